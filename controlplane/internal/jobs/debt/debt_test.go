package debt_test

import (
	"io"
	"log/slog"
	"testing"

	"tollgate/controlplane/internal/jobs/debt"
	"tollgate/internal/keys"
	"tollgate/internal/testutil"
)

// An app that borrowed and then went idle repays through the job alone: ten seconds of refill
// overflow its burst and pay the debt, and the principal returns to L1.
func TestIdleAppRepays(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 1_000_000)
	f.App("c", "a", 1000, 2000, 0, 3000)
	f.App("c", "b", 1000, 2000, 0, 0)
	g, err := f.Ledger.Grant(f.Ctx, "c", "a", "n1", 4000, 4000, 0) // 2000 held + 2000 borrowed
	if err != nil || g.Granted != 4000 {
		t.Fatalf("grant %+v %v", g, err)
	}
	// the node spends the lease, then ten seconds pass without a grant
	f.Consume("c", "a", "n1", 4000)
	f.RDB.HSet(f.Ctx, keys.L2("c", "a"), "last_refill_us", f.RedisNowUS()-10_000_000)
	l2, _ := f.Ledger.ReadL2(f.Ctx, "c", "a")
	if l2.Borrowed != 2000 || l2.Debt != 2400 || l2.Outstanding != 0 {
		t.Fatalf("after borrowing: %+v", l2)
	}
	j := debt.New(f.Store, f.Ledger, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := j.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	// 10 s x 1000/s = 10000 refilled: 2000 fill the bucket, 2400 pay the debt off
	s := j.Stats()
	l2, _ = f.Ledger.ReadL2(f.Ctx, "c", "a")
	l1, _ := f.Ledger.ReadL1(f.Ctx, "c")
	if s.Paid != 2400 || s.PrincipalPaid != 2000 || s.InDebt != 1 || l2.Debt != 0 || l2.Borrowed != 0 || l2.Tokens != 2000 {
		t.Fatalf("stats %+v, L2 %+v", s, l2)
	}
	if l1.Borrowed != 0 || l1.Available != l1.Capacity-l1.Allocated {
		t.Fatalf("L1 %+v", l1)
	}
	if err := j.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if s := j.Stats(); s.InDebt != 0 || s.Runs != 2 {
		t.Fatalf("second run %+v", s)
	}
}
