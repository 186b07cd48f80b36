// Package debt is the periodic debt-repayment job: for every app in debt it runs l2_refill, which
// pays debt with what would overflow the burst (Property 13) — so an idle app, which no grant
// refills, repays too.
package debt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"tollgate/controlplane/internal/jobs"
	"tollgate/internal/ledger"
)

// Ledger reads debts and refills (implemented by *ledger.Ledger).
type Ledger interface {
	Debts(ctx context.Context, cluster string, apps []string) (map[string]int64, error)
	Refill(ctx context.Context, cluster, app string, nowUS int64) (ledger.Refill, error)
}

// Catalog lists clusters and their apps (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
	ClusterApps(ctx context.Context, cluster string) ([]string, error)
}

// Stats are the job's counters.
type Stats struct {
	Runs          int64
	Paid          int64 // debt paid by the job's refills
	PrincipalPaid int64 // of which returned to L1 available
	InDebt        int   // apps in debt at the last run
}

// Job is the debt job.
type Job struct {
	cat Catalog
	led Ledger
	log *slog.Logger

	mu    sync.Mutex
	stats Stats
}

// New returns the job.
func New(cat Catalog, led Ledger, log *slog.Logger) *Job {
	if log == nil {
		log = slog.Default()
	}
	return &Job{cat: cat, led: led, log: log}
}

// Name of the job.
func (j *Job) Name() string { return "debt" }

// Stats returns the counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stats
}

// Tick refills every app in debt.
func (j *Job) Tick(ctx context.Context) error {
	clusters, err := j.cat.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("debt: %w", err)
	}
	var errs jobs.Errors
	inDebt := 0
	for _, c := range clusters {
		apps, err := j.cat.ClusterApps(ctx, c)
		if err != nil {
			errs.Add(fmt.Errorf("debt %s: %w", c, err))
			continue
		}
		debts, err := j.led.Debts(ctx, c, apps)
		if err != nil {
			errs.Add(fmt.Errorf("debt %s: %w", c, err))
			continue
		}
		inDebt += len(debts)
		for app := range debts {
			r, err := j.led.Refill(ctx, c, app, 0)
			if err != nil {
				errs.Add(fmt.Errorf("debt %s/%s: %w", c, app, err))
				continue
			}
			j.mu.Lock()
			j.stats.Paid += r.Paid
			j.stats.PrincipalPaid += r.PrincipalPaid
			j.mu.Unlock()
			if r.Debt == 0 && r.Paid > 0 {
				j.log.Info("debt repaid", "cluster", c, "app", app)
			}
		}
	}
	j.mu.Lock()
	j.stats.Runs++
	j.stats.InDebt = inDebt
	j.mu.Unlock()
	return errs.Err()
}
