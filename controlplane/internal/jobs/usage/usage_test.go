package usage_test

import (
	"context"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/ledger"
	"tollgate/internal/testutil"
)

type fakes struct {
	total int64
}

func (f *fakes) ClusterTotals(context.Context, string) (ledger.Totals, error) {
	return ledger.Totals{Consumed: f.total}, nil
}
func (f *fakes) ReadL1(context.Context, string) (ledger.L1, error) {
	return ledger.L1{Capacity: 1000}, nil
}

// The first measurement only sets the baseline; then usage is the consumption between two
// measurements over their distance in time, per capacity; a counter that went back (Redis
// restarted empty) starts a new baseline instead of a negative reading.
func TestMeasure(t *testing.T) {
	f := &fakes{total: 5000}
	c := testutil.NewClock(time.Unix(0, 0))
	m := usage.NewMeter(f, c)
	if _, ok, err := m.Measure(context.Background(), "c"); ok || err != nil {
		t.Fatalf("first measurement: ok=%v err=%v", ok, err)
	}
	f.total += 1900
	c.Advance(2 * time.Second)
	r, ok, err := m.Measure(context.Background(), "c")
	if !ok || err != nil || r.Rate != 950 || r.Usage != 0.95 || r.Window != 2*time.Second {
		t.Fatalf("reading %+v ok=%v err=%v", r, ok, err)
	}
	f.total = 10
	c.Advance(time.Second)
	if _, ok, _ := m.Measure(context.Background(), "c"); ok {
		t.Fatal("a counter that went back gave a reading")
	}
	f.total += 500
	c.Advance(time.Second)
	if r, ok, _ := m.Measure(context.Background(), "c"); !ok || r.Usage != 0.5 {
		t.Fatalf("after the reset: %+v %v", r, ok)
	}
	if _, ok, _ := m.Measure(context.Background(), "c"); ok {
		t.Fatal("no time passed, yet a reading")
	}
}
