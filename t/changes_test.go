package t

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

// hscanCalls is Redis' count of HSCAN commands: a full config load walks the apps index with
// HSCAN; a change applied from the change log does not.
func (s *stack) hscanCalls() int64 { return s.cmdCalls("hscan") }

func manyApps(prefix string, n int) []store.App {
	apps := make([]store.App, 0, n)
	for i := 0; i < n; i++ {
		apps = append(apps, app(fmt.Sprintf("%s-%05d", prefix, i), 10, 100))
	}
	return apps
}

// Issue 20 item 2: with 5,000 apps configured, a new app and a changed one reach the node as
// those changes (the change log), not as a reload of every app: no HSCAN, no new full load;
// a change the log does not describe as one app (here a bare version bump) still loads
// everything.
func TestConfigChangeAppliedWithoutFullLoad(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("many", 5000)})
	g := s.gw()
	v0, err := s.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	loads, scans := g.Metric("ratelimit_config_full_loads_total"), s.hscanCalls()
	if r := g.Do("HEAD", "/bucket/obj", "late-app", nil, nil); r.Status != 403 {
		t.Fatalf("late-app before it exists: status %d, want 403", r.Status)
	}

	if _, err := s.store.PutApp(context.Background(), app("late-app", 10, 100)); err != nil {
		t.Fatal(err)
	}
	off := app("many-00042", 10, 100)
	off.Enabled = false
	if _, err := s.store.PutApp(context.Background(), off); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0 + 2)
	if r := g.Do("HEAD", "/bucket/obj", "late-app", nil, nil); r.Status != 200 {
		t.Fatalf("late-app after its change: status %d, want 200", r.Status)
	}
	if r := g.Do("HEAD", "/bucket/obj", "many-00042", nil, nil); r.Status == 200 {
		t.Fatalf("many-00042 disabled: status %d", r.Status)
	}
	if got := g.Metric("ratelimit_config_full_loads_total"); got != loads {
		t.Errorf("full loads %v -> %v: the changes were applied by reloading everything", loads, got)
	}
	if got := s.hscanCalls(); got != scans {
		t.Errorf("HSCAN calls %d -> %d: the apps index was walked for two app changes", scans, got)
	}
	if got := g.Metric("ratelimit_config_changes_applied_total"); got < 2 {
		t.Errorf("changes applied: %v, want >= 2", got)
	}

	// a change that is not one app's: everything is loaded again
	if _, err := s.store.Bump(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0 + 3)
	eventually(t, "a full load for a change that is not an app's", func() bool {
		return g.Metric("ratelimit_config_full_loads_total") > loads && s.hscanCalls() > scans
	})
}

// Issue 20 item 2/3: a config_dict too small for the apps keeps serving every tenant (the apps it
// has no room for are looked up on demand), raises ratelimit_config_dict_partial, counts the
// entries that did not fit and shows the zone's fill (ratelimit_shm_*_bytes).
func TestFullConfigDictRefusesNoTenant(t *testing.T) {
	apps := manyApps("full", 3000)
	// every app looked up at once: a lookup budget above the burst (a smaller one answers the
	// rest 503 SlowDown, TestAbuseSprayedIDs)
	s := newStack(t, stackOptions{apps: apps, configDict: "256k",
		env: map[string]string{"TOLLGATE_LOOKUP_RATE": "100000"}})
	g := s.gw()
	v0, err := s.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	if g.Metric("ratelimit_config_dict_partial") != 1 || g.Metric("ratelimit_config_dict_full_total") == 0 {
		t.Fatalf("config_dict of 256k holds 3,000 apps? partial %v, entries that did not fit %v",
			g.Metric("ratelimit_config_dict_partial"), g.Metric("ratelimit_config_dict_full_total"))
	}
	capacity := g.Metric(`ratelimit_shm_capacity_bytes{zone="config_dict"}`)
	free := g.Metric(`ratelimit_shm_free_bytes{zone="config_dict"}`)
	if capacity < 200<<10 || free > 0.05*capacity {
		t.Errorf("config_dict on /metrics: capacity %v bytes, %v free; want about 256k, under 5 %% free",
			capacity, free)
	}
	// each worker notes its own Lua heap: the budget of docs/scale.md covers the workers too
	harness.Eventually(t, 10*time.Second, "both workers' Lua heap on /metrics", func() bool {
		return g.Metric(`ratelimit_worker_lua_memory_bytes{worker="0"}`) > 100<<10 &&
			g.Metric(`ratelimit_worker_lua_memory_bytes{worker="1"}`) > 100<<10
	})
	var mu sync.Mutex
	refused := map[int][]string{}
	var wg sync.WaitGroup
	ch := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ch {
				if st := g.Do("HEAD", "/bucket/obj", id, nil, nil).Status; st != 200 {
					mu.Lock()
					refused[st] = append(refused[st], id)
					mu.Unlock()
				}
			}
		}()
	}
	for _, a := range apps {
		ch <- a.AppID
	}
	close(ch)
	wg.Wait()
	for st, ids := range refused {
		t.Errorf("%d apps answered %d, e.g. %s", len(ids), st, ids[0])
	}
	if g.Metric("ratelimit_config_lookups_total") == 0 {
		t.Error("no app was looked up on demand")
	}
	if r := g.Do("HEAD", "/bucket/obj", "no-such-app", nil, nil); r.Status != 403 {
		t.Errorf("an unknown app on a partial node: status %d, want 403", r.Status)
	}
}

// putHash writes field of a config hash (value "" removes it) with the version bump the control
// plane gives that kind of change (store.WithChange), and waits until the node has the version.
func (s *stack) putHash(kind, id, key, field, value string) {
	s.t.Helper()
	ctx := context.Background()
	v, err := s.store.Bump(store.WithChange(ctx, kind, id), func(ctx context.Context) error {
		if value == "" {
			return s.rdb.HDel(ctx, key, field).Err()
		}
		return s.rdb.HSet(ctx, key, field, value).Err()
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitVersion(v)
}

// Issue 20 item 2: with 3,000 apps configured, a change of every other kind — an access key, a
// bucket, a rule, a breaker, a cluster, an app's and a cluster's connection limits, an app's
// removal with its access key — is enforced by the node as that change: no full load, no HSCAN
// (the apps index, the key and bucket maps, the rules and breakers are not walked), and the
// workers' caches forget the changed entries (a key first answered unknown is known after).
func TestEveryConfigKindAppliedAsChange(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("kinds", 3000)})
	g := s.gw()
	ctx := context.Background()
	v0, err := s.store.ConfigVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	loads, scans, applied := g.Metric("ratelimit_config_full_loads_total"), s.hscanCalls(),
		g.Metric("ratelimit_config_changes_applied_total")
	// every worker past the first full load's generation
	for i := 0; i < 8; i++ {
		g.Do("HEAD", "/bucket/obj", "kinds-00001", nil, nil)
	}
	wipes := g.Metric("ratelimit_config_cache_wipes_total")
	wait := func(v int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		s.waitVersion(v)
	}
	const akid = "AKIAKINDSTEST0000001"
	auth := map[string]string{"Authorization": sigV4(akid)}
	status := func(path string, hdr map[string]string) int { return g.Do("HEAD", path, "", nil, hdr).Status }
	// each worker answers the unknown key once (and caches that answer)
	for i := 0; i < 4; i++ {
		if st := status("/bucket/obj", auth); st != 403 {
			t.Fatalf("unknown access key: status %d, want 403", st)
		}
	}

	// an access key
	_, v, err := s.store.AddAccessKey(ctx, "kinds-00007", akid)
	wait(v, err)
	for i := 0; i < 4; i++ {
		if st := status("/bucket/obj", auth); st != 200 {
			t.Fatalf("access key of kinds-00007 after its change: status %d, want 200", st)
		}
	}
	waitCharged(t, g, "kinds-00007", "HEAD", 4)

	// a bucket
	if st := status("/kindsbucket/obj", nil); st == 200 {
		t.Fatalf("anonymous request to an unmapped bucket: status %d", st)
	}
	_, v, err = s.store.PutBucket(ctx, "kindsbucket", "kinds-00008")
	wait(v, err)
	for i := 0; i < 4; i++ {
		if st := status("/kindsbucket/obj", nil); st != 200 {
			t.Fatalf("bucket of kinds-00008 after its change: status %d, want 200", st)
		}
	}
	waitCharged(t, g, "kinds-00008", "HEAD", 4)

	// a rule: one request a minute for kinds-00009
	r, _ := json.Marshal(base("kinds-rule", 1, 60, rule{"match": rule{"app_ids": []string{"kinds-00009"}}}))
	s.putHash(store.ChangeRule, "kinds-rule", keys.RulesIndex(), "kinds-rule", string(r))
	refused := 0
	for i := 0; i < 4; i++ {
		if g.Do("HEAD", "/bucket/obj", "kinds-00009", nil, nil).Status == 429 {
			refused++
		}
	}
	if refused < 2 { // the node's limit of 1 per minute, whichever worker counts it
		t.Errorf("rule applied as a change: %d of 4 requests refused, want >= 2", refused)
	}

	// a breaker
	b, _ := json.Marshal(breakerCfg(map[string]any{"name": "kinds-brk"}))
	s.putHash(store.ChangeBreaker, "kinds-brk", keys.BreakersIndex(), "kinds-brk", string(b))
	// requests first: each worker moves to the new generation on its request path (a generation
	// that names the breaker recompiles the breakers), then the node's report
	for i := 0; i < 8; i++ {
		g.Do("HEAD", "/bucket/obj", "kinds-00001", nil, nil)
	}
	for i := 0; i < 6; i++ {
		if _, ok := breakersOf(g)["kinds-brk"]; !ok {
			t.Fatalf("breaker kinds-brk unknown to the node after its change (report %d)", i)
		}
	}

	// a cluster's L1 config (read by the scripts; the node only moves its version)
	if _, err := s.store.PutCluster(ctx, store.Cluster{ID: "default", Capacity: 200000, ReservedRatio: 0.1}); err != nil {
		t.Fatal(err)
	}
	v, err = s.store.ConfigVersion(ctx)
	wait(v, err)

	// an app's and the cluster's connection limits
	s.putHash(store.ChangeConnApp, "kinds-00010", keys.ConnConfig("default", "kinds-00010"), "max_connections", "3")
	eventually(t, "connection limit of kinds-00010", func() bool { return connStateOf(g, "kinds-00010").Max == 3 })
	s.putHash(store.ChangeConnCluster, "default", keys.ConnCluster("default"), "max_connections", "777")
	eventually(t, "connection limit of the cluster", func() bool { return connStateOf(g, "kinds-00010").ClusterMax == 777 })

	// an app's removal takes its access key in the same version
	wait(s.store.Bump(store.WithChange(ctx, store.ChangeApp, "kinds-00007"), func(ctx context.Context) error {
		if err := s.store.RemoveApp(ctx, "kinds-00007"); err != nil {
			return err
		}
		return s.store.RemoveAppIdentity(ctx, "kinds-00007")
	}))
	for i := 0; i < 4; i++ {
		if st := status("/bucket/obj", auth); st != 403 {
			t.Fatalf("access key of a removed app: status %d, want 403", st)
		}
	}

	if got := g.Metric("ratelimit_config_full_loads_total"); got != loads {
		t.Errorf("full loads %v -> %v: a change was applied by loading everything", loads, got)
	}
	if got := g.Metric("ratelimit_config_cache_wipes_total"); got != wipes {
		t.Errorf("workers dropped all their parsed config %v -> %v times: a change wiped the caches", wipes, got)
	}
	if got := s.hscanCalls(); got != scans {
		t.Errorf("HSCAN calls %d -> %d: a config hash was walked for a change", scans, got)
	}
	if got := g.Metric("ratelimit_config_changes_applied_total"); got < applied+9 {
		t.Errorf("changes applied %v -> %v, want at least 9 more", applied, got)
	}
}

// fullLoadWithout announces a change logged as "all" after removing app `gone` from the apps index
// behind the change log's back, and waits until the node's full load is done.
func (s *stack) fullLoadWithout(gone string) {
	s.t.Helper()
	g := s.gw()
	loads := g.Metric("ratelimit_config_full_loads_total")
	ctx := context.Background()
	if _, err := s.store.Bump(ctx, func(ctx context.Context) error {
		return s.rdb.HDel(ctx, keys.AppsIndex(), gone).Err()
	}); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, "a full load", func() bool { return g.Metric("ratelimit_config_full_loads_total") > loads })
}

// Issue 20 item 2: a full load drops the apps gone from the store without walking config_dict:
// worker 0 keeps the ids it holds; a worker 0 that did not load the dict's config itself (after
// a reload of nginx) lists the dict once, and still drops what is gone.
func TestFullLoadDropsRemovedAppsWithoutWalk(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("sweep", 2000)})
	g := s.gw()
	v0, err := s.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	status := func(id string) int { return g.Do("HEAD", "/bucket/obj", id, nil, nil).Status }
	for _, id := range []string{"sweep-00005", "sweep-00007"} {
		if st := status(id); st != 200 {
			t.Fatalf("%s before: status %d", id, st)
		}
	}

	s.fullLoadWithout("sweep-00005")
	if st := status("sweep-00005"); st != 403 {
		t.Errorf("an app gone from the store after a full load: status %d, want 403", st)
	}
	if st := status("sweep-00006"); st != 200 {
		t.Errorf("an app still in the store after a full load: status %d, want 200", st)
	}

	old := workers(t, g)
	g.Signal(syscall.SIGHUP)
	eventually(t, "the workers of the reload alone", func() bool {
		now := workers(t, g)
		for _, pid := range now {
			if slices.Contains(old, pid) {
				return false
			}
		}
		return len(now) == 2
	})
	s.fullLoadWithout("sweep-00007")
	if st := status("sweep-00007"); st != 403 {
		t.Errorf("an app gone from the store, full load after a reload of nginx: status %d, want 403", st)
	}
	if st := status("sweep-00008"); st != 200 {
		t.Errorf("an app still in the store after a reload of nginx: status %d, want 200", st)
	}
}

// Issue 20 item 2: a node whose first full load is under way (here held back: the bucket map is
// of the wrong type, so the load fails at its end and is retried) serves the apps it has
// loaded, looks up on demand an app it has not (created meanwhile), refuses an unknown app, and
// reports a config version only once the load completes.
func TestFreshNodeServesWhileItsFirstLoadRuns(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("early", 500)})
	ctx := context.Background()
	if err := s.rdb.Set(ctx, keys.Buckets(), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// one poll a minute: the load is retried on notices only, and none comes until the end
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, NodeID: "fresh", Loading: true,
		Env: map[string]string{"TOLLGATE_CONFIG_POLL": "60"}})
	status := func(id string) int { return g.Do("HEAD", "/bucket/obj", id, nil, nil).Status }
	eventually(t, "the apps of the first load served", func() bool { return status("early-00042") == 200 })
	// the node's first rounds (its subscription and its first poll) have failed: nothing retries
	eventually(t, "the first loads failed", func() bool {
		return strings.Count(g.ErrorLog(), "tollgate: config reload (") >= 2
	})
	// an app the load did not see: written as the store writes it, not announced (no retry)
	late := app("late-comer", 10, 100)
	if err := s.scripts.Run(ctx, s.rdb, "app_config", []string{keys.L1("default"), keys.L1Apps("default"),
		keys.L2("default", late.AppID)}, late.AppID, late.GuaranteedQuota, late.BurstQuota, late.Priority,
		late.CBw, late.MaxBorrow, "1").Err(); err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(late)
	if err := s.rdb.HSet(ctx, keys.AppsIndex(), late.AppID, string(doc)).Err(); err != nil {
		t.Fatal(err)
	}
	if st := status("late-comer"); st != 200 {
		t.Errorf("an app created while the node loads: status %d, want 200 (looked up)", st)
	}
	if g.Metric("ratelimit_config_lookups_total") == 0 {
		t.Error("no app looked up on demand while loading")
	}
	if st := status("never-created"); st != 403 {
		t.Errorf("an unknown app while the node loads: status %d, want 403", st)
	}
	if h := healthOf(t, g); h.ConfigVersion != 0 {
		t.Errorf("a node whose first load has not finished reports config version %d", h.ConfigVersion)
	}
	if err := s.rdb.Del(ctx, keys.Buckets()).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := s.store.Bump(ctx, nil) // the notice: the load is retried
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first load done", func() bool { return healthOf(t, g).ConfigVersion >= v })
	if st := status("late-comer"); st != 200 {
		t.Errorf("late-comer after the load: status %d", st)
	}
}

// cmdCalls is Redis' count of calls of command cmd (INFO commandstats).
func (s *stack) cmdCalls(cmd string) int64 {
	s.t.Helper()
	return testutil.CommandCalls(s.t, s.rdb)[cmd]
}

// Issue 20 item 2: after a full load a node reads the connection limits of the apps that have
// some (the cluster's set the control plane keeps with the limits), not one HMGET per app; an
// app whose limits went while the node was not following loses them all the same.
func TestFullLoadReadsOnlyAppsWithConnectionLimits(t *testing.T) {
	s := newStack(t, stackOptions{apps: manyApps("lim", 3000)})
	g := s.gw()
	ctx := context.Background()
	v0, err := s.store.ConfigVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.waitVersion(v0)
	// as the control plane writes them: hash and set in one transaction, the store indexed
	for _, id := range []string{"lim-00010", "lim-00020"} {
		if err := store.SetConnLimits(ctx, s.rdb, "default", id, 3, 4); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.IndexConnLimits(ctx, s.rdb); err != nil {
		t.Fatal(err)
	}
	// the first load's connection limits (read before the store was indexed: every app) are
	// read in a timer after it
	reads := func() float64 { return g.Metric("ratelimit_config_conn_full_reads_total") }
	eventually(t, "the first load's connection limits read", func() bool { return reads() >= 1 })
	// new limits behind the change log's back: only the full load's reading brings them
	before := reads()
	base := s.cmdCalls("hmget")
	for _, id := range []string{"lim-00010", "lim-00020"} {
		if err := store.SetConnLimits(ctx, s.rdb, "default", id, 5, 6); err != nil {
			t.Fatal(err)
		}
	}
	loads := g.Metric("ratelimit_config_full_loads_total")
	if _, err := s.store.Bump(ctx, nil); err != nil { // logged as "all": a full load
		t.Fatal(err)
	}
	eventually(t, "a full load and its connection limits read", func() bool {
		return g.Metric("ratelimit_config_full_loads_total") > loads && reads() > before
	})
	if st := connStateOf(g, "lim-00010"); st.Max != 5 || connStateOf(g, "lim-00020").Burst != 6 {
		t.Fatalf("the full load did not bring the new limits: lim-00010 %+v", st)
	}
	if n := s.cmdCalls("hmget") - base; n > 100 {
		t.Errorf("the full load's connection limits took %d HMGETs for 2 apps with limits among 3,000", n)
	}

	// lim-00020's limits go behind the change log's back; the next full load drops them
	def := connStateOf(g, "lim-00030").Max
	if err := store.DelConnLimits(ctx, s.rdb, "default", "lim-00020"); err != nil {
		t.Fatal(err)
	}
	loads = g.Metric("ratelimit_config_full_loads_total")
	if _, err := s.store.Bump(ctx, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lim-00020 back to the default limit after a full load", func() bool {
		return g.Metric("ratelimit_config_full_loads_total") > loads && connStateOf(g, "lim-00020").Max == def
	})
	if st := connStateOf(g, "lim-00010"); st.Max != 5 || st.Burst != 6 {
		t.Errorf("lim-00010 after the second full load: max %d burst %d, want 5 6", st.Max, st.Burst)
	}
}
