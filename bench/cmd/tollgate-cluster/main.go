// Command tollgate-cluster measures how exactly K real gateway nodes enforce each app's limit
// together: it starts one Redis (or, with -redis-cluster, a 3-master Redis Cluster), the
// control plane with its jobs, K nodes (nginx with tollgate's Lua, own loopback address
// 127.0.0.(10+i) and node id each) and an in-process open-loop load generator (Go HTTP clients
// with X-App-Id, a fixed rate per app and node), drives M apps with known guarantees and
// bursts, and compares what the nodes admitted with an ideal single token bucket per app fed
// the same offered load. The simulator (sim/) runs the same workload and its figures are
// printed side by side. See docs/accuracy.md for the definitions.
//
//	go run ./bench/cmd/tollgate-cluster -nodes 4 -scenario b90 -duration 20s
//	go run ./bench/cmd/tollgate-cluster -sweep                # K = 2,4,8,16 × every scenario
//	go run ./bench/cmd/tollgate-cluster -nodes 16 -split 90/10 -json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/runner"
	"tollgate/internal/keys"
)

type options struct {
	repo         string
	nodes        []int
	scenarios    []string
	split        string
	dur          time.Duration
	apps         int
	reqs         float64
	workers      int
	redisCluster bool
	reconcile    time.Duration
	reapAfter    time.Duration
	noSim        bool
	jsonOut      bool
	keep         bool
	verbose      bool
	progress     io.Writer
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tollgate-cluster:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("tollgate-cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{repo: repo, progress: stderr}
	nodes := fs.String("nodes", "4", "gateway nodes K (comma-separated for several)")
	scen := fs.String("scenario", "b90", "scenarios, comma-separated: "+strings.Join(scenarioNames, ",")+" (all: every one)")
	fs.StringVar(&o.split, "split", "", "split of each app's traffic: 50/50 (even over the nodes), 90/10 or 99/1 (one primary node per app, the rest shared by the others); default per scenario")
	fs.DurationVar(&o.dur, "duration", 20*time.Second, "load per run (scenario c: at least 30s)")
	fs.IntVar(&o.apps, "apps", 8, "apps M")
	fs.Float64Var(&o.reqs, "rate", 600, "requests per second the generator offers in all")
	fs.IntVar(&o.workers, "workers", 1, "nginx workers per node")
	fs.BoolVar(&o.redisCluster, "redis-cluster", false, "a 3-master Redis Cluster instead of one redis-server")
	fs.DurationVar(&o.reconcile, "reconcile", 60*time.Second, "control plane reconciliation interval (TOLLGATE_CP_RECONCILE_INTERVAL)")
	fs.DurationVar(&o.reapAfter, "reap-after", 30*time.Second, "control plane: a silent node's leases are reaped after (TOLLGATE_CP_REAP_AFTER)")
	fs.BoolVar(&o.noSim, "no-sim", false, "skip the simulator's run of each workload")
	fs.BoolVar(&o.jsonOut, "json", false, "end with one JSON line of the (last) run's figures")
	fs.BoolVar(&o.keep, "keep", false, "keep the runs' directories (logs) under $TMPDIR")
	fs.BoolVar(&o.verbose, "v", false, "print each app's figures and L2 ledger after each run")
	sweep := fs.Bool("sweep", false, "K = 2,4,8,16 × every scenario, 15 s each (c: 30 s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sweep {
		*nodes, *scen = "2,4,8,16", "all"
		o.dur = 15 * time.Second
	}
	for _, f := range strings.Split(*nodes, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 2 || k > 200 {
			return fmt.Errorf("-nodes: %q is not a number of nodes in [2, 200]", f)
		}
		o.nodes = append(o.nodes, k)
	}
	if *scen == "all" {
		o.scenarios = scenarioNames
	} else {
		for _, s := range strings.Split(*scen, ",") {
			if scenarioLabel(s) == s {
				return fmt.Errorf("-scenario: %q is not one of %s", s, strings.Join(scenarioNames, ","))
			}
			o.scenarios = append(o.scenarios, s)
		}
	}
	if o.apps < 2 || o.reqs <= 0 || o.dur < 5*time.Second {
		return fmt.Errorf("want -apps ≥ 2, -rate > 0 and -duration ≥ 5s")
	}
	var rows []row
	var failed []string
	for _, sc := range o.scenarios {
		for _, k := range o.nodes {
			r, err := runOne(ctx, o, sc, k)
			if err != nil {
				if ctx.Err() != nil || len(o.scenarios)*len(o.nodes) == 1 {
					return fmt.Errorf("scenario %s, %d nodes: %w", sc, k, err)
				}
				o.logf("scenario %s, %d nodes: %v", sc, k, err) // the sweep goes on without it
				failed = append(failed, fmt.Sprintf("%s K=%d", sc, k))
				continue
			}
			rows = append(rows, r)
			fmt.Fprintln(stderr, r.line())
		}
	}
	fmt.Fprint(stdout, render(o, rows))
	if len(failed) > 0 {
		fmt.Fprintf(stdout, "\nruns that could not start: %s\n", strings.Join(failed, ", "))
	}
	if o.jsonOut && len(rows) > 0 {
		b, _ := json.Marshal(rows[len(rows)-1].Real)
		fmt.Fprintln(stdout, string(b))
	}
	return nil
}

func (o options) logf(format string, args ...any) {
	fmt.Fprintf(o.progress, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// row is one (scenario, K) run.
type row struct {
	Scenario string
	Split    string
	K        int
	Real     figures
	Sim      *figures
	// RedisPerSec are the commands Redis ran per second (INFO commandstats, inside scripts
	// included; the generator's own L2 reads excluded); ScriptsPerSec the script calls.
	RedisPerSec, ScriptsPerSec float64
	Achieved                   float64 // sent / intended, %
	Dropped, Errors            int64
	Idle                       float64 // machine idle CPU during the load, %
	Lost                       int64   // admitted cost that never reached L2's consumption totals
	Admitted                   int64
	FailOpen                   int64 // cost admitted from the nodes' fail-open budgets (Redis too slow)
	Reasons                    map[string]int64
	Bound                      bool // the machine, not tollgate, limited the run
}

func (r row) line() string {
	return fmt.Sprintf("%-4s K=%-2d overshoot %.2f%% worst %.2f%% util mean %.1f%% worst %.1f%% conv p99 %.1fs (control %.1fs) false %d/%d fail-open %d lost %d redis %.0f/s achieved %.1f%% idle %.0f%%",
		r.Scenario, r.K, r.Real.Overshoot, r.Real.WorstOvershoot, r.Real.MeanUtil, r.Real.WorstUtil,
		r.Real.ConvP99, r.Real.ConvControlP99, r.Real.FalseRefusals, r.Real.Refusals, r.FailOpen, r.Lost, r.RedisPerSec, r.Achieved, r.Idle)
}

func runOne(ctx context.Context, o options, sc string, k int) (row, error) {
	dur := o.dur
	if sc == "c" && dur < 30*time.Second {
		dur = 30 * time.Second
	}
	w, err := newWorkload(sc, o.split, k, o.apps, o.reqs, dur)
	if err != nil {
		return row{}, err
	}
	o.logf("scenario %s, %d nodes, %s split, %s: starting the stack", sc, k, w.splitName(), dur)
	st, err := startStack(ctx, o, w)
	if err != nil && ctx.Err() == nil {
		// free ports are picked before nginx binds them: on a shared machine another process
		// can take one in between; one more try with new ports
		o.logf("starting the stack failed, once more: %v", err)
		st, err = startStack(ctx, o, w)
	}
	if err != nil {
		return row{}, err
	}
	defer st.stop()
	rec := newRecorder(len(w.apps), int(dur/slot)+1)
	gen := newGenerator(w, st, rec)
	calls0, err := st.commandCalls(ctx)
	if err != nil {
		return row{}, err
	}
	idle0, total0 := cpuStat()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { gen.run(lctx); close(done) }()
	var restartErr atomic.Value
	if w.killAt > 0 {
		go func() {
			select {
			case <-time.After(w.killAt):
			case <-done:
				return
			}
			w.down.Store(true)
			st.nodes[0].kill9()
			o.logf("node %s killed (-9)", st.nodes[0].id)
			time.Sleep(w.upAt - w.killAt)
			if err := st.nodes[0].start(lctx); err != nil {
				restartErr.Store(err)
			}
			w.down.Store(false)
			o.logf("node %s restarted", st.nodes[0].id)
		}()
	}
	<-done
	idle1, total1 := cpuStat()
	calls1, err := st.commandCalls(ctx)
	if err != nil {
		return row{}, err
	}
	if e, ok := restartErr.Load().(error); ok {
		return row{}, e
	}
	r := row{Scenario: sc, Split: w.splitName(), K: k, Reasons: map[string]int64{}}
	ser := rec.series()
	r.Real = compute(w, ser)
	r.Real.FalseRefusals, r.Real.Refusals = rec.falseRefused.Load(), rec.refused.Load()
	secs := dur.Seconds()
	c := calls1.Sub(calls0)
	r.RedisPerSec = float64(c.All-rec.probes.Load()) / secs
	r.ScriptsPerSec = float64(c.Scripts) / secs
	if n := rec.intended.Load(); n > 0 {
		r.Achieved = 100 * float64(rec.sent.Load()) / float64(n)
	}
	r.Dropped, r.Errors = rec.dropped.Load(), rec.errors.Load()
	if total1 > total0 {
		r.Idle = 100 * float64(idle1-idle0) / float64(total1-total0)
	}
	r.Bound = r.Achieved < 98 || r.Idle < 5
	rec.reasons.Range(func(k, v any) bool {
		r.Reasons[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	for _, s := range ser {
		r.Admitted += sum(s.admitted)
	}
	r.Lost = r.Admitted - st.consumed(ctx, w, r.Admitted)
	for _, a := range w.apps {
		v, _ := st.rdb.HGet(ctx, keys.Stats(clusterID, a.id), "fail_open_consumed").Int64()
		r.FailOpen += v
	}
	if o.verbose {
		st.dumpApps(ctx, w, ser)
		changed, control := w.shifts()
		ideals := make([][]int64, len(w.apps))
		for i, a := range w.apps {
			ideals[i] = idealOf(a, ser[i].offered)
		}
		for k, set := range [][][2]int{changed, control} {
			for j, c := range convergence(w, ser, ideals, set) {
				if c > 1 {
					o.logf("convergence %.1fs: %s at %.0fs (%s)", c, w.apps[set[j][0]].id,
						float64(set[j][1])*slot.Seconds(), []string{"moved or restarted", "control"}[k])
				}
			}
		}
	}
	if !o.noSim {
		f, err := simulate(ctx, w, o)
		if err != nil {
			return row{}, fmt.Errorf("simulator: %w", err)
		}
		r.Sim = &f
	}
	return r, nil
}

// consumed waits (≤ 3 s) until the apps' consumption reported to L2 reaches want or stops
// growing, and returns it.
func (s *stack) consumed(ctx context.Context, w *workload, want int64) int64 {
	var last int64 = -1
	for i := 0; i < 30; i++ {
		var total int64
		for _, a := range w.apps {
			v, _ := s.rdb.HGet(ctx, keys.Stats(clusterID, a.id), "total_consumed").Int64()
			total += v
		}
		if total >= want || total == last {
			return total
		}
		last = total
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// commandCalls sums INFO commandstats over the Redis servers.
func (s *stack) commandCalls(ctx context.Context) (redisenv.Calls, error) {
	var c redisenv.Calls
	for _, a := range s.addrs {
		cl := redis.NewClient(&redis.Options{Addr: a})
		x, err := redisenv.CommandCalls(ctx, cl)
		_ = cl.Close()
		if err != nil {
			return c, err
		}
		c.All += x.All
		c.Scripts += x.Scripts
	}
	return c, nil
}

// cpuStat is the machine's idle and total jiffies from /proc/stat.
func cpuStat() (idle, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i, x := range f[1:] {
		v, _ := strconv.ParseInt(x, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

func render(o options, rows []row) string {
	var b strings.Builder
	topo := "one redis-server"
	if o.redisCluster {
		topo = "3-master Redis Cluster"
	}
	fmt.Fprintf(&b, "\n## tollgate-cluster: %d apps, %.0f req/s offered, %d nginx worker(s) per node, %s (shared machine)\n\n",
		o.apps, o.reqs, o.workers, topo)
	fmt.Fprintln(&b, "| scenario | K | overshoot % (sim) | worst app overshoot % (sim) | utilisation mean % (sim) | worst app utilisation % (sim) | convergence p99 s (sim) | control p99 s | false refusals / refusals | fail-open cost | lost cost | Redis cmd/s (scripts/s) | achieved rate % | idle CPU % |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		s := func(real, sim float64, f string) string {
			out := fmt.Sprintf(f, real)
			if r.Sim != nil {
				out += " (" + fmt.Sprintf(f, sim) + ")"
			}
			return out
		}
		var sm figures
		if r.Sim != nil {
			sm = *r.Sim
		}
		conv, ctrl := "–", "–"
		if r.Scenario == "c" {
			conv = s(r.Real.ConvP99, sm.ConvP99, "%.1f")
			ctrl = fmt.Sprintf("%.1f", r.Real.ConvControlP99)
		}
		bound := ""
		if r.Bound {
			bound = " **machine-bound**"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %d / %d | %d | %d | %.0f (%.0f) | %.1f%s | %.0f |\n",
			scenarioLabel(r.Scenario), r.K,
			s(r.Real.Overshoot, sm.Overshoot, "%.2f"), s(r.Real.WorstOvershoot, sm.WorstOvershoot, "%.2f"),
			s(r.Real.MeanUtil, sm.MeanUtil, "%.1f"), s(r.Real.WorstUtil, sm.WorstUtil, "%.1f"),
			conv, ctrl, r.Real.FalseRefusals, r.Real.Refusals, r.FailOpen, r.Lost, r.RedisPerSec, r.ScriptsPerSec,
			r.Achieved, bound, r.Idle)
	}
	fmt.Fprintln(&b, "\nRefusal reasons and errors per run:")
	for _, r := range rows {
		names := make([]string, 0, len(r.Reasons))
		for k := range r.Reasons {
			names = append(names, k)
		}
		sort.Strings(names)
		var parts []string
		for _, k := range names {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Reasons[k]))
		}
		fmt.Fprintf(&b, "- %s, K=%d: %s; dropped by the generator %d, errors %d, admitted cost %d\n",
			r.Scenario, r.K, strings.Join(parts, ", "), r.Dropped, r.Errors, r.Admitted)
	}
	return b.String()
}

// dumpApps prints, per app, the offered, ideal and admitted cost and its L2 ledger (-v).
func (s *stack) dumpApps(ctx context.Context, w *workload, ser []series) {
	for i, a := range w.apps {
		l2, _ := s.rdb.HGetAll(ctx, keys.L2(clusterID, a.id)).Result()
		stats, _ := s.rdb.HGetAll(ctx, keys.Stats(clusterID, a.id)).Result()
		ideal := sum(idealOf(a, ser[i].offered))
		s.o.logf("%s g=%d burst=%d offered=%d ideal=%d admitted=%d (%+.2f%%) granted=%s returned=%s outstanding=%s tokens=%s consumed=%s fail_open=%s",
			a.id, a.g, a.burst, sum(ser[i].offered), ideal, sum(ser[i].admitted),
			100*float64(sum(ser[i].admitted)-ideal)/float64(max(1, ideal)), l2["total_granted"], l2["total_returned"],
			l2["outstanding"], l2["current_tokens"], stats["total_consumed"], stats["fail_open_consumed"])
		var held []string
		for _, n := range s.nodes {
			held = append(held, fmt.Sprintf("%s:%.0f", n.id, scrape(ctx, n.metrics, `ratelimit_l3_tokens{app_id="`+a.id+`"}`)))
		}
		s.o.logf("  leases held: %s", strings.Join(held, " "))
	}
}

// scrape is the value of one series on a node's /metrics (0 when absent).
func scrape(ctx context.Context, base, series string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
