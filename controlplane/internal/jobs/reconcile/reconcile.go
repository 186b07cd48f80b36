// Package reconcile is the periodic reconciliation job (Req 7): per app it reaps the leases of
// silent nodes, measures drift and corrects it above the tolerance, and restarts the window
// (l2_reconcile); per cluster it restores allocated + borrowed = capacity - available
// (Property 7). Corrections are counted and logged.
//
// A tick's work is bounded by the cluster's activity, not by its number of apps: it visits
// the apps of the cluster's active set (those gateways granted or reported lately, every
// tick), plus a page of SweepPerTick apps of the cluster's allocation set at a cursor that
// resumes next tick, so that every app is still visited once per cycle of
// ceil(apps / SweepPerTick) ticks. The L1 check is spread over the same cycle: each page's
// quotas and loans are summed by l1_tally, and at the end of the cycle l1_correct compares the
// sums with L1 — unless an allocation changed meanwhile (the cycle's sums are then discarded and
// the next cycle checks again).
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

// Catalog lists the clusters (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
}

// Ledger runs the reconciliation scripts and reads the cluster indexes (implemented by
// *ledger.Ledger).
type Ledger interface {
	ReconcileApp(ctx context.Context, cluster, app string, tolerance float64, reapAfter time.Duration, nowUS int64) (ledger.AppReconcile, error)
	ActiveApps(ctx context.Context, cluster string) ([]string, error)
	AllocPage(ctx context.Context, cluster string, from, n int64) ([]string, error)
	ReadRevs(ctx context.Context, cluster string) (ledger.Revs, error)
	TallyL1(ctx context.Context, cluster string, apps []string) (ledger.Tally, error)
	CorrectL1(ctx context.Context, cluster string, revs ledger.Revs, sums ledger.Tally) (ledger.L1Correction, error)
}

// Options of the job.
type Options struct {
	Tolerance    float64       // drift above which a ledger is corrected, default 0.1
	ReapAfter    time.Duration // silence after which a node's leases are reaped, default 30 s
	SweepPerTick int           // apps of the allocation set visited per tick and cluster, default 2000
	Logger       *slog.Logger
}

// tallyChunk is the number of apps one l1_tally script sums (each script stays short).
const tallyChunk = 100

// Stats are cumulative counters of the job, and the drift seen lately.
type Stats struct {
	Runs               int64
	AppCorrections     int64 // ledgers corrected for drift above the tolerance
	ClusterCorrections int64 // L1 hashes corrected
	ReapedNodes        int64
	ReapedTokens       int64
	Visits             int64 // l2_reconcile runs (active apps and the sweep)
	Deactivated        int64 // apps that left the active set
	Cycles             int64 // sweeps of a whole allocation set completed
	L1Checks           int64 // of which the L1 sums were compared (no allocation changed meanwhile)
	// "<cluster>/<app>" -> drift of the app's last window, for apps whose window had grants or
	// drift; an app leaves the map when it leaves the active set or has no L2 state
	Drift map[string]float64
}

// sweep is a cluster's cursor over its allocation set and the L1 sums of the current cycle.
type sweep struct {
	next int64 // rank of the next page
	revs ledger.Revs
	sums ledger.Tally
}

// Job is the reconciliation job.
type Job struct {
	cat  Catalog
	led  Ledger
	opts Options

	sweeps map[string]*sweep // only Tick uses it (one tick at a time)

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
	if o.SweepPerTick <= 0 {
		o.SweepPerTick = 2000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Job{cat: cat, led: led, opts: o, sweeps: map[string]*sweep{}, stats: Stats{Drift: map[string]float64{}}}
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

// Tick reconciles every cluster's active apps and the next page of its sweep.
func (j *Job) Tick(ctx context.Context) error {
	listed := map[string]bool{}
	err := jobs.EachCluster(ctx, func(ctx context.Context) ([]string, error) {
		cs, err := j.cat.ListClusters(ctx)
		for _, c := range cs {
			listed[c] = true
		}
		return cs, err
	}, "reconcile", j.cluster)
	if len(listed) > 0 {
		for c := range j.sweeps {
			if !listed[c] {
				delete(j.sweeps, c)
			}
		}
	}
	j.mu.Lock()
	j.stats.Runs++
	j.mu.Unlock()
	return err
}

func (j *Job) cluster(ctx context.Context, c string) error {
	var errs jobs.Errors
	active, err := j.led.ActiveApps(ctx, c)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", c, err)
	}
	visited := make(map[string]bool, len(active))
	for _, a := range active {
		visited[a] = true
		errs.Add(j.app(ctx, c, a))
	}
	errs.Add(j.sweep(ctx, c, visited))
	return errs.Err()
}

func (j *Job) app(ctx context.Context, c, a string) error {
	r, err := j.led.ReconcileApp(ctx, c, a, j.opts.Tolerance, j.opts.ReapAfter, 0)
	if errors.Is(err, ledger.ErrUnknownApp) {
		j.mu.Lock()
		delete(j.stats.Drift, c+"/"+a)
		j.mu.Unlock()
		return nil // indexed but without L2 state (deleted): it left the indexes
	}
	if err != nil {
		return fmt.Errorf("reconcile %s/%s: %w", c, a, err)
	}
	j.noteApp(c, a, r)
	return nil
}

// sweep visits the next page of the cluster's allocation set (the apps not visited as active
// this tick), adds the page to the cycle's L1 sums, and at the end of the set compares them with
// L1 and starts the next cycle.
func (j *Job) sweep(ctx context.Context, c string, visited map[string]bool) error {
	sw := j.sweeps[c]
	if sw == nil {
		sw = &sweep{}
		j.sweeps[c] = sw
	}
	if sw.next == 0 {
		revs, err := j.led.ReadRevs(ctx, c)
		if err != nil {
			return fmt.Errorf("reconcile %s sweep: %w", c, err)
		}
		sw.revs, sw.sums = revs, ledger.Tally{}
	}
	n := int64(j.opts.SweepPerTick)
	page, err := j.led.AllocPage(ctx, c, sw.next, n)
	if err != nil {
		return fmt.Errorf("reconcile %s sweep: %w", c, err)
	}
	var errs jobs.Errors
	for _, a := range page {
		if !visited[a] {
			errs.Add(j.app(ctx, c, a))
		}
	}
	for i := 0; i < len(page); i += tallyChunk {
		t, err := j.led.TallyL1(ctx, c, page[i:min(i+tallyChunk, len(page))])
		if err != nil {
			sw.next = 0 // the cycle's sums miss a page: start over
			errs.Add(fmt.Errorf("reconcile %s L1: %w", c, err))
			return errs.Err()
		}
		sw.sums.Allocated += t.Allocated
		sw.sums.Borrowed += t.Borrowed
		sw.sums.Fixed += t.Fixed
	}
	sw.next += int64(len(page))
	if int64(len(page)) == n {
		return errs.Err() // more to come next tick
	}
	sw.next = 0
	r, err := j.led.CorrectL1(ctx, c, sw.revs, sw.sums)
	if err != nil {
		errs.Add(fmt.Errorf("reconcile %s L1: %w", c, err))
		return errs.Err()
	}
	j.mu.Lock()
	j.stats.Cycles++
	if r.Applied {
		j.stats.L1Checks++
	}
	if r.Corrected {
		j.stats.ClusterCorrections++
	}
	j.mu.Unlock()
	if r.Corrected {
		j.opts.Logger.Warn("L1 corrected", "cluster", c,
			"allocated", r.OldAllocated, "allocated_now", r.Allocated,
			"borrowed", r.OldBorrowed, "borrowed_now", r.Borrowed,
			"available", r.OldAvailable, "available_now", r.Available,
			"borrowed_checked", r.BorrowedChecked)
	}
	return errs.Err()
}

func (j *Job) noteApp(c, a string, r ledger.AppReconcile) {
	j.mu.Lock()
	j.stats.Visits++
	switch {
	case r.Deactivated:
		j.stats.Deactivated++
		delete(j.stats.Drift, c+"/"+a)
	case r.Granted != 0 || r.Imbalance != 0:
		j.stats.Drift[c+"/"+a] = r.Drift()
	}
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
