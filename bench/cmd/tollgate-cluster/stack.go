package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/proc"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

const (
	clusterID = "bench"
	probeApp  = "probe" // readiness probes: an app of its own, never measured
	adminPass = "cluster-bench-password-1"
)

// stack is one run's processes: Redis (one server or a 3-master cluster), the control plane
// and K gateway nodes.
type stack struct {
	o       options
	dir     string
	redis   []*proc.Process
	addrs   []string // host:port of every Redis server
	url     string   // TOLLGATE_REDIS_URL
	rdb     redis.UniversalClient
	cp      *proc.Process
	nodes   []*node
	cluster bool
}

// node is one gateway: nginx with tollgate's Lua on its own loopback address.
type node struct {
	id      string
	prefix  string
	conf    string
	addr    string // 127.0.0.x:port of the tenants' listener
	metrics string // http://127.0.0.1:port of /health
	env     []string
	p       *proc.Process
}

func startStack(ctx context.Context, o options, w *workload) (*stack, error) {
	dir, err := os.MkdirTemp("", "tollgate-cluster-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	s := &stack{o: o, dir: dir, cluster: o.redisCluster}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	if err := s.startRedis(ctx); err != nil {
		return nil, err
	}
	if err := s.seed(ctx, w); err != nil {
		return nil, err
	}
	if err := s.startControlPlane(ctx); err != nil {
		return nil, err
	}
	for i := 0; i < w.nodes; i++ {
		n, err := s.newNode(i)
		if err != nil {
			return nil, err
		}
		s.nodes = append(s.nodes, n)
		if err := n.start(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

func (s *stack) stop() {
	for _, n := range s.nodes {
		if n.p != nil {
			n.p.Stop(syscall.SIGTERM, 10*time.Second)
		}
	}
	if s.cp != nil {
		s.cp.Stop(syscall.SIGTERM, 10*time.Second)
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	for _, r := range s.redis {
		r.Stop(syscall.SIGTERM, 5*time.Second)
	}
	if !s.o.keep {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *stack) startRedis(ctx context.Context) error {
	n := 1
	if s.cluster {
		n = 3
	}
	for i := 0; i < n; i++ {
		port, err := proc.FreePort()
		if err != nil {
			return err
		}
		d := filepath.Join(s.dir, "redis"+strconv.Itoa(i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
			"--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(d, "redis.log")}
		if s.cluster {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		}
		p, err := proc.Start("redis-server", exec.Command("redis-server", args...))
		if err != nil {
			return err
		}
		s.redis = append(s.redis, p)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		s.addrs = append(s.addrs, addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		err = p.Poll(ctx, 10*time.Second, 10*time.Millisecond, func(ctx context.Context) (bool, error) {
			return c.Ping(ctx).Err() == nil, nil
		})
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	if !s.cluster {
		s.url = "redis://" + s.addrs[0] + "/0"
		s.rdb = redis.NewClient(&redis.Options{Addr: s.addrs[0], PoolSize: 8})
		return nil
	}
	cmd := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, s.addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	s.url = "redis-cluster://" + strings.Join(s.addrs, ",")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.addrs, PoolSize: 8})
	s.rdb = cc
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, a := range s.addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok")
		}
		if ok && cc.Set(ctx, "{"+clusterID+"}:probe", 1, time.Second).Err() == nil &&
			cc.Set(ctx, "probe", 1, time.Second).Err() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis cluster not ready within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seed creates the storage cluster and the apps through the control plane's store.
func (s *stack) seed(ctx context.Context, w *workload) error {
	set, err := scripts.New()
	if err != nil {
		return err
	}
	st := store.New(s.rdb, set)
	var sumG int64
	for _, a := range w.apps {
		sumG += a.g
	}
	capacity := max(1_000_000, 10*sumG)
	if _, err := st.PutCluster(ctx, store.Cluster{ID: clusterID, Capacity: capacity, ReservedRatio: 0.1}); err != nil {
		return fmt.Errorf("seed cluster: %w", err)
	}
	apps := append([]appSpec{{id: probeApp, g: 10_000, burst: 100_000}}, w.apps...)
	for _, a := range apps {
		if _, err := st.PutApp(ctx, store.App{AppID: a.id, ClusterID: clusterID, GuaranteedQuota: a.g,
			BurstQuota: a.burst, Priority: 0, CBw: 1, MaxBorrow: 0, Enabled: true}); err != nil {
			return fmt.Errorf("seed app %s: %w", a.id, err)
		}
	}
	return nil
}

func (s *stack) startControlPlane(ctx context.Context) error {
	bin := filepath.Join(s.o.repo, "bin", "tollgate-controlplane")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: %w (run make build)", bin, err)
	}
	port, err := proc.FreePort()
	if err != nil {
		return err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TOLLGATE_REDIS_URL="+s.url, "TOLLGATE_CP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"TOLLGATE_ADMIN_PASSWORD="+adminPass, "TOLLGATE_CONFIG_BACKUP_DIR="+filepath.Join(s.dir, "backups"),
		"TOLLGATE_SEED_DEMO=false", "TOLLGATE_CP_RECONCILE_INTERVAL="+s.o.reconcile.String(),
		"TOLLGATE_CP_REAP_AFTER="+s.o.reapAfter.String())
	p, err := proc.Start("tollgate-controlplane", cmd)
	if err != nil {
		return err
	}
	s.cp = p
	if err := p.Poll(ctx, 30*time.Second, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, base+"/health"), nil
	}); err != nil {
		return fmt.Errorf("control plane: %w\n%s", err, p.Output())
	}
	return nil
}

func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePortOn returns a port free on host a moment ago.
func freePortOn(host string) (int, error) {
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newNode renders node i: nginx.conf from the repository's gateway template, listening on
// 127.0.0.(10+i), node id n<i>.
func (s *stack) newNode(i int) (*node, error) {
	host := "127.0.0." + strconv.Itoa(10+i)
	port, err := freePortOn(host)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", i, err)
	}
	mport, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	bport, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Join(s.dir, "node"+strconv.Itoa(i))
	v := nginxenv.Variant{Key: "b", Name: "tollgate", Kind: nginxenv.Lease}
	conf, err := nginxenv.Render(v, nginxenv.Layout{Prefix: prefix, Repo: s.o.repo, Workers: s.o.workers,
		LogLevel: "warn", Listen: host + ":" + strconv.Itoa(port), MetricsListen: "127.0.0.1:" + strconv.Itoa(mport),
		Backend: "127.0.0.1:" + strconv.Itoa(bport)})
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("n%02d", i)
	return &node{id: id, prefix: prefix, conf: conf, addr: host + ":" + strconv.Itoa(port),
		metrics: "http://127.0.0.1:" + strconv.Itoa(mport),
		env: append(os.Environ(), "TOLLGATE_REDIS_URL="+s.url, "TOLLGATE_NODE_ID="+id,
			"TOLLGATE_LIMITER_MODE=lease")}, nil
}

// start runs nginx and waits until its config is loaded and it proxies a request of the probe
// app.
func (n *node) start(ctx context.Context) error {
	cmd := exec.Command("nginx", "-p", n.prefix, "-c", n.conf)
	cmd.Env = n.env
	p, err := proc.Start("nginx "+n.id, cmd)
	if err != nil {
		return err
	}
	n.p = p
	ready := func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.metrics+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		var h struct {
			ConfigVersion *int64 `json:"config_version"`
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil || h.ConfigVersion == nil {
			return false, err
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.addr+nginxenv.ObjectPath, nil)
		req.Header.Set(nginxenv.AppHeader, probeApp)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("probe: %d", resp.StatusCode)
	}
	if err := p.Poll(ctx, 30*time.Second, 20*time.Millisecond, ready); err != nil {
		return fmt.Errorf("node %s: %w\n%s", n.id, err, n.errorLog())
	}
	return nil
}

// kill9 kills the node's master and workers at once (SIGKILL to its process group).
func (n *node) kill9() {
	_ = syscall.Kill(-n.p.PID(), syscall.SIGKILL)
	<-n.p.Done()
}

func (n *node) errorLog() string {
	b, _ := os.ReadFile(filepath.Join(n.prefix, "logs", "error.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
