// Alerts provoked for real (rules contract §9): a real gateway and control plane on one
// Redis; each condition is caused through nginx or the admin API, the alert is listed by
// GET /api/v1/alerts and pushed over the WebSocket, and resolves when the condition ends.
package t

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"tollgate/t/harness"
)

const alertWait = 90 * time.Second // snapshots every 500 ms; gateways report every 5 s

type wsAlert struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Resource string `json:"resource"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Active   bool   `json:"active"`
}

// alertFeed collects the alert messages of one WebSocket subscriber.
type alertFeed struct {
	mu   sync.Mutex
	msgs []wsAlert
	err  error
}

func subscribeAlerts(t *testing.T, api *adminAPI) *alertFeed {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"tollgate.v1", "tollgate.bearer." + api.token},
		HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(api.url, "http")+"/api/v1/ws", nil)
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	f := &alertFeed{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var m struct {
				Type string  `json:"type"`
				Data wsAlert `json:"data"`
			}
			if err := c.ReadJSON(&m); err != nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
				return
			}
			if m.Type == "alert" {
				f.mu.Lock()
				f.msgs = append(f.msgs, m.Data)
				f.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = c.Close(); <-done })
	return f
}

// pushed returns the alert pushed with id and the given state, if any.
func (f *alertFeed) pushed(id string, active bool) (wsAlert, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.msgs {
		if m.ID == id && m.Active == active {
			return m, true
		}
	}
	return wsAlert{}, false
}

// activeAlerts is GET /api/v1/alerts (active ones) by id.
func activeAlerts(api *adminAPI) map[string]wsAlert {
	var out struct {
		Data []wsAlert `json:"data"`
	}
	if code := api.do("GET", "/api/v1/alerts", nil, &out); code != 200 {
		api.t.Fatalf("GET /api/v1/alerts = %d", code)
	}
	m := map[string]wsAlert{}
	for _, a := range out.Data {
		m[a.ID] = a
	}
	return m
}

// slowly polls cond every 100 ms (each poll is an API call) until it holds or timeout passes.
func slowly(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	harness.Eventually(t, timeout, what, func() bool {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
		return false
	})
}

// raised waits for the alert in the API's list and on the WebSocket.
func raised(t *testing.T, api *adminAPI, feed *alertFeed, id, what string) wsAlert {
	t.Helper()
	var a wsAlert
	slowly(t, alertWait, what+": alert "+id+" listed and pushed", func() bool {
		var ok bool
		a, ok = activeAlerts(api)[id]
		_, pushed := feed.pushed(id, true)
		return ok && pushed
	})
	return a
}

// resolved waits until the alert leaves the active list and its resolution is pushed.
func resolved(t *testing.T, api *adminAPI, feed *alertFeed, id, what string) {
	t.Helper()
	slowly(t, alertWait, what+": alert "+id+" resolved", func() bool {
		_, active := activeAlerts(api)[id]
		_, pushed := feed.pushed(id, false)
		return !active && pushed
	})
}

func alertStack(t *testing.T) (*stack, *adminAPI, *alertFeed) {
	t.Helper()
	s := newStack(t, stackOptions{
		env: map[string]string{"TOLLGATE_CONN_STATS_INTERVAL": "0.5", "TOLLGATE_DEGRADATION_HOLD": "0.5"},
		// 5 tokens/s: a burst of requests is mostly refused
		apps: appsOf(app("tight", 5, 5)),
	})
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "500ms",
		"TOLLGATE_API_RATE": "1000", "TOLLGATE_API_BURST": "1000"})
	api := loginAdmin(t, cp)
	return s, api, subscribeAlerts(t, api)
}

// connections_high: requests held in flight against a limit of 5 (90 % = 4.5).
func TestAlertConnectionsHigh(t *testing.T) {
	s, api, feed := alertStack(t)
	g := s.gw()
	api.change("PUT", "/api/v1/connections/demo-p2", map[string]any{"max_connections": 5, "burst_connections": 5})
	harness.Eventually(t, 10*time.Second, "limit applied", func() bool { return connStateOf(g, "demo-p2").Max == 5 })
	h := newHolder(t, g)
	res := h.start("demo-p2", "hi", 4)
	harness.Eventually(t, 10*time.Second, "4 requests held", func() bool { return h.held("hi").Now == 4 })
	// 4 of 5 (80 %): no alert while the control plane sees them
	slowly(t, alertWait, "4 connections in the cluster view", func() bool {
		var v struct {
			Data struct {
				Apps []struct {
					AppID  string `json:"app_id"`
					Active int64  `json:"active"`
				} `json:"apps"`
			} `json:"data"`
		}
		api.do("GET", "/api/v1/metrics/connections", nil, &v)
		for _, a := range v.Data.Apps {
			if a.AppID == "demo-p2" {
				return a.Active == 4
			}
		}
		return false
	})
	if a, ok := activeAlerts(api)["connections_high-demo-p2"]; ok {
		t.Fatalf("alert at 80%%: %+v", a)
	}
	res2 := h.start("demo-p2", "hi2", 1)
	a := raised(t, api, feed, "connections_high-demo-p2", "5 of 5 in flight")
	if a.Severity != "warning" || !strings.Contains(a.Message, "5 of 5") || !strings.Contains(a.Message, g.NodeID) {
		t.Fatalf("alert %+v", a)
	}
	h.unhold("hi")
	h.unhold("hi2")
	for _, ch := range []<-chan holdResult{res, res2} {
		for r := range ch {
			if r.err != nil || r.status != 200 {
				t.Fatalf("held request: %d %v", r.status, r.err)
			}
		}
	}
	resolved(t, api, feed, "connections_high-demo-p2", "connections released")
}

// emergency: activated and deactivated through the admin API.
func TestAlertEmergency(t *testing.T) {
	_, api, feed := alertStack(t)
	var out map[string]any
	if code := api.do("POST", "/api/v1/emergency/activate", map[string]any{"cluster_id": "default", "duration": 120,
		"reason": "alert test"}, &out); code != 200 {
		t.Fatalf("activate: %d %v", code, out)
	}
	a := raised(t, api, feed, "emergency-default", "emergency activated")
	if a.Severity != "critical" || !strings.Contains(a.Message, "alert test") {
		t.Fatalf("alert %+v", a)
	}
	if code := api.do("POST", "/api/v1/emergency/deactivate", map[string]any{"cluster_id": "default"}, &out); code != 200 {
		t.Fatalf("deactivate: %d %v", code, out)
	}
	resolved(t, api, feed, "emergency-default", "emergency deactivated")
}

// node_degraded: Redis slowed by busy scripts (~40 ms per command) puts the gateway at
// degradation level 1 or 2 (a warning); fast again, the alert resolves.
func TestAlertNodeDegraded(t *testing.T) {
	s, api, feed := alertStack(t)
	g := s.gw()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); loadMethod(g, "HEAD", "demo-p0", "/bucket/obj", 2, stop) }()
	stallStop := make(chan struct{})
	go func() { defer wg.Done(); stall(s.redis.Client(), 40*time.Millisecond, 2*time.Millisecond, stallStop) }()
	defer func() {
		select {
		case <-stallStop:
		default:
			close(stallStop)
		}
		close(stop)
		wg.Wait()
	}()
	id := "node_degraded-" + g.NodeID
	a := raised(t, api, feed, id, "Redis slow")
	if a.Severity != "warning" {
		t.Fatalf("alert %+v, want a warning at level 1-2", a)
	}
	close(stallStop)
	resolved(t, api, feed, id, "Redis fast again")
}

// block_rate_high: an app driven far over its limit through nginx; needs the gateway's node
// report counters of contract §6.
func TestAlertBlockRateHigh(t *testing.T) {
	s, api, feed := alertStack(t)
	g := s.gw()
	reportsCounters := func() bool {
		doc, err := s.rdb.HGet(t.Context(), "ratelimit:gateways", g.NodeID).Result()
		var r map[string]any
		return err == nil && json.Unmarshal([]byte(doc), &r) == nil && r["blocked_total"] != nil
	}
	harness.Eventually(t, 15*time.Second, "the gateway's first report", func() bool {
		return s.rdb.HExists(t.Context(), "ratelimit:gateways", g.NodeID).Val()
	})
	if !reportsCounters() {
		t.Skip("the gateway does not report requests_total/blocked_total yet (contract §6)")
	}
	refused := 0
	for i := 0; i < 300; i++ {
		if r := g.Do("GET", "/bucket/obj", "tight", nil, nil); r.Status == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused < 100 {
		t.Fatalf("only %d of 300 requests refused", refused)
	}
	a := raised(t, api, feed, "block_rate_high-tight", "tight driven over its limit")
	if a.Severity != "warning" || !strings.Contains(a.Message, "requests blocked") {
		t.Fatalf("alert %+v", a)
	}
	if _, ok := activeAlerts(api)["block_rate_high-demo-p1"]; ok {
		t.Fatal("an app without traffic alerted")
	}
}
