// Command tollgate-cpidle measures the Redis commands per second the control plane issues while
// no gateway sends anything, as a function of the number of configured apps (issue "scale to a
// storage provider's tenant count", item "periodic jobs with bounded work per tick"). For each N
// of -apps it starts a private redis-server, creates one cluster and N apps through the store
// (16 writers), starts the control plane binary (jobs on, this replica the leader), waits for
// its first config snapshot (a read of the whole config, once; at most -snapshot-wait) and lets
// it run -warmup, then counts the commands Redis executes over -window (INFO commandstats deltas,
// the commands scripts run included) and the CPU time redis-server used.
//
// It prints a Markdown table. It is a benchmark program, not a test: the figures depend on the
// machine. -cp runs another control plane binary (e.g. one built from an older commit).
//
//	go run ./bench/cmd/tollgate-cpidle [-apps 1000,10000,100000] [-window 30s] [-cp path]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/redisenv"
	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tollgate-cpidle:", err)
		os.Exit(1)
	}
}

type row struct {
	apps              int
	perSec, scriptsPS float64
	redisCPU          time.Duration
	seed              time.Duration
	top               string // the commands with the most calls over the window
	snapshot          bool   // the config snapshot of the current version was written before the window
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("tollgate-cpidle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	appsFlag := fs.String("apps", "1000,10000,100000", "numbers of apps, comma-separated")
	window := fs.Duration("window", 30*time.Second, "measurement window")
	warmup := fs.Duration("warmup", 15*time.Second, "time the control plane runs before the window")
	cpBin := fs.String("cp", "", "control plane binary (default: built from this checkout)")
	reconcile := fs.String("reconcile", "10s", "TOLLGATE_CP_RECONCILE_INTERVAL of the control plane")
	snapWait := fs.Duration("snapshot-wait", 90*time.Second, "longest wait for the first config snapshot")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*appsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-apps: %q is not a positive number", s)
		}
		sizes = append(sizes, n)
	}
	tmp, err := os.MkdirTemp("", "tollgate-cpidle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if *cpBin == "" {
		*cpBin = filepath.Join(tmp, "tollgate-controlplane")
		b := exec.CommandContext(ctx, "go", "build", "-o", *cpBin, "./controlplane/cmd/tollgate-controlplane")
		b.Stdout, b.Stderr = stderr, stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("build the control plane (run from the repository): %w", err)
		}
	}
	var rows []row
	for _, n := range sizes {
		r, err := measure(ctx, tmp, *cpBin, *reconcile, n, *warmup, *window, *snapWait, stderr)
		if err != nil {
			return fmt.Errorf("%d apps: %w", n, err)
		}
		rows = append(rows, r)
	}
	fmt.Fprintf(stdout, "control plane idle (no gateway), reconcile every %s, window %s: %s\n\n", *reconcile, *window, *cpBin)
	fmt.Fprintln(stdout, "| apps | Redis commands/s | of which script calls/s | redis-server CPU over the window | config snapshot done before | most called (calls/s) |")
	fmt.Fprintln(stdout, "|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		snap := "yes"
		if !r.snapshot {
			snap = "no (running in the window)"
		}
		fmt.Fprintf(stdout, "| %d | %.0f | %.1f | %s | %s | %s |\n", r.apps, r.perSec, r.scriptsPS,
			r.redisCPU.Round(time.Millisecond), snap, r.top)
	}
	return nil
}

func measure(ctx context.Context, tmp, cpBin, reconcile string, n int, warmup, window, snapWait time.Duration, log io.Writer) (row, error) {
	dir, err := os.MkdirTemp(tmp, fmt.Sprintf("n%d-", n))
	if err != nil {
		return row{}, err
	}
	srv, err := redisenv.Start(ctx, dir)
	if err != nil {
		return row{}, err
	}
	defer srv.Stop()
	start := time.Now()
	if err := seed(ctx, srv.Addr(), n); err != nil {
		return row{}, err
	}
	r := row{apps: n, seed: time.Since(start)}
	fmt.Fprintf(log, "%d apps created in %s\n", n, r.seed.Round(time.Millisecond))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return row{}, err
	}
	addr := l.Addr().String()
	l.Close()
	cp := exec.Command(cpBin)
	cp.Env = append(os.Environ(), "TOLLGATE_REDIS_URL="+srv.URL(), "TOLLGATE_CP_ADDR="+addr,
		"TOLLGATE_CONFIG_BACKUP_DIR="+filepath.Join(dir, "backup"), "TOLLGATE_CP_RECONCILE_INTERVAL="+reconcile)
	out, err := os.Create(filepath.Join(dir, "controlplane.log"))
	if err != nil {
		return row{}, err
	}
	defer out.Close()
	cp.Stdout, cp.Stderr = out, out
	if err := cp.Start(); err != nil {
		return row{}, fmt.Errorf("start the control plane: %w", err)
	}
	defer func() { _ = cp.Process.Signal(syscall.SIGTERM); _ = cp.Wait() }()
	if err := waitHealth(ctx, "http://"+addr+"/health", time.Minute); err != nil {
		return row{}, err
	}
	// the config snapshot a control plane writes when it starts on a new version reads the whole
	// config once (by nature O(apps)): the window starts after it
	if r.snapshot, err = waitSnapshot(ctx, srv.Client(), filepath.Join(dir, "backup"), snapWait); err != nil {
		return row{}, err
	}
	select {
	case <-ctx.Done():
		return row{}, ctx.Err()
	case <-time.After(warmup):
	}
	c0, err := redisenv.CommandCalls(ctx, srv.Client())
	if err != nil {
		return row{}, err
	}
	per0, err := perCommand(ctx, srv.Client())
	if err != nil {
		return row{}, err
	}
	cpu0, err := srv.CPU()
	if err != nil {
		return row{}, err
	}
	select {
	case <-ctx.Done():
		return row{}, ctx.Err()
	case <-time.After(window):
	}
	c1, err := redisenv.CommandCalls(ctx, srv.Client())
	if err != nil {
		return row{}, err
	}
	per1, err := perCommand(ctx, srv.Client())
	if err != nil {
		return row{}, err
	}
	r.top = top(per0, per1, window, 5)
	cpu1, err := srv.CPU()
	if err != nil {
		return row{}, err
	}
	d := c1.Sub(c0)
	r.perSec = float64(d.All) / window.Seconds()
	r.scriptsPS = float64(d.Scripts) / window.Seconds()
	r.redisCPU = cpu1 - cpu0
	return r, nil
}

// perCommand is calls per command of INFO commandstats.
func perCommand(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		_, calls, _ := strings.Cut(rest, "calls=")
		calls, _, _ = strings.Cut(calls, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out, nil
}

// top lists the k commands called most between two snapshots, in calls per second.
func top(a, b map[string]int64, window time.Duration, k int) string {
	type kv struct {
		name string
		n    int64
	}
	var l []kv
	for name, n := range b {
		if d := n - a[name]; d > 0 && name != "info" {
			l = append(l, kv{name, d})
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].name < l[j].name })
	var parts []string
	for i := 0; i < len(l) && i < k; i++ {
		parts = append(parts, fmt.Sprintf("%s %.0f", l[i].name, float64(l[i].n)/window.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// seed creates cluster "c" and n apps "app-NNNNNN" through the store, 16 writers.
func seed(ctx context.Context, addr string, n int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
	defer rdb.Close()
	set, err := scripts.New()
	if err != nil {
		return err
	}
	st := store.New(rdb, set)
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "c", Capacity: 1_000_000_000_000, ReservedRatio: 0.1}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				a := store.App{AppID: fmt.Sprintf("app-%06d", i), ClusterID: "c", GuaranteedQuota: 100,
					BurstQuota: 1000, Priority: i % 4, CBw: 1, MaxBorrow: 100, Enabled: true}
				if _, err := st.PutApp(ctx, a); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitSnapshot waits until dir holds the config snapshot of the current config version; false
// when none came within limit (the snapshot may still be running during the window).
func waitSnapshot(ctx context.Context, rdb *redis.Client, dir string, limit time.Duration) (bool, error) {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		v, err := rdb.Get(ctx, keys.ConfigVersion()).Int64()
		if err != nil {
			return false, fmt.Errorf("config version: %w", err)
		}
		if es, err := os.ReadDir(dir); err == nil {
			for _, e := range es {
				if strings.HasSuffix(e.Name(), fmt.Sprintf("-v%d.json", v)) {
					return true, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return false, nil
}

func waitHealth(ctx context.Context, url string, limit time.Duration) error {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the control plane's %s did not answer 200 within %s", url, limit)
}
