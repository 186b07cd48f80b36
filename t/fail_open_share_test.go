package t

import (
	"testing"

	"tollgate/internal/store"
)

// While Redis is down a node admits an app at most its fail-open budget per second, and that
// budget is never more than the app's guaranteed rate shared over its nodes: an app guaranteed
// 20 tokens/s is not admitted TOLLGATE_FAIL_OPEN_RATE (100) tokens/s by every node.
func TestFailOpenBudgetCappedByGuarantee(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{app("smallg", 20, 1000)}})
	g := s.gw()
	s.redis.Stop()
	admitted := 0
	for i := 0; i < 100; i++ {
		r := g.Do("GET", "/bucket/obj", "smallg", nil, nil)
		switch {
		case r.Status == 200:
			admitted++
		case r.Status != 429:
			t.Fatalf("request %d with Redis down: %d %s", i, r.Status, r.Body)
		}
	}
	failOpen := g.Metric(`ratelimit_fail_open_total{app_id="smallg"}`)
	t.Logf("admitted %d of 100 with Redis down (fail-open %v)", admitted, failOpen)
	// a GET costs 2 at access: at most 10 a second, and the loop may span two seconds (without
	// the cap: 50 a second)
	if admitted == 0 || admitted > 20 {
		t.Fatalf("admitted %d requests of cost 2 with Redis down, want 1..20 (20 tokens/s)", admitted)
	}
}
