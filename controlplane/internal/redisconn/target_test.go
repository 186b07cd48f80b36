package redisconn

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

func TestParse(t *testing.T) {
	cases := []struct {
		url  string
		want Target
	}{
		{"redis://127.0.0.1:6390/2", Target{Kind: Single, Addrs: []string{"127.0.0.1:6390"}, DB: 2}},
		{"redis://:pw@h:1", Target{Kind: Single, Addrs: []string{"h:1"}, Password: "pw"}},
		{"redis-sentinel://10.0.0.1:26379,10.0.0.2:26380/mymaster",
			Target{Kind: Sentinel, Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26380"},
				MasterName: "mymaster"}},
		{"redis-sentinel://:s3cret@h:26379/m-1.a/3",
			Target{Kind: Sentinel, Addrs: []string{"h:26379"}, MasterName: "m-1.a",
				Password: "s3cret", DB: 3}},
		{"redis-sentinel://h:26379/m/", Target{Kind: Sentinel, Addrs: []string{"h:26379"},
			MasterName: "m"}},
		{"redis-cluster://a:7000,b:7001,c:7002", Target{Kind: Cluster,
			Addrs: []string{"a:7000", "b:7001", "c:7002"}}},
		{"redis-cluster://user:pw@a:7000/0", Target{Kind: Cluster, Addrs: []string{"a:7000"},
			Username: "user", Password: "pw"}},
	}
	for _, c := range cases {
		got, err := Parse(c.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.url, err)
			continue
		}
		got.single = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", c.url, got, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, u := range []string{
		"", "http://h:1", "redis://h:1/x",
		"redis-sentinel://h:26379", "redis-sentinel://h:26379/", "redis-sentinel://h/m",
		"redis-sentinel://h:1,/m", "redis-sentinel://h:1/m/x", "redis-sentinel://h:1/m/1/2",
		"redis-sentinel://h:99999/m", "redis-sentinel://h:1/bad name",
		"redis-cluster://", "redis-cluster://h:1/3", "redis-cluster://h:1,h2",
		"redis-cluster://:pw@h:x",
	} {
		_, err := Parse(u)
		if err == nil || !errors.Is(err, ErrURL) {
			t.Errorf("Parse(%q) = %v, want an ErrURL", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("Parse(%q): error shows the password: %v", u, err)
		}
	}
}

func TestStringHidesPassword(t *testing.T) {
	for u, want := range map[string]string{
		"redis://:pw@h:1/2":                  "redis://:xxxxx@h:1/2",
		"redis-sentinel://:pw@a:1,b:2/m":     "redis-sentinel://:xxxxx@a:1,b:2/m/0",
		"redis-cluster://a:1,b:2":            "redis-cluster://a:1,b:2",
		"redis-cluster://user:pw@a:1,b:2/0":  "redis-cluster://user:xxxxx@a:1,b:2",
		"redis-sentinel://a:1/m/4":           "redis-sentinel://a:1/m/4",
		"redis://127.0.0.1:6390/0":           "redis://127.0.0.1:6390/0",
		"rediss://:pw@secure.example:6380/0": "rediss://:xxxxx@secure.example:6380/0",
	} {
		tg, err := Parse(u)
		if err != nil {
			t.Fatalf("Parse(%q): %v", u, err)
		}
		if got := tg.String(); got != want {
			t.Errorf("String(%q) = %q, want %q", u, got, want)
		}
	}
}

func testLogger() *slog.Logger { return logger(&syncBuffer{}) }

func mustClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	tg, err := Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	c := tg.NewClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The control plane's store and scripts work through the cluster client: every script's keys
// share the cluster's hash tag, and the untagged keys are written one command at a time.
func TestClusterClientRunsTheStore(t *testing.T) {
	c := testutil.StartCluster(t, 3)
	rdb := mustClient(t, c.URL())
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("client of %s is %T, want *redis.ClusterClient", c.URL(), rdb)
	}
	ctx := context.Background()
	if err := Wait(ctx, rdb, testLogger(), fast()); err != nil {
		t.Fatal(err)
	}
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		t.Fatalf("LoadAll on a cluster: %v", err)
	}
	// SCRIPT LOAD reached every master
	sha, _ := set.SHA("l2_grant")
	for i := range c.Nodes {
		if ok, err := c.Node(i).ScriptExists(ctx, sha).Result(); err != nil || !ok[0] {
			t.Errorf("l2_grant not loaded on node %d: %v %v", i, ok, err)
		}
	}
	st := store.New(rdb, set)
	seeded, err := seed.Demo(ctx, st)
	if err != nil || !seeded {
		t.Fatalf("seed.Demo on a cluster = %v, %v", seeded, err)
	}
	other := store.App{AppID: "other-1", ClusterID: "c1", GuaranteedQuota: 100, BurstQuota: 200,
		Priority: 1, CBw: 1, Enabled: true}
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c1", Capacity: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutApp(ctx, other); err != nil {
		t.Fatal(err)
	}
	// the two clusters live on different masters
	if a, b := c.NodeOf(c.Slot(keys.L1("default"))), c.NodeOf(c.Slot(keys.L1("c1"))); a == b {
		t.Fatalf("clusters default and c1 on the same node %d", a)
	}
	apps, err := st.ListApps(ctx)
	if err != nil || len(apps) != len(seed.DemoApps())+1 {
		t.Fatalf("ListApps = %d apps, %v", len(apps), err)
	}
	if v, err := st.ConfigVersion(ctx); err != nil || v != int64(len(seed.DemoApps())+3) {
		t.Fatalf("ConfigVersion = %d, %v", v, err)
	}
	if has, err := st.HasConfig(ctx); err != nil || !has {
		t.Fatalf("HasConfig = %v, %v", has, err)
	}
	if got, err := st.GetApp(ctx, "other-1"); err != nil || got != other {
		t.Fatalf("GetApp = %+v, %v", got, err)
	}
}

// The failover client follows SENTINEL FAILOVER: writes land on the new master.
func TestSentinelClientFollowsFailover(t *testing.T) {
	g := testutil.StartSentinelGroup(t)
	rdb := mustClient(t, g.URL())
	ctx := context.Background()
	if err := Wait(ctx, rdb, testLogger(), fast()); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := g.Master.Client().Get(ctx, "k").Result(); v != "before" {
		t.Fatalf("write before failover not on the master: %q", v)
	}
	newMaster := g.Failover()
	if newMaster != g.Replica.Addr() {
		t.Fatalf("new master %s, want the replica %s", newMaster, g.Replica.Addr())
	}
	start := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return rdb.Set(cctx, "k", "after", 0).Err() == nil &&
			g.Replica.Client().Get(ctx, "k").Val() == "after"
	}, "a write through the failover client reaches the new master")
	t.Logf("writes on the new master %v after the sentinels announced it", time.Since(start))
}
