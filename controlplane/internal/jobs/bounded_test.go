package jobs_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs/debt"
	"tollgate/controlplane/internal/jobs/reconcile"
	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// commands is the number of commands Redis executed, without the measurement's own and a new
// connection's handshake, and their list.
func commands(t *testing.T, f *testutil.Fixture) (int64, string) {
	return testutil.WorkCalls(testutil.CommandCalls(t, f.RDB), testutil.Housekeeping...)
}

// activeCluster creates cluster c with n apps (ids "app-NNNNN"), then gives the first `active`
// of them (ids "act-NN", which sort first) traffic: a grant and a report on node n1, and to
// every other active app a loan (debt). Returns the fixture.
func activeCluster(t *testing.T, n, active int) *testutil.Fixture {
	t.Helper()
	f := testutil.NewFixture(t)
	f.Cluster("c", 1_000_000_000)
	for i := 0; i < active; i++ {
		f.App("c", fmt.Sprintf("act-%02d", i), 10, 100, 1, 1000)
	}
	for i := 0; i < n-active; i++ {
		f.App("c", fmt.Sprintf("app-%05d", i), 10, 100, 1, 0)
	}
	for i := 0; i < active; i++ {
		id := fmt.Sprintf("act-%02d", i)
		want := int64(50)
		if i%2 == 1 {
			want = 300 // more than the burst: borrows, owes
		}
		if g, err := f.Ledger.Grant(f.Ctx, "c", id, "n1", want, want, 0); err != nil || g.Granted != want {
			t.Fatalf("grant %s: %+v %v", id, g, err)
		}
		f.Consume("c", id, "n1", 10)
	}
	return f
}

// tick runs one tick of the reconcile, debt and usage jobs and returns the commands it took.
func tick(t *testing.T, f *testutil.Fixture, rec *reconcile.Job, dj *debt.Job, m *usage.Meter) (int64, string) {
	t.Helper()
	if err := f.RDB.ConfigResetStat(f.Ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if err := dj.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Measure(f.Ctx, "c"); err != nil {
		t.Fatal(err)
	}
	return commands(t, f)
}

// One tick of the reconcile, debt and usage jobs costs the same number of Redis commands with
// 100 or 5,000 apps configured when the same 10 apps are active: the work follows the active
// apps, the apps in debt and a fixed sweep page, not the number of apps.
func TestJobTickIsBoundedByActivity(t *testing.T) {
	run := func(n int) (int64, string) {
		f := activeCluster(t, n, 10)
		rec := reconcile.New(f.Store, f.Ledger, reconcile.Options{SweepPerTick: 50, Logger: quiet()})
		dj := debt.New(f.Store, f.Ledger, quiet())
		m := usage.NewMeter(f.Ledger, nil)
		tick(t, f, rec, dj, m) // the first tick (and the first measurement) out of the count
		return tick(t, f, rec, dj, m)
	}
	small, smallPer := run(100)
	large, largePer := run(5000)
	t.Logf("commands of one tick: %d with 100 apps, %d with 5,000", small, large)
	if small == 0 || large > small+small/20 {
		t.Fatalf("one tick: %d commands with 100 apps (%s), %d with 5,000 (%s)", small, smallPer, large, largePer)
	}
}

// An app with debt that no gateway uses any more is repaid by the debt job (it is in the
// cluster's debtors set), and leaves the set once the debt is paid.
func TestIdleDebtorIsRepaid(t *testing.T) {
	f := activeCluster(t, 300, 2) // act-01 owes
	if ok, _ := f.RDB.SIsMember(f.Ctx, keys.Debtors("c"), "act-01").Result(); !ok {
		t.Fatal("a borrowing grant did not add the app to the debtors")
	}
	f.RDB.ZRem(f.Ctx, keys.Active("c"), "act-01") // idle: no longer active
	f.RDB.HSet(f.Ctx, keys.L2("c", "act-01"), "last_refill_us", f.RedisNowUS()-60_000_000)
	dj := debt.New(f.Store, f.Ledger, quiet())
	if err := dj.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	l2, _ := f.Ledger.ReadL2(f.Ctx, "c", "act-01")
	if s := dj.Stats(); s.Paid == 0 || l2.Debt != 0 || l2.Borrowed != 0 {
		t.Fatalf("stats %+v, L2 %+v", s, l2)
	}
	if in, _ := f.RDB.SIsMember(f.Ctx, keys.Debtors("c"), "act-01").Result(); in {
		t.Fatal("act-01 left in the debtors set after repayment")
	}
}

// With 3,000 apps and a sweep of 50 apps per tick, drift on an active app (outside the sweep's
// page) is corrected at the first tick, and the leases of an active app's silent node are
// reaped, after which that app leaves the active set.
func TestActiveAppsReconciledEveryTick(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 1_000_000_000)
	for i := 0; i < 3000; i++ {
		f.App("c", fmt.Sprintf("app-%05d", i), 10, 100, 1, 0)
	}
	f.App("c", "zz-lost", 10, 10_000, 1, 0)
	f.App("c", "zz-silent", 10, 10_000, 1, 0)
	now := f.RedisNowUS()
	// zz-lost: a node took 5000 tokens, then restarted and reports holding nothing
	if _, err := f.Ledger.Grant(f.Ctx, "c", "zz-lost", "n1", 5000, 1, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Report(f.Ctx, "c", "zz-lost", "n1", ledger.Report{Seq: 1, Consumed: 100, Requests: 100}, now); err != nil {
		t.Fatal(err)
	}
	// zz-silent: a node last seen a minute ago, holding 300 tokens
	old := now - 60_000_000
	if _, err := f.Ledger.Grant(f.Ctx, "c", "zz-silent", "gone", 300, 1, old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Report(f.Ctx, "c", "zz-silent", "gone", ledger.Report{Seq: 1, Held: 300}, old); err != nil {
		t.Fatal(err)
	}
	rec := reconcile.New(f.Store, f.Ledger, reconcile.Options{SweepPerTick: 50, ReapAfter: 30 * time.Second, Logger: quiet()})
	if err := rec.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	s := rec.Stats()
	if s.AppCorrections != 1 || s.ReapedNodes != 1 || s.ReapedTokens != 300 {
		t.Fatalf("stats %+v", s)
	}
	if n, _ := f.RDB.HLen(f.Ctx, keys.Leases("c", "zz-silent")).Result(); n != 0 {
		t.Fatalf("silent node's ledger has %d fields", n)
	}
	act, _ := f.Ledger.ActiveApps(f.Ctx, "c")
	if len(act) != 1 || act[0] != "zz-lost" || s.Deactivated != 1 {
		t.Fatalf("active after the tick: %v (deactivated %d), want only zz-lost", act, s.Deactivated)
	}
	if s.Visits > 2+50 {
		t.Fatalf("one tick visited %d apps", s.Visits)
	}
}

// Apps that never had traffic are reached by the sweep: with 230 apps and 50 per tick, every
// app has been reconciled after 5 ticks, not before; the L1 check, spread over the cycle,
// corrects a corrupted L1 at the end of it. A cycle during which an allocation changed is not
// used: the next one corrects.
func TestSweepReachesEveryAppAndChecksL1(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 1_000_000_000)
	const n = 230
	for i := 0; i < n; i++ {
		f.App("c", fmt.Sprintf("app-%05d", i), 10, 100, 1, 0)
	}
	reconciled := func() int {
		c := 0
		for i := 0; i < n; i++ {
			if v, _ := f.RDB.HGet(f.Ctx, keys.Stats("c", fmt.Sprintf("app-%05d", i)), "last_reconcile").Result(); v != "" {
				c++
			}
		}
		return c
	}
	f.RDB.HIncrBy(f.Ctx, keys.L1("c"), "available", -77) // corrupt L1
	rec := reconcile.New(f.Store, f.Ledger, reconcile.Options{SweepPerTick: 50, Logger: quiet()})
	for i := 1; i <= 5; i++ {
		if got := rec.Stats().ClusterCorrections; got != 0 {
			t.Fatalf("L1 corrected before the end of the cycle (tick %d)", i)
		}
		if err := rec.Tick(f.Ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := reconciled(), min(50*i, n); got != want {
			t.Fatalf("after %d ticks %d apps reconciled, want %d", i, got, want)
		}
	}
	if s := rec.Stats(); s.Cycles != 1 || s.L1Checks != 1 || s.ClusterCorrections != 1 {
		t.Fatalf("after one cycle: %+v", s)
	}
	l1, _ := f.Ledger.ReadL1(f.Ctx, "c")
	if l1.Allocated != 10*n || l1.Available != l1.Capacity-l1.Allocated-l1.Borrowed {
		t.Fatalf("L1 not repaired: %+v", l1)
	}
	// in the middle of the next cycle an allocation changes, and L1 is corrupted again
	for i := 0; i < 5; i++ {
		if i == 2 {
			f.App("c", "app-00001", 20, 100, 1, 0)
			f.RDB.HIncrBy(f.Ctx, keys.L1("c"), "available", -5)
		}
		if err := rec.Tick(f.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := rec.Stats(); s.Cycles != 2 || s.L1Checks != 1 || s.ClusterCorrections != 1 {
		t.Fatalf("a cycle that saw an allocation change was used: %+v", s)
	}
	for i := 0; i < 5; i++ {
		if err := rec.Tick(f.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	l1, _ = f.Ledger.ReadL1(f.Ctx, "c")
	if s := rec.Stats(); s.Cycles != 3 || s.L1Checks != 2 || s.ClusterCorrections != 2 ||
		l1.Allocated != 10*n+10 || l1.Available != l1.Capacity-l1.Allocated-l1.Borrowed {
		t.Fatalf("the next cycle: %+v, L1 %+v", s, l1)
	}
}

// Debt written before the debtors set existed (or by hand) is found by the reconcile sweep,
// which adds the app to the set, and the debt job then repays it.
func TestSweepFindsDebtOutsideTheIndex(t *testing.T) {
	f := activeCluster(t, 120, 0)
	// a full bucket refilled just now: the sweep's own refill has nothing to repay with
	f.RDB.HSet(f.Ctx, keys.L2("c", "app-00077"), "debt", 120, "borrowed", 100,
		"last_refill_us", f.RedisNowUS()+5_000_000)
	f.RDB.HIncrBy(f.Ctx, keys.L1("c"), "borrowed", 100)
	f.RDB.HIncrBy(f.Ctx, keys.L1("c"), "available", -100)
	dj := debt.New(f.Store, f.Ledger, quiet())
	if err := dj.Tick(f.Ctx); err != nil || dj.Stats().InDebt != 0 {
		t.Fatalf("the debt job found %d debtors before the sweep (%v)", dj.Stats().InDebt, err)
	}
	rec := reconcile.New(f.Store, f.Ledger, reconcile.Options{SweepPerTick: 50, Logger: quiet()})
	for i := 0; i < 3; i++ { // 120 apps, 50 per tick: app-00077 is in the second page
		if err := rec.Tick(f.Ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := f.RDB.SIsMember(f.Ctx, keys.Debtors("c"), "app-00077").Result(); !ok {
		t.Fatal("the sweep did not add the app in debt to the debtors set")
	}
	f.RDB.HSet(f.Ctx, keys.L2("c", "app-00077"), "last_refill_us", f.RedisNowUS()-60_000_000)
	if err := dj.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	l2, _ := f.Ledger.ReadL2(f.Ctx, "c", "app-00077")
	if dj.Stats().InDebt != 1 || l2.Debt != 0 || l2.Borrowed != 0 {
		t.Fatalf("debt job %+v, L2 %+v", dj.Stats(), l2)
	}
}
