// Package reconcile is the periodic reconciliation job (Req 7): per app it reaps the leases of
// silent nodes, measures drift and corrects it above the tolerance, and restarts the window
// (l2_reconcile); per cluster it restores allocated + borrowed = capacity - available
// (l1_reconcile, Property 7). Corrections are counted and logged.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/internal/ledger"
)

// Catalog lists clusters and their apps (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
	ClusterApps(ctx context.Context, cluster string) ([]string, error)
}

// Ledger runs the reconciliation scripts (implemented by *ledger.Ledger).
type Ledger interface {
	ReconcileApp(ctx context.Context, cluster, app string, tolerance float64, reapAfter time.Duration, nowUS int64) (ledger.AppReconcile, error)
	ReconcileCluster(ctx context.Context, cluster string, apps []string) (ledger.ClusterReconcile, error)
}

// Options of the job.
type Options struct {
	Tolerance float64       // drift above which a ledger is corrected, default 0.1
	ReapAfter time.Duration // silence after which a node's leases are reaped, default 30 s
	Logger    *slog.Logger
}

// Stats are cumulative counters of the job, and the drift seen by its last run.
type Stats struct {
	Runs               int64
	AppCorrections     int64 // ledgers corrected for drift above the tolerance
	ClusterCorrections int64 // L1 hashes corrected
	ReapedNodes        int64
	ReapedTokens       int64
	Drift              map[string]float64 // "<cluster>/<app>" -> drift of the last window
}

// Job is the reconciliation job.
type Job struct {
	cat  Catalog
	led  Ledger
	opts Options

	mu    sync.Mutex
	stats Stats
}

// New returns the job.
func New(cat Catalog, led Ledger, o Options) *Job {
	if o.Tolerance <= 0 {
		o.Tolerance = 0.1
	}
	if o.ReapAfter <= 0 {
		o.ReapAfter = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Job{cat: cat, led: led, opts: o, stats: Stats{Drift: map[string]float64{}}}
}

// Name of the job.
func (j *Job) Name() string { return "reconcile" }

// Stats returns a copy of the counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats
	s.Drift = make(map[string]float64, len(j.stats.Drift))
	for k, v := range j.stats.Drift {
		s.Drift[k] = v
	}
	return s
}

// Tick reconciles every app of every cluster, then every cluster's L1.
func (j *Job) Tick(ctx context.Context) error {
	err := jobs.EachCluster(ctx, j.cat.ListClusters, "reconcile", j.cluster)
	j.mu.Lock()
	j.stats.Runs++
	j.mu.Unlock()
	return err
}

func (j *Job) cluster(ctx context.Context, c string) error {
	apps, err := j.cat.ClusterApps(ctx, c)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", c, err)
	}
	var errs jobs.Errors
	for _, a := range apps {
		r, err := j.led.ReconcileApp(ctx, c, a, j.opts.Tolerance, j.opts.ReapAfter, 0)
		if errors.Is(err, ledger.ErrUnknownApp) {
			continue // indexed but without L2 state: nothing to reconcile
		}
		if err != nil {
			errs.Add(fmt.Errorf("reconcile %s/%s: %w", c, a, err))
			continue
		}
		j.noteApp(c, a, r)
	}
	r, err := j.led.ReconcileCluster(ctx, c, apps)
	if errors.Is(err, ledger.ErrStaleAppList) { // an app was added meanwhile: list again, once
		if apps, err = j.cat.ClusterApps(ctx, c); err == nil {
			r, err = j.led.ReconcileCluster(ctx, c, apps)
		}
	}
	if err != nil {
		errs.Add(fmt.Errorf("reconcile %s L1: %w", c, err))
		return errs.Err()
	}
	if r.Corrected {
		j.mu.Lock()
		j.stats.ClusterCorrections++
		j.mu.Unlock()
		j.opts.Logger.Warn("L1 corrected", "cluster", c,
			"allocated", r.OldAllocated, "allocated_now", r.Allocated,
			"borrowed", r.OldBorrowed, "borrowed_now", r.Borrowed,
			"available", r.OldAvailable, "available_now", r.Available)
	}
	return errs.Err()
}

func (j *Job) noteApp(c, a string, r ledger.AppReconcile) {
	j.mu.Lock()
	j.stats.Drift[c+"/"+a] = r.Drift()
	j.stats.ReapedNodes += r.ReapedNodes
	j.stats.ReapedTokens += r.ReapedTokens
	if r.Corrected {
		j.stats.AppCorrections++
	}
	j.mu.Unlock()
	if r.Corrected {
		j.opts.Logger.Warn("drift corrected", "cluster", c, "app", a, "drift", r.Drift(),
			"tolerance", j.opts.Tolerance, "imbalance", r.Imbalance, "granted", r.Granted)
	}
	if r.ReapedNodes > 0 {
		j.opts.Logger.Info("leases of silent nodes reaped", "cluster", c, "app", a,
			"nodes", r.ReapedNodes, "tokens", r.ReapedTokens)
	}
}
