package api

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"tollgate/internal/store"
)

// commandStats returns the calls per command of INFO commandstats, without the commands the
// measurement itself and the audit stream (written asynchronously, one entry per change) use.
func commandStats(t *testing.T, f *fixture) map[string]int64 {
	t.Helper()
	info, err := f.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch name {
		case "info", "config|resetstat", "xadd", "xtrim", "xlen", "xrevrange", "xrange", "ping",
			"hello", "client|setinfo", "select", "auth": // a new pool connection, not the request
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[name] = n
	}
	return out
}

// scaleRun seeds n apps and returns the Redis commands of: one update, one create, a first
// page, a later page and a search of the app list.
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
	// one list first: the id index is checked (and would be rebuilt) outside the measurement
	if res := f.call(t, "GET", "/api/v1/apps", tok, nil); res.code != 200 {
		t.Fatalf("list: %d %s", res.code, res.raw)
	}
	if err := f.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res := f.call(t, "PUT", "/api/v1/apps/bulk-000007", tok, map[string]any{"burst_quota": 20}); res.code != 200 {
		t.Fatalf("update: %d %s", res.code, res.raw)
	}
	if res := f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": "new-app", "cluster_id": "default",
		"guaranteed_quota": 1, "burst_quota": 5, "priority": 1}); res.code != 201 {
		t.Fatalf("create: %d %s", res.code, res.raw)
	}
	for _, q := range []string{"", "?page=3&limit=20", "?search=BULK-00002"} {
		res := f.call(t, "GET", "/api/v1/apps"+q, tok, nil)
		data, _ := res.get("data").([]any)
		if res.code != 200 || len(data) == 0 {
			t.Fatalf("list %q: %d %s", q, res.code, res.raw)
		}
	}
	return commandStats(t, f)
}

// TestAppWritesAndListsAreO1 proves that an app write (validation included) and a page or a
// search of the app list send the same Redis commands with 100 apps as with 5,000: nothing
// reads every app.
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
	t.Logf("commands per update + create + 3 list pages: %v", small)
}
