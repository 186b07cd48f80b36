// Command tollgate-bench measures the gateway's overhead side by side with plain nginx, nginx
// limit_req and a Redis-call-per-request limiter, and prints the table (also written as
// Markdown, by default to bench/results/latest.md). `make bench` runs it; BENCH_FLAGS=-quick
// makes a smoke run.
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
	"syscall"
	"time"

	"tollgate/bench/internal/report"
	"tollgate/bench/internal/runner"
)

func main() {
	_, err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "tollgate-bench: interrupted; every started process was stopped")
		os.Exit(130)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "tollgate-bench:", err)
		os.Exit(1)
	}
}

// run is the whole program: flags, the benchmark (stopped cleanly on SIGINT/SIGTERM), the
// table on stdout and the Markdown file.
func run(args []string, stdout, stderr io.Writer) (report.Report, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, out, err := parseFlags(args, stderr)
	if err != nil {
		return report.Report{}, err
	}
	cfg.Progress = stderr
	rep, err := runner.Run(ctx, cfg)
	if err != nil {
		return report.Report{}, err
	}
	fmt.Fprint(stdout, "\n"+rep.Text())
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return rep, fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.WriteFile(out, []byte(rep.Markdown()), 0o644); err != nil {
		return rep, fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Fprintf(stdout, "\nwritten to %s\n", out)
	return rep, nil
}

// parseFlags returns the run's config and the Markdown output path. -quick sets the defaults
// of a smoke run; flags given explicitly still win.
func parseFlags(args []string, stderr io.Writer) (runner.Config, string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return runner.Config{}, "", err
	}
	repo, err := runner.FindRepo(cwd)
	if err != nil {
		return runner.Config{}, "", err
	}
	fs := flag.NewFlagSet("tollgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := runner.Config{Workers: 2}
	fs.StringVar(&cfg.Repo, "repo", repo, "checkout whose nginx/ and lua/ the gateways run")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured wrk run per variant and round")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "warm-up wrk run before every measured run")
	fs.IntVar(&cfg.Connections, "connections", 64, "wrk connections (-c)")
	fs.IntVar(&cfg.Threads, "threads", 2, "wrk threads (-t)")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds interleaving the variants (medians are reported)")
	fs.IntVar(&cfg.Pairs, "pairs", 10, "paired (a)/(b) runs with both gateways up (0: skip)")
	fs.DurationVar(&cfg.Slice, "slice", 2*time.Second, "wrk run of each side of a pair")
	out := fs.String("out", filepath.Join(repo, "bench", "results", "latest.md"),
		"Markdown output file")
	quick := fs.Bool("quick", false, "smoke run: 1 round, 2s runs, 1s warm-up")
	fs.BoolVar(&cfg.RulesOnly, "rules-only", false, "only the rules section: (b) with 0, 10 and 100 active rules")
	if err := fs.Parse(args); err != nil {
		return runner.Config{}, "", err
	}
	if fs.NArg() > 0 {
		return runner.Config{}, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["rounds"] {
			cfg.Rounds = 1
		}
		if !set["duration"] {
			cfg.Duration = 2 * time.Second
		}
		if !set["warmup"] {
			cfg.Warmup = time.Second
		}
		if !set["pairs"] {
			cfg.Pairs = 2
		}
		if !set["slice"] {
			cfg.Slice = time.Second
		}
	}
	return cfg, *out, nil
}
