package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// MemoryConfig is one Redis memory measurement: Apps apps created through the config store,
// then, for the first Active of them, leases on 1, then each of Nodes nodes through the real
// l2_grant and l3_report scripts, as the simulator's gateways take them.
type MemoryConfig struct {
	Apps        int   // apps created through internal/store
	Active      int   // apps that take leases (<= Apps)
	Nodes       []int // lease counts per active app to measure at, increasing (e.g. 1, 10, 100)
	RedisServer string
}

// DefaultMemory measures 100,000 apps, 1,000 of them active on 1, 2, 10, 25, 50 and 100 nodes.
func DefaultMemory() MemoryConfig {
	return MemoryConfig{Apps: 100_000, Active: 1000, Nodes: []int{1, 2, 10, 25, 50, 100}}
}

// MemoryStep is used_memory after every active app holds leases on Nodes nodes.
type MemoryStep struct {
	Nodes    int
	Used     int64
	PerApp   float64 // (Used - after the apps) / Active: an active app's lease state on Nodes nodes
	PerLease float64 // the same / Nodes
	Marginal float64 // per lease added since the previous step
}

// MemoryResult is what MeasureMemory measured (bytes of INFO memory used_memory).
type MemoryResult struct {
	Config    MemoryConfig
	Base      int64   // after the cluster, before any app
	AfterApps int64   // after the apps
	PerApp    float64 // (AfterApps - Base) / Apps
	// AfterJobs is after one l2_reconcile of every app, as the control plane's reconcile job
	// runs it on every app (it writes the app's stats hash); the leases are measured from here.
	AfterJobs     int64
	PerAppWithJob float64 // (AfterJobs - Base) / Apps
	Steps         []MemoryStep
	CreateTime    time.Duration
}

// MeasureMemory starts a private redis-server and measures it (see MemoryConfig).
func MeasureMemory(ctx context.Context, c MemoryConfig, log io.Writer) (*MemoryResult, error) {
	if c.Apps < 1 || c.Active < 0 || c.Active > c.Apps {
		return nil, fmt.Errorf("sim: memory: want apps >= 1 and 0 <= active <= apps")
	}
	for i, n := range c.Nodes {
		if n < 1 || (i > 0 && n <= c.Nodes[i-1]) {
			return nil, fmt.Errorf("sim: memory: node counts must be increasing and >= 1: %v", c.Nodes)
		}
	}
	if log == nil {
		log = io.Discard
	}
	srv, err := startRedis(c.RedisServer)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	// Every phase works on its own connections and closes them before the reading (on one
	// connection that only reads INFO): the buffers of a pipelining client are not data.
	reader := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1})
	defer reader.Close()
	set, err := scripts.New()
	if err != nil {
		return nil, err
	}
	phase := func(f func(rdb *redis.Client) error) (int64, error) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 16, ReadTimeout: time.Minute})
		err := f(rdb)
		rdb.Close()
		if err != nil {
			return 0, err
		}
		return settledMemory(ctx, reader)
	}
	r := &MemoryResult{Config: c}
	if r.Base, err = phase(func(rdb *redis.Client) error {
		if err := set.LoadAll(ctx, rdb); err != nil {
			return err
		}
		_, err := store.New(rdb, set).PutCluster(ctx, store.Cluster{ID: cluster, Capacity: 1 << 40, ReservedRatio: 0.1})
		return err
	}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if r.AfterApps, err = phase(func(rdb *redis.Client) error {
		return createApps(ctx, store.New(rdb, set), c.Apps)
	}); err != nil {
		return nil, err
	}
	r.CreateTime = time.Since(t0)
	r.PerApp = perItem(r.Base, r.AfterApps, c.Apps)
	fmt.Fprintf(log, "memory: %d apps created in %s, %.0f B per app\n", c.Apps, r.CreateTime.Round(time.Millisecond), r.PerApp)
	now := time.Now().UnixMicro()
	if r.AfterJobs, err = phase(func(rdb *redis.Client) error {
		b := newBatch(ctx, rdb)
		for i := 0; i < c.Apps; i++ {
			if err := b.reconcile(set, memAppID(i), now); err != nil {
				return err
			}
		}
		return b.flush()
	}); err != nil {
		return nil, err
	}
	r.PerAppWithJob = perItem(r.Base, r.AfterJobs, c.Apps)
	fmt.Fprintf(log, "memory: after the reconcile job, %.0f B per app\n", r.PerAppWithJob)
	have := 0
	for _, n := range c.Nodes {
		if c.Active == 0 {
			break
		}
		now += 1_000_000
		used, err := phase(func(rdb *redis.Client) error { return leaseOn(ctx, rdb, set, c.Active, have, n, now) })
		if err != nil {
			return nil, err
		}
		s := MemoryStep{Nodes: n, Used: used, PerApp: perItem(r.AfterJobs, used, c.Active)}
		s.PerLease = s.PerApp / float64(n)
		prev := r.AfterJobs
		if len(r.Steps) > 0 {
			prev = r.Steps[len(r.Steps)-1].Used
		}
		s.Marginal = perItem(prev, used, c.Active*(n-have))
		r.Steps = append(r.Steps, s)
		fmt.Fprintf(log, "memory: %d active apps on %d nodes: %.0f B per active app\n", c.Active, n, s.PerApp)
		have = n
	}
	return r, nil
}

func memAppID(i int) string { return fmt.Sprintf("app%06d", i) }

// createApps creates n apps through the store with 8 concurrent writers.
func createApps(ctx context.Context, st *store.Store, n int) error {
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += writers {
				if _, err := st.PutApp(ctx, store.App{AppID: memAppID(i), ClusterID: cluster,
					GuaranteedQuota: 100, BurstQuota: 200, Priority: i % 4, CBw: 1, Enabled: true}); err != nil {
					errs <- fmt.Errorf("sim: memory: app %d: %w", i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// batch pipelines script calls, 2,000 at a time, and fails on the first error.
type batch struct {
	ctx  context.Context
	pipe redis.Pipeliner
	cmds []*redis.Cmd
}

func newBatch(ctx context.Context, rdb *redis.Client) *batch {
	return &batch{ctx: ctx, pipe: rdb.Pipeline()}
}

func (b *batch) add(c *redis.Cmd) error {
	b.cmds = append(b.cmds, c)
	if len(b.cmds) >= 2000 {
		return b.flush()
	}
	return nil
}

func (b *batch) flush() error {
	if len(b.cmds) == 0 {
		return nil
	}
	_, _ = b.pipe.Exec(b.ctx)
	for _, c := range b.cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("sim: memory: %w", err)
		}
	}
	b.cmds = b.cmds[:0]
	return nil
}

// reconcile queues one l2_reconcile of app, as the control plane's job runs it.
func (b *batch) reconcile(set *scripts.Set, app string, nowUS int64) error {
	k := []string{keys.L2(cluster, app), keys.Leases(cluster, app), keys.Nodes(cluster, app),
		keys.Stats(cluster, app), keys.L1(cluster)}
	return b.add(set.Run(b.ctx, b.pipe, "l2_reconcile", k, "0.1", 3600, nowUS))
}

// leaseOn gives every one of the first active apps leases on nodes [from, to): one l2_grant and
// one l3_report (consumption, a returned token, held tokens) per (app, node), as a gateway's
// first grant and report, then one l2_reconcile per app, as the control plane's job runs it.
func leaseOn(ctx context.Context, rdb *redis.Client, set *scripts.Set, active, from, to int, nowUS int64) error {
	b := newBatch(ctx, rdb)
	for i := 0; i < active; i++ {
		app := memAppID(i)
		for n := from; n < to; n++ {
			node := nodeID(n)
			k, args := ledger.GrantCall(cluster, app, node, 10, 1, nowUS)
			if err := b.add(set.Run(ctx, b.pipe, "l2_grant", k, args...)); err != nil {
				return err
			}
			k, args = ledger.ReportCall(cluster, app, node, ledger.Report{Seq: 1, Consumed: 4, Requests: 2,
				Returned: 1, Held: 5}, nowUS)
			if err := b.add(set.Run(ctx, b.pipe, "l3_report", k, args...)); err != nil {
				return err
			}
		}
	}
	for i := 0; i < active; i++ {
		if err := b.reconcile(set, memAppID(i), nowUS+500_000); err != nil {
			return err
		}
	}
	return b.flush()
}

// settledMemory waits until the reader is the only client left (closed connections are freed
// by the server asynchronously), then reads used memory.
func settledMemory(ctx context.Context, reader *redis.Client) (int64, error) {
	for i := 0; ; i++ {
		info, err := reader.Info(ctx, "clients").Result()
		if err != nil {
			return 0, err
		}
		if strings.Contains(info, "connected_clients:1\r\n") || i == 500 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return usedMemory(ctx, reader)
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return parseUsedMemory(info)
}

// parseUsedMemory reads used_memory less the clients' buffers (mem_clients_normal and
// mem_clients_slaves: a pipeline's query and reply buffers, not the data) from the text of
// INFO memory.
func parseUsedMemory(info string) (int64, error) {
	f := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory", "mem_clients_normal", "mem_clients_slaves":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("sim: %s %q: %w", k, v, err)
			}
			f[k] = n
		}
	}
	if _, ok := f["used_memory"]; !ok {
		return 0, fmt.Errorf("sim: no used_memory in INFO memory")
	}
	return f["used_memory"] - f["mem_clients_normal"] - f["mem_clients_slaves"], nil
}

// perItem is the bytes each of n items added between two used_memory readings.
func perItem(before, after int64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(after-before) / float64(n)
}

// Print writes the result as Markdown tables and the formula.
func (r *MemoryResult) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Redis used_memory less client buffers: %d apps created through the store in %s; leases of %d active apps through l2_grant + l3_report + l2_reconcile\n\n",
		c.Apps, r.CreateTime.Round(time.Millisecond), c.Active)
	fmt.Fprintln(w, "| | used_memory | bytes |")
	fmt.Fprintln(w, "|---|---|---|")
	fmt.Fprintf(w, "| cluster only | %d | |\n", r.Base)
	fmt.Fprintf(w, "| + %d apps | %d | %.0f per app |\n", c.Apps, r.AfterApps, r.PerApp)
	fmt.Fprintf(w, "| + one reconcile job over every app (its stats hash) | %d | %.0f per app |\n", r.AfterJobs, r.PerAppWithJob)
	if len(r.Steps) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes per active app | used_memory | per active app | per (app, node) lease | per lease added since the row above |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "| %d | %d | %.0f | %.0f | %.0f |\n", s.Nodes, s.Used, s.PerApp, s.PerLease, s.Marginal)
	}
	last := r.Steps[len(r.Steps)-1]
	fmt.Fprintf(w, "\nformula: used_memory ≈ %d + %.0f × apps + Σ over active apps of (lease state on k nodes: %.0f B at k = %d, %.0f B at k = %d)\n",
		r.Base, r.PerAppWithJob, r.Steps[0].PerApp, r.Steps[0].Nodes, last.PerApp, last.Nodes)
}

// commandCalls sums the calls of INFO commandstats: every command Redis executed, those run
// inside scripts included (INFO itself left out), and the script calls among them.
func commandCalls(ctx context.Context, rdb *redis.Client) (total, scriptCalls int64, err error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	return parseCommandStats(info)
}

// parseCommandStats reads lines such as "cmdstat_hget:calls=12,usec=30,..." of INFO
// commandstats.
func parseCommandStats(info string) (total, scriptCalls int64, err error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		field, _, _ := strings.Cut(rest, ",")
		v, ok := strings.CutPrefix(field, "calls=")
		if !ok {
			return 0, 0, fmt.Errorf("sim: commandstats line %q", sc.Text())
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("sim: commandstats %s: %w", name, err)
		}
		switch name {
		case "info":
			continue
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			scriptCalls += n
		}
		total += n
	}
	return total, scriptCalls, nil
}

// redisCPU is the CPU time the server used so far (INFO cpu used_cpu_user + used_cpu_sys).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	return parseCPU(info)
}

func parseCPU(info string) (time.Duration, error) {
	var secs float64
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("sim: %s %q: %w", k, v, err)
			}
			secs += f
			seen++
		}
	}
	if seen != 2 {
		return 0, fmt.Errorf("sim: no used_cpu_user and used_cpu_sys in INFO cpu")
	}
	return time.Duration(secs * float64(time.Second)), nil
}
