package t

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/t/harness"
)

// measuredLoad sends HEAD requests (cost 1, no post-hoc charge) and records statuses and the
// slowest answer: 200 admitted, 429 rejected, 5xx, failed requests, and every other status (a
// 403 unknown_app, a 400, …) in other, by status.
type measuredLoad struct {
	admitted, rejected, server5xx, errors atomic.Int64
	slowest                               atomic.Int64 // nanoseconds
	mu                                    sync.Mutex
	other                                 map[int]int64
}

// unexpected describes the answers a load under faults must never get — a 5xx, a failed
// request, a status other than 200 and 429 — or is "" when there were none.
func (m *measuredLoad) unexpected() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.server5xx.Load() == 0 && m.errors.Load() == 0 && len(m.other) == 0 {
		return ""
	}
	return fmt.Sprintf("%d answers 5xx, %d failed requests, other statuses %v", m.server5xx.Load(),
		m.errors.Load(), m.other)
}

func runMeasured(g *harness.Gateway, app string, conc int, stop <-chan struct{}) *measuredLoad {
	m := &measuredLoad{}
	m.run(g, app, conc, stop)
	return m
}

// run sends the load until stop is closed; the counters can be read while it runs.
func (m *measuredLoad) run(g *harness.Gateway, app string, conc int, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				r, err := newRequest(context.Background(), "HEAD", g.URL+"/bucket/obj", "")
				if err != nil {
					panic(err)
				}
				r.Header.Set("X-App-Id", app)
				resp, err := g.Client.Do(r)
				d := time.Since(t0).Nanoseconds()
				for {
					old := m.slowest.Load()
					if d <= old || m.slowest.CompareAndSwap(old, d) {
						break
					}
				}
				if err != nil {
					m.errors.Add(1)
					continue
				}
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					m.admitted.Add(1)
				case resp.StatusCode == 429:
					m.rejected.Add(1)
				case resp.StatusCode >= 500:
					m.server5xx.Add(1)
				default:
					m.mu.Lock()
					if m.other == nil {
						m.other = map[int]int64{}
					}
					m.other[resp.StatusCode]++
					m.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// During a 1.5 s freeze of Redis (SIGSTOP) under load, no request waits much longer than the
// operation timeout, none is answered 5xx, and every report kept during the outage reaches
// Redis afterwards: Redis' consumed total equals the admitted cost, of which the fail-open part
// is accounted separately (it was never granted by L2).
func TestFrozenRedisLosesNoReportAndNoRequestHangs(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan *measuredLoad)
	go func() { done <- runMeasured(g, "demo-p1", 8, stop) }()
	time.Sleep(time.Second)
	s.redis.Freeze()
	time.Sleep(1500 * time.Millisecond)
	s.redis.Thaw()
	time.Sleep(time.Second)
	close(stop)
	m := <-done
	t.Logf("admitted %d, rejected %d, 5xx %d, errors %d, slowest %v", m.admitted.Load(),
		m.rejected.Load(), m.server5xx.Load(), m.errors.Load(), time.Duration(m.slowest.Load()))
	if bad := m.unexpected(); bad != "" {
		t.Fatalf("while Redis was frozen: %s", bad)
	}
	// operation timeout 100 ms; anything near a second means a request waited on a
	// background timeout or on a frozen connection
	if slowest := time.Duration(m.slowest.Load()); slowest > 400*time.Millisecond {
		t.Fatalf("a request took %v with Redis frozen (operation timeout 100 ms)", slowest)
	}
	eventually(t, "every admitted request reported", func() bool {
		failOpen := int64(g.Metric(`ratelimit_fail_open_total{app_id="demo-p1"}`))
		st := g.State("demo-p1")
		stats := s.stats("demo-p1")
		return st.PendingCost == 0 && st.Inflight == "" && st.FailOpen == 0 &&
			int64(stats["total_consumed"]) == m.admitted.Load() &&
			int64(stats["fail_open_consumed"]) == failOpen && failOpen > 0
	})
}

// The gateway keeps serving across SCRIPT FLUSH (NOSCRIPT -> reload) without failing open.
func TestScriptFlushRecovery(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})
	g := s.gw()
	for i := 0; i < 20; i++ {
		g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil)
	}
	if err := s.rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	granted := s.l2("demo-p3")["total_granted"]
	for i := 0; i < 50; i++ {
		if r := g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil); r.Status != 200 {
			t.Fatalf("after SCRIPT FLUSH: status %d", r.Status)
		}
	}
	if s.l2("demo-p3")["total_granted"] <= granted {
		t.Fatalf("no grant reached Redis after SCRIPT FLUSH")
	}
	g.SettleMetrics()
	if v := g.Metric(`ratelimit_fail_open_total{app_id="demo-p3"}`); v != 0 {
		t.Fatalf("failed open %v times after SCRIPT FLUSH", v)
	}
}

// After a Redis restart (data from its dump, script cache empty) grants and reports work again;
// while it is down no request is answered 5xx.
func TestRedisRestartRecovery(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_RESERVE_TARGET": "5"}})
	g := s.gw()
	for i := 0; i < 20; i++ {
		g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil)
	}
	if err := s.rdb.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	s.redis.Stop()
	for i := 0; i < 30; i++ {
		if r := g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil); r.Status >= 500 {
			t.Fatalf("with Redis down: status %d", r.Status)
		}
	}
	s.redis.Restart()
	eventually(t, "grants from the restarted Redis", func() bool {
		before := s.l2("demo-p3")["total_granted"]
		for i := 0; i < 20; i++ {
			if r := g.Do("HEAD", "/bucket/obj", "demo-p3", nil, nil); r.Status >= 500 {
				t.Fatalf("after restart: status %d", r.Status)
			}
		}
		return s.l2("demo-p3")["total_granted"] > before
	})
	eventually(t, "reports reach the restarted Redis", func() bool {
		return g.State("demo-p3").Inflight == "" && s.stats("demo-p3")["total_requests"] > 0
	})
}
