package t

import (
	"context"
	"strconv"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/t/harness"
)

// activateEmergency puts cluster "default" in emergency mode for d through the control plane's
// own path (ledger.ActivateEmergency: the emergency_activate script writes L1 and the history
// and publishes the notice).
func (s *stack) activateEmergency(d time.Duration) {
	s.t.Helper()
	if _, _, err := ledger.New(s.rdb, s.scripts).ActivateEmergency(context.Background(), "default",
		ledger.Activation{Duration: d, Reason: "test", Source: "manual", Actor: "t"}, 0); err != nil {
		s.t.Fatal(err)
	}
}

// deactivateEmergency ends it the same way (emergency_deactivate, with its notice).
func (s *stack) deactivateEmergency() {
	s.t.Helper()
	if _, err := ledger.New(s.rdb, s.scripts).DeactivateEmergency(context.Background(), "default",
		ledger.Deactivation{Reason: "test", Source: "manual", Actor: "t"}, 0); err != nil {
		s.t.Fatal(err)
	}
}

// activateEmergencyNoticeLost runs the same emergency_activate script with its notice sent to a
// channel no gateway listens to: a lost notice.
func (s *stack) activateEmergencyNoticeLost(d time.Duration) {
	s.t.Helper()
	err := s.scripts.Run(context.Background(), s.rdb, "emergency_activate",
		[]string{keys.L1("default"), keys.EmergencyHistory("default")},
		"default", int64(d/time.Second), "test", "manual", "t", "nobody-listens", "").Err()
	if err != nil {
		s.t.Fatal(err)
	}
}

func reasonOf(t *testing.T, r *harness.Response) string {
	t.Helper()
	if r.Status != 429 {
		return ""
	}
	var b rejection
	r.JSON(t, &b)
	return b.Reason
}

// Activation reaches every node at once: P3 is refused locally with emergency_blocked, P1's
// lease is cut to half, P0 keeps being served; deactivation restores P3 just as fast.
func TestEmergencyReachesEveryNodeAtOnce(t *testing.T) {
	s := newStack(t, stackOptions{nodes: 2})
	for _, g := range s.gws {
		for _, app := range []string{"demo-p0", "demo-p1", "demo-p3"} {
			if r := g.Do("HEAD", "/bucket/obj", app, nil, nil); r.Status != 200 {
				t.Fatalf("%s before emergency: %d", app, r.Status)
			}
		}
	}
	// a node's first grant of an app takes the request alone, its reserve follows
	// asynchronously: P1's lease is what the activation cuts
	eventually(t, "P1 lease on "+s.gws[0].NodeID, func() bool { return s.gws[0].State("demo-p1").Tokens > 1 })
	p1Before := s.gws[0].State("demo-p1").Tokens
	start := time.Now()
	s.activateEmergency(30 * time.Second)
	for _, g := range s.gws {
		// polled with HEAD: a GET admitted just before the notice is paced to a stall (P3 in an
		// emergency) and would hold the poll; a refused GET then carries the reason
		harness.Eventually(t, 200*time.Millisecond, "P3 blocked on "+g.NodeID, func() bool {
			return g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil).Status == 429
		})
		if why := reasonOf(t, g.Do("GET", "/bucket/obj", "demo-p3", nil, nil)); why != "emergency_blocked" {
			t.Fatalf("P3 on %s during the emergency: refused for %q", g.NodeID, why)
		}
	}
	t.Logf("P3 blocked on both nodes %v after activation", time.Since(start))
	r := s.gws[0].Do("HEAD", "/bucket/obj", "demo-p3", nil, nil)
	ra, _ := strconv.Atoi(r.Header.Get("Retry-After"))
	if ra < 25 || ra > 35 {
		t.Fatalf("Retry-After %d during an emergency ending in 30 s", ra)
	}
	if after := s.gws[0].State("demo-p1").Tokens; after > p1Before/2+1 {
		t.Fatalf("P1 lease %d after activation, want <= half of %d", after, p1Before)
	}
	if r := s.gws[1].Do("HEAD", "/bucket/obj", "demo-p0", nil, nil); r.Status != 200 {
		t.Fatalf("P0 during emergency: %d", r.Status)
	}
	start = time.Now()
	s.deactivateEmergency()
	for _, g := range s.gws {
		harness.Eventually(t, 200*time.Millisecond, "P3 served on "+g.NodeID, func() bool {
			return g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil).Status == 200
		})
	}
	t.Logf("P3 served on both nodes %v after deactivation", time.Since(start))
}

// An emergency ends at its expiry on the node itself, even if nobody deactivates it, and a
// missed notice is caught up by the poll.
func TestEmergencyExpiresAndPollCatchesMissedNotice(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.activateEmergencyNoticeLost(2 * time.Second) // no notice: the poll must find it
	eventually(t, "emergency found by the poll", func() bool {
		return g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil).Status == 429
	})
	if why := reasonOf(t, g.Do("GET", "/bucket/obj", "demo-p3", nil, nil)); why != "emergency_blocked" {
		t.Fatalf("P3 during the emergency: refused for %q", why)
	}
	// nobody deactivates: the node lets it expire (the poll keeps seeing an expired until)
	eventually(t, "emergency expired", func() bool {
		return g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil).Status == 200
	})
}
