package t

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/store"
	"tollgate/t/harness"
)

// A grant that times out on the node while Redis still applies it (Redis paused past the
// operation timeout) is not lost: the node's next grant recovers it into the lease, so L2, the
// lease and what was consumed still add up to the app's burst.
func TestTimedOutGrantRecoveredByNextGrant(t *testing.T) {
	s := newStack(t, stackOptions{workers: 1, apps: []store.App{app("lostgrant", 1, 1000)},
		env: map[string]string{"TOLLGATE_SYNC_INTERVAL": "60", "TOLLGATE_IDLE_RETURN": "60"}})
	g := s.gw()
	ctx := context.Background()
	// a pooled, authenticated connection: the grant below is sent at once, not after an AUTH
	if r := g.Do("GET", "/bucket/obj", "demo-p1", nil, nil); r.Status != 200 {
		t.Fatalf("warm-up GET: %d %s", r.Status, r.Body)
	}
	// the node knows the app's node count, as after an earlier grant: its grant asks for the
	// request and a reserve (500 tokens of the burst), which the lease must not lose (a node's
	// first grant of an app asks for the request alone)
	g.T("set?app=lostgrant&tokens=0", nil)
	// a script keeps Redis busy for 400 ms: the node's grant (100 ms timeout) fails on the node,
	// then Redis reads and runs it
	busy := make(chan error, 1)
	go func() {
		busy <- s.rdb.Eval(ctx, `local t0 = redis.call('TIME')
			local function us(t) return t[1] * 1000000 + t[2] end
			while us(redis.call('TIME')) - us(t0) < 400000 do end
			return 1`, nil).Err()
	}()
	probe := redis.NewClient(&redis.Options{Addr: s.redis.Addr(), ReadTimeout: 30 * time.Millisecond,
		MaxRetries: -1, PoolSize: 1})
	defer probe.Close()
	eventually(t, "the busy script running (PING times out)", func() bool {
		return probe.Ping(ctx).Err() != nil
	})
	// the grant times out: the request fails open (the app's fail-open budget is its guarantee,
	// 1 token/s, less than the request's cost: 429 fail_open_exhausted)
	if r := g.Do("GET", "/bucket/obj", "lostgrant", nil, nil); !okOrFailOpen(r) {
		t.Fatalf("GET during the pause: %d %s", r.Status, r.Body)
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the timed-out grant applied by Redis", func() bool { return s.l2("lostgrant")["total_granted"] > 0 })
	lost := s.l2("lostgrant")["total_granted"]
	if lost < 100 {
		t.Fatalf("the timed-out grant took %.0f tokens: a reserve was expected (the test needs one)", lost)
	}
	if st := g.State("lostgrant"); st.Tokens != 0 {
		t.Fatalf("the lease holds %d tokens: the grant did not time out (the test needs it)", st.Tokens)
	}
	// the timeout opened the node's breaker: requests fail open until a probe closes it
	var st harness.Lease
	eventually(t, "a request served from a grant again", func() bool {
		if r := g.Do("GET", "/bucket/obj", "lostgrant", nil, nil); !okOrFailOpen(r) {
			t.Fatalf("GET after the pause: %d %s", r.Status, r.Body)
		}
		st = g.State("lostgrant")
		return st.Tokens > 0
	})
	l2 := s.l2("lostgrant")
	// fail-open admissions (while the breaker was open) never came from L2
	sum := float64(st.Tokens) + l2["current_tokens"] + float64(st.PendingCost)
	t.Logf("lost grant %.0f; lease %d, L2 %.1f, pending %d, fail-open %d", lost, st.Tokens,
		l2["current_tokens"], st.PendingCost, st.FailOpen)
	// G = 1 token/s: a few seconds of refill at most
	if sum < 1000-2 || sum > 1000+10 {
		t.Fatalf("lease + L2 + consumed = %.1f, want the burst 1000: the timed-out grant of %.0f is lost", sum, lost)
	}
}

// okOrFailOpen: admitted, or refused by the fail-open budget while the node's breaker is open.
func okOrFailOpen(r *harness.Response) bool {
	return r.Status == 200 || r.Status == 429 && strings.Contains(string(r.Body), `"fail_open_exhausted"`)
}
