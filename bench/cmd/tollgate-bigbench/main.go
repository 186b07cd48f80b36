// Command tollgate-bigbench is the benchmark's large-object variant: a PUT and a GET of one
// large object (1 GiB by default) through (a) a plain nginx proxy, (b) tollgate, and (o) the
// storage backend alone, each the median of -rounds runs. It prints MB/s, the CPU seconds the
// nginx under test spent per GiB (the backend is a Go server in this process: its CPU is not
// counted), the bytes that nginx wrote to disk, and its workers' largest resident memory. The
// backend reads every PUT's body to the end before it answers, and answers a GET with zeros.
//
//	go run ./bench/cmd/tollgate-bigbench [-size 1073741824] [-rounds 3]
package main

import (
	"bytes"
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
	"syscall"
	"time"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/proc"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/runner"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tollgate-bigbench:", err)
		os.Exit(1)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// sample is one transfer's figures.
type sample struct {
	mbps   float64 // MB/s (10^6 bytes)
	cpu    float64 // CPU seconds of the node per GiB
	writes int64   // bytes the node wrote to disk
	rss    int64   // largest VmRSS of a worker after the transfer (KiB)
}

func run(args []string) error {
	fs := flag.NewFlagSet("tollgate-bigbench", flag.ContinueOnError)
	size := fs.Int64("size", 1<<30, "object size in bytes")
	rounds := fs.Int("rounds", 3, "runs per variant and direction (medians are reported)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, _ := os.Getwd()
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return err
	}
	scratch, err := redisenv.StartScratch(ctx, "tollgate-bigbench")
	if err != nil {
		return err
	}
	defer scratch.Close()
	dir, red := scratch.Dir, scratch.Redis
	backend, err := startBackend(*size)
	if err != nil {
		return err
	}
	defer backend.Close()
	start := func(v nginxenv.Variant) (*nginxenv.Node, error) {
		return nginxenv.Start(ctx, nginxenv.Options{Variant: v, Repo: repo, Prefix: filepath.Join(dir, v.Key),
			Workers: 2, RedisURL: red.URL(), NodeID: "big-" + v.Key, AppID: redisenv.AppID,
			Backend: backend.Addr().String()})
	}
	var plain, gw *nginxenv.Node
	for _, v := range nginxenv.Variants() {
		switch v.Kind {
		case nginxenv.Plain:
			plain, err = start(v)
		case nginxenv.Lease:
			gw, err = start(v)
		}
		if err != nil {
			return err
		}
	}
	defer plain.Stop()
	defer gw.Stop()
	type target struct {
		label string
		node  *nginxenv.Node
		base  string
	}
	targets := []target{
		{"(a) plain nginx proxy", plain, plain.BaseURL},
		{"(b) tollgate", gw, gw.BaseURL},
		{"(o) backend alone", nil, plain.BackendURL},
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	results := map[string][]sample{}
	for r := 0; r < *rounds; r++ {
		for _, tg := range targets {
			for _, dirn := range []string{"PUT", "GET"} {
				s, err := transfer(ctx, client, tg.node, tg.base, dirn, *size)
				if err != nil {
					return fmt.Errorf("%s %s: %w\n%s", tg.label, dirn, err, tg.node.ErrorLog())
				}
				key := tg.label + "|" + dirn
				results[key] = append(results[key], s)
				fmt.Fprintf(os.Stderr, "round %d %s %s: %.0f MB/s, %.2f CPU s/GiB\n", r+1, tg.label, dirn, s.mbps, s.cpu)
			}
		}
	}
	fmt.Printf("\nlarge objects: %d bytes per transfer, median of %d (shared machine)\n\n", *size, *rounds)
	fmt.Println("| variant | direction | MB/s | % of plain | CPU s per GiB (node) | disk writes (bytes) | worker RSS max (MiB) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, dirn := range []string{"PUT", "GET"} {
		base := median(results["(a) plain nginx proxy|"+dirn], func(s sample) float64 { return s.mbps })
		for _, tg := range targets {
			ss := results[tg.label+"|"+dirn]
			mb := median(ss, func(s sample) float64 { return s.mbps })
			var writes, rss int64
			for _, s := range ss {
				writes = max(writes, s.writes)
				rss = max(rss, s.rss)
			}
			fmt.Printf("| %s | %s | %.0f | %.0f %% | %.2f | %d | %.1f |\n", tg.label, dirn, mb, 100*mb/base,
				median(ss, func(s sample) float64 { return s.cpu }), writes, float64(rss)/1024)
		}
	}
	fmt.Println("\nCPU and disk writes are the nginx's under test (none for (o)); the client and the backend run in this process.")
	return nil
}

func transfer(ctx context.Context, c *http.Client, n *nginxenv.Node, base, method string, size int64) (sample, error) {
	url := base + "/bucket/big"
	var body io.Reader
	if method == "PUT" {
		url = base + "/upload/big"
		body = io.LimitReader(zeros{}, size)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return sample{}, err
	}
	req.ContentLength = 0
	if method == "PUT" {
		req.ContentLength = size
	}
	req.Header.Set(nginxenv.AppHeader, redisenv.AppID)
	var cpu0 time.Duration
	var w0 int64
	if n != nil {
		if cpu0, err = n.CPU(); err != nil {
			return sample{}, err
		}
		w0 = treeWrites(n.PID())
	}
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return sample{}, err
	}
	got, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(t0)
	if err != nil {
		return sample{}, err
	}
	if resp.StatusCode != http.StatusOK || (method == "GET" && got != size) ||
		(method == "PUT" && resp.Header.Get("X-Received") != strconv.FormatInt(size, 10)) {
		return sample{}, fmt.Errorf("status %d, %d bytes, the backend received %q", resp.StatusCode, got,
			resp.Header.Get("X-Received"))
	}
	s := sample{mbps: float64(size) / 1e6 / took.Seconds()}
	if n == nil {
		return s, nil
	}
	cpu1, err := n.CPU()
	if err != nil {
		return sample{}, err
	}
	s.cpu = (cpu1 - cpu0).Seconds() / (float64(size) / (1 << 30))
	s.writes = treeWrites(n.PID()) - w0
	s.rss = maxRSS(n.PID())
	return s, nil
}

// startBackend serves the benchmark's small object (the nodes' readiness probe), size bytes of
// zeros for GET /bucket/big, and reads a PUT's body to the end before answering 200.
func startBackend(size int64) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	small := bytes.Repeat([]byte("tollgate-bench-0"), nginxenv.ObjectSize/16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "PUT":
			n, _ := io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Received", strconv.FormatInt(n, 10))
		case r.URL.Path == nginxenv.ObjectPath:
			_, _ = w.Write(small)
		case r.URL.Path == "/bucket/big":
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			_, _ = io.Copy(w, io.LimitReader(zeros{}, size))
		default:
			http.NotFound(w, r)
		}
	})
	go func() { _ = http.Serve(l, h) }()
	return l, nil
}

// treeWrites is write_bytes of /proc/<pid>/io summed over the master and its workers.
func treeWrites(pid int) int64 {
	pids, _ := proc.Children(pid)
	var total int64
	for _, p := range append(pids, pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/io")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total
}

// maxRSS is the largest VmRSS (KiB) of pid's workers.
func maxRSS(pid int) int64 {
	pids, _ := proc.Children(pid)
	var m int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m = max(m, n)
			}
		}
	}
	return m
}

func median(ss []sample, f func(sample) float64) float64 {
	if len(ss) == 0 {
		return 0
	}
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}
