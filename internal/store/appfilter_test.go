package store_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	. "tollgate/internal/store"
)

// filterApps is the reference: the ids of apps (in id order, case ignored) that match f.
func filterApps(apps map[string]App, f AppFilter) []string {
	var out []string
	for id, a := range apps {
		if strings.HasPrefix(strings.ToLower(id), strings.ToLower(f.Prefix)) &&
			(f.Cluster == "" || a.ClusterID == f.Cluster) &&
			(f.Priority == nil || a.Priority == *f.Priority) &&
			(f.Enabled == nil || a.Enabled == *f.Enabled) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		return strings.Compare(strings.ToLower(a)+"\x00"+a, strings.ToLower(b)+"\x00"+b)
	})
	return out
}

// allPages reads every match of f: by pages of 7 (one value filter) or by continuation with at
// most maxExamined candidates a step (several), checking the bound on each step.
func allPages(t *testing.T, s *Store, f AppFilter, maxExamined int64) []string {
	t.Helper()
	got := []string{}
	if f.ValueFilters() == 1 {
		var total int64 = -1
		for off := int64(0); ; off += 7 {
			p, err := s.PageAppsWhere(ctx(t), f, off, 7)
			if err != nil {
				t.Fatal(err)
			}
			if total >= 0 && p.Total != total {
				t.Fatalf("%+v: total moved from %d to %d", f, total, p.Total)
			}
			total = p.Total
			if len(p.Apps) == 0 {
				break
			}
			for _, a := range p.Apps {
				got = append(got, a.AppID)
			}
		}
		if int64(len(got)) != total {
			t.Fatalf("%+v: %d apps in the pages, total %d", f, len(got), total)
		}
		return got
	}
	after := ""
	for step := 0; ; step++ {
		sc, err := s.ScanAppsWhere(ctx(t), f, after, 5, maxExamined)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Examined > maxExamined {
			t.Fatalf("%+v: examined %d candidates, bound %d", f, sc.Examined, maxExamined)
		}
		for _, a := range sc.Apps {
			got = append(got, a.AppID)
		}
		if sc.Next == "" {
			return got
		}
		if step > 1000 {
			t.Fatalf("%+v: no end after 1000 steps", f)
		}
		after = sc.Next
	}
}

// TestValueIndexesAnswerFilters: every filter (one value filter paged, several scanned with a
// bound and a continuation, with or without an id prefix) lists exactly the apps a filter of
// every app finds, after creates, updates that move an app between values, removals, a store
// without the value indexes and indexes with stale members.
func TestValueIndexesAnswerFilters(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 1_000_000)
	if _, err := s.PutCluster(ctx(t), Cluster{ID: "c2", Capacity: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	apps := map[string]App{}
	put := func(a App) {
		t.Helper()
		if _, err := s.PutApp(ctx(t), a); err != nil {
			t.Fatal(err)
		}
		apps[a.AppID] = a
	}
	for i := 0; i < 90; i++ {
		id := fmt.Sprintf("app-%02d", i)
		if i%5 == 0 {
			id = fmt.Sprintf("App-%02d", i)
		}
		a := demoApp(id, 1)
		a.Priority, a.Enabled = i%4, i%3 != 0
		if i%7 == 0 {
			a.ClusterID = "c2"
		}
		put(a)
	}
	p0, p1, p3, yes, no := 0, 1, 3, true, false
	filters := []AppFilter{
		{Cluster: "c1"}, {Cluster: "c2", Prefix: "APP-1"}, {Priority: &p1}, {Enabled: &no},
		{Priority: &p0, Enabled: &yes}, {Cluster: "c2", Priority: &p3},
		{Cluster: "c1", Priority: &p1, Enabled: &no}, {Cluster: "c1", Enabled: &yes, Prefix: "app-4"},
		{Cluster: "nowhere", Enabled: &yes},
	}
	check := func(when string) {
		t.Helper()
		for _, f := range filters {
			want := filterApps(apps, f)
			if got := allPages(t, s, f, 6); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("%s: %+v lists %v\nwant %v", when, f, got, want)
			}
		}
	}
	check("created")
	// updates that move apps between priorities and enabled flags
	for _, id := range []string{"app-01", "App-10", "app-33", "app-89"} {
		a := apps[id]
		a.Priority, a.Enabled = (a.Priority+1)%4, !a.Enabled
		put(a)
	}
	check("updated")
	for _, id := range []string{"app-02", "App-35", "app-77"} {
		if err := s.RemoveApp(ctx(t), id); err != nil {
			t.Fatal(err)
		}
		delete(apps, id)
	}
	check("removed")
	// a store from before the value indexes: rebuilt from the JSON index
	for _, v := range []string{"0", "1", "2", "3"} {
		rdb.Del(ctx(t), keys.AppsBy("priority", v))
	}
	rdb.Del(ctx(t), keys.AppsBy("cluster", "c1"), keys.AppsBy("enabled", "1"))
	check("value indexes lost")
	// stale members (a removed app, an app under its old priority) as a write in flight leaves
	// them for a moment: not listed, and no rebuild while they may be a write in flight
	rdb.ZAdd(ctx(t), keys.AppsBy("priority", "1"), redis.Z{Member: "ghost\x00ghost"}, redis.Z{Member: "app-04\x00app-04"})
	rdb.ZAdd(ctx(t), keys.AppsBy("cluster", "c2"), redis.Z{Member: "app-04\x00app-04"})
	p1 = 1
	for i := 0; i < 3; i++ {
		p, err := s.PageAppsWhere(ctx(t), AppFilter{Priority: &p1}, 0, 100)
		if err != nil || p.Total != int64(len(filterApps(apps, AppFilter{Priority: &p1})))+2 {
			t.Fatalf("surplus rebuilt at once, or not counted: total %d, %v", p.Total, err)
		}
		var got []string
		for _, a := range p.Apps {
			got = append(got, a.AppID)
		}
		if want := filterApps(apps, AppFilter{Priority: &p1}); !slices.Equal(got, want) {
			t.Fatalf("stale members listed: %v\nwant %v", got, want)
		}
	}
	// the same surplus for StaleRepairAfter: rebuilt
	defer func(d time.Duration) { StaleRepairAfter = d }(StaleRepairAfter)
	StaleRepairAfter = 0
	for i := 0; i < 2; i++ {
		if _, err := s.EnsureAppValueIndexes(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	check("stale members")
	if n, _ := rdb.ZCard(ctx(t), keys.AppsBy("cluster", "c2")).Result(); n != int64(len(filterApps(apps, AppFilter{Cluster: "c2"}))) {
		t.Fatalf("cluster c2 index keeps %d members after the rebuild", n)
	}
}

// TestScanAppsWhereIsBounded: with a match only at the end of 200 candidates, one step examines
// at most the bound and hands back where to continue; the last step finds the match.
func TestScanAppsWhereIsBounded(t *testing.T) {
	s, _ := newStore(t)
	mustCluster(t, s, 1_000_000)
	for i := 0; i < 200; i++ {
		a := demoApp(fmt.Sprintf("b-%03d", i), 1)
		a.Enabled = i == 199
		if _, err := s.PutApp(ctx(t), a); err != nil {
			t.Fatal(err)
		}
	}
	p1, yes := 1, true
	f := AppFilter{Priority: &p1, Enabled: &yes, Cluster: "c1"}
	// enabled holds 1 id: the smallest index is walked, one candidate, found at once
	sc, err := s.ScanAppsWhere(ctx(t), f, "", 10, 50)
	if err != nil || len(sc.Apps) != 1 || sc.Examined != 1 || sc.Next != "" {
		t.Fatalf("smallest index not walked: %+v %v", sc, err)
	}
	// priority and cluster each hold 200: a step examines 50 and continues
	f = AppFilter{Priority: &p1, Cluster: "c1", Prefix: "b-1"}
	sc, err = s.ScanAppsWhere(ctx(t), f, "b-149", 200, 30)
	if err != nil || len(sc.Apps) != 30 || sc.Examined != 30 || sc.Next != "b-179" || sc.Apps[0].AppID != "b-150" {
		t.Fatalf("step: %d apps, examined %d, next %q, %v", len(sc.Apps), sc.Examined, sc.Next, err)
	}
	sc, err = s.ScanAppsWhere(ctx(t), f, sc.Next, 200, 30)
	if err != nil || len(sc.Apps) != 20 || sc.Next != "" {
		t.Fatalf("last step: %d apps, next %q, %v", len(sc.Apps), sc.Next, err)
	}
}

// TestReleaseAppSubtractsItsShare: removing an app takes its quota and debt out of the cluster's
// maintained sums (what l1_reconcile would compute from the remaining apps) and deletes its L2.
func TestReleaseAppSubtractsItsShare(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 10_000)
	for i, g := range []int64{100, 250, 400} {
		if _, err := s.PutApp(ctx(t), demoApp(fmt.Sprintf("r%d", i), g)); err != nil {
			t.Fatal(err)
		}
	}
	// r1 owes 30 borrowed tokens, as l2_grant books a borrow
	rdb.HSet(ctx(t), keys.L2("c1", "r1"), "borrowed", 30, "debt", 30)
	rdb.HIncrBy(ctx(t), keys.L1("c1"), "borrowed", 30)
	rdb.HIncrBy(ctx(t), keys.L1("c1"), "available", -30)
	// r1 had traffic and owes: it is in the reconcile job's active set and among the debtors
	rdb.ZAdd(ctx(t), keys.Active("c1"), redis.Z{Score: 1, Member: "r1"})
	rdb.SAdd(ctx(t), keys.Debtors("c1"), "r1")
	revs := func() string {
		v, _ := rdb.HMGet(ctx(t), keys.L1("c1"), "alloc_rev", "borrow_rev").Result()
		return fmt.Sprint(v)
	}
	before := revs()
	alloc, err := s.ReleaseApp(ctx(t), "c1", "r1")
	if err != nil || alloc != (Allocation{Allocated: 500, Available: 9500}) {
		t.Fatalf("release r1: %+v %v", alloc, err)
	}
	l1, _ := rdb.HMGet(ctx(t), keys.L1("c1"), "allocated", "borrowed", "available").Result()
	if fmt.Sprint(l1) != "[500 0 9500]" {
		t.Fatalf("L1 after release: %v", l1)
	}
	if n, _ := rdb.Exists(ctx(t), keys.L2("c1", "r1")).Result(); n != 0 {
		t.Fatal("L2 of the released app kept")
	}
	if _, err := rdb.ZScore(ctx(t), keys.L1Apps("c1"), "r1").Result(); err != redis.Nil {
		t.Fatalf("allocation of the released app kept: %v", err)
	}
	// a chunked L1 check that tallied r1 before the removal must not correct from that tally
	if after := revs(); after == before {
		t.Fatalf("alloc_rev/borrow_rev did not move with the sums: %s", after)
	}
	if _, err := rdb.ZScore(ctx(t), keys.Active("c1"), "r1").Result(); err != redis.Nil {
		t.Fatalf("released app still in the active set: %v", err)
	}
	if in, _ := rdb.SIsMember(ctx(t), keys.Debtors("c1"), "r1").Result(); in {
		t.Fatal("released app still among the debtors")
	}
	if alloc, err := s.ReleaseApp(ctx(t), "c1", "r1"); err != nil || alloc.Allocated != 500 {
		t.Fatalf("second release: %+v %v", alloc, err)
	}
	if _, err := s.ReleaseApp(ctx(t), "nope", "r0"); err == nil {
		t.Fatal("release in an unknown cluster accepted")
	}
}

// TestWritesInFlightCostNoRebuild: lists and filters that run while apps are created, moved
// between priorities and removed never see an index missing a member, so they never rebuild an
// index (no HSCAN of the JSON index).
func TestWritesInFlightCostNoRebuild(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 1_000_000)
	if err := rdb.ConfigResetStat(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		go func() {
			defer func() { errs <- nil }()
			for i := 0; i < 150; i++ {
				a := demoApp(fmt.Sprintf("w%d-%03d", w, i), 1)
				for _, p := range []int{0, 2} {
					a.Priority = p
					if _, err := s.PutApp(ctx(t), a); err != nil {
						errs <- err
						return
					}
				}
				if i%3 == 0 {
					if err := s.RemoveApp(ctx(t), a.AppID); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	p2 := 2
	var readers sync.WaitGroup
	for r := 0; r < 2; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.PageApps(ctx(t), "", 0, 20); err != nil {
					errs <- err
					return
				}
				if _, err := s.PageAppsWhere(ctx(t), AppFilter{Priority: &p2}, 0, 20); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for w := 0; w < 4; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	readers.Wait()
	info, _ := rdb.Info(ctx(t), "commandstats").Result()
	if strings.Contains(info, "cmdstat_hscan:") {
		t.Fatalf("an index was rebuilt while writes were in flight:\n%s", info)
	}
}

// TestAppsIdentityMatchesOneByOne: the batched read of access keys and buckets an export uses
// answers what AccessKeys and AppBuckets answer app by app, a stale set member (a key another app
// now owns) left out.
func TestAppsIdentityMatchesOneByOne(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 1_000_000)
	var ids []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("id-%d", i)
		ids = append(ids, id)
		if _, err := s.PutApp(ctx(t), demoApp(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids[:4] {
		for k := 0; k <= i; k++ {
			if _, _, err := s.AddAccessKey(ctx(t), id, fmt.Sprintf("AKIAEXPORT%d%d0000000", i, k)); err != nil {
				t.Fatal(err)
			}
		}
		if i%2 == 0 {
			if _, _, err := s.PutBucket(ctx(t), fmt.Sprintf("bucket-%d", i), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	rdb.SAdd(ctx(t), keys.AppAccessKeys("id-5"), "AKIAEXPORT000000000") // owned by id-0
	akeys, buckets, err := s.AppsIdentity(ctx(t), ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		k, _ := s.AccessKeys(ctx(t), id)
		b, _ := s.AppBuckets(ctx(t), id)
		if fmt.Sprint(k) != fmt.Sprint(akeys[id]) && !(len(k) == 0 && len(akeys[id]) == 0) {
			t.Fatalf("%s: access keys %v, one by one %v", id, akeys[id], k)
		}
		if fmt.Sprint(b) != fmt.Sprint(buckets[id]) && !(len(b) == 0 && len(buckets[id]) == 0) {
			t.Fatalf("%s: buckets %v, one by one %v", id, buckets[id], b)
		}
	}
	if len(akeys["id-3"]) != 4 || len(buckets["id-2"]) != 1 || len(akeys["id-5"]) != 0 {
		t.Fatalf("identities %v %v", akeys, buckets)
	}
}

// TestConnLimitsIndex: the limits and the cluster's set move together; a store written before
// the sets is indexed once from its ConnConfig hashes (SCAN), then marked.
func TestConnLimitsIndex(t *testing.T) {
	_, rdb := newStore(t)
	// a store from before the sets: hashes only
	for _, k := range []string{keys.ConnConfig("c1", "a1"), keys.ConnConfig("c2", "b-2")} {
		rdb.HSet(ctx(t), k, "max_connections", 5)
	}
	rdb.HSet(ctx(t), keys.ConnCluster("c1"), "max_connections", 50) // not an app's
	n, err := IndexConnLimits(ctx(t), rdb)
	if err != nil || n != 2 {
		t.Fatalf("index: %d apps, %v; want 2", n, err)
	}
	member := func(c, a string) bool { ok, _ := rdb.SIsMember(ctx(t), keys.ConnLimited(c), a).Result(); return ok }
	if !member("c1", "a1") || !member("c2", "b-2") {
		t.Fatal("an app with limits is missing from its cluster's set")
	}
	if n, err := IndexConnLimits(ctx(t), rdb); err != nil || n != 0 {
		t.Fatalf("second index: %d apps, %v; want 0 (marked)", n, err)
	}
	if err := SetConnLimits(ctx(t), rdb, "c1", "a3", 2, 3); err != nil || !member("c1", "a3") {
		t.Fatalf("set: %v, member %v", err, member("c1", "a3"))
	}
	if err := DelConnLimits(ctx(t), rdb, "c1", "a1"); err != nil || member("c1", "a1") {
		t.Fatalf("del: %v, still a member %v", err, member("c1", "a1"))
	}
	if n, _ := rdb.Exists(ctx(t), keys.ConnConfig("c1", "a1")).Result(); n != 0 {
		t.Fatal("limits kept after DelConnLimits")
	}
}
