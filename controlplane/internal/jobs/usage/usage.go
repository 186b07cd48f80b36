// Package usage measures a storage cluster's usage: the rate of its reported consumption (the
// stats hashes' total_consumed, fail-open consumption included) over the time between two
// measurements, divided by its capacity (docs/design.md §3, "Overload").
//
// The consumption is the cluster's totals hash, which l3_report increments with every app's
// (one read per cluster whatever its number of apps). A cumulative total is read rather than
// the period counters because reconciliation resets those every period: a difference of
// total_consumed is the consumption between two measurements whatever resets happened in between.
package usage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"tollgate/controlplane/internal/clock"
	"tollgate/internal/ledger"
)

// Source reads consumption and capacity (implemented by *ledger.Ledger).
type Source interface {
	ClusterTotals(ctx context.Context, cluster string) (ledger.Totals, error)
	ReadL1(ctx context.Context, cluster string) (ledger.L1, error)
}

// Reading is one measurement.
type Reading struct {
	Rate     float64       // tokens per second over the window
	Capacity int64         // tokens per second
	Usage    float64       // Rate / Capacity
	Window   time.Duration // time since the previous measurement
}

type sample struct {
	at    time.Time
	total int64
}

// Meter keeps the previous sample per cluster; each Measure is a window since the last one.
type Meter struct {
	src   Source
	clock clock.Clock

	mu   sync.Mutex
	last map[string]sample
}

// NewMeter returns a meter; a nil clock is the real one.
func NewMeter(src Source, c clock.Clock) *Meter {
	if c == nil {
		c = clock.Real{}
	}
	return &Meter{src: src, clock: c, last: map[string]sample{}}
}

// Measure returns the usage of cluster since the previous call. ok is false for the first call,
// after a counter went back (Redis restarted empty) or when no time has passed.
func (m *Meter) Measure(ctx context.Context, cluster string) (Reading, bool, error) {
	l1, err := m.src.ReadL1(ctx, cluster)
	if err != nil {
		return Reading{}, false, fmt.Errorf("usage %s: %w", cluster, err)
	}
	t, err := m.src.ClusterTotals(ctx, cluster)
	if err != nil {
		return Reading{}, false, fmt.Errorf("usage %s: %w", cluster, err)
	}
	total := t.Consumed
	now := m.clock.Now()
	m.mu.Lock()
	prev, seen := m.last[cluster]
	m.last[cluster] = sample{at: now, total: total}
	m.mu.Unlock()
	dt := now.Sub(prev.at)
	if !seen || total < prev.total || dt <= 0 || l1.Capacity <= 0 {
		return Reading{}, false, nil
	}
	rate := float64(total-prev.total) / dt.Seconds()
	return Reading{Rate: rate, Capacity: l1.Capacity, Usage: rate / float64(l1.Capacity), Window: dt}, true, nil
}
