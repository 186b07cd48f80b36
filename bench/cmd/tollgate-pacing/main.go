// Command tollgate-pacing measures bandwidth pacing (docs/operations.md "Bandwidth pacing"): an
// app guaranteed about 10 MB/s in cost units (153 tokens/s × 64 KiB at C_bw 1, a burst of two
// seconds) downloads large objects through one tollgate node with 1, 4 and 16 streams, while a
// neighbour app with a large quota downloads with one stream. For each run it prints the paced
// app's bandwidth per 1-second window (the first window, where the burst shows, then the mean,
// p1 and p99 of the others against the guarantee), the neighbour's MB/s, and the node's CPU
// seconds per GiB moved — with pacing on, and with TOLLGATE_PACING=off for comparison.
//
//	go run ./bench/cmd/tollgate-pacing [-duration 10s] [-streams 1,4,16] [-size 1073741824]
//
// Wall-clock figures: label them "(shared machine)" wherever they are quoted.
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
	pacedID     = "paced"
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

// result is one run's figures.
type result struct {
	pacing    string
	streams   int
	windows   []float64 // paced app's MB/s per 1-s window
	neighbour float64   // MB/s
	cpuPerGiB float64
	refused   int64 // the paced app's 429s (new requests it could not afford)
}

func run(args []string) error {
	fs := flag.NewFlagSet("tollgate-pacing", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Second, "length of each run")
	streamList := fs.String("streams", "1,4,16", "parallel downloads of the paced app, per run")
	size := fs.Int64("size", 1<<30, "object size in bytes (a stream that finishes one starts the next)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var streams []int
	for _, s := range strings.Split(*streamList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-streams: %q is not a positive integer", s)
		}
		streams = append(streams, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, _ := os.Getwd()
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tollgate-pacing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "redis"), 0o700); err != nil {
		return err
	}
	red, err := redisenv.Start(ctx, filepath.Join(dir, "redis"))
	if err != nil {
		return err
	}
	defer red.Stop()
	if err := redisenv.Seed(ctx, red.Client()); err != nil {
		return err
	}
	set, err := scripts.New()
	if err != nil {
		return err
	}
	st := store.New(red.Client(), set)
	for _, a := range []store.App{
		{AppID: pacedID, ClusterID: redisenv.ClusterID, GuaranteedQuota: guaranteed,
			BurstQuota: 2 * guaranteed, Priority: 1, CBw: 1, Enabled: true},
		{AppID: neighbourID, ClusterID: redisenv.ClusterID, GuaranteedQuota: 1_000_000,
			BurstQuota: 4_000_000, Priority: 1, CBw: 1, Enabled: true},
	} {
		if _, err := st.PutApp(ctx, a); err != nil {
			return err
		}
	}
	backend, err := startBackend(*size)
	if err != nil {
		return err
	}
	defer backend.Close()
	var results []result
	for _, pacing := range []string{"on", "off"} {
		os.Setenv("TOLLGATE_PACING", pacing)
		var v nginxenv.Variant
		for _, x := range nginxenv.Variants() {
			if x.Kind == nginxenv.Lease {
				v = x
			}
		}
		node, err := nginxenv.Start(ctx, nginxenv.Options{Variant: v, Repo: repo,
			Prefix: filepath.Join(dir, "pacing-"+pacing), Workers: 2, RedisURL: red.URL(),
			NodeID: "pacing-" + pacing, AppID: redisenv.AppID, Backend: backend.Addr().String()})
		if err != nil {
			return err
		}
		for _, n := range streams {
			// the paced app's bucket refills (its burst is two seconds of its rate) and the
			// debt the last run left is repaid
			time.Sleep(5 * time.Second)
			r, err := measure(ctx, node, n, *duration)
			if err != nil {
				node.Stop()
				return fmt.Errorf("pacing %s, %d streams: %w\n%s", pacing, n, err, node.ErrorLog())
			}
			r.pacing = pacing
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "pacing %s, %d streams: windows %v MB/s, neighbour %.0f MB/s\n",
				pacing, n, round(r.windows), r.neighbour)
		}
		node.Stop()
	}
	g := float64(guaranteed*quantum) / 1e6
	fmt.Printf("\nbandwidth pacing: app guaranteed %.2f MB/s (%d tokens/s, burst 2 s), %v per run, "+
		"one node of 2 workers (shared machine)\n\n", g, guaranteed, *duration)
	fmt.Println("| pacing | streams | first 1-s window MB/s | mean MB/s (windows 2..) | p1 | p99 | p99 vs guarantee | 429s | neighbour MB/s | CPU s per GiB (node) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		first, rest := 0.0, []float64(nil)
		if len(r.windows) > 0 {
			first, rest = r.windows[0], r.windows[1:]
		}
		mean, p1, p99 := stats(rest)
		fmt.Printf("| %s | %d | %.1f | %.2f | %.2f | %.2f | %+.1f %% | %d | %.0f | %.2f |\n", r.pacing, r.streams,
			first, mean, p1, p99, 100*(p99-g)/g, r.refused, r.neighbour, r.cpuPerGiB)
	}
	fmt.Println("\nMB/s = 10^6 bytes/s. Windows are the paced app's bytes received per second, all streams " +
		"together; the neighbour (1 stream, large quota) runs at the same time. CPU is the nginx node's " +
		"(client and backend run in this process), per GiB moved by both apps.")
	return nil
}

// measure runs n streams of the paced app and one of the neighbour for d.
func measure(ctx context.Context, node *nginxenv.Node, n int, d time.Duration) (result, error) {
	r := result{streams: n}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 32}}
	var paced, neigh atomic.Int64
	var refused atomic.Int64
	errc := make(chan error, n+1)
	var wg sync.WaitGroup
	stream := func(app string, counter *atomic.Int64) {
		defer wg.Done()
		for rctx.Err() == nil {
			status, err := get(rctx, client, node.BaseURL+"/bucket/big", app, counter)
			if rctx.Err() != nil {
				return
			}
			if err != nil {
				errc <- err
				return
			}
			if status == http.StatusTooManyRequests {
				refused.Add(1)
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
	cpu0, err := node.CPU()
	if err != nil {
		return r, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go stream(pacedID, &paced)
	}
	wg.Add(1)
	go stream(neighbourID, &neigh)
	tick := time.NewTicker(time.Second)
	last := int64(0)
loop:
	for {
		select {
		case <-tick.C:
			v := paced.Load()
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
	cpu1, err := node.CPU()
	if err != nil {
		return r, err
	}
	moved := float64(paced.Load()+neigh.Load()) / (1 << 30)
	if moved > 0 {
		r.cpuPerGiB = (cpu1 - cpu0).Seconds() / moved
	}
	r.neighbour = float64(neigh.Load()) / 1e6 / took.Seconds()
	r.refused = refused.Load()
	return r, nil
}

// counting adds what passes through it to a counter as it arrives.
type counting struct{ c *atomic.Int64 }

func (w counting) Write(p []byte) (int, error) {
	w.c.Add(int64(len(p)))
	return len(p), nil
}

func get(ctx context.Context, c *http.Client, url, app string, counter *atomic.Int64) (int, error) {
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
	_, err = io.Copy(counting{counter}, resp.Body)
	return resp.StatusCode, err
}

// startBackend serves the benchmark's small object (the node's readiness probe) and size bytes
// of zeros for GET /bucket/big.
func startBackend(size int64) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	small := make([]byte, nginxenv.ObjectSize)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case nginxenv.ObjectPath:
			_, _ = w.Write(small)
		case "/bucket/big":
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			_, _ = io.Copy(w, io.LimitReader(zeros{}, size))
		default:
			http.NotFound(w, r)
		}
	})
	go func() { _ = http.Serve(l, h) }()
	return l, nil
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
	idx := func(q float64) float64 {
		i := int(q * float64(len(s)-1))
		return s[i]
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
