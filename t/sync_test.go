package t

import (
	"testing"
	"time"
)

// Consumption reaches Redis within a sync interval of a single request (100 ms default).
func TestReportEverySyncInterval(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	g.Do("HEAD", "/bucket/obj", "demo-p1", nil, nil)
	eventually(t, "one request reported", func() bool {
		return s.stats("demo-p1")["total_requests"] == 1 && s.stats("demo-p1")["total_consumed"] == 1
	})
}

// Without periodic ticks, 1000 pending requests trigger a report by themselves.
func TestReportAfterBatchThreshold(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_SYNC_INTERVAL": "3600"}})
	g := s.gw()
	for i := 0; i < 999; i++ {
		g.Do("HEAD", "/bucket/obj", "demo-p0", nil, nil)
	}
	time.Sleep(100 * time.Millisecond) // room for a wrong early report to show up
	if n := s.stats("demo-p0")["total_requests"]; n != 0 {
		t.Fatalf("%v requests reported before the batch threshold", n)
	}
	g.Do("HEAD", "/bucket/obj", "demo-p0", nil, nil)
	eventually(t, "batch report", func() bool { return s.stats("demo-p0")["total_requests"] >= 1000 })
}

// The reserve target follows the node's rate: a busy app's grows beyond the minimum, a scarce
// app's shrinks below it.
func TestReserveTargetAdaptsToRate(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("scarce", 500, 1000))})
	g := s.gw()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		go loadMethod(g, "HEAD", "scarce", "/bucket/obj", 2, stop)
		loadMethod(g, "HEAD", "demo-p0", "/bucket/obj", 8, stop)
	}()
	eventually(t, "targets adapted", func() bool {
		busy := g.Metric(`ratelimit_l3_reserve_target{app_id="demo-p0"}`)
		scarce := g.Metric(`ratelimit_l3_reserve_target{app_id="scarce"}`)
		return busy > 1000 && scarce > 0 && scarce < 1000
	})
	close(stop)
	<-done
	t.Logf("targets: busy %v, scarce %v", g.Metric(`ratelimit_l3_reserve_target{app_id="demo-p0"}`),
		g.Metric(`ratelimit_l3_reserve_target{app_id="scarce"}`))
}
