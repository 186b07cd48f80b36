// Command tollgate-pacing measures bandwidth pacing (docs/design.md "Pacing"): an app guaranteed
// about 10 MB/s in cost units (153 tokens/s × 64 KiB at C_bw 1, a burst of two seconds) moves
// large objects through tollgate while a neighbour app with a large quota downloads with one
// stream on the first node (its client reading at most -neighbour-rate MB/s: a tenant with a
// steady demand, which pacing must leave unaffected). Runs:
//
//   - downloads with 1, 4 and 16 streams on one node, pacing on and off (TOLLGATE_PACING=off);
//   - downloads with 2, 4 and 16 streams spread over two nodes (two gateways sharing the app's
//     L2 bucket through their leases), pacing on and off;
//   - uploads with 1, 4 and 16 streams on one node (charged their announced length up front,
//     not paced: the table shows what happens).
//
// Each run uses an app of its own (a full bucket, no debt left by an earlier run). For each it
// prints the paced app's bytes per 1-second window (the first window, where the burst shows,
// then the mean, p1 and p99 of the others against the guarantee), its 429s, the neighbour's
// MB/s and the nodes' CPU seconds per GiB moved by both apps.
//
//	go run ./bench/cmd/tollgate-pacing [-duration 15s] [-streams 1,4,16] [-streams2 2,4,16]
//	    [-uploads 1,4,16] [-size 1073741824] [-neighbour-rate 200]
//
// Wall-clock figures: label them "(shared machine)" wherever they are quoted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/runner"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

const (
	neighbourID = "neighbour"
	guaranteed  = 153 // tokens/s: 153 × 65536 B = 10.03 MB/s
	quantum     = 65536
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tollgate-pacing:", err)
		os.Exit(1)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// scenario is one run.
type scenario struct {
	upload  bool
	pacing  string // "on" or "off"
	nodes   int
	streams int
}

func (s scenario) app() string {
	dir := "get"
	if s.upload {
		dir = "put"
	}
	return fmt.Sprintf("%s-%s-%dn-%d", dir, s.pacing, s.nodes, s.streams)
}

// result is one run's figures.
type result struct {
	scenario
	windows   []float64 // paced app's MB per 1-s window
	neighbour float64   // MB/s
	cpuPerGiB float64
	refused   int64 // the paced app's 429s (new requests it could not afford)
}

func parseList(flagName, v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("tollgate-pacing", flag.ContinueOnError)
	duration := fs.Duration("duration", 15*time.Second, "length of each run")
	streamList := fs.String("streams", "1,4,16", "parallel downloads on one node, per run (empty: none)")
	streams2List := fs.String("streams2", "2,4,16", "parallel downloads spread over two nodes, per run (empty: none)")
	uploadList := fs.String("uploads", "1,4,16", "parallel uploads on one node, per run (empty: none)")
	size := fs.Int64("size", 1<<30, "object size in bytes (a stream that finishes one starts the next)")
	neighbourRate := fs.Float64("neighbour-rate", 200, "MB/s the neighbour's client reads at most (0: as fast as it can)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	streams, err := parseList("streams", *streamList)
	if err != nil {
		return err
	}
	streams2, err := parseList("streams2", *streams2List)
	if err != nil {
		return err
	}
	uploads, err := parseList("uploads", *uploadList)
	if err != nil {
		return err
	}
	var plan []scenario
	for _, pacing := range []string{"on", "off"} {
		for _, n := range streams {
			plan = append(plan, scenario{pacing: pacing, nodes: 1, streams: n})
		}
		for _, n := range streams2 {
			plan = append(plan, scenario{pacing: pacing, nodes: 2, streams: n})
		}
	}
	for _, n := range uploads {
		plan = append(plan, scenario{upload: true, pacing: "on", nodes: 1, streams: n})
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, _ := os.Getwd()
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return err
	}
	scratch, err := redisenv.StartScratch(ctx, "tollgate-pacing")
	if err != nil {
		return err
	}
	defer scratch.Close()
	dir, red := scratch.Dir, scratch.Redis
	set, err := scripts.New()
	if err != nil {
		return err
	}
	st := store.New(red.Client(), set)
	apps := []store.App{{AppID: neighbourID, ClusterID: redisenv.ClusterID, GuaranteedQuota: 1_000_000,
		BurstQuota: 4_000_000, Priority: 1, CBw: 1, Enabled: true}}
	for _, s := range plan {
		apps = append(apps, store.App{AppID: s.app(), ClusterID: redisenv.ClusterID,
			GuaranteedQuota: guaranteed, BurstQuota: 2 * guaranteed, Priority: 1, CBw: 1, Enabled: true})
	}
	for _, a := range apps {
		if _, err := st.PutApp(ctx, a); err != nil {
			return err
		}
	}
	backend, err := startBackend(*size)
	if err != nil {
		return err
	}
	defer backend.Close()
	var v nginxenv.Variant
	for _, x := range nginxenv.Variants() {
		if x.Kind == nginxenv.Lease {
			v = x
		}
	}
	var results []result
	for _, pacing := range []string{"on", "off"} {
		var todo []scenario
		nodes := 0
		for _, s := range plan {
			if s.pacing == pacing {
				todo = append(todo, s)
				nodes = max(nodes, s.nodes)
			}
		}
		if len(todo) == 0 {
			continue
		}
		os.Setenv("TOLLGATE_PACING", pacing)
		var running []*nginxenv.Node
		stopAll := func() {
			for _, n := range running {
				n.Stop()
			}
		}
		for i := 0; i < nodes; i++ {
			name := fmt.Sprintf("pacing-%s-%d", pacing, i+1)
			node, err := nginxenv.Start(ctx, nginxenv.Options{Variant: v, Repo: repo,
				Prefix: filepath.Join(dir, name), Workers: 2, RedisURL: red.URL(),
				NodeID: name, AppID: redisenv.AppID, Backend: backend.Addr().String()})
			if err != nil {
				stopAll()
				return err
			}
			running = append(running, node)
		}
		for _, s := range todo {
			r, err := measure(ctx, running[:s.nodes], running[0], s, *duration, backend, *neighbourRate)
			if err != nil {
				logs := ""
				for _, n := range running {
					logs += n.ErrorLog()
				}
				stopAll()
				return fmt.Errorf("%s: %w\n%s", s.app(), err, logs)
			}
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "%s: windows %v MB/s, neighbour %.0f MB/s, %d refused\n",
				s.app(), round(r.windows), r.neighbour, r.refused)
			// a quiet second between runs (the last run's transfers end, the neighbour's
			// connections close)
			time.Sleep(time.Second)
		}
		stopAll()
	}
	printTable(results, *duration)
	return nil
}

func printTable(results []result, d time.Duration) {
	g := float64(guaranteed*quantum) / 1e6
	fmt.Printf("\nbandwidth pacing: app guaranteed %.2f MB/s (%d tokens/s, burst 2 s), %v per run, "+
		"nodes of 2 workers (shared machine)\n\n", g, guaranteed, d)
	fmt.Println("| direction | pacing | nodes | streams | first 1-s window MB/s | mean MB/s (windows 2..) | p1 | p99 | p1 / p99 vs guarantee | windows within ±5 % | 429s | neighbour MB/s | CPU s per GiB (nodes) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		first, rest := 0.0, []float64(nil)
		if len(r.windows) > 0 {
			first, rest = r.windows[0], r.windows[1:]
		}
		mean, p1, p99 := stats(rest)
		dir := "download"
		if r.upload {
			dir = "upload"
		}
		within := 0
		for _, w := range rest {
			if math.Abs(w-g) <= 0.05*g {
				within++
			}
		}
		fmt.Printf("| %s | %s | %d | %d | %.1f | %.2f | %.2f | %.2f | %+.1f %% / %+.1f %% | %d of %d | %d | %.0f | %.2f |\n",
			dir, r.pacing, r.nodes, r.streams, first, mean, p1, p99, 100*(p1-g)/g, 100*(p99-g)/g,
			within, len(rest), r.refused, r.neighbour, r.cpuPerGiB)
	}
	fmt.Println("\nMB/s = 10^6 bytes/s. Windows are the paced app's bytes per second, all streams " +
		"together (downloads: as the client receives them; uploads: as the backend receives them); " +
		"streams over two nodes alternate between them. The neighbour (1 download stream on the first " +
		"node, a large quota, its client reading at most -neighbour-rate MB/s) runs at the same time. CPU is the nginx nodes' (client and backend run " +
		"in this process), per GiB moved by both apps.")
}

// measure runs s.streams transfers of the scenario's app spread over nodes, and one download of
// the neighbour on neighbourNode, for d.
func measure(ctx context.Context, nodes []*nginxenv.Node, neighbourNode *nginxenv.Node, s scenario,
	d time.Duration, b *backendServer, neighbourRate float64) (result, error) {
	r := result{scenario: s}
	app := s.app()
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64,
		ExpectContinueTimeout: 5 * time.Second}}
	var paced, neigh atomic.Int64
	var refused atomic.Int64
	counter := &paced
	if s.upload {
		counter = b.counter(app)
	}
	errc := make(chan error, s.streams+1)
	var wg sync.WaitGroup
	stream := func(base, app string, upload bool, i int, counter *atomic.Int64, rate float64) {
		defer wg.Done()
		for rctx.Err() == nil {
			var status int
			var err error
			if upload {
				status, err = put(rctx, client, fmt.Sprintf("%s/bucket/up-%d", base, i), app, b.size)
			} else {
				status, err = get(rctx, client, base+"/bucket/big", app, counter, rate)
			}
			if rctx.Err() != nil {
				return
			}
			if err != nil {
				errc <- err
				return
			}
			if status == http.StatusTooManyRequests {
				if app != neighbourID {
					refused.Add(1)
				}
				select {
				case <-rctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			} else if status != http.StatusOK {
				errc <- fmt.Errorf("%s: status %d", app, status)
				return
			}
		}
	}
	cpu0, err := cpu(nodes, neighbourNode)
	if err != nil {
		return r, err
	}
	start := time.Now()
	base := counter.Load()
	for i := 0; i < s.streams; i++ {
		wg.Add(1)
		go stream(nodes[i%len(nodes)].BaseURL, app, s.upload, i, counter, 0)
	}
	wg.Add(1)
	go stream(neighbourNode.BaseURL, neighbourID, false, 0, &neigh, neighbourRate)
	tick := time.NewTicker(time.Second)
	last := base
loop:
	for {
		select {
		case <-tick.C:
			v := counter.Load()
			r.windows = append(r.windows, float64(v-last)/1e6)
			last = v
		case <-rctx.Done():
			break loop
		}
	}
	tick.Stop()
	wg.Wait()
	took := time.Since(start)
	close(errc)
	for err := range errc {
		return r, err
	}
	cpu1, err := cpu(nodes, neighbourNode)
	if err != nil {
		return r, err
	}
	moved := float64(counter.Load()-base+neigh.Load()) / (1 << 30)
	if moved > 0 {
		r.cpuPerGiB = (cpu1 - cpu0).Seconds() / moved
	}
	r.neighbour = float64(neigh.Load()) / 1e6 / took.Seconds()
	r.refused = refused.Load()
	return r, nil
}

// cpu is the CPU time the nodes (with the neighbour's) have used so far.
func cpu(nodes []*nginxenv.Node, extra *nginxenv.Node) (time.Duration, error) {
	seen := map[*nginxenv.Node]bool{}
	var total time.Duration
	for _, n := range append([]*nginxenv.Node{extra}, nodes...) {
		if seen[n] {
			continue
		}
		seen[n] = true
		t, err := n.CPU()
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// counting adds what passes through it to a counter as it arrives.
type counting struct{ c *atomic.Int64 }

func (w counting) Write(p []byte) (int, error) {
	w.c.Add(int64(len(p)))
	return len(p), nil
}

// capped is counting that takes at most rate MB/s (a client that reads no faster).
type capped struct {
	c     *atomic.Int64
	rate  float64
	start time.Time
	n     int64
}

func (w *capped) Write(p []byte) (int, error) {
	w.c.Add(int64(len(p)))
	w.n += int64(len(p))
	if ahead := time.Duration(float64(w.n)/(w.rate*1e6)*float64(time.Second)) - time.Since(w.start); ahead > 0 {
		time.Sleep(ahead)
	}
	return len(p), nil
}

func get(ctx context.Context, c *http.Client, url, app string, counter *atomic.Int64, rate float64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(nginxenv.AppHeader, app)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	var w io.Writer = counting{counter}
	if rate > 0 {
		w = &capped{c: counter, rate: rate, start: time.Now()}
	}
	_, err = io.Copy(w, resp.Body)
	return resp.StatusCode, err
}

// put uploads size bytes of zeros with Expect: 100-continue (as S3 clients send large bodies):
// a refusal comes before the body.
func put(ctx context.Context, c *http.Client, url, app string, size int64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", url, io.LimitReader(zeros{}, size))
	if err != nil {
		return 0, err
	}
	req.ContentLength = size
	req.Header.Set(nginxenv.AppHeader, app)
	req.Header.Set("Expect", "100-continue")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// backendServer serves the benchmark's small object (the nodes' readiness probe), size bytes of
// zeros for GET /bucket/big, and takes uploads (PUT /bucket/up-N), counting their bytes per app
// as they arrive.
type backendServer struct {
	net.Listener
	size int64
	mu   sync.Mutex
	up   map[string]*atomic.Int64
}

func (b *backendServer) counter(app string) *atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.up[app]
	if c == nil {
		c = new(atomic.Int64)
		b.up[app] = c
	}
	return c
}

func startBackend(size int64) (*backendServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backendServer{Listener: l, size: size, up: map[string]*atomic.Int64{}}
	small := make([]byte, nginxenv.ObjectSize)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == nginxenv.ObjectPath:
			_, _ = w.Write(small)
		case r.Method == http.MethodGet && r.URL.Path == "/bucket/big":
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			_, _ = io.Copy(w, io.LimitReader(zeros{}, size))
		case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/bucket/up-"):
			_, _ = io.Copy(counting{b.counter(r.Header.Get(nginxenv.AppHeader))}, r.Body)
		default:
			http.NotFound(w, r)
		}
	})
	go func() { _ = http.Serve(l, h) }()
	return b, nil
}

func stats(v []float64) (mean, p1, p99 float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	// nearest rank: with fewer than 100 windows p1 is the lowest and p99 the highest
	idx := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return sum / float64(len(s)), idx(0.01), idx(0.99)
}

func round(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(int(x*10)) / 10
	}
	return out
}
