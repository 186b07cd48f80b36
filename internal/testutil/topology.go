package testutil

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	topologyTimeout = 15 * time.Second
	// a sentinel that was not scheduled for 2 s (a stalled machine) enters TILT mode and takes
	// no action for 30 s, SENTINEL FAILOVER included
	tiltTimeout = 40 * time.Second
)

// Cluster is a Redis Cluster of masters without replicas on loopback, owned by a test.
type Cluster struct {
	t     testing.TB
	Nodes []*Redis
	ids   []string
	admin []*redis.Client
}

// StartCluster starts n cluster-enabled redis-servers, gives node i the i-th of n equal slot
// ranges (the split of `redis-cli --cluster create --cluster-replicas 0`: 0-5460, 5461-10922,
// 10923-16383 for three), and waits until every node sees every slot served. It does what
// redis-cli does, without its fixed one-second waits.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		r := StartRedisArgs(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "3000")
		adm := r.Client()
		id, err := adm.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("testutil: cluster myid: %v", err)
		}
		first, last := slotRange(i, n)
		for _, cmd := range [][]any{
			{"CLUSTER", "SET-CONFIG-EPOCH", i + 1},
			{"CLUSTER", "ADDSLOTSRANGE", first, last},
		} {
			if err := adm.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("testutil: %v: %v", cmd, err)
			}
		}
		c.Nodes, c.ids, c.admin = append(c.Nodes, r), append(c.ids, id), append(c.admin, adm)
	}
	for _, r := range c.Nodes[1:] {
		if err := c.admin[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(r.Port())).Err(); err != nil {
			t.Fatalf("testutil: cluster meet: %v", err)
		}
	}
	Eventually(t, topologyTimeout, func() bool { return c.agree(ctx, nil) },
		"every cluster node has state ok and sees every slot")
	return c
}

// slotRange is the slots of master i of n, as redis-cli --cluster create assigns them.
func slotRange(i, n int) (int, int) {
	per := 16384.0 / float64(n)
	first := 0
	if i > 0 {
		_, prev := slotRange(i-1, n)
		first = prev + 1
	}
	last := int(math.Round(float64(i)*per + per - 1))
	if i == n-1 || last > 16383 {
		last = 16383
	}
	return first, last
}

// agree reports whether every node has cluster_state:ok and the same slot map (and, when want
// is set, every slot of want served by its node).
func (c *Cluster) agree(ctx context.Context, want map[int]int) bool {
	var sig string
	for i, adm := range c.admin {
		info, err := adm.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
			return false
		}
		slots, err := adm.ClusterSlots(ctx).Result()
		if err != nil {
			return false
		}
		s := fmt.Sprint(slots)
		if i > 0 && s != sig {
			return false
		}
		sig = s
		for slot, node := range want {
			if owner(slots, slot) != c.Nodes[node].Addr() {
				return false
			}
		}
	}
	return true
}

func owner(slots []redis.ClusterSlot, slot int) string {
	for _, s := range slots {
		if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	return ""
}

// URL is the gateway's redis-cluster:// URL of every node.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		addrs[i] = r.Addr()
	}
	return "redis-cluster://" + strings.Join(addrs, ",")
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	addrs := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		addrs[i] = r.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns a plain client of node i (for per-node commands and statistics).
func (c *Cluster) Node(i int) *redis.Client { return c.admin[i] }

// Slot is the hash slot of key.
func (c *Cluster) Slot(key string) int {
	c.t.Helper()
	s, err := c.admin[0].ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		c.t.Fatalf("testutil: cluster keyslot: %v", err)
	}
	return int(s)
}

// NodeOf is the index of the node serving slot, as node 0 sees it.
func (c *Cluster) NodeOf(slot int) int {
	c.t.Helper()
	slots, err := c.admin[0].ClusterSlots(context.Background()).Result()
	if err != nil {
		c.t.Fatalf("testutil: cluster slots: %v", err)
	}
	addr := owner(slots, slot)
	for i, r := range c.Nodes {
		if r.Addr() == addr {
			return i
		}
	}
	c.t.Fatalf("testutil: slot %d has no node", slot)
	return -1
}

// MigrateSlot moves slot to node `to` the way redis-cli --cluster reshard does: IMPORTING on
// the target, MIGRATING on the source, every key of the slot MIGRATEd in one atomic batch, then
// SETSLOT NODE on the target, the source and the others. hold (if not nil) runs while the keys
// are on the target but the slot still belongs to the source: the source answers ASK then,
// and MOVED once the migration is done. Returns after every node sees the new owner.
func (c *Cluster) MigrateSlot(slot, to int, hold func()) {
	c.t.Helper()
	ctx := context.Background()
	from := c.NodeOf(slot)
	if from == to {
		c.t.Fatalf("testutil: slot %d already on node %d", slot, to)
	}
	src, dst := c.admin[from], c.admin[to]
	steps := [][]any{
		{"CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from]},
		{"CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to]},
	}
	for i, cmd := range steps {
		node := dst
		if i == 1 {
			node = src
		}
		if err := node.Do(ctx, cmd...).Err(); err != nil {
			c.t.Fatalf("testutil: %v: %v", cmd, err)
		}
	}
	c.moveKeys(ctx, slot, src, c.Nodes[to])
	if hold != nil {
		hold()
	}
	c.moveKeys(ctx, slot, src, c.Nodes[to])
	order := []int{to, from}
	for i := range c.Nodes {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := c.admin[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[to]).Err(); err != nil {
			c.t.Fatalf("testutil: setslot %d node on node %d: %v", slot, i, err)
		}
	}
	Eventually(c.t, topologyTimeout, func() bool { return c.agree(ctx, map[int]int{slot: to}) },
		fmt.Sprintf("every node sees slot %d on node %d", slot, to))
}

func (c *Cluster) moveKeys(ctx context.Context, slot int, src *redis.Client, dst *Redis) {
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
		if err != nil {
			c.t.Fatalf("testutil: getkeysinslot %d: %v", slot, err)
		}
		if len(keys) == 0 {
			return
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			c.t.Fatalf("testutil: migrate %d keys of slot %d: %v", len(keys), slot, err)
		}
	}
}

// SentinelGroup is a master, one replica and three sentinels monitoring them, on loopback.
type SentinelGroup struct {
	t         testing.TB
	Name      string
	Master    *Redis // the master at start
	Replica   *Redis
	Sentinels []*Sentinel
}

// StartSentinelGroup starts the master, its replica (synchronised) and three sentinels (quorum
// 2, down-after 1 s), and waits until every sentinel knows the replica.
func StartSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	return StartSentinelGroupArgs(t)
}

// StartSentinelGroupArgs is StartSentinelGroup with extra redis-server arguments for the master
// and the replica (e.g. "--appendonly", "yes").
func StartSentinelGroupArgs(t testing.TB, args ...string) *SentinelGroup {
	t.Helper()
	g := &SentinelGroup{t: t, Name: "mymaster"}
	g.Master = StartRedisArgs(t, append([]string{"--repl-diskless-sync-delay", "0"}, args...)...)
	g.Replica = StartRedisArgs(t, append([]string{"--repl-diskless-sync-delay", "0",
		"--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port())}, args...)...)
	ctx := context.Background()
	rc := g.Replica.Client()
	Eventually(t, topologyTimeout, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, "replica synchronised with its master")
	for i := 0; i < 3; i++ {
		g.Sentinels = append(g.Sentinels, startSentinel(t, g.Name, g.Master.Port()))
	}
	for _, s := range g.Sentinels {
		sc := s.Client()
		Eventually(t, topologyTimeout, func() bool {
			reps, err := sc.Replicas(ctx, g.Name).Result()
			return err == nil && len(reps) == 1 && reps[0]["master-link-status"] == "ok" &&
				!strings.Contains(reps[0]["flags"], "down") &&
				!strings.Contains(reps[0]["flags"], "disconnected")
		}, "sentinel knows the replica")
	}
	return g
}

// WaitQuorum waits until every sentinel knows the two others (from their hello messages, every
// 2 s), as an automatic failover after a master's death needs their votes.
func (g *SentinelGroup) WaitQuorum() {
	g.t.Helper()
	ctx := context.Background()
	for _, s := range g.Sentinels {
		sc := s.Client()
		Eventually(g.t, topologyTimeout, func() bool {
			others, err := sc.Sentinels(ctx, g.Name).Result()
			return err == nil && len(others) == len(g.Sentinels)-1
		}, "sentinels know each other")
	}
	g.WaitNoTilt()
}

// WaitNoTilt waits until no sentinel is in TILT mode (Failover and WaitQuorum wait too; call it
// before starting a clock on a failover).
func (g *SentinelGroup) WaitNoTilt() {
	g.t.Helper()
	ctx := context.Background()
	for _, s := range g.Sentinels {
		sc := s.Client()
		Eventually(g.t, tiltTimeout, func() bool {
			cmd := redis.NewStringCmd(ctx, "INFO", "sentinel")
			return sc.Process(ctx, cmd) == nil && strings.Contains(cmd.Val(), "sentinel_tilt:0")
		}, "sentinel out of TILT mode")
	}
}

// logs is what each sentinel announces and its log, for a failed test.
func (g *SentinelGroup) logs() string {
	var b strings.Builder
	for _, s := range g.Sentinels {
		a, err := s.Client().GetMasterAddrByName(context.Background(), g.Name).Result()
		log, _ := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
		fmt.Fprintf(&b, "\n== sentinel %s announces %v (%v)\n%s", s.Addr(), a, err, log)
	}
	return b.String()
}

// URL is the gateway's redis-sentinel:// URL (database 0).
func (g *SentinelGroup) URL() string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr()
	}
	return "redis-sentinel://" + strings.Join(addrs, ",") + "/" + g.Name + "/0"
}

// MasterAddr is the master address sentinel 0 announces.
func (g *SentinelGroup) MasterAddr() string {
	g.t.Helper()
	addr, err := g.Sentinels[0].Client().GetMasterAddrByName(context.Background(), g.Name).Result()
	if err != nil {
		g.t.Fatalf("testutil: get-master-addr-by-name: %v", err)
	}
	return addr[0] + ":" + addr[1]
}

// Failover runs SENTINEL FAILOVER on sentinel 0 (retrying while the sentinel has no usable
// replica yet) and returns once every sentinel announces the new master's address.
func (g *SentinelGroup) Failover() string {
	g.t.Helper()
	ctx := context.Background()
	g.WaitNoTilt()
	old := g.MasterAddr()
	sc := g.Sentinels[0].Client()
	Eventually(g.t, topologyTimeout, func() bool {
		return sc.Failover(ctx, g.Name).Err() == nil
	}, "SENTINEL FAILOVER accepted")
	return g.WaitNewMaster(old)
}

// WaitNewMaster returns the master address once every sentinel announces one other than old.
func (g *SentinelGroup) WaitNewMaster(old string) string {
	g.t.Helper()
	g.t.Cleanup(func() {
		if g.t.Failed() {
			g.t.Log(g.logs())
		}
	})
	ctx := context.Background()
	var addr string
	Eventually(g.t, topologyTimeout, func() bool {
		for _, s := range g.Sentinels {
			a, err := s.Client().GetMasterAddrByName(ctx, g.Name).Result()
			if err != nil || a[0]+":"+a[1] == old {
				return false
			}
			addr = a[0] + ":" + a[1]
		}
		return true
	}, "every sentinel announces the new master")
	return addr
}

// Sentinel is one redis-sentinel process.
type Sentinel struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	cli  *redis.SentinelClient
}

func startSentinel(t testing.TB, name string, masterPort int) *Sentinel {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < startTries; try++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
			"sentinel resolve-hostnames no\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 10000\n"+
			"sentinel parallel-syncs %s 1\n",
			port, dir, filepath.Join(dir, "sentinel.log"), name, masterPort, name, name, name)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(serverBin(t), conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			t.Fatalf("testutil: start sentinel: %v", err)
		}
		s := &Sentinel{t: t, dir: dir, port: port, cmd: cmd, done: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(s.done) }()
		t.Cleanup(s.kill)
		if lastErr = s.waitReady(); lastErr == nil {
			return s
		}
		s.kill()
	}
	t.Fatalf("testutil: start sentinel: %v", lastErr)
	return nil
}

func (s *Sentinel) waitReady() error {
	cli := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), DialTimeout: 200 * time.Millisecond,
		MaxRetries: -1})
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := cli.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cli = cli
			return nil
		}
		select {
		case <-s.done:
			_ = cli.Close()
			return fmt.Errorf("sentinel on port %d exited at start", s.port)
		default:
		}
		if time.Now().After(deadline) {
			_ = cli.Close()
			return fmt.Errorf("sentinel on port %d: no PING answer: %w", s.port, err)
		}
		time.Sleep(pollEvery)
	}
}

// Addr is host:port of the sentinel.
func (s *Sentinel) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Client is the sentinel's client (closed when the test ends).
func (s *Sentinel) Client() *redis.SentinelClient { return s.cli }

func (s *Sentinel) kill() {
	if s.cli != nil {
		_ = s.cli.Close()
		s.cli = nil
	}
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}
