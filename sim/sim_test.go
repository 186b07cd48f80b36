package sim

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The quick run (10 nodes x 60 apps, 24 virtual seconds, the real scripts on a real
// redis-server) meets the goals: overshoot <= 1 % of the ideal bucket, utilisation
// >= 98 % for apps over quota, drift < 1 %, emergency enforced on every node within 200 ms,; no
// script error, no correction needed. The same seed gives the same run.
func TestQuickRunMeetsGoals(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, Quick(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	s.res.Print(&b)
	t.Log("\n" + b.String())
	if miss := s.res.Goals(); len(miss) > 0 {
		t.Fatalf("goals missed: %v", miss)
	}
	if s.res.RoundLimit != 0 || s.res.Corrections != 0 || s.res.L1Corrections != 0 {
		t.Fatalf("round limit %d, corrections %d / %d", s.res.RoundLimit, s.res.Corrections, s.res.L1Corrections)
	}
	// the same seed gives the same run
	again, err := run(ctx, Quick(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.res.OvershootAll != s.res.OvershootAll || again.res.Calls != s.res.Calls {
		t.Fatalf("not deterministic: overshoot %v vs %v, calls %d vs %d", again.res.OvershootAll,
			s.res.OvershootAll, again.res.Calls, s.res.Calls)
	}
}
