// Command tollgate-callgrind counts the CPU instructions nginx spends per request in the
// benchmark's variants, under valgrind's callgrind: a figure that, unlike requests per second,
// does not move with whatever else the machine is running. Each variant runs as a single
// nginx process (master_process off, 1 worker) in front of the same backend server block as
// `make bench`; after a warm-up (so that LuaJIT has compiled its traces) the counters are reset,
// N keep-alive requests are sent with curl, and the counters are dumped.
//
//	go run ./bench/cmd/tollgate-callgrind [-n 4000] [-warmup 3000] [-rules 0,10,100 [-rule-alg A]
//		[-rule-mix all]]
//		[-runs N] [-json] [-jv=false] [-keep DIR]
//
// -rules adds variants of (b) with that many active rules (the bench's mix, runner.BenchRules:
// several tenants' rules of which the request matches 5 of 10, 6 of 100; -rule-mix all: rules
// that all match it, runner.BenchRulesAllMatch; -rule-alg makes them all node rules of one
// algorithm, e.g. token_bucket).
//
// Needs valgrind (callgrind, callgrind_control, callgrind_annotate), curl, nginx and
// redis-server. Timers of the gateway fire per second, not per request, so under valgrind's
// slow-down they weigh more per request than at full speed: the "timers" column shows them, and
// the last column leaves them out.
//
// The figure to compare is "over (a) without timers": the variant's instructions per request
// minus plain nginx's, both without the timers (ngx_event_expire_timers) and the Redis replies
// that resume Lua on a cosocket (ngx_http_lua_socket_tcp_handler: the timers' Redis calls, and
// the rare renewal of a global rule's batch by a request). It is what the variant adds in the
// access and log phases and the header filter. -json ends the output with one JSON line of that
// figure for (b), each -rules variant (r<N>), (d) and (e): {"b": ..., "r10": ..., "d": ..., "e": ...}.
//
// -runs N measures every variant N times, taking turns, and reports the medians (and each
// variant's spread: how far one run is from the next).
//
// -jv (on by default) runs the tollgate variants with TOLLGATE_JIT_LOG, LuaJIT's trace log
// (jit.v), and counts the traces compiled and the traces aborted during the warm-up and during
// the measured requests (a path still compiling after the warm-up is not in its steady state);
// with -keep the logs are copied to DIR/<variant>.jit.log (docs/development.md reads them).
//
// TOLLGATE_CALLGRIND_ARGS adds valgrind options, e.g. "--collect-atstart=no
// --toggle-collect=ngx_http_lua_access_handler --toggle-collect=ngx_http_lua_log_handler"
// to count only inside the Lua phases (the table's totals are then those phases alone; with
// -keep, callgrind_annotate shows what in them costs what).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/proc"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/runner"
	"tollgate/internal/keys"
	"tollgate/internal/secrets"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "tollgate-callgrind:", err)
		}
		os.Exit(2)
	}
}

type config struct {
	repo     string
	requests int
	warmup   int
	rules    string
	ruleAlg  string
	ruleMix  string // realistic (runner.BenchRules) or all (runner.BenchRulesAllMatch)
	keep     string
	method   string // GET (the 1 KiB object) or PUT (1 KiB uploads)
	auth     string // header (X-App-Id), sigv4 (an S3 access key mapped to the app) or signed
	keyFile  string // -auth signed: the secrets key file the gateway opens the key's secret with
	json     bool   // end with the JSON line of the figures
	runs     int    // measurements of each variant (the figures: their medians)
	jv       bool   // TOLLGATE_JIT_LOG for the tollgate variants
}

// row is one variant's instructions per request: in total and inside the phases that
// callgrind_annotate can attribute.
type row struct {
	key, name                       string
	total, access, log, tmrs, reply float64
	jit                             *jitCounts // nil: no trace log (not a tollgate variant, or -jv=false)
}

// jitCounts are the traces compiled and aborted in a variant's trace log, during the warm-up
// and during the measured requests.
type jitCounts struct {
	warmTraces, warmAborts, traces, aborts int
	flushes                                int // "[TRACE flush]": the VM threw every trace away
}

// over is the figure of the JSON line: instructions per request over plain nginx, without the
// timers and the Redis replies of either.
func (rw row) over(plain row) float64 {
	return (rw.total - rw.tmrs - rw.reply) - (plain.total - plain.tmrs - plain.reply)
}

func run(args []string, stdout, stderr io.Writer) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("tollgate-callgrind", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{}
	fs.StringVar(&cfg.repo, "repo", repo, "checkout whose nginx/ and lua/ the gateway runs")
	fs.IntVar(&cfg.requests, "n", 4000, "measured requests per variant")
	fs.IntVar(&cfg.warmup, "warmup", 3000, "requests before the counters are reset")
	fs.StringVar(&cfg.rules, "rules", "", "comma-separated rule counts: extra (b) variants with active rules")
	fs.StringVar(&cfg.ruleAlg, "rule-alg", "", "with -rules: every rule a node rule of this algorithm")
	fs.StringVar(&cfg.ruleMix, "rule-mix", "realistic", "with -rules: realistic (the bench's mix: the request "+
		"matches 5 of 10 rules, 6 of 100) or all (every rule matches every request)")
	fs.StringVar(&cfg.method, "method", "GET", "GET (the 1 KiB object) or PUT (1 KiB uploads)")
	fs.StringVar(&cfg.auth, "auth", "header", "header (X-App-Id), sigv4 (a SigV4 Authorization whose access key maps to the app) "+
		"or signed (the same key with its secret on file: the gateway verifies a real signature)")
	fs.BoolVar(&cfg.json, "json", false, "end with one JSON line of each variant's instructions per request over (a), "+
		"without timers and Redis replies")
	fs.IntVar(&cfg.runs, "runs", 1, "measure each variant this many times (variants take turns); the figures are the medians")
	fs.BoolVar(&cfg.jv, "jv", true, "count LuaJIT's traces and aborts of the tollgate variants (TOLLGATE_JIT_LOG)")
	fs.StringVar(&cfg.keep, "keep", "", "copy each variant's dump to DIR/<variant>.callgrind (for callgrind_annotate)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.requests < 100 || cfg.warmup < 0 || cfg.runs < 1 {
		return fmt.Errorf("-n must be >= 100, -warmup >= 0 and -runs >= 1")
	}
	if cfg.method != "GET" && cfg.method != "PUT" {
		return fmt.Errorf("-method must be GET or PUT")
	}
	if cfg.auth != "header" && cfg.auth != "sigv4" && cfg.auth != "signed" {
		return fmt.Errorf("-auth must be header, sigv4 or signed")
	}
	if cfg.auth == "signed" && cfg.method != "GET" {
		return fmt.Errorf("-auth signed signs GETs only")
	}
	if cfg.ruleMix != "realistic" && cfg.ruleMix != "all" {
		return fmt.Errorf("-rule-mix must be realistic or all")
	}
	for _, bin := range []string{"valgrind", "callgrind_control", "callgrind_annotate", "curl",
		"nginx", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is required (apt-get install valgrind curl): %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "tollgate-callgrind-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // nginx workers may run as nobody
		return err
	}
	ctx := context.Background()
	rdir := filepath.Join(dir, "redis")
	if err := os.Mkdir(rdir, 0o755); err != nil {
		return err
	}
	r, err := redisenv.Start(ctx, rdir)
	if err != nil {
		return err
	}
	defer r.Stop()
	if err := redisenv.Seed(ctx, r.Client()); err != nil {
		return err
	}
	if err := r.Client().HSet(ctx, keys.AccessKeys(), benchAccessKey, redisenv.AppID).Err(); err != nil {
		return err
	}
	if cfg.auth == "signed" {
		if cfg.keyFile, err = sealBenchSecret(ctx, r.Client(), dir); err != nil {
			return err
		}
	}
	var rows []row
	type variant struct {
		v     nginxenv.Variant
		rules int
	}
	vs := []variant{
		{nginxenv.Variant{Key: "a", Name: "plain", Kind: nginxenv.Plain}, 0},
		{nginxenv.Variant{Key: "b", Name: "tollgate", Kind: nginxenv.Lease}, 0},
	}
	if cfg.rules != "" {
		for _, f := range strings.Split(cfg.rules, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return fmt.Errorf("-rules: bad count %q", f)
			}
			if n == 0 && cfg.ruleAlg == "" {
				continue // (b) is the variant without rules
			}
			name := fmt.Sprintf("tollgate-%d-rules", n)
			if cfg.ruleAlg != "" {
				name = fmt.Sprintf("tollgate-%d-%s", n, cfg.ruleAlg)
			}
			if cfg.ruleMix == "all" {
				name += "-all-matching"
			}
			vs = append(vs, variant{nginxenv.Variant{Key: "r" + strconv.Itoa(n), Name: name,
				Kind: nginxenv.Lease}, n})
		}
	}
	vs = append(vs, variant{nginxenv.Variant{Key: "d", Name: "limit_req", Kind: nginxenv.LimitReq}, 0},
		variant{nginxenv.Variant{Key: "e", Name: "empty-lua-phases", Kind: nginxenv.EmptyLua}, 0})
	// runs[i][k]: variant i in run k; the variants take turns, so that a busier spell of the
	// machine falls on all of them
	runs := make([][]row, len(vs))
	for k := 0; k < cfg.runs; k++ {
		rdir := filepath.Join(dir, "run"+strconv.Itoa(k+1))
		if err := os.Mkdir(rdir, 0o755); err != nil {
			return err
		}
		for i, x := range vs {
			v := x.v
			if err := putRules(ctx, r.Client(), x.rules, cfg.ruleAlg, cfg.ruleMix); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "[%s] run %d/%d %s: %d warm-up + %d measured requests under callgrind\n",
				time.Now().Format("15:04:05"), k+1, cfg.runs, v.Label(), cfg.warmup, cfg.requests)
			rw, err := measure(ctx, cfg, rdir, r.URL(), v)
			if err != nil {
				return fmt.Errorf("%s: %w", v.Label(), err)
			}
			runs[i] = append(runs[i], rw)
		}
	}
	// each variant's figure over (a) of the same run; the table shows the run of its median
	overs := make([][]float64, len(vs))
	for i := range vs {
		for k := range runs[i] {
			overs[i] = append(overs[i], runs[i][k].over(runs[0][k]))
		}
		rows = append(rows, runs[i][medianIndex(overs[i])])
	}
	fmt.Fprintf(stdout, "\ninstructions per request under callgrind (%d requests, 1 nginx process)\n\n",
		cfg.requests)
	fmt.Fprintln(stdout, "| variant | total | over (a) | access phase | log phase | timers | "+
		"redis replies | over (a) without timers | JIT traces (aborts): warm-up / measured | JIT flushes |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|---|---|")
	for _, rw := range rows {
		j, fl := "-", "-"
		if rw.jit != nil {
			j = fmt.Sprintf("%d (%d) / %d (%d)", rw.jit.warmTraces, rw.jit.warmAborts,
				rw.jit.traces, rw.jit.aborts)
			fl = strconv.Itoa(rw.jit.flushes)
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %+.0f | %.0f | %.0f | %.0f | %.0f | %+.0f | %s | %s |\n", rw.name,
			rw.total, rw.total-rows[0].total, rw.access, rw.log, rw.tmrs, rw.reply,
			rw.over(rows[0]), j, fl)
	}
	fmt.Fprintln(stdout, "\n(timers fire per second, not per request: valgrind's slow-down makes them "+
		"weigh far more per request than at full speed, so \"over (a) without timers\" - which also "+
		"leaves out the Redis replies - is the figure to compare)")
	figs := make([]float64, len(vs))
	for i := range vs {
		figs[i] = overs[i][medianIndex(overs[i])]
	}
	if cfg.runs > 1 {
		fmt.Fprintf(stdout, "\nover (a) without timers in %d runs (the table above: the median run)\n\n", cfg.runs)
		fmt.Fprintln(stdout, "| variant | median | min | max | spread around the median | runs |")
		fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
		for i := 1; i < len(vs); i++ {
			lo, hi := minMax(overs[i])
			m := figs[i]
			var each []string
			for _, o := range overs[i] {
				each = append(each, strconv.FormatFloat(o, 'f', 0, 64))
			}
			spread := "-"
			if m > 0 {
				spread = fmt.Sprintf("%+.1f %% / %+.1f %%", (lo-m)/m*100, (hi-m)/m*100)
			}
			fmt.Fprintf(stdout, "| %s | %.0f | %.0f | %.0f | %s | %s |\n", rows[i].name, m, lo, hi,
				spread, strings.Join(each, ", "))
		}
	}
	if cfg.json {
		keys := make([]string, len(vs))
		for i, x := range vs {
			keys[i] = x.v.Key
		}
		b, err := jsonLine(keys[1:], figs[1:])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return nil
}

// medianIndex is the index of the median of xs (the lower one of an even count).
func medianIndex(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	return idx[(len(xs)-1)/2]
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := xs[0], xs[0]
	for _, x := range xs[1:] {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// jsonLine is {"b": ..., "r10": ..., "d": ..., "e": ...}: each variant's key and its
// instructions per request over (a) without timers and Redis replies, rounded.
func jsonLine(keys []string, figs []float64) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, key := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		k, err := json.Marshal(key)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s: %.0f", k, figs[i])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// putRules replaces the rule set with n bench rules of the mix (alg: all node rules of that
// algorithm).
func putRules(ctx context.Context, rdb *redis.Client, n int, alg, mix string) error {
	rs := runner.BenchRules(n)
	if mix == "all" {
		rs = runner.BenchRulesAllMatch(n)
	}
	pipe := rdb.TxPipeline()
	pipe.Del(ctx, keys.RulesIndex())
	for _, r := range rs {
		if alg != "" {
			r["algorithm"], r["distribution"] = alg, "node"
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		pipe.HSet(ctx, keys.RulesIndex(), r["id"], string(b))
	}
	pipe.Incr(ctx, keys.ConfigVersion())
	_, err := pipe.Exec(ctx)
	return err
}

func measure(ctx context.Context, cfg config, dir, redisURL string, v nginxenv.Variant) (row, error) {
	listen, err := proc.FreePort()
	if err != nil {
		return row{}, err
	}
	backend, err := proc.FreePort()
	if err != nil {
		return row{}, err
	}
	metrics, err := proc.FreePort()
	if err != nil {
		return row{}, err
	}
	prefix := filepath.Join(dir, v.Key+"-"+v.Name)
	conf, err := nginxenv.Render(v, nginxenv.Layout{Prefix: prefix, Repo: cfg.repo, Workers: 1,
		LogLevel: "warn", Listen: "127.0.0.1:" + strconv.Itoa(listen),
		MetricsListen: "127.0.0.1:" + strconv.Itoa(metrics),
		Backend:       "127.0.0.1:" + strconv.Itoa(backend)})
	if err != nil {
		return row{}, err
	}
	text, err := os.ReadFile(conf)
	if err != nil {
		return row{}, err
	}
	// one process: callgrind follows it, and the request path is not split across workers
	if err := os.WriteFile(conf, append([]byte("master_process off;\n"), text...), 0o644); err != nil {
		return row{}, err
	}
	out := filepath.Join(prefix, "callgrind.out")
	args := []string{"--tool=callgrind", "--callgrind-out-file=" + out + ".%p"}
	args = append(args, strings.Fields(os.Getenv("TOLLGATE_CALLGRIND_ARGS"))...)
	cmd := exec.Command("valgrind", append(args, "nginx", "-p", prefix, "-c", conf)...)
	cmd.Env = os.Environ()
	jitLog := ""
	if v.Tollgate() {
		cmd.Env = append(cmd.Env, "TOLLGATE_REDIS_URL="+redisURL, "TOLLGATE_NODE_ID=callgrind",
			"TOLLGATE_LIMITER_MODE="+v.Mode(), "TOLLGATE_SECRETS_KEY_FILE="+cfg.keyFile)
		if cfg.jv {
			jitLog = filepath.Join(prefix, "jit.log")
			cmd.Env = append(cmd.Env, "TOLLGATE_JIT_LOG="+jitLog)
		}
	}
	p, err := proc.Start("valgrind nginx "+v.Name, cmd)
	if err != nil {
		return row{}, err
	}
	defer p.Stop(syscall.SIGQUIT, 20*time.Second)
	url := "http://127.0.0.1:" + strconv.Itoa(listen) + nginxenv.ObjectPath
	probe := url
	if cfg.method == "PUT" {
		url = "http://127.0.0.1:" + strconv.Itoa(listen) + nginxenv.UploadPath
	}
	ok := func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, probe, nil)
		for _, h := range authHeaders(cfg.auth, http.MethodGet, probe) {
			req.Header.Set(h[0], h[1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Errorf("status %d", res.StatusCode)
	}
	if err := p.Poll(ctx, 2*time.Minute, 200*time.Millisecond, ok); err != nil {
		return row{}, fmt.Errorf("not answering 200 under valgrind: %w\n%s", err, p.Output())
	}
	if err := curl(prefix, url, cfg, cfg.warmup); err != nil {
		return row{}, err
	}
	pid := strconv.Itoa(p.PID())
	if jitLog != "" {
		jitLog += "." + pid // the gateway's file: TOLLGATE_JIT_LOG.<worker pid>
	}
	var warm jitCounts
	warmLen := 0 // bytes of the JIT log written during the warm-up
	if jitLog != "" {
		if b, rerr := os.ReadFile(jitLog); rerr == nil {
			warmLen = len(b)
		}
		if warm, err = countJIT(jitLog); err != nil {
			// the figures stand without it: say so, keep measuring
			fmt.Fprintf(os.Stderr, "tollgate-callgrind: %s: no JIT counts: %v\n%s\n", v.Label(), err,
				tail(filepath.Join(prefix, "logs", "error.log"), 2000))
			jitLog = ""
		}
	}
	if b, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
		return row{}, fmt.Errorf("callgrind_control -z: %w: %s", err, b)
	}
	if err := curl(prefix, url, cfg, cfg.requests); err != nil {
		return row{}, err
	}
	if b, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		return row{}, fmt.Errorf("callgrind_control -d: %w: %s", err, b)
	}
	var jc *jitCounts
	if jitLog != "" {
		all, err := countJIT(jitLog)
		if err != nil {
			return row{}, err
		}
		if all.traces < warm.traces { // not the same log
			return row{}, fmt.Errorf("the JIT log %s shrank", jitLog)
		}
		jc = &jitCounts{warmTraces: warm.traces, warmAborts: warm.aborts,
			traces: all.traces - warm.traces, aborts: all.aborts - warm.aborts, flushes: all.flushes}
		if cfg.keep != "" {
			if err := keepFile(jitLog, cfg.keep, keepName(cfg, dir, v)+".jit.log"); err != nil {
				return row{}, err
			}
			// what the JIT did during the measured requests alone
			if b, rerr := os.ReadFile(jitLog); rerr == nil && len(b) >= warmLen {
				name := filepath.Join(cfg.keep, keepName(cfg, dir, v)+".measured.jit.log")
				if err := os.WriteFile(name, b[warmLen:], 0o644); err != nil {
					return row{}, err
				}
			}
		}
	}
	dump, err := waitDump(ctx, out+"."+pid+".1")
	if err != nil {
		return row{}, err
	}
	if cfg.keep != "" {
		if err := keepFile(dump, cfg.keep, keepName(cfg, dir, v)+".callgrind"); err != nil {
			return row{}, err
		}
	}
	rw, err := annotate(v.Label(), dump, float64(cfg.requests))
	rw.key, rw.jit = v.Key, jc
	return rw, err
}

// tail is the last n bytes of a file ("" when it cannot be read).
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// keepName names the kept files of variant v: its name, and with -runs the run's directory
// (tollgate.run3.callgrind).
func keepName(cfg config, dir string, v nginxenv.Variant) string {
	if cfg.runs > 1 {
		return v.Name + "." + filepath.Base(dir)
	}
	return v.Name
}

// keepFile copies file to dir/name.
func keepFile(file, dir, name string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-keep: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, name), b, 0o644)
}

// jit.v's lines: "[TRACE   3 file:line loop]" (compiled), "[TRACE --- file:line -- reason]"
// (aborted), "[TRACE flush]" (every trace thrown away: too many traces or no room for machine
// code).
var (
	traceLine = regexp.MustCompile(`(?m)^\[TRACE +\d+ `)
	abortLine = regexp.MustCompile(`(?m)^\[TRACE --- `)
	flushLine = regexp.MustCompile(`(?m)^\[TRACE flush\]`)
)

// countJIT counts the traces compiled and aborted so far in a trace log.
func countJIT(path string) (jitCounts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return jitCounts{}, fmt.Errorf("the JIT log (TOLLGATE_JIT_LOG): %w", err)
	}
	return jitCounts{traces: len(traceLine.FindAll(b, -1)), aborts: len(abortLine.FindAll(b, -1)),
		flushes: len(flushLine.FindAll(b, -1))}, nil
}

// benchAccessKey is the S3 access key id of the bench app (-auth sigv4).
const benchAccessKey = "AKIABENCHEXAMPLE0001"

// benchSecret is the secret of benchAccessKey (-auth signed).
const benchSecret = "benchSecretKey/K7MDENG+bPxRfiCYEXAMPLEKEY"

// sealBenchSecret writes a secrets key file into dir and the bench key's sealed secret into
// Redis; it returns the key file's path.
func sealBenchSecret(ctx context.Context, rdb *redis.Client, dir string) (string, error) {
	data, err := secrets.NewKey()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "secrets.key")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", err
	}
	kr, err := secrets.Parse(data)
	if err != nil {
		return "", err
	}
	sealed, err := kr.Seal(benchAccessKey, benchSecret)
	if err != nil {
		return "", err
	}
	return path, rdb.HSet(ctx, keys.AccessKeySecrets(), benchAccessKey, sealed).Err()
}

// authHeaders are the headers identifying the bench app: X-App-Id; a SigV4 Authorization whose
// signature is not checked (sigv4: the key has no secret on file, and the bench backend checks
// none); or a real SigV4 signature of a GET of url, made now (signed: the gateway verifies it;
// a run must stay within the 15 minutes a signed date is accepted).
func authHeaders(auth, method, url string) [][2]string {
	switch auth {
	case "sigv4":
		return [][2]string{{"Authorization", "AWS4-HMAC-SHA256 Credential=" + benchAccessKey +
			"/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, " +
			"Signature=" + strings.Repeat("5d", 32)}}
	case "signed":
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		_ = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: benchAccessKey,
			SecretAccessKey: benchSecret}, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
		return [][2]string{{"Authorization", req.Header.Get("Authorization")},
			{"X-Amz-Date", req.Header.Get("X-Amz-Date")}, {"X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD"}}
	}
	return [][2]string{{nginxenv.AppHeader, redisenv.AppID}}
}

// curl sends n keep-alive requests over one connection (curl -K with n URLs); PUTs upload a
// 1 KiB body each.
func curl(prefix, url string, cfg config, n int) error {
	if n == 0 {
		return nil
	}
	body := filepath.Join(prefix, "body")
	if cfg.method == "PUT" {
		if err := os.WriteFile(body, bytes.Repeat([]byte("u"), 1024), 0o644); err != nil {
			return err
		}
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "url = %q\noutput = \"/dev/null\"\n", url)
		if cfg.method == "PUT" {
			fmt.Fprintf(&b, "upload-file = %q\n", body)
		}
	}
	list := filepath.Join(prefix, "urls.txt")
	if err := os.WriteFile(list, []byte(b.String()), 0o644); err != nil {
		return err
	}
	args := []string{"-sS", "--fail"}
	for _, h := range authHeaders(cfg.auth, http.MethodGet, url) {
		args = append(args, "-H", h[0]+": "+h[1])
	}
	out, err := exec.Command("curl", append(args, "-K", list)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("curl: %w: %s", err, out)
	}
	return nil
}

func waitDump(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte("\ntotals:")) {
			return path, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no complete callgrind dump at %s", path)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var (
	totalsLine = regexp.MustCompile(`(?m)^(?:summary|totals): (\d+)`)
	inclLine   = regexp.MustCompile(`(?m)^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*:(ngx_http_lua_access_handler|ngx_http_lua_log_handler|ngx_event_expire_timers) `)
)

// annotate reads the dump's total and, from callgrind_annotate's inclusive view, the access
// and log phase handlers and the timers.
func annotate(name, dump string, n float64) (row, error) {
	b, err := os.ReadFile(dump)
	if err != nil {
		return row{}, err
	}
	m := totalsLine.FindSubmatch(b)
	if m == nil {
		return row{}, fmt.Errorf("%s: no totals", dump)
	}
	total, _ := strconv.ParseFloat(string(m[1]), 64)
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", dump).Output()
	if err != nil {
		return row{}, fmt.Errorf("callgrind_annotate: %w", err)
	}
	rw := row{name: name, total: total / n}
	for _, m := range inclLine.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(strings.ReplaceAll(string(m[1]), ",", ""), 64)
		switch string(m[2]) {
		case "ngx_http_lua_access_handler":
			rw.access = v / n
		case "ngx_http_lua_log_handler":
			rw.log = v / n
		case "ngx_event_expire_timers":
			rw.tmrs = v / n
		}
	}
	tree, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--tree=calling",
		"--threshold=100", dump).Output()
	if err != nil {
		return row{}, fmt.Errorf("callgrind_annotate --tree=calling: %w", err)
	}
	rw.reply = replyCost(string(tree)) / n
	return rw, nil
}

var (
	// "  226,721,343 (94.98%)  *  ???:0x0000000000054130 [/usr/sbin/nginx]": a function
	treeFunc = regexp.MustCompile(`^\s*[\d,]+ \(\s*[\d.]+%\)\s+\*\s+\S*:(\S+) \[([^\]]*)\]`)
	// "    2,142,121 ( 0.90%)  >   ???:0x0000000000031d20 (56x) [/usr/lib/.../ngx_http_lua_module.so]":
	// one of its callees
	treeCallee = regexp.MustCompile(`^\s*([\d,]+) \(\s*[\d.]+%\)\s+>\s+\S*:(\S+) \([\d,]+x\) \[([^\]]*)\]`)
)

// replyCost is the inclusive cost of the Lua module's event handlers that nginx's event loop
// calls: the cosocket handlers that take Redis' replies and resume the Lua that waits for them.
// nginx's binaries carry no names for static functions, so the event loop is found as the
// unnamed callees of ngx_process_events_and_timers (ngx_epoll_process_events), and the
// handlers as their callees in ngx_http_lua_module.so; tree is callgrind_annotate
// --inclusive=yes --tree=calling.
func replyCost(tree string) float64 {
	callees := map[string][][3]string{} // "function [object]" -> (cost, name, object) of its callees
	cur := ""
	for _, line := range strings.Split(tree, "\n") {
		if m := treeFunc.FindStringSubmatch(line); m != nil {
			cur = m[1] + " [" + m[2] + "]"
			continue
		}
		if m := treeCallee.FindStringSubmatch(line); m != nil && cur != "" {
			callees[cur] = append(callees[cur], [3]string{m[1], m[2], m[3]})
		}
	}
	sum := 0.0
	for f, cs := range callees {
		if !strings.HasPrefix(f, "ngx_process_events_and_timers [") {
			continue
		}
		for _, loop := range cs {
			if !strings.HasPrefix(loop[1], "0x") {
				continue // ngx_event_expire_timers (the timers column), ngx_event_find_timer, ...
			}
			sum += luaCallees(callees[loop[1]+" ["+loop[2]+"]"])
		}
	}
	return sum
}

// luaCallees is the sum of the costs of the callees in ngx_http_lua_module.so.
func luaCallees(cs [][3]string) float64 {
	sum := 0.0
	for _, c := range cs {
		if strings.HasSuffix(c[2], "/ngx_http_lua_module.so") {
			v, _ := strconv.ParseFloat(strings.ReplaceAll(c[0], ",", ""), 64)
			sum += v
		}
	}
	return sum
}
