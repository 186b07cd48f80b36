package ledger_test

import (
	"math"
	"testing"

	"pgregory.net/rapid"

	. "tollgate/internal/ledger" // an external test: testutil's Fixture imports ledger
)

// Property 5: when the bucket cannot cover a grant's min, the grant borrows A from L1 with
// debt += ceil(1.2 A), borrowed never exceeds max_borrow, and L1 never lends below its reserve;
// a refusal names the limit that stopped it (borrow_limit_exceeded, cluster_exhausted,
// app_exhausted) and changes neither debt nor L1. Grants happen at one instant, so no refill
// blurs what the bucket held.
func TestProperty5Borrowing(t *testing.T) {
	f := newFx(t)
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		capacity := rapid.Int64Range(100, 1_000_000).Draw(rt, "capacity")
		f.cluster(rt, "c", capacity)
		apps := []string{"a", "b"}
		left := capacity * 9 / 10
		for _, a := range apps {
			g := rapid.Int64Range(1, max(1, left/2)).Draw(rt, "guaranteed")
			burst := g * rapid.Int64Range(1, 4).Draw(rt, "burst_factor")
			maxBorrow := rapid.Int64Range(0, 2*burst).Draw(rt, "max_borrow")
			f.app(rt, "c", a, g, burst, rapid.IntRange(0, 3).Draw(rt, "priority"), maxBorrow)
			left -= g
		}
		for i, n := 0, rapid.IntRange(1, 20).Draw(rt, "grants"); i < n; i++ {
			a := rapid.SampledFrom(apps).Draw(rt, "app")
			b0, c0 := f.l2(rt, "c", a), f.l1(rt, "c")
			req := rapid.Int64Range(1, 3*b0.Burst).Draw(rt, "requested")
			min := rapid.Int64Range(0, req).Draw(rt, "min")
			res := f.grant(rt, "c", a, "n1", req, min, now)
			b1, c1 := f.l2(rt, "c", a), f.l1(rt, "c")
			checkBorrow(rt, b0, b1, c0, c1, req, min, res)
			f.checkL1(rt, "c", apps...)
		}
	})
}

func checkBorrow(t *rapid.T, b0, b1 L2, c0, c1 L1, req, min int64, res Grant) {
	avail := int64(math.Floor(b0.Tokens))
	need := max(min, 1) - avail
	lent := b1.Borrowed - b0.Borrowed
	covered := avail >= max(min, 1)
	switch {
	case covered:
		if lent != 0 || res.Reason != "ok" || res.Granted != min64(req, avail) {
			t.Fatalf("bucket held %d for %d/%d: lent %d, %+v", avail, req, min, lent, res)
		}
	case lent > 0:
		if lent < need || lent > req-avail {
			t.Fatalf("borrowed %d for a deficit of %d (requested %d, held %d)", lent, need, req, avail)
		}
		if d := b1.Debt - b0.Debt; d != ceil12(lent) {
			t.Fatalf("borrowed %d: debt grew by %d, want ceil(1.2 x %d) = %d", lent, d, lent, ceil12(lent))
		}
		if b1.Borrowed > b1.MaxBorrow {
			t.Fatalf("borrowed %d > max_borrow %d", b1.Borrowed, b1.MaxBorrow)
		}
		if c1.Available != c0.Available-lent || float64(c1.Available) < c1.ReservedRatio*float64(c1.Capacity)-1e-6 {
			t.Fatalf("lent %d: L1 available %d -> %d, reserve %.1f", lent, c0.Available, c1.Available,
				c1.ReservedRatio*float64(c1.Capacity))
		}
		if res.Reason != "ok" || res.Granted != min64(req, avail+lent) {
			t.Fatalf("borrowed %d holding %d: %+v, want %d granted", lent, avail, res, min64(req, avail+lent))
		}
	default:
		if res.Granted != 0 || b1.Debt != b0.Debt || c1.Available != c0.Available {
			t.Fatalf("refused grant changed state: %+v debt %d->%d available %d->%d",
				res, b0.Debt, b1.Debt, c0.Available, c1.Available)
		}
		want := "app_exhausted"
		switch {
		case b0.MaxBorrow <= 0:
		case b0.Borrowed+need > b0.MaxBorrow:
			want = "borrow_limit_exceeded"
		case need > pool(c0):
			want = "cluster_exhausted"
		default:
			t.Fatalf("deficit %d within max_borrow %d-%d and pool %d, yet nothing lent: %+v",
				need, b0.MaxBorrow, b0.Borrowed, pool(c0), res)
		}
		if res.Reason != want {
			t.Fatalf("refusal reason %q, want %q (deficit %d, borrowed %d/%d, pool %d)",
				res.Reason, want, need, b0.Borrowed, b0.MaxBorrow, pool(c0))
		}
	}
}

func min64(a, b int64) int64 { return min(a, b) }

// capOf is what a refill may fill the bucket to: the burst minus the tokens outstanding on the
// nodes (the leases count against the burst).
func capOf(b L2) float64 {
	c := float64(b.Burst)
	if b.Outstanding > 0 {
		c = math.Max(0, c-float64(b.Outstanding))
	}
	return c
}

// Property 13: a refill that would overflow the burst (less the tokens outstanding on the
// nodes) pays debt first — exactly min(floor(overflow), debt) — and reduces borrowed by the principal part of the payment, which
// returns to L1 available; borrowed never exceeds debt and debt = 0 implies borrowed = 0.
func TestProperty13RepaymentOrder(t *testing.T) {
	f := newFx(t)
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		f.cluster(rt, "c", 1_000_000)
		g := rapid.Int64Range(1, 100_000).Draw(rt, "guaranteed")
		burst := g * rapid.Int64Range(1, 4).Draw(rt, "burst_factor")
		f.app(rt, "c", "a", g, burst, 0, rapid.Int64Range(1, 3*burst).Draw(rt, "max_borrow"))
		// run the bucket dry and into debt
		for i, n := 0, rapid.IntRange(1, 4).Draw(rt, "borrows"); i < n; i++ {
			f.grant(rt, "c", "a", "n1", rapid.Int64Range(1, 2*burst).Draw(rt, "drain"), 1, now)
		}
		for i, n := 0, rapid.IntRange(1, 15).Draw(rt, "steps"); i < n; i++ {
			elapsed := rapid.Int64Range(0, 3_000_000).Draw(rt, "elapsed_us")
			now += elapsed
			b0, c0 := f.l2(rt, "c", "a"), f.l1(rt, "c")
			limit := capOf(b0)
			over := b0.Tokens + float64(b0.ReturnedPending) + float64(elapsed)*1*float64(g)/1e6 - limit
			wantPaid := int64(0)
			if over > 0 {
				wantPaid = min(int64(math.Floor(over)), b0.Debt)
			}
			var granted int64
			if rapid.Bool().Draw(rt, "grant") {
				granted = f.grant(rt, "c", "a", "n1", rapid.Int64Range(1, burst).Draw(rt, "req"), 1, now).Granted
			} else {
				r, err := f.l.Refill(f.ctx, "c", "a", now)
				if err != nil {
					rt.Fatal(err)
				}
				if r.Paid != wantPaid {
					rt.Fatalf("refill paid %d, want %d", r.Paid, wantPaid)
				}
			}
			b1, c1 := f.l2(rt, "c", "a"), f.l1(rt, "c")
			lent := b1.TotalBorrowed - b0.TotalBorrowed
			paid := b0.Debt + ceil12(lent) - b1.Debt
			if lent == 0 && paid != wantPaid {
				rt.Fatalf("debt %d -> %d after %dus (overflow %.3f): paid %d, want %d",
					b0.Debt, b1.Debt, elapsed, over, paid, wantPaid)
			}
			if paid > 0 && math.Abs(b1.Tokens+float64(granted-lent)-limit) > 1e-6 {
				rt.Fatalf("paid %d while the bucket was not full: tokens %.6f + granted %d, cap %.0f",
					paid, b1.Tokens, granted, limit)
			}
			principal := b0.Borrowed + lent - b1.Borrowed
			if lent == 0 && paid > 0 {
				want := b0.Borrowed
				if paid < b0.Debt {
					want = max(paid*b0.Borrowed/b0.Debt, b0.Borrowed-(b0.Debt-paid))
				}
				if principal != want {
					rt.Fatalf("paid %d of debt %d (borrowed %d): principal %d, want %d",
						paid, b0.Debt, b0.Borrowed, principal, want)
				}
			}
			if c1.Available != c0.Available+principal-lent {
				rt.Fatalf("L1 available %d -> %d, principal %d, lent %d", c0.Available, c1.Available, principal, lent)
			}
			f.checkL1(rt, "c", "a")
		}
	})
}
