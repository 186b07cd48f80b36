package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs"
	"tollgate/controlplane/internal/jobs/reconcile"
	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// One pass corrects a ledger that drifted beyond the tolerance, leaves one within it alone,
// reaps a node that went silent, resets the period counters and repairs a corrupted L1.
func TestTickCorrectsReapsAndRepairs(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 1_000_000)
	f.App("c", "lost", 1000, 10_000, 1, 0)
	f.App("c", "fine", 1000, 10_000, 1, 0)
	f.App("c", "silent", 1000, 10_000, 1, 0)
	now := f.RedisNowUS()
	// "lost": a node took 5000 tokens, then restarted and reports holding nothing
	g, err := f.Ledger.Grant(f.Ctx, "c", "lost", "n1", 5000, 1, now)
	if err != nil || g.Granted != 5000 {
		t.Fatalf("grant %+v %v", g, err)
	}
	if _, err := f.Ledger.Report(f.Ctx, "c", "lost", "n1", ledger.Report{Seq: 1, Consumed: 100, Requests: 100}, now); err != nil {
		t.Fatal(err)
	}
	// "fine": granted 5000, 4990 accounted for: 0.2 % drift, under the 10 % tolerance
	if _, err := f.Ledger.Grant(f.Ctx, "c", "fine", "n1", 5000, 1, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Report(f.Ctx, "c", "fine", "n1", ledger.Report{Seq: 1, Consumed: 990, Requests: 9, Held: 4000}, now); err != nil {
		t.Fatal(err)
	}
	// "silent": a node last seen a minute ago, holding 300 tokens
	old := now - 60_000_000
	if _, err := f.Ledger.Grant(f.Ctx, "c", "silent", "gone", 300, 1, old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Report(f.Ctx, "c", "silent", "gone", ledger.Report{Seq: 1, Held: 300}, old); err != nil {
		t.Fatal(err)
	}
	f.RDB.HIncrBy(f.Ctx, keys.L1("c"), "available", -77) // corrupt L1

	job := reconcile.New(f.Store, f.Ledger, reconcile.Options{Tolerance: 0.1, ReapAfter: 30 * time.Second, Logger: quiet()})
	if err := job.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	s := job.Stats()
	if s.Runs != 1 || s.AppCorrections != 1 || s.ClusterCorrections != 1 || s.ReapedNodes != 1 || s.ReapedTokens != 300 {
		t.Fatalf("stats %+v", s)
	}
	if d := s.Drift["c/lost"]; d < 0.97 || d > 0.99 {
		t.Fatalf("drift of lost = %v, want 4900/5000", d)
	}
	if d := s.Drift["c/fine"]; d != 0.002 {
		t.Fatalf("drift of fine = %v, want 0.002", d)
	}
	stats, _ := f.RDB.HGetAll(f.Ctx, keys.Stats("c", "lost")).Result()
	if stats["correction_count"] != "1" || stats["period_consumed"] != "0" || stats["last_period_consumed"] != "100" {
		t.Fatalf("stats of lost: %v", stats)
	}
	if n, _ := f.RDB.HLen(f.Ctx, keys.Leases("c", "silent")).Result(); n != 0 {
		t.Fatalf("silent node's ledger has %d fields", n)
	}
	l1, _ := f.Ledger.ReadL1(f.Ctx, "c")
	if l1.Allocated+l1.Borrowed != l1.Capacity-l1.Available {
		t.Fatalf("L1 not repaired: %+v", l1)
	}
	// a second pass finds nothing more to correct
	if err := job.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if s2 := job.Stats(); s2.AppCorrections != 1 || s2.ClusterCorrections != 1 || s2.Runs != 2 {
		t.Fatalf("second pass: %+v", s2)
	}
}

// failingLedger fails every app's reconciliation.
type failingLedger struct{ reconcile.Ledger }

func (failingLedger) ReconcileApp(context.Context, string, string, float64, time.Duration, int64) (ledger.AppReconcile, error) {
	return ledger.AppReconcile{}, errors.New("NOSCRIPT " + strings.Repeat("x", 200))
}

// A tick over 2,000 failing apps returns a few lines (the first failures and a count), not a
// line per app, and the runner logs it clipped.
func TestFailingTickLogsABoundedLine(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 100_000_000)
	for i := 0; i < 2000; i++ {
		f.App("c", fmt.Sprintf("a%04d", i), 1, 1, 0, 0)
	}
	j := reconcile.New(f.Store, failingLedger{f.Ledger}, reconcile.Options{SweepPerTick: 2000, Logger: quiet()})
	err := j.Tick(f.Ctx)
	if err == nil {
		t.Fatal("a tick where every app fails returned nil")
	}
	if n := len(err.Error()); n > 4*jobs.MaxErrors*300 {
		t.Fatalf("the error of one tick is %d bytes", n)
	}
	if !strings.Contains(err.Error(), "(and 1995 more failures)") {
		t.Fatalf("error does not count the failures left out: %.500s", err)
	}
}
