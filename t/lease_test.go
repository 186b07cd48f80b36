package t

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tollgate/internal/store"
	"tollgate/t/harness"
)

// quiet: no periodic sync, no batch-triggered report, so the local state only moves by what a
// test does.
func quiet(extra map[string]string) map[string]string {
	env := map[string]string{
		"TOLLGATE_SYNC_INTERVAL":   "3600",
		"TOLLGATE_BATCH_THRESHOLD": "100000000",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

type acquireReply struct {
	OK        bool   `json:"ok"`
	Remaining int64  `json:"remaining"`
	Reason    string `json:"reason"`
	Source    string `json:"source"`
}

// Property 2: a local deduction reduces tokens by exactly the cost and raises pending by it.
func TestProperty2DeductionConsistency(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_RESERVE_TARGET": "1"})})
	g := s.gw()
	rapid.Check(t, func(rt *rapid.T) {
		start := rapid.Int64Range(1, 1000000).Draw(rt, "tokens")
		g.T("set?app=demo-p0&tokens="+strconv.FormatInt(start, 10), nil)
		tokens, pending := start, int64(0)
		steps := rapid.IntRange(1, 20).Draw(rt, "steps")
		for i := 0; i < steps && tokens > 1; i++ {
			cost := rapid.Int64Range(1, tokens-1).Draw(rt, "cost")
			var r acquireReply
			g.T("acquire?app=demo-p0&cost="+strconv.FormatInt(cost, 10), &r)
			tokens -= cost
			pending += cost
			if !r.OK || r.Remaining != tokens {
				rt.Fatalf("acquire %d: %+v, want ok with remaining %d", cost, r, tokens)
			}
			st := g.State("demo-p0")
			if st.Tokens != tokens || st.PendingCost != pending || st.PendingCount != int64(i+1) {
				rt.Fatalf("after %d deductions: %+v, want tokens %d pending %d", i+1, st, tokens, pending)
			}
		}
	})
}

// Property 12: a deduction that leaves less than 20 % of the reserve target starts an
// asynchronous refill from L2; one that leaves more does not.
func TestProperty12RefillThreshold(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_RESERVE_TARGET": "500"})})
	g := s.gw()
	rapid.Check(t, func(rt *rapid.T) {
		start := rapid.Int64Range(2, 1500).Draw(rt, "tokens")
		cost := rapid.Int64Range(1, start-1).Draw(rt, "cost")
		g.T("set?app=demo-p0&tokens="+strconv.FormatInt(start, 10), nil)
		granted := s.l2("demo-p0")["total_granted"]
		var r acquireReply
		g.T("acquire?app=demo-p0&cost="+strconv.FormatInt(cost, 10), &r)
		left := start - cost
		if left < 100 { // 20 % of 500
			harness.Eventually(t, 5*time.Second, "async refill", func() bool {
				return g.State("demo-p0").Tokens >= 500
			})
			if got := s.l2("demo-p0")["total_granted"] - granted; got != float64(500-left) {
				rt.Fatalf("refill granted %v, want %d (target 500 - %d left)", got, 500-left, left)
			}
		} else {
			// give a wrongly started refill the time to show up
			time.Sleep(30 * time.Millisecond)
			if st := g.State("demo-p0"); st.Tokens != left {
				rt.Fatalf("tokens %d after a deduction leaving %d >= 20%% of target: refill ran", st.Tokens, left)
			}
		}
	})
}

// Property 10: post-hoc charges never drive the lease negative; the uncovered part becomes
// local debt, and the next grant pays it first.
func TestProperty10PostHocChargeNeverNegative(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_RESERVE_TARGET": "1000"})})
	g := s.gw()
	rapid.Check(t, func(rt *rapid.T) {
		start := rapid.Int64Range(0, 300).Draw(rt, "tokens")
		charge := rapid.Int64Range(1, 600).Draw(rt, "charge")
		g.T("set?app=demo-p0&tokens="+strconv.FormatInt(start, 10), nil)
		g.T("charge?app=demo-p0&amount="+strconv.FormatInt(charge, 10), nil)
		st := g.State("demo-p0")
		wantTokens, wantDebt := start-charge, int64(0)
		if wantTokens < 0 {
			wantTokens, wantDebt = 0, charge-start
		}
		if st.Tokens != wantTokens || st.Debt != wantDebt || st.PendingCost != charge {
			rt.Fatalf("charge %d on %d: %+v, want tokens %d debt %d", charge, start, st, wantTokens, wantDebt)
		}
		if wantDebt > 0 {
			// the lease is empty: the next request is served by a grant that pays the debt first
			var r acquireReply
			g.T("acquire?app=demo-p0&cost=1", &r)
			after := g.State("demo-p0")
			if !r.OK || after.Debt != 0 || after.Tokens < 0 {
				rt.Fatalf("after grant: %+v %+v, want admitted with debt paid", r, after)
			}
		}
	})
}

// Under concurrent deductions, post-hoc charges and refills from many connections the lease
// ledger balances exactly once traffic stops: granted = consumed + returned + held (held =
// tokens - debt), and neither tokens nor debt is left negative.
func TestLeaseLedgerBalancesUnderConcurrency(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan *loadResult)
	go func() { done <- load(g, "demo-p2", "/bucket/obj?size=200000", 16, stop) }()
	time.Sleep(3 * time.Second)
	close(stop)
	res := <-done
	if res.admitted.Load() == 0 || res.other.Load() != 0 {
		t.Fatalf("load: %d admitted, %d errors", res.admitted.Load(), res.other.Load())
	}
	eventually(t, "balanced ledger", func() bool {
		l := s.leases("demo-p2")
		st := g.State("demo-p2")
		return st.PendingCost == 0 && st.Inflight == "" &&
			l["node-1:granted"] == l["node-1:consumed"]+l["node-1:returned"]+l["node-1:held"] &&
			l["node-1:held"] == float64(st.Tokens-st.Debt)
	})
	st := g.State("demo-p2")
	if st.Tokens < 0 || st.Debt < 0 {
		t.Fatalf("negative local state at rest: %+v", st)
	}
	l := s.leases("demo-p2")
	t.Logf("admitted %d requests (%d rejected); ledger %v", res.admitted.Load(), res.rejected.Load(), l)
	if l["node-1:consumed"] < float64(res.cost.Load()) {
		t.Fatalf("consumed %v < admitted access-time cost %d", l["node-1:consumed"], res.cost.Load())
	}
}

// Property 8: a request the client cancels before the backend answered gives its charge back.
func TestProperty8RollbackOfCancelledRequests(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(nil)})
	g := s.gw()
	g.Do("GET", "/bucket/warm", "demo-p0", nil, nil)
	eventually(t, "lease", func() bool { return g.State("demo-p0").Tokens > 900 })
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.IntRange(0, 300000).Draw(rt, "size")
		before := g.State("demo-p0")
		abortedPut(t, g, "demo-p0", size)
		harness.Eventually(t, 5*time.Second, "rollback", func() bool {
			return g.State("demo-p0").RollbackCount == before.RollbackCount+1
		})
		after := g.State("demo-p0")
		if after.Tokens != before.Tokens || after.PendingCost != before.PendingCost ||
			after.PendingCount != before.PendingCount {
			rt.Fatalf("cancelled PUT of %d bytes: before %+v after %+v", size, before, after)
		}
	})
	// a backend that answers 5xx did the work: that request keeps its charge
	before := g.State("demo-p0")
	if r := g.Do("GET", "/bucket/k?code=503", "demo-p0", nil, nil); r.Status != 503 {
		t.Fatalf("backend 503: got %d", r.Status)
	}
	eventually(t, "charge of a backend 5xx", func() bool {
		return g.State("demo-p0").PendingCount == before.PendingCount+1
	})
	if g.State("demo-p0").RollbackCount != before.RollbackCount {
		t.Fatalf("a backend 5xx was rolled back")
	}
}

// An exhausted app is answered from the negative cache, not by a Redis call per request.
func TestNegativeCacheSparesRedis(t *testing.T) {
	s := newStack(t, stackOptions{apps: []store.App{app("tiny", 10, 20)}})
	g := s.gw()
	for i := 0; i < 30; i++ {
		g.Do("DELETE", "/bucket/k", "tiny", nil, nil)
	}
	before := s.scriptCalls()
	rejected := 0
	start := time.Now()
	for i := 0; i < 300; i++ {
		if r := g.Do("DELETE", "/bucket/k", "tiny", nil, nil); r.Status == 429 {
			rejected++
		}
	}
	elapsed := time.Since(start).Seconds()
	calls := s.scriptCalls() - before
	// one grant per negative-cache period (>= 50 ms) per worker, plus periodic reports
	limit := int64(elapsed/0.05+1)*2 + int64(elapsed/0.1+1)*2 + 4
	if rejected < 250 || calls > limit {
		t.Fatalf("%d of 300 rejected with %d script calls in %.2fs (limit %d)", rejected, calls, elapsed, limit)
	}
}

// An idle lease goes back to L2.
func TestIdleLeaseIsReturned(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_IDLE_RETURN": "0.3"}})
	g := s.gw()
	g.Do("GET", "/bucket/k", "demo-p1", nil, nil)
	eventually(t, "lease taken", func() bool { return g.State("demo-p1").Tokens > 0 })
	eventually(t, "lease returned", func() bool {
		return g.State("demo-p1").Tokens == 0 && s.leases("demo-p1")["node-1:returned"] > 0
	})
	l := s.leases("demo-p1")
	if l["node-1:granted"] != l["node-1:consumed"]+l["node-1:returned"]+l["node-1:held"] {
		t.Fatalf("lease ledger does not balance: %v", l)
	}
}

// abortedPut sends a PUT of size bytes to a slow backend and closes the connection before the
// backend answers.
func abortedPut(t *testing.T, g *harness.Gateway, app string, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := newRequest(ctx, "PUT", g.URL+"/bucket/obj?ms=3000", strings.Repeat("p", size))
	req.Header.Set("X-App-Id", app)
	resp, err := g.Client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the slow backend answered (%d) before the client gave up", resp.StatusCode)
	}
}

// The lease's tokens and pending consumption and the connection limiter's in-flight counts show
// the requests' effects: the lease holds what the grants put in minus what the requests took,
// each request is pending until reported, no request stays in flight.
func TestHotCountersAccountEachRequest(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_IDLE_RETURN": "3600"})})
	g := s.gw()
	g.T("set?app=demo-p1&tokens=5000", nil)
	for i := 0; i < 10; i++ {
		if r := g.Do("HEAD", "/bucket/obj", "demo-p1", nil, nil); r.Status != 200 && r.Status != 404 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	st := g.State("demo-p1")
	if st.Tokens != 5000-10 || st.PendingCount != 10 || st.PendingCost != 10 {
		t.Fatalf("after 10 HEADs of cost 1 from a lease of 5000: %+v", st)
	}
	// the last request's slot is given back in its log phase, after the client has its answer
	labels := `{app_id="demo-p1",cluster_id="default"}`
	var active, peak float64
	eventually(t, "no request in flight, a peak of one", func() bool {
		active, peak = g.Metric("connlimit_active_connections"+labels), g.Metric("connlimit_peak_connections"+labels)
		return active == 0 && peak == 1
	}, func() { t.Logf("one request at a time: %v in flight, peak %v; want 0 and 1", active, peak) })
}
