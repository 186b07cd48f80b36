// Package runner runs the benchmark: a private redis-server seeded through the control plane's
// store, then for every round each variant in turn on a fresh nginx (warm-up, measured wrk run,
// L3 counters and Redis commands around it), and the report of the medians.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/report"
)

// Config of one benchmark run.
type Config struct {
	Repo        string // repository root (nginx/, lua/)
	TempDir     string // parent of the run's temporary directory ("" = the system default)
	Threads     int
	Connections int
	Duration    time.Duration // measured run per variant and round
	Warmup      time.Duration // warm-up run before every measured run
	Rounds      int
	Workers     int           // nginx workers per variant
	Pairs       int           // paired (a)/(b) runs after the rounds (0: none)
	Slice       time.Duration // wrk run of each side of a pair
	RulesOnly   bool          // only the rules section (no rounds of the variants, no pairs)
	Progress    io.Writer     // progress lines
}

// Validate lists what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Repo == "" {
		errs = append(errs, errors.New("repository root is required"))
	}
	if c.Threads < 1 || c.Connections < c.Threads {
		errs = append(errs, fmt.Errorf("need 1 ≤ threads (%d) ≤ connections (%d)",
			c.Threads, c.Connections))
	}
	if c.Duration < time.Second || c.Warmup < time.Second {
		errs = append(errs, fmt.Errorf("duration (%s) and warm-up (%s) must be ≥ 1s",
			c.Duration, c.Warmup))
	}
	if c.Pairs < 0 || (c.Pairs > 0 && c.Slice < time.Second) {
		errs = append(errs, fmt.Errorf("pairs (%d) must be ≥ 0, and their runs (%s) ≥ 1s",
			c.Pairs, c.Slice))
	}
	if c.Rounds < 1 || c.Workers < 1 {
		errs = append(errs, fmt.Errorf("rounds (%d) and workers (%d) must be ≥ 1",
			c.Rounds, c.Workers))
	}
	return errors.Join(errs...)
}

// env is what every measurement shares.
type env struct {
	cfg   Config
	dir   string
	redis *redisenv.Server
}

// Run runs the benchmark and returns its report. Every process it started is stopped before it
// returns, also when ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, cfg Config) (report.Report, error) {
	if err := cfg.Validate(); err != nil {
		return report.Report{}, fmt.Errorf("runner: %w", err)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	dir, err := os.MkdirTemp(cfg.TempDir, "tollgate-bench-")
	if err != nil {
		return report.Report{}, fmt.Errorf("runner: %w", err)
	}
	defer os.RemoveAll(dir)
	// nginx workers run as nobody: they must traverse into every prefix
	if err := os.Chmod(dir, 0o755); err != nil {
		return report.Report{}, fmt.Errorf("runner: %w", err)
	}
	loadStart := loadAverage()
	e := &env{cfg: cfg, dir: dir}
	if e.redis, err = startRedis(ctx, dir); err != nil {
		return report.Report{}, err
	}
	defer e.redis.Stop()
	e.progress("redis-server pid %d on %s, seeded cluster %q and app %q",
		e.redis.PID(), e.redis.Addr(), redisenv.ClusterID, redisenv.AppID)
	var series []report.Series
	var paired report.Paired
	if !cfg.RulesOnly {
		series, err = e.rounds(ctx)
		if ctx.Err() != nil {
			return report.Report{}, fmt.Errorf("runner: %w", ctx.Err())
		}
		if err != nil {
			return report.Report{}, err
		}
		paired, err = e.paired(ctx)
		if ctx.Err() != nil {
			return report.Report{}, fmt.Errorf("runner: %w", ctx.Err())
		}
		if err != nil {
			return report.Report{}, fmt.Errorf("runner: %w", err)
		}
	}
	rules, err := e.rulesSection(ctx)
	if ctx.Err() != nil {
		return report.Report{}, fmt.Errorf("runner: %w", ctx.Err())
	}
	if err != nil {
		return report.Report{}, err
	}
	rep := report.New(Describe(cfg, loadStart), series, paired)
	rep.Rules = rules
	return rep, nil
}

func startRedis(ctx context.Context, dir string) (*redisenv.Server, error) {
	rdir := filepath.Join(dir, "redis")
	if err := os.Mkdir(rdir, 0o755); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	r, err := redisenv.Start(ctx, rdir)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if err := redisenv.Seed(ctx, r.Client()); err != nil {
		r.Stop()
		return nil, fmt.Errorf("runner: %w", err)
	}
	return r, nil
}

// rounds measures every variant once per round, interleaved: a b c d, a b c d, ...
func (e *env) rounds(ctx context.Context) ([]report.Series, error) {
	variants := nginxenv.Variants()
	series := make([]report.Series, len(variants))
	for i, v := range variants {
		series[i] = report.Series{Key: v.Key, Name: v.Name}
	}
	for round := 1; round <= e.cfg.Rounds; round++ {
		for i, v := range variants {
			s, err := e.measure(ctx, v, round)
			if err != nil {
				return nil, fmt.Errorf("runner: round %d, %s: %w", round, v.Label(), err)
			}
			series[i].Samples = append(series[i].Samples, s)
		}
	}
	return series, nil
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.cfg.Progress, "[%s] "+format+"\n",
		append([]any{time.Now().Format("15:04:05")}, args...)...)
}
