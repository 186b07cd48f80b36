package t

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"tollgate/t/harness"
)

// activate writes the cluster's emergency state the way the control plane does and announces it
// (publish=false simulates a lost notice).
func (s *stack) emergency(active bool, until time.Time, publish bool) {
	s.t.Helper()
	c := context.Background()
	mode := "0"
	if active {
		mode = "1"
	}
	if err := s.rdb.HSet(c, "ratelimit:{default}:l1", "emergency_mode", mode,
		"emergency_until", until.Unix(), "emergency_reason", "test").Err(); err != nil {
		s.t.Fatal(err)
	}
	if publish {
		msg, _ := json.Marshal(map[string]any{"cluster_id": "default", "active": active,
			"until": until.Unix(), "reason": "test"})
		if err := s.rdb.Publish(c, "ratelimit:emergency", msg).Err(); err != nil {
			s.t.Fatal(err)
		}
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
	p1Before := s.gws[0].State("demo-p1").Tokens
	start := time.Now()
	s.emergency(true, time.Now().Add(30*time.Second), true)
	for _, g := range s.gws {
		harness.Eventually(t, 200*time.Millisecond, "P3 blocked on "+g.NodeID, func() bool {
			return reasonOf(t, g.Do("GET", "/bucket/obj", "demo-p3", nil, nil)) == "emergency_blocked"
		})
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
	s.emergency(false, time.Now(), true)
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
	s.emergency(true, time.Now().Add(2*time.Second), false) // no notice: the poll must find it
	eventually(t, "emergency found by the poll", func() bool {
		return reasonOf(t, g.Do("GET", "/bucket/obj", "demo-p3", nil, nil)) == "emergency_blocked"
	})
	// nobody deactivates: the node lets it expire (the poll keeps seeing an expired until)
	eventually(t, "emergency expired", func() bool {
		return g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil).Status == 200
	})
}
