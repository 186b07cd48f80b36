package api

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// commandStats returns the calls per command of INFO commandstats, without the commands the
// measurement itself, a new pool connection and the audit stream (written asynchronously, one
// entry per change) use.
func commandStats(t *testing.T, f *fixture) map[string]int64 {
	out := testutil.CommandCalls(t, f.rdb)
	for _, name := range append([]string{"xadd", "xtrim", "xlen", "xrevrange", "xrange"}, testutil.Housekeeping...) {
		delete(out, name)
	}
	return out
}

// scaleRun seeds n apps and returns the Redis commands of: two updates (one moving the app to
// another priority and enabled flag), one delete, one create, pages and searches of the app
// list with and without the cluster, priority and enabled filters (alone and combined), and a
// page of the connection limits.
func scaleRun(t *testing.T, n int) map[string]int64 {
	f := newFixture(t)
	f.seed(t)
	ctx := context.Background()
	for i := 0; i < n; i++ {
		a := store.App{AppID: fmt.Sprintf("bulk-%06d", i), ClusterID: "default", GuaranteedQuota: 1,
			BurstQuota: 10, Priority: i % 4, CBw: 1, Enabled: true}
		if _, err := f.store.PutApp(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	tok := f.user(t, "ops", "operator")
	// one list first: the id and value indexes are checked (and would be rebuilt) outside the
	// measurement; the live snapshot the connection usage comes from is taken once
	for _, q := range []string{"apps", "apps?priority=1", "connections"} {
		if res := f.call(t, "GET", "/api/v1/"+q, tok, nil); res.code != 200 {
			t.Fatalf("list: %d %s", res.code, res.raw)
		}
	}
	if err := f.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res := f.call(t, "PUT", "/api/v1/apps/bulk-000007", tok, map[string]any{"burst_quota": 20}); res.code != 200 {
		t.Fatalf("update: %d %s", res.code, res.raw)
	}
	// an update that moves the app to another priority and disables it, a delete
	if res := f.call(t, "PUT", "/api/v1/apps/bulk-000009", tok, map[string]any{"priority": 2, "enabled": false}); res.code != 200 {
		t.Fatalf("update: %d %s", res.code, res.raw)
	}
	if res := f.call(t, "DELETE", "/api/v1/apps/bulk-000010", tok, nil); res.code != 200 {
		t.Fatalf("delete: %d %s", res.code, res.raw)
	}
	if res := f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": "new-app", "cluster_id": "default",
		"guaranteed_quota": 1, "burst_quota": 5, "priority": 1}); res.code != 201 {
		t.Fatalf("create: %d %s", res.code, res.raw)
	}
	for _, q := range []string{"", "?page=3&limit=20", "?search=BULK-00002", "?cluster_id=default&page=2",
		"?priority=3&search=bulk-00003", "?enabled=true&limit=50", "?priority=1&enabled=true",
		"?cluster_id=default&priority=2&enabled=true&search=bulk-0000", "?cluster_id=default&priority=2&enabled=false"} {
		res := f.call(t, "GET", "/api/v1/apps"+q, tok, nil)
		data, _ := res.get("data").([]any)
		if res.code != 200 || len(data) == 0 {
			t.Fatalf("list %q: %d %s", q, res.code, res.raw)
		}
	}
	if res := f.call(t, "GET", "/api/v1/connections?limit=20", tok, nil); res.code != 200 {
		t.Fatalf("connections: %d %s", res.code, res.raw)
	}
	return commandStats(t, f)
}

// TestAppWritesAndListsAreO1 proves that an app write (validation included), a delete and a
// page, a search or a filter of the app list send the same Redis commands with 100 apps as with
// 5,000: nothing reads every app.
func TestAppWritesAndListsAreO1(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 5,000 apps")
	}
	small, large := scaleRun(t, 100), scaleRun(t, 5000)
	names := map[string]bool{}
	for k := range small {
		names[k] = true
	}
	for k := range large {
		names[k] = true
	}
	var diff []string
	for k := range names {
		if small[k] != large[k] {
			diff = append(diff, fmt.Sprintf("%s: %d with 100 apps, %d with 5000", k, small[k], large[k]))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("Redis commands depend on the number of apps:\n%s\nall (100 apps): %v", strings.Join(diff, "\n"), small)
	}
	t.Logf("commands per 2 updates + delete + create + 9 list pages + 1 connections page: %v", small)
}

// TestAppListFiltersContinue: several value filters are answered by a bounded walk with a
// continuation: following meta.next lists exactly the matching apps, each response examines at
// most MaxExamined candidates and has no exact total; one filter pages with an exact total;
// page= with several filters and after= with fewer are refused.
func TestAppListFiltersContinue(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	ctx := context.Background()
	var want []string
	for i := 0; i < 40; i++ {
		a := store.App{AppID: fmt.Sprintf("f-%02d", i), ClusterID: "default", GuaranteedQuota: 1,
			BurstQuota: 10, Priority: i % 2, CBw: 1, Enabled: i%3 != 0}
		if _, err := f.store.PutApp(ctx, a); err != nil {
			t.Fatal(err)
		}
		if a.Priority == 1 && !a.Enabled {
			want = append(want, a.AppID)
		}
	}
	defer func(n int64) { MaxExamined = n }(MaxExamined)
	MaxExamined = 4
	tok := f.user(t, "viewer1", "viewer")
	var got []string
	q := "/api/v1/apps?cluster_id=default&priority=1&enabled=false&search=f-&limit=3"
	for step, after := 0, ""; ; step++ {
		url := q
		if after != "" {
			url += "&after=" + after
		}
		res := f.call(t, "GET", url, tok, nil)
		if res.code != 200 || res.get("meta", "total") != nil {
			t.Fatalf("%s: %d %s", url, res.code, res.raw)
		}
		if ex, _ := res.get("meta", "examined").(float64); ex > 4 {
			t.Fatalf("%s examined %v candidates, bound 4", url, ex)
		}
		data, _ := res.get("data").([]any)
		for _, d := range data {
			got = append(got, d.(map[string]any)["app_id"].(string))
		}
		if after = res.str("meta", "next"); after == "" {
			break
		}
		if step > 40 {
			t.Fatal("no end")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("continued list %v\nwant %v", got, want)
	}
	res := f.call(t, "GET", "/api/v1/apps?enabled=false&search=f-&limit=5&page=2", tok, nil)
	if n, _ := res.get("meta", "total").(float64); res.code != 200 || n != 14 {
		t.Fatalf("one filter: %d %s", res.code, res.raw)
	}
	for _, bad := range []string{"?priority=1&enabled=false&page=2", "?priority=1&after=f-01",
		"?priority=1&enabled=false&after=a%20b"} {
		if res := f.call(t, "GET", "/api/v1/apps"+bad, tok, nil); res.code != 400 || res.str("error", "code") != "invalid_query" {
			t.Fatalf("%s: %d %s", bad, res.code, res.raw)
		}
	}
}
