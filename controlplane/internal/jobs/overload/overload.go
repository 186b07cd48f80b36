// Package overload is the periodic overload-reduction job (Req 4.4, docs/design.md §3): it
// measures each cluster's usage and records it with overload_set, so that above 90 % the L2
// refill factor of P1-P3 falls linearly towards its emergency ratio (P0 never reduced). The
// record expires after a few intervals, so a stopped control plane cannot leave a cluster
// reduced.
package overload

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/controlplane/internal/jobs/usage"
)

// Threshold is the usage above which refill is reduced (fixed in redis-scripts/_common.lua).
const Threshold = 0.9

// Ledger records usage (implemented by *ledger.Ledger).
type Ledger interface {
	SetOverload(ctx context.Context, cluster string, usage float64, ttl time.Duration, nowUS int64) ([4]int64, error)
}

// Catalog lists the clusters (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
}

// Meter measures a cluster's usage (implemented by *usage.Meter).
type Meter interface {
	Measure(ctx context.Context, cluster string) (usage.Reading, bool, error)
}

// Stats are the job's counters.
type Stats struct {
	Runs    int64
	Factors map[string][4]int64 // per cluster: refill factors of P0-P3 in thousandths
}

// Job is the overload job.
type Job struct {
	cat   Catalog
	led   Ledger
	meter Meter
	ttl   time.Duration
	log   *slog.Logger

	mu    sync.Mutex
	stats Stats
}

// New returns the job; ttl is how long a recorded usage holds (e.g. three intervals).
func New(cat Catalog, led Ledger, meter Meter, ttl time.Duration, log *slog.Logger) *Job {
	if log == nil {
		log = slog.Default()
	}
	return &Job{cat: cat, led: led, meter: meter, ttl: ttl, log: log, stats: Stats{Factors: map[string][4]int64{}}}
}

// Name of the job.
func (j *Job) Name() string { return "overload" }

// Stats returns a copy of the counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats
	s.Factors = make(map[string][4]int64, len(j.stats.Factors))
	for k, v := range j.stats.Factors {
		s.Factors[k] = v
	}
	return s
}

// Tick measures every cluster and records its usage.
func (j *Job) Tick(ctx context.Context) error {
	clusters, err := j.cat.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("overload: %w", err)
	}
	var errs jobs.Errors
	for _, c := range clusters {
		r, ok, err := j.meter.Measure(ctx, c)
		if err != nil {
			errs.Add(err)
			continue
		}
		if !ok {
			continue
		}
		f, err := j.led.SetOverload(ctx, c, r.Usage, j.ttl, 0)
		if err != nil {
			errs.Add(fmt.Errorf("overload %s: %w", c, err))
			continue
		}
		j.mu.Lock()
		prev, had := j.stats.Factors[c]
		j.stats.Factors[c] = f
		j.mu.Unlock()
		if normal := [4]int64{1000, 1000, 1000, 1000}; f != prev && (f != normal || had) {
			j.log.Warn("overload refill factors changed", "cluster", c, "usage", r.Usage,
				"p1", f[1], "p2", f[2], "p3", f[3])
		}
	}
	j.mu.Lock()
	j.stats.Runs++
	j.mu.Unlock()
	return errs.Err()
}
