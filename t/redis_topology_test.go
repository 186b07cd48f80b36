package t

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

// liveLoad is measured HEAD load on several apps, readable while it runs.
type liveLoad struct {
	by   map[string]*measuredLoad
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// startLoad sends conc concurrent streams of requests per app until finish (or the test's end).
func startLoad(t *testing.T, g *harness.Gateway, conc int, apps ...string) *liveLoad {
	l := &liveLoad{by: map[string]*measuredLoad{}, stop: make(chan struct{})}
	for _, a := range apps {
		m := &measuredLoad{}
		l.by[a] = m
		l.wg.Add(1)
		go func(a string) {
			defer l.wg.Done()
			m.run(g, a, conc, l.stop)
		}(a)
	}
	t.Cleanup(func() { l.finish() })
	return l
}

// finish stops the load and returns the results by app.
func (l *liveLoad) finish() map[string]*measuredLoad {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.by
}

// progress waits until every app has had n more requests admitted from now on.
func (l *liveLoad) progress(t *testing.T, n int64, what string) {
	t.Helper()
	from := map[string]int64{}
	for a, m := range l.by {
		from[a] = m.admitted.Load()
	}
	eventually(t, what, func() bool {
		for a, m := range l.by {
			if m.admitted.Load()-from[a] < n {
				return false
			}
		}
		return true
	})
}

func requireServed(t *testing.T, what string, res map[string]*measuredLoad) {
	t.Helper()
	for app, m := range res {
		t.Logf("%s, %s: admitted %d, rejected %d, 5xx %d, errors %d, slowest %v", what, app,
			m.admitted.Load(), m.rejected.Load(), m.server5xx.Load(), m.errors.Load(),
			time.Duration(m.slowest.Load()))
		if bad := m.unexpected(); bad != "" {
			t.Errorf("%s, %s: %s", what, app, bad)
		}
		if m.admitted.Load() == 0 {
			t.Errorf("%s, %s: nothing admitted", what, app)
		}
	}
}

func hgetFloat(t *testing.T, rdb redis.Cmdable, key, field string) float64 {
	t.Helper()
	v, err := rdb.HGet(context.Background(), key, field).Result()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("HGET %s %s: %v", key, field, err)
	}
	f, _ := strconv.ParseFloat(v, 64)
	return f
}

// A 3-master Redis Cluster: two storage clusters whose hash tags live on different masters,
// and the slot of one of them migrated to a third master under load. The gateway follows ASK
// while the slot's keys sit on the target and MOVED once the migration is done: no 5xx, no
// request failed open, grants land on the new master, and every admitted request is reported.
func TestRedisClusterSlotMigrationUnderLoad(t *testing.T) {
	c := testutil.StartCluster(t, 3)
	rdb := c.Client()
	ctx := context.Background()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	st := store.New(rdb, set)
	if _, err := seed.Demo(ctx, st); err != nil {
		t.Fatalf("seed on the cluster: %v", err)
	}
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c1", Capacity: 100000}); err != nil {
		t.Fatal(err)
	}
	c1app := store.App{AppID: "c1-app", ClusterID: "c1", GuaranteedQuota: 20000,
		BurstQuota: 50000, Priority: 1, CBw: 1, Enabled: true}
	if _, err := st.PutApp(ctx, c1app); err != nil {
		t.Fatal(err)
	}
	slot := c.Slot(keys.L1("default"))
	from, other := c.NodeOf(slot), c.NodeOf(c.Slot(keys.L1("c1")))
	if from == other {
		t.Fatalf("clusters default and c1 share node %d", from)
	}
	to := 3 - from - other // the third master
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: c.URL(), NodeID: "node-1",
		Env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})

	l2 := keys.L2("default", "demo-p1")
	load := startLoad(t, g, 4, "demo-p1", "c1-app")
	load.progress(t, 1000, "load on both clusters")
	redirects := func(kind string) float64 {
		return g.Metric(`ratelimit_redis_redirects_total{kind="` + kind + `"}`)
	}
	before := hgetFloat(t, rdb, l2, "total_granted")
	var inWindow float64
	start := time.Now()
	c.MigrateSlot(slot, to, func() {
		// the keys are on the target, the slot still on the source: it answers ASK; the cluster
		// client of the test follows ASK too
		inWindow = hgetFloat(t, rdb, l2, "total_granted")
		load.progress(t, 2000, "load while the slot is migrating")
		eventually(t, "ASK followed by a grant", func() bool {
			return redirects("ask") > 0 && hgetFloat(t, rdb, l2, "total_granted") > inWindow
		})
	})
	migrated := time.Since(start)
	afterMigration := hgetFloat(t, c.Node(to), l2, "total_granted")
	load.progress(t, 1000, "load after the migration")
	eventually(t, "MOVED followed by a grant on the new master", func() bool {
		return redirects("moved") > 0 && hgetFloat(t, c.Node(to), l2, "total_granted") > afterMigration
	})
	res := load.finish()
	requireServed(t, "slot migration", res)
	t.Logf("slot %d moved from node %d to node %d in %v (keys on the target until a grant through "+
		"ASK); redirects: %v ASK, %v MOVED, %v TRYAGAIN; demo-p1 granted %v before, %v when the "+
		"keys moved, %v after the migration, %v at the end (on the new master)", slot, from, to,
		migrated, redirects("ask"), redirects("moved"), redirects("tryagain"), before, inWindow,
		afterMigration, hgetFloat(t, c.Node(to), l2, "total_granted"))
	if n, _ := c.Node(from).Exists(ctx, l2).Result(); n != 0 {
		t.Errorf("%s still on the old master", l2)
	}
	g.SettleMetrics()
	for _, app := range []string{"demo-p1", "c1-app"} {
		if v := g.Metric(`ratelimit_fail_open_total{app_id="` + app + `"}`); v != 0 {
			t.Errorf("%s failed open %v times during the migration", app, v)
		}
	}
	eventually(t, "every admitted request reported", func() bool {
		for app, m := range res {
			cl := "default"
			if app == "c1-app" {
				cl = "c1"
			}
			if g.State(app).Inflight != "" ||
				hgetFloat(t, rdb, keys.Stats(cl, app), "total_consumed") != float64(m.admitted.Load()) {
				return false
			}
		}
		return true
	})
}

// Sentinel: 1 master + 1 replica + 3 sentinels; control plane and gateway on the
// redis-sentinel:// URL; SENTINEL FAILOVER under load. The gateway serves throughout, its grants
// reach the new master within a few seconds and it stops calling scripts on the old one (which
// stays writable until the sentinels demote it); the control plane follows too.
func TestRedisSentinelFailoverUnderLoad(t *testing.T) {
	grp := testutil.StartSentinelGroup(t)
	cp := harness.StartControlPlane(t, grp.URL(), map[string]string{"TOLLGATE_SEED_DEMO": "true"})
	ctx := context.Background()
	oldMaster, newMaster := grp.Master.Client(), grp.Replica.Client()
	if n, _ := oldMaster.Exists(ctx, keys.AppsIndex()).Result(); n != 1 {
		t.Fatalf("the control plane did not seed the master through the sentinels")
	}
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: grp.URL(), NodeID: "node-1",
		Env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})
	l2 := keys.L2("default", "demo-p1")
	load := startLoad(t, g, 4, "demo-p1")
	load.progress(t, 1000, "load on the first master")
	if hgetFloat(t, oldMaster, l2, "total_granted") == 0 {
		t.Fatal("no grant on the first master")
	}

	grp.WaitNoTilt()
	start := time.Now()
	addr := grp.Failover()
	announced := time.Since(start)
	if addr != grp.Replica.Addr() {
		t.Fatalf("new master %s, want the replica %s", addr, grp.Replica.Addr())
	}
	base := hgetFloat(t, newMaster, l2, "total_granted")
	eventually(t, "grants on the new master", func() bool {
		return hgetFloat(t, newMaster, l2, "total_granted") > base
	})
	backOn := time.Since(start)
	// the old master stays a writable master until the sentinels demote it: watch its script
	// calls (grants, reports; a replica gets effects, not scripts) for a second under load to
	// see when the gateway stopped writing there
	scriptCalls := func() float64 {
		return infoField(t, oldMaster, "commandstats", "cmdstat_evalsha") +
			infoField(t, oldMaster, "commandstats", "cmdstat_eval")
	}
	last, lastChange := scriptCalls(), time.Since(start)
	tick := time.NewTicker(10 * time.Millisecond)
	for end := time.Now().Add(time.Second); time.Now().Before(end); <-tick.C {
		if v := scriptCalls(); v != last {
			last, lastChange = v, time.Since(start)
		}
	}
	tick.Stop()
	requireServed(t, "sentinel failover", load.finish())
	t.Logf("SENTINEL FAILOVER: new master announced after %v, first grant on it after %v, "+
		"last script call on the old master after %v; %v requests failed open", announced,
		backOn, lastChange, g.Metric(`ratelimit_fail_open_total{app_id="demo-p1"}`))
	if backOn > 5*time.Second {
		t.Errorf("grants reached the new master %v after the failover, want within 5 s", backOn)
	}
	if lastChange > backOn+500*time.Millisecond {
		t.Errorf("the gateway kept calling scripts on the old master until %v (new master from %v)",
			lastChange, backOn)
	}
	eventually(t, "the control plane healthy on the new master", func() bool {
		h := cp.Health()
		v, _ := newMaster.Get(ctx, keys.ConfigVersion()).Result()
		return h != nil && h["redis"] == "ok" && fmt.Sprint(h["config_version"]) == v
	})
}

// Sentinel, the master killed under load: while there is no master the gateway fails open
// (no 5xx); once the sentinels have promoted the replica, grants reach it within about a
// second (2 s allowed on this shared 2-core machine).
func TestRedisSentinelMasterKilledUnderLoad(t *testing.T) {
	grp := testutil.StartSentinelGroup(t)
	ctx := context.Background()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Demo(ctx, store.New(grp.Master.Client(), set)); err != nil {
		t.Fatal(err)
	}
	grp.WaitQuorum()
	g := harness.StartGateway(t, harness.GatewayOptions{RedisURL: grp.URL(), NodeID: "node-1",
		Env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})
	l2 := keys.L2("default", "demo-p1")
	newMaster := grp.Replica.Client()
	load := startLoad(t, g, 4, "demo-p1")
	load.progress(t, 1000, "load on the first master")
	old := grp.MasterAddr()
	start := time.Now()
	grp.Master.Stop()
	grp.WaitNewMaster(old)
	announced := time.Since(start)
	base := hgetFloat(t, newMaster, l2, "total_granted")
	eventually(t, "grants on the new master", func() bool {
		return hgetFloat(t, newMaster, l2, "total_granted") > base
	})
	backOn := time.Since(start)
	requireServed(t, "master killed", load.finish())
	failOpen := g.Metric(`ratelimit_fail_open_total{app_id="demo-p1"}`)
	t.Logf("master killed: new master announced after %v, first grant on it after %v; "+
		"%v requests failed open", announced, backOn, failOpen)
	if failOpen == 0 {
		t.Errorf("no request failed open while there was no master")
	}
	if backOn-announced > 2*time.Second {
		t.Errorf("grants reached the new master %v after the sentinels announced it, want < 2 s",
			backOn-announced)
	}
}

// A READONLY reply (the gateway's Redis made a replica) is an unavailable Redis: requests fail
// open (no 5xx), the connections that answered READONLY are closed, not pooled, and grants
// resume after REPLICAOF NO ONE.
func TestReadonlyReplicaFailsOpenAndRecovers(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})
	g := s.gw()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		g.Do("HEAD", "/bucket/obj", "demo-p1", nil, nil)
	}
	// a replica of a master that does not exist keeps its data and refuses every write
	if err := s.rdb.SlaveOf(ctx, "127.0.0.1", strconv.Itoa(harness.FreePort(t))).Err(); err != nil {
		t.Fatal(err)
	}
	// as Sentinel does on a demotion: drop the clients, so that every connection the gateway
	// uses from now on has only talked to a replica
	if err := s.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	conns0 := infoField(t, s.rdb, "stats", "total_connections_received")
	load := startLoad(t, g, 4, "demo-p1")
	start := time.Now()
	readonlyReplies := func() float64 { return infoField(t, s.rdb, "errorstats", "errorstat_READONLY") }
	eventually(t, "READONLY replies and requests failing open", func() bool {
		return readonlyReplies() > 0 && g.Metric(`ratelimit_fail_open_total{app_id="demo-p1"}`) > 0
	})
	// the breaker is open; each worker probes every 0.5 s: wait for two more probes answered
	// READONLY and a few thousand requests answered meanwhile
	first, m := readonlyReplies(), load.by["demo-p1"]
	answered := func() int64 { return m.admitted.Load() + m.rejected.Load() }
	from := answered()
	eventually(t, "probes answered READONLY under load", func() bool {
		return readonlyReplies() >= first+2 && answered()-from >= 2000
	})
	res := load.finish()
	asReplica := time.Since(start)
	requireServed(t, "replica", res)
	readonly := infoField(t, s.rdb, "errorstats", "errorstat_READONLY")
	conns := infoField(t, s.rdb, "stats", "total_connections_received") - conns0
	failOpen := g.Metric(`ratelimit_fail_open_total{app_id="demo-p1"}`)
	// no connection whose last command was a write stays open: each was closed on READONLY
	clients, err := s.rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(clients, "\n") {
		for _, cmd := range []string{"cmd=evalsha", "cmd=eval ", "cmd=hset", "cmd=xadd",
			"cmd=expire"} {
			if strings.Contains(line, cmd) {
				t.Errorf("a connection that answered READONLY is still open: %s", line)
			}
		}
	}
	t.Logf("replica for %v under load: %v READONLY replies, %v new connections, %v requests "+
		"failed open", asReplica, readonly, conns, failOpen)
	// the events drain pipelines its XADDs: one batch gets a READONLY reply per entry on one
	// connection (closed afterwards, as the client list above shows); every other write is
	// alone on its connection
	batched := infoStat(t, s.rdb, "commandstats", "cmdstat_xadd", "rejected_calls")
	if conns < readonly-batched {
		t.Errorf("%v READONLY replies (%v of them to pipelined XADDs) but only %v new "+
			"connections: a connection was reused", readonly, batched, conns)
	}

	granted := s.l2("demo-p1")["total_granted"]
	start = time.Now()
	if err := s.rdb.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "grants after REPLICAOF NO ONE", func() bool {
		if r := g.Do("HEAD", "/bucket/obj", "demo-p1", nil, nil); r.Status >= 500 {
			t.Fatalf("status %d after REPLICAOF NO ONE", r.Status)
		}
		return s.l2("demo-p1")["total_granted"] > granted
	})
	t.Logf("grants again %v after REPLICAOF NO ONE", time.Since(start))
}

// infoField reads a numeric field of INFO section; for errorstats and commandstats lines
// (errorstat_READONLY:count=5, cmdstat_evalsha:calls=9,usec=...) the first value.
// infoStat is value `key` of an INFO line "field:k1=v1,k2=v2,..." (0 when absent).
func infoStat(t *testing.T, rdb redis.Cmdable, section, field, key string) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			for _, kv := range strings.Split(v, ",") {
				if k, val, _ := strings.Cut(kv, "="); k == key {
					f, _ := strconv.ParseFloat(val, 64)
					return f
				}
			}
		}
	}
	return 0
}

func infoField(t *testing.T, rdb redis.Cmdable, section, field string) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			if _, kv, found := strings.Cut(v, "="); found {
				v, _, _ = strings.Cut(kv, ",")
			}
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
