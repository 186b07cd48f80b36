package t

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/seed"
	"tollgate/t/harness"
)

type health struct {
	Redis            string `json:"redis"`
	DegradationLevel int    `json:"degradation_level"`
	ConfigVersion    int64  `json:"config_version"`
}

func healthOf(t *testing.T, g *harness.Gateway) health {
	t.Helper()
	var h health
	r := g.Monitor("/health")
	if err := json.Unmarshal(r.Body, &h); err != nil {
		t.Fatalf("health: %v: %s", err, r.Body)
	}
	return h
}

// stall keeps Redis busy with `busy`-long scripts (a pause of `gap` between them) until stop:
// every other client waits up to `busy` per command, as on an overloaded Redis.
func stall(rdb *redis.Client, busy, gap time.Duration, stop <-chan struct{}) {
	script := `local t0 = redis.call('TIME')
local s0 = t0[1] * 1000000 + t0[2]
while true do
  local t = redis.call('TIME')
  if t[1] * 1000000 + t[2] - s0 >= tonumber(ARGV[1]) then return 1 end
end`
	for {
		select {
		case <-stop:
			return
		default:
		}
		rdb.Eval(context.Background(), script, nil, busy.Microseconds())
		time.Sleep(gap)
	}
}

// The node's degradation level follows Redis latency — 1 above 10 ms, 2 above 100 ms — with one
// log line per change, larger reserve targets at higher levels, and returns to 0 when Redis is
// fast again.
func TestDegradationLevelsFollowRedisLatency(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_DEGRADATION_HOLD": "0.5"}})
	g := s.gw()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); loadMethod(g, "HEAD", "demo-p0", "/bucket/obj", 2, stop) }()
	defer func() { close(stop); wg.Wait() }()

	level := func() int { return healthOf(t, g).DegradationLevel }
	stallRedis := func(busy, gap time.Duration, until func() bool, what string) {
		st := make(chan struct{})
		done := make(chan struct{})
		go func() { defer close(done); stall(s.redis.Client(), busy, gap, st) }()
		harness.Eventually(t, 15*time.Second, what, until)
		close(st)
		<-done
	}
	stallRedis(40*time.Millisecond, 2*time.Millisecond, func() bool {
		return level() == 1 && g.Metric(`ratelimit_l3_reserve_target{app_id="demo-p0"}`) >= 2000
	}, "level 1 with ~20 ms latency, reserve target >= 2000")
	stallRedis(400*time.Millisecond, 2*time.Millisecond, func() bool { return level() >= 2 },
		"level 2 with ~200 ms latency")
	harness.Eventually(t, 15*time.Second, "level 0 once Redis is fast", func() bool { return level() == 0 })
	if v := g.Metric("ratelimit_degradation_level"); v != 0 {
		t.Fatalf("ratelimit_degradation_level %v after recovery", v)
	}
	changes := strings.Count(g.ErrorLog(), "tollgate: degradation level")
	if changes < 3 || changes > 8 {
		t.Fatalf("%d level-change log lines for 0 -> 1 -> 2 -> ... -> 0", changes)
	}
}

// Redis killed under load: no 5xx, the node fails open, and it is back on Redis within 2 s of
// Redis' return.
func TestRedisKilledUnderLoad(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "50"}})
	g := s.gw()
	if err := s.rdb.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan *measuredLoad)
	go func() { done <- runMeasured(g, "demo-p3", 4, stop) }()
	time.Sleep(500 * time.Millisecond)
	s.redis.Stop()
	eventually(t, "fail-open", func() bool {
		return healthOf(t, g).DegradationLevel == 3 &&
			g.Metric(`ratelimit_fail_open_total{app_id="demo-p3"}`) > 0
	})
	time.Sleep(time.Second)
	s.redis.Restart()
	back := time.Now()
	harness.Eventually(t, 2*time.Second, "back on Redis within 2 s", func() bool {
		return healthOf(t, g).Redis == "ok"
	})
	t.Logf("back on Redis %v after its return", time.Since(back))
	granted := s.l2("demo-p3")["total_granted"]
	eventually(t, "grants after recovery", func() bool { return s.l2("demo-p3")["total_granted"] > granted })
	close(stop)
	m := <-done
	t.Logf("admitted %d rejected %d 5xx %d errors %d", m.admitted.Load(), m.rejected.Load(),
		m.server5xx.Load(), m.errors.Load())
	if bad := m.unexpected(); bad != "" {
		t.Fatalf("with Redis killed: %s", bad)
	}
}

// Redis frozen (SIGSTOP) for 3 s under load: no request waits longer than the operation timeout
// (100 ms) + 20 ms, and the breaker makes the failure path cheap.
func TestRedisFrozenRequestsBoundedByTimeout(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "20"}})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan *measuredLoad)
	time.Sleep(200 * time.Millisecond)
	s.redis.Freeze()
	go func() { done <- runMeasured(g, "demo-p3", 4, stop) }()
	time.Sleep(3 * time.Second)
	close(stop)
	m := <-done
	s.redis.Thaw()
	slowest := g.SlowestRequest("/bucket/")
	t.Logf("frozen 3 s: admitted %d, rejected %d, slowest %v in nginx (%v at the client)", m.admitted.Load(),
		m.rejected.Load(), slowest, time.Duration(m.slowest.Load()))
	if bad := m.unexpected(); bad != "" {
		t.Fatalf("with Redis frozen: %s", bad)
	}
	if slowest > 120*time.Millisecond {
		t.Fatalf("a request waited %v in nginx with Redis frozen (timeout 100 ms + 20 ms)", slowest)
	}
	if m.admitted.Load()+m.rejected.Load() < 200 {
		t.Fatalf("only %d answers in 3 s: the failure path is not cheap", m.admitted.Load()+m.rejected.Load())
	}
}

// SCRIPT FLUSH and an empty Redis restart under load: only 200 and 429 answers, and each time
// the node recovers — after the flush its grants go on (the scripts are loaded again), after the
// empty restart, once the config is written again (as the control plane's seed or an operator's
// restore does), it is granted from the new Redis and reports its consumption there.
func TestScriptFlushAndEmptyRestartUnderLoad(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "20"}})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan *measuredLoad)
	go func() { done <- runMeasured(g, "demo-p2", 4, stop) }()
	eventually(t, "grants before the flush", func() bool { return s.l2("demo-p2")["total_granted"] > 0 })
	if err := s.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	granted := s.l2("demo-p2")["total_granted"]
	eventually(t, "grants after SCRIPT FLUSH", func() bool { return s.l2("demo-p2")["total_granted"] > granted })
	s.redis.Restart() // empty: no dump was saved
	if _, err := seed.Demo(context.Background(), s.store); err != nil {
		t.Fatal(err)
	}
	eventually(t, "grants and reports in the new Redis", func() bool {
		return s.l2("demo-p2")["total_granted"] > 0 && s.stats("demo-p2")["total_consumed"] > 0
	})
	close(stop)
	m := <-done
	t.Logf("admitted %d rejected %d 5xx %d errors %d", m.admitted.Load(), m.rejected.Load(),
		m.server5xx.Load(), m.errors.Load())
	if bad := m.unexpected(); bad != "" || m.admitted.Load() == 0 {
		t.Fatalf("%s; %d admitted", bad, m.admitted.Load())
	}
}
