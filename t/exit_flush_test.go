package t

import (
	"syscall"
	"testing"

	"tollgate/internal/store"
	"tollgate/t/harness"
)

// exitFlushStack is one node with 2 workers whose periodic reports and idle-lease returns are
// a minute away: whatever reaches L2 within the test comes from the exit flush. App "flush"
// has room; app "debtor" has a burst smaller than one download's bandwidth, so the download
// leaves local debt (charged after the response: pacing off, which would slow it instead).
func exitFlushStack(t *testing.T) (*stack, *harness.Gateway) {
	s := newStack(t, stackOptions{workers: 2, apps: []store.App{app("flush", 1000, 100000), app("debtor", 1, 100)},
		env: map[string]string{"TOLLGATE_SYNC_INTERVAL": "60", "TOLLGATE_IDLE_RETURN": "60",
			"TOLLGATE_PACING": "off"}})
	g := s.gw()
	for i := 0; i < 20; i++ {
		if r := g.Do("GET", "/bucket/obj?size=1000", "flush", nil, nil); r.Status != 200 {
			t.Fatalf("GET %d: %d %s", i, r.Status, r.Body)
		}
	}
	// the node's lease of "debtor" first (a node's first grant of an app takes the request
	// alone, the reserve follows): no refill is under way when the download below overruns it
	if r := g.Do("HEAD", "/bucket/obj", "debtor", nil, nil); r.Status != 200 {
		t.Fatalf("HEAD: %d %s", r.Status, r.Body)
	}
	eventually(t, "a lease of debtor", func() bool { return g.State("debtor").Tokens > 0 })
	// 60 × 64 KiB: a bandwidth charge of 60 after the response, beyond the lease of ≤ 50
	if r := g.Do("GET", "/bucket/blob?size=3932160", "debtor", nil, nil); r.Status != 200 {
		t.Fatalf("GET blob: %d %s", r.Status, r.Body)
	}
	eventually(t, "local debt booked", func() bool { return g.State("debtor").Debt > 0 })
	return s, g
}

// checkFlushed asserts that L2 has everything the node held of app id before it stopped: its
// consumption (want), no lease and no debt left on the node, and a balanced lease ledger.
func checkFlushed(t *testing.T, s *stack, node, id string, want int64) {
	t.Helper()
	eventually(t, id+": consumption, lease and debt reached L2", func() bool {
		l := s.leases(id)
		return int64(s.stats(id)["total_consumed"]) == want && l[node+":held"] == 0 &&
			l[node+":granted"] == l[node+":consumed"]+l[node+":returned"]
	}, func() { t.Logf("%s: stats %v, leases %v, want consumed %d", id, s.stats(id), s.leases(id), want) })
}

// pendingBefore is what the node booked for each app and has not reported (nothing is
// reported yet: the sync interval is a minute).
func pendingBefore(t *testing.T, s *stack, g *harness.Gateway) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, id := range []string{"flush", "debtor"} {
		st := g.State(id)
		if st.PendingCost <= 0 || s.stats(id)["total_consumed"] != 0 {
			t.Fatalf("%s before the stop: pending %d, reported %v: the test needs unreported consumption",
				id, st.PendingCost, s.stats(id)["total_consumed"])
		}
		out[id] = st.PendingCost
	}
	return out
}

// An orderly stop (`nginx -s quit`) hands L2 every app's unreported consumption, its lease and
// its local debt before the workers exit.
func TestExitFlushOnQuit(t *testing.T) {
	s, g := exitFlushStack(t)
	want := pendingBefore(t, s, g)
	g.Stop() // SIGQUIT, waits for the master to exit
	for id, c := range want {
		checkFlushed(t, s, g.NodeID, id, c)
	}
}

// A reload (`nginx -s reload`) does the same from the old workers; the new ones start clean.
func TestExitFlushOnReload(t *testing.T) {
	s, g := exitFlushStack(t)
	want := pendingBefore(t, s, g)
	g.Signal(syscall.SIGHUP)
	for id, c := range want {
		checkFlushed(t, s, g.NodeID, id, c)
	}
	if st := g.State("debtor"); st.Debt != 0 || st.PendingCost != 0 {
		t.Fatalf("after the reload the node still has debt %d, pending %d", st.Debt, st.PendingCost)
	}
}
