// Package debt is the periodic debt-repayment job: for every app in debt it runs l2_refill, which
// pays debt with what would overflow the burst (Property 13) — so an idle app, which no grant
// refills, repays too. The apps in debt are the cluster's debtors set, kept by the scripts (a
// loan adds the app, the refill that clears the debt removes it): a tick's work is the number of
// apps in debt, not the number of apps.
package debt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"tollgate/controlplane/internal/jobs"
	"tollgate/internal/ledger"
)

// Ledger reads the debtors and refills (implemented by *ledger.Ledger).
type Ledger interface {
	Debtors(ctx context.Context, cluster string) ([]string, error)
	Refill(ctx context.Context, cluster, app string, nowUS int64) (ledger.Refill, error)
}

// Catalog lists the clusters (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
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
		debtors, err := j.led.Debtors(ctx, c)
		if err != nil {
			errs.Add(fmt.Errorf("debt %s: %w", c, err))
			continue
		}
		for _, app := range debtors {
			r, err := j.led.Refill(ctx, c, app, 0)
			if errors.Is(err, ledger.ErrUnknownApp) {
				continue // deleted: the refill took it out of the set
			}
			inDebt++
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
