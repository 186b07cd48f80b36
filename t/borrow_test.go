package t

import (
	"context"
	"math"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/store"
)

// Borrowing through the gateway (Req 5, Property 5): an app whose bucket runs dry borrows from
// L1 up to max_borrow with 20 % interest, so it admits more than burst + G x T but never more
// than that plus max_borrow; once traffic stops, refills pay the debt back and the principal
// returns to L1 (Property 13).
func TestBorrowingThroughTheGateway(t *testing.T) {
	a := app("borrower", 500, 500)
	a.MaxBorrow = 1000
	s := newStack(t, stackOptions{apps: appsOf(a), env: map[string]string{"TOLLGATE_RESERVE_TARGET": "50"}})
	l1Before := s.l1("default")
	perNode, elapsed := runNodes(s.gws, "borrower", 4, 3*time.Second)
	admitted := float64(sum(perNode))
	base := 500 + 500*elapsed.Seconds()
	l2 := s.l2("borrower")
	t.Logf("admitted %v in %.2fs; burst + G x T = %.0f; borrowed %v debt %v", admitted,
		elapsed.Seconds(), base, l2["borrowed"], l2["debt"])
	if admitted <= base*1.02 || admitted > (base+1000)*1.02 {
		t.Fatalf("admitted %v, want above %.0f (borrowing) and at most %.0f (+ max_borrow)",
			admitted, base, base+1000)
	}
	if l2["borrowed"] <= 0 || l2["borrowed"] > 1000 || l2["debt"] < math.Ceil(1.2*l2["borrowed"]) {
		t.Fatalf("borrowed %v (max 1000), debt %v (want >= ceil(1.2 x borrowed))", l2["borrowed"], l2["debt"])
	}
	if l1 := s.l1("default"); l1["available"] != l1Before["available"]-l2["borrowed"] {
		t.Fatalf("L1 available %v, want %v - %v borrowed", l1["available"], l1Before["available"], l2["borrowed"])
	}
	// the gateways' scripts kept the cluster's indexes: the app is active and a debtor, and the
	// cluster's totals count what its nodes reported (the jobs read these, not every app)
	ctx := context.Background()
	if _, err := s.rdb.ZScore(ctx, keys.Active("default"), "borrower").Result(); err != nil {
		t.Fatalf("the app is not in the cluster's active set: %v", err)
	}
	if ok, _ := s.rdb.SIsMember(ctx, keys.Debtors("default"), "borrower").Result(); !ok {
		t.Fatal("the borrowing app is not in the cluster's debtors set")
	}
	eventually(t, "the cluster's totals count the reported requests", func() bool {
		n, _ := s.rdb.HGet(ctx, keys.Totals("default"), "total_requests").Int64()
		return float64(n) >= admitted
	})
	// the control plane's debt job: refill idle apps so that overflow repays the debt
	led := ledger.New(s.rdb, s.scripts)
	eventually(t, "debt repaid", func() bool {
		r, err := led.Refill(context.Background(), "default", "borrower", 0)
		return err == nil && r.Debt == 0 && r.Borrowed == 0
	})
	if ok, _ := s.rdb.SIsMember(ctx, keys.Debtors("default"), "borrower").Result(); ok {
		t.Fatal("the repaid app is still in the debtors set")
	}
	if l1 := s.l1("default"); l1["available"] != l1Before["available"] || l1["borrowed"] != 0 {
		t.Fatalf("after repayment L1 available %v borrowed %v, want %v and 0", l1["available"], l1["borrowed"],
			l1Before["available"])
	}
}

// When L1 cannot lend (the cluster's pool is at its reserve), the app is refused with
// cluster_exhausted (Req 4.8).
func TestClusterExhaustedWhenL1CannotLend(t *testing.T) {
	s := newStack(t, stackOptions{})
	c := context.Background()
	if _, err := s.store.PutCluster(c, store.Cluster{ID: "tight", Capacity: 1000, ReservedRatio: 0.1}); err != nil {
		t.Fatal(err)
	}
	a := app("squeezed", 900, 900)
	a.ClusterID, a.MaxBorrow = "tight", 500
	if _, err := s.store.PutApp(c, a); err != nil {
		t.Fatal(err)
	}
	g := s.gw()
	eventually(t, "app known to the gateway", func() bool {
		return g.Do("HEAD", "/b/k", "squeezed", nil, nil).Status == 200
	})
	reason := ""
	for i := 0; i < 3000 && reason == ""; i++ {
		reason = reasonOf(t, g.Do("GET", "/b/k", "squeezed", nil, nil))
	}
	if reason != "cluster_exhausted" {
		t.Fatalf("reason %q, want cluster_exhausted", reason)
	}
}
