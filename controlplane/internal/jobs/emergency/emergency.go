// Package emergency manages a storage cluster's emergency mode (Req 6): manual activation and
// deactivation for the admin API, and the periodic job that activates it automatically when the
// measured usage exceeds the threshold (95 %) and records its expiry. The grant script and the
// gateways honour the end time themselves; the job only writes the history entry and the
// deactivation notice once it has passed. Every activation and deactivation is logged.
package emergency

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/ledger"
)

// Ledger runs the emergency scripts (implemented by *ledger.Ledger).
type Ledger interface {
	ReadL1(ctx context.Context, cluster string) (ledger.L1, error)
	ActivateEmergency(ctx context.Context, cluster string, a ledger.Activation, nowUS int64) (bool, int64, error)
	DeactivateEmergency(ctx context.Context, cluster string, d ledger.Deactivation, nowUS int64) (bool, error)
}

// Catalog lists the clusters (implemented by *store.Store).
type Catalog interface {
	ListClusters(ctx context.Context) ([]string, error)
}

// Meter measures a cluster's usage (implemented by *usage.Meter).
type Meter interface {
	Measure(ctx context.Context, cluster string) (usage.Reading, bool, error)
}

// DefaultDuration is how long an emergency lasts unless told otherwise (Req 6.5).
const DefaultDuration = 300 * time.Second

// Manager activates and deactivates emergencies and logs each change.
type Manager struct {
	led Ledger
	log *slog.Logger
}

// NewManager returns a manager.
func NewManager(led Ledger, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{led: led, log: log}
}

// Activate puts cluster in emergency mode for d (DefaultDuration if 0) on behalf of actor.
// It returns the end time.
func (m *Manager) Activate(ctx context.Context, cluster string, d time.Duration, reason, source, actor string) (time.Time, error) {
	if d == 0 {
		d = DefaultDuration
	}
	first, until, err := m.led.ActivateEmergency(ctx, cluster,
		ledger.Activation{Duration: d, Reason: reason, Source: source, Actor: actor}, 0)
	if err != nil {
		m.log.Warn("emergency activation refused", "cluster", cluster, "source", source, "actor", actor, "err", err)
		return time.Time{}, fmt.Errorf("emergency: activate %s: %w", cluster, err)
	}
	m.log.Warn("emergency mode activated", "cluster", cluster, "until", time.Unix(until, 0).UTC(),
		"reason", reason, "source", source, "actor", actor, "extended", !first)
	return time.Unix(until, 0), nil
}

// Deactivate ends cluster's emergency mode; it reports whether one was active.
func (m *Manager) Deactivate(ctx context.Context, cluster, reason, source, actor string) (bool, error) {
	return m.deactivate(ctx, cluster, ledger.Deactivation{Reason: reason, Source: source, Actor: actor})
}

// Expire ends cluster's emergency mode if its end time has passed (by Redis' clock).
func (m *Manager) Expire(ctx context.Context, cluster string) (bool, error) {
	return m.deactivate(ctx, cluster, ledger.Deactivation{Reason: "expired", Source: "expired",
		Actor: "controlplane", OnlyIfExpired: true})
}

func (m *Manager) deactivate(ctx context.Context, cluster string, d ledger.Deactivation) (bool, error) {
	ended, err := m.led.DeactivateEmergency(ctx, cluster, d, 0)
	if err != nil {
		return false, fmt.Errorf("emergency: deactivate %s: %w", cluster, err)
	}
	if ended {
		m.log.Warn("emergency mode ended", "cluster", cluster, "reason", d.Reason, "source", d.Source,
			"actor", d.Actor)
	}
	return ended, nil
}

// Options of the automatic job.
type Options struct {
	Threshold float64       // usage above which emergency activates, default 0.95
	Duration  time.Duration // of an automatic emergency, default DefaultDuration
}

// Stats are the job's counters.
type Stats struct {
	Runs, Activations, Expiries int64
	Usage                       map[string]float64 // last measured usage per cluster
}

// Job activates emergencies above the threshold and records expiries.
type Job struct {
	cat   Catalog
	led   Ledger
	meter Meter
	mgr   *Manager
	opts  Options

	mu    sync.Mutex
	stats Stats
}

// NewJob returns the automatic emergency job.
func NewJob(cat Catalog, led Ledger, meter Meter, mgr *Manager, o Options) *Job {
	if o.Threshold <= 0 {
		o.Threshold = 0.95
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	return &Job{cat: cat, led: led, meter: meter, mgr: mgr, opts: o, stats: Stats{Usage: map[string]float64{}}}
}

// Name of the job.
func (j *Job) Name() string { return "emergency" }

// Stats returns a copy of the counters.
func (j *Job) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats
	s.Usage = make(map[string]float64, len(j.stats.Usage))
	for k, v := range j.stats.Usage {
		s.Usage[k] = v
	}
	return s
}

// Tick expires ended emergencies and activates new ones where usage exceeds the threshold.
func (j *Job) Tick(ctx context.Context) error {
	err := jobs.EachCluster(ctx, j.cat.ListClusters, "emergency", j.cluster)
	j.mu.Lock()
	j.stats.Runs++
	j.mu.Unlock()
	return err
}

func (j *Job) cluster(ctx context.Context, c string) error {
	l1, err := j.led.ReadL1(ctx, c)
	if err != nil {
		return fmt.Errorf("emergency %s: %w", c, err)
	}
	active := l1.EmergencyMode
	if active {
		ended, err := j.mgr.Expire(ctx, c)
		if err != nil {
			return err
		}
		if ended {
			active = false
			j.count(func(s *Stats) { s.Expiries++ })
		}
	}
	r, ok, err := j.meter.Measure(ctx, c)
	if err != nil || !ok {
		return err
	}
	j.count(func(s *Stats) { s.Usage[c] = r.Usage })
	if active || r.Usage <= j.opts.Threshold {
		return nil
	}
	reason := fmt.Sprintf("auto: usage %.1f%% above %.1f%% over %s", 100*r.Usage, 100*j.opts.Threshold,
		r.Window.Round(time.Millisecond))
	if _, err := j.mgr.Activate(ctx, c, j.opts.Duration, reason, "auto", "controlplane"); err != nil {
		return err
	}
	j.count(func(s *Stats) { s.Activations++ })
	return nil
}

func (j *Job) count(f func(*Stats)) {
	j.mu.Lock()
	f(&j.stats)
	j.mu.Unlock()
}
