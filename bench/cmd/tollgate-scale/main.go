// Command tollgate-scale measures what the number of configured apps does to the gateway and the
// control plane (issue "scale to a storage provider's tenant count"). For each N of -apps it
// starts a private redis-server, creates N apps through the store (16 writers), starts the real
// control plane binary and one gateway node (real nginx with the repository's Lua), and measures:
//
//   - the store: apps created per second (bulk creation through PutApp);
//   - a fresh node: time from start to a loaded config, and how many of a random sample of apps
//     it knows (not 403 unknown_app);
//   - a full load under traffic: wrk on one app while the node loads every app again (a change
//     logged as "all"): req/s, p99, and the load's time;
//   - the request path: wrk on one app (req/s, p99, refused requests, fail-open admissions);
//   - propagation: API 2xx of an app change → the node enforces it (p50, max of -changes);
//   - memory: nginx worker private memory, control plane RSS, Redis used_memory;
//   - idle CPU of nginx, Redis and the control plane;
//   - the API: PUT /apps/{id} and GET /apps (first page) p50/p99 with 16 concurrent clients.
//
// It prints a table (and writes it as Markdown, by default bench/results/scale.md). It is a
// benchmark program, not a test: the figures depend on the machine.
//
//	go run ./bench/cmd/tollgate-scale [-apps 1000,10000,100000] [-duration 10s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tollgate/bench/internal/runner"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tollgate-scale:", err)
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
	fs := flag.NewFlagSet("tollgate-scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := options{repo: repo}
	counts := fs.String("apps", "1000,10000,100000", "comma-separated numbers of configured apps")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "wrk run on one app")
	fs.IntVar(&o.connections, "connections", 16, "wrk connections")
	fs.IntVar(&o.workers, "workers", 2, "nginx workers")
	fs.IntVar(&o.writers, "writers", 16, "concurrent writers creating apps and concurrent API clients")
	fs.IntVar(&o.changes, "changes", 10, "app changes whose propagation to the node is timed")
	fs.IntVar(&o.sample, "sample", 200, "random apps probed on the node")
	fs.DurationVar(&o.apiPhase, "api", 5*time.Second, "duration of each API phase (0 skips them)")
	fs.DurationVar(&o.ready, "ready", 5*time.Minute, "longest wait for a node to load its config")
	fs.IntVar(&o.rounds, "rounds", 3, "wrk runs on one app (the table shows their medians)")
	fs.IntVar(&o.active, "active", 1000, "apps given traffic to measure the per-active-app shared dicts")
	fs.BoolVar(&o.hold, "hold", false, "after measuring the last -apps, keep its stack running until Ctrl-C (to inspect it)")
	fs.StringVar(&o.configDict, "config-dict", "auto", "size of the node's config_dict (auto: docs/scale.md's rule for N apps)")
	out := fs.String("out", filepath.Join(repo, "bench", "results", "scale.md"), "Markdown output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return fmt.Errorf("-apps: %q is not a number of apps ≥ 2", f)
		}
		o.counts = append(o.counts, n)
	}
	if o.rounds < 1 || o.duration < time.Second {
		return fmt.Errorf("-rounds (%d) must be ≥ 1 and -duration (%s) ≥ 1s", o.rounds, o.duration)
	}
	o.progress = stderr
	var rows []row
	for i, n := range o.counts {
		oi := o
		oi.hold = o.hold && i == len(o.counts)-1
		r, err := measure(ctx, oi, n)
		if err != nil {
			return fmt.Errorf("%d apps: %w", n, err)
		}
		rows = append(rows, r)
	}
	text := render(o, rows)
	fmt.Fprint(stdout, "\n"+text)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwritten to %s\n", *out)
	return nil
}

type options struct {
	repo        string
	counts      []int
	duration    time.Duration
	connections int
	workers     int
	writers     int
	changes     int
	sample      int
	apiPhase    time.Duration
	ready       time.Duration
	hold        bool
	active      int
	rounds      int
	configDict  string
	progress    io.Writer
}

func (o options) logf(format string, args ...any) {
	fmt.Fprintf(o.progress, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
