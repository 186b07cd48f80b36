// Package jobs runs the control plane's periodic jobs — each on its own interval, only while
// this replica is the elected leader, one tick at a time, each tick bounded by its interval.
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Job is one periodic task; Tick does one pass.
type Job interface {
	Name() string
	Tick(ctx context.Context) error
}

// Leader says whether this replica may run jobs (implemented by *leader.Elector).
type Leader interface {
	IsLeader() bool
}

// Scheduled is a job and its interval.
type Scheduled struct {
	Job   Job
	Every time.Duration
}

// Counts are a job's run and error counts.
type Counts struct {
	Runs, Errors, Skipped int64
}

type counter struct{ runs, errors, skipped atomic.Int64 }

// Runner runs scheduled jobs while Leader says so.
type Runner struct {
	leader Leader
	jobs   []Scheduled
	log    *slog.Logger
	counts map[string]*counter
}

// New returns a runner; jobs with a non-positive interval are left out.
func New(l Leader, log *slog.Logger, jobs ...Scheduled) *Runner {
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{leader: l, log: log, counts: map[string]*counter{}}
	for _, j := range jobs {
		if j.Every > 0 {
			r.jobs = append(r.jobs, j)
			r.counts[j.Job.Name()] = &counter{}
		}
	}
	return r
}

// Counts returns the counts of job name (zero for an unknown name).
func (r *Runner) Counts(name string) Counts {
	c, ok := r.counts[name]
	if !ok {
		return Counts{}
	}
	return Counts{Runs: c.runs.Load(), Errors: c.errors.Load(), Skipped: c.skipped.Load()}
}

// Run ticks every job on its interval until ctx is done.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, j := range r.jobs {
		wg.Add(1)
		go func(j Scheduled) {
			defer wg.Done()
			r.loop(ctx, j)
		}(j)
	}
	wg.Wait()
}

func (r *Runner) loop(ctx context.Context, j Scheduled) {
	t := time.NewTicker(j.Every)
	defer t.Stop()
	c := r.counts[j.Job.Name()]
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !r.leader.IsLeader() {
			c.skipped.Add(1)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, j.Every)
		start := time.Now()
		err := j.Job.Tick(tctx)
		cancel()
		c.runs.Add(1)
		if err != nil && ctx.Err() == nil {
			c.errors.Add(1)
			r.log.Warn("job failed", "job", j.Job.Name(), "err", clip(err), "took", time.Since(start))
		}
	}
}

// EachCluster calls fn for every cluster list returns, goes on after a cluster that failed, and
// returns the first failures joined (see Errors) (the per-cluster loop of the leader's jobs).
func EachCluster(ctx context.Context, list func(context.Context) ([]string, error), name string,
	fn func(context.Context, string) error) error {
	clusters, err := list(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var errs Errors
	for _, c := range clusters {
		errs.Add(fn(ctx, c))
	}
	return errs.Err()
}
