package t

import (
	"fmt"
	"io"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"

	"tollgate/internal/store"
	"tollgate/t/harness"
)

var l3Series = regexp.MustCompile(`(?m)^ratelimit_l3_reserve_target\{app_id="([^"]+)"\}`)

// l3Apps are the apps whose lease gauges the node's /metrics lists (the active set).
func l3Apps(t *testing.T, g *harness.Gateway) map[string]bool {
	t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := map[string]bool{}
	for _, sm := range l3Series.FindAllStringSubmatch(string(b), -1) {
		m[sm[1]] = true
	}
	return m
}

// Issue 20: the sync tick visits the apps with local state on the node, never every configured
// app. With 500 apps configured and traffic on three, it visits three; an app without traffic
// leaves the set once its lease went back to L2 (held 0 in its leases), but not while one of
// its requests is still in flight; it joins again with its next request, whose consumption is
// reported; a reload's new worker 0 finds the set again.
func TestSyncVisitsOnlyAppsWithLocalState(t *testing.T) {
	apps := make([]store.App, 0, 500)
	for i := 0; i < cap(apps); i++ {
		apps = append(apps, app(fmt.Sprintf("idle-%04d", i), 10, 100))
	}
	s := newStack(t, stackOptions{apps: apps, env: map[string]string{"TOLLGATE_IDLE_RETURN": "0.2"}})
	g := s.gw()
	visited := func() float64 { return g.Metric("ratelimit_sync_apps_visited") }
	slow := make(chan int, 1)
	var slowDone atomic.Bool
	go func() {
		st := g.Do("GET", "/bucket/obj?ms=8000", "demo-p3", nil, nil).Status
		slowDone.Store(true)
		slow <- st
	}()
	for _, id := range []string{"demo-p0", "demo-p1"} {
		if r := g.Do("HEAD", "/bucket/obj", id, nil, nil); r.Status != 200 {
			t.Fatalf("%s: status %d", id, r.Status)
		}
	}
	eventually(t, "the tick visits the three apps with traffic", func() bool { return visited() == 3 },
		func() { t.Logf("visited %v of %d configured apps", visited(), len(apps)+4) })

	// idle: the leases go back to L2, then the apps leave the set, but the one whose request is
	// still in flight (8 s) stays
	eventually(t, "idle apps leave the set, the one with a request in flight stays",
		func() bool {
			m := l3Apps(t, g)
			return len(m) == 1 && m["demo-p3"] && visited() == 1 && !slowDone.Load()
		},
		func() { t.Logf("visited %v, apps on /metrics %v", visited(), l3Apps(t, g)) })
	if status := <-slow; status != 200 {
		t.Fatalf("the slow request: status %d", status)
	}
	eventually(t, "then it leaves too", func() bool { return visited() == 0 && len(l3Apps(t, g)) == 0 })
	for _, id := range []string{"demo-p0", "demo-p1"} {
		if held := s.leases(id)["node-1:held"]; held != 0 {
			t.Errorf("%s left the set while the node still held %v tokens of it", id, held)
		}
		if n := s.stats(id)["total_requests"]; n != 1 {
			t.Errorf("%s: %v requests reported, want 1", id, n)
		}
	}

	// traffic again, across a reload (its new worker 0 reads the set from the shared dict)
	if r := g.Do("HEAD", "/bucket/obj", "demo-p2", nil, nil); r.Status != 200 {
		t.Fatalf("demo-p2: status %d", r.Status)
	}
	g.Signal(syscall.SIGHUP)
	for i := 0; i < 3; i++ {
		g.Do("HEAD", "/bucket/obj", "demo-p0", nil, nil)
	}
	eventually(t, "consumption after the reload reported", func() bool {
		return s.stats("demo-p2")["total_requests"] == 1 && s.stats("demo-p0")["total_requests"] == 4
	}, func() { t.Logf("demo-p2 %v, demo-p0 %v", s.stats("demo-p2"), s.stats("demo-p0")) })
	if v := visited(); v > 2 {
		t.Errorf("after the reload the tick visits %v apps, want at most 2", v)
	}
}
