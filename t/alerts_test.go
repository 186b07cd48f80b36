// Alerts provoked for real (docs/rules-contract.md §9): a real gateway and control plane on one
// Redis; each condition is caused through nginx or the admin API, the alert is listed by
// GET /api/v1/alerts and pushed over the WebSocket, and resolves when the condition ends.
package t

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"tollgate/internal/keys"
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

// index is the position of the first message that pushed the alert with id in the given
// state, -1 if none.
func (f *alertFeed) index(id string, active bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.msgs {
		if m.ID == id && m.Active == active {
			return i
		}
	}
	return -1
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

// alertOptions: extra settings of the gateway and of the control plane of an alert stack.
type alertOptions struct {
	gw, cp map[string]string
}

func alertStack(t *testing.T) (*stack, *adminAPI, *alertFeed) {
	t.Helper()
	return alertStackWith(t, alertOptions{})
}

// gatewayEnv is the gateway settings of an alert stack with o's extras.
func (o alertOptions) gatewayEnv() map[string]string {
	// the connection alerts hold an app's slots from one address: no per-address share
	gw := map[string]string{"TOLLGATE_CONN_STATS_INTERVAL": "0.5", "TOLLGATE_DEGRADATION_HOLD": "0.5",
		"TOLLGATE_CONN_CLIENT_SHARE": "1"}
	maps.Copy(gw, o.gw)
	return gw
}

func alertStackWith(t *testing.T, o alertOptions) (*stack, *adminAPI, *alertFeed) {
	t.Helper()
	s := newStack(t, stackOptions{
		env: o.gatewayEnv(),
		// tight: 5 tokens/s, a burst of requests is mostly refused; roomy: never short of tokens
		apps: appsOf(app("tight", 5, 5), app("roomy", 10000, 20000)),
	})
	cp := map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "500ms",
		"TOLLGATE_API_RATE": "1000", "TOLLGATE_API_BURST": "1000"}
	maps.Copy(cp, o.cp)
	api := loginAdmin(t, harness.StartControlPlane(t, s.redis.URL(), cp))
	return s, api, subscribeAlerts(t, api)
}

// alertIDOf is the id the control plane gives the alert of kind on resource: "<kind>-<resource>",
// or the kind and a hash when the resource is no plain id (docs/rules-contract.md §9).
func alertIDOf(kind, resource string) string {
	id := kind + "-" + resource
	if !keys.ValidID(id) {
		sum := sha256.Sum256([]byte(resource))
		id = kind + "-" + hex.EncodeToString(sum[:16])
	}
	return id
}

// seenByControlPlane waits until the control plane's cluster view has the node's report with
// its counters: from then on, the node's traffic counts (a node's first report is a baseline).
func seenByControlPlane(t *testing.T, api *adminAPI, node string) {
	t.Helper()
	slowly(t, alertWait, "node "+node+" with its counters in GET /api/v1/nodes", func() bool {
		var out struct {
			Data []struct {
				NodeID        string `json:"node_id"`
				Stale         bool   `json:"stale"`
				RequestsTotal *int64 `json:"requests_total"`
			} `json:"data"`
		}
		api.do("GET", "/api/v1/nodes", nil, &out)
		for _, n := range out.Data {
			if n.NodeID == node {
				return !n.Stale && n.RequestsTotal != nil
			}
		}
		return false
	})
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

// block_rate_high: an app driven over its limit through nginx (a rule of 100 requests a day:
// 15 of 115 refused, 13 %) raises the alert for the app and for all apps; the limit lifted, 60
// more requests bring the rate to 15 of 175 (8.6 %) and both resolve. The 5-min window itself
// (an old block rate falls out) is proven in controlplane/internal/live's unit tests.
func TestAlertBlockRateHigh(t *testing.T) {
	s, api, feed := alertStack(t)
	g := s.gw()
	seenByControlPlane(t, api, g.NodeID)
	s.waitVersion(api.change("POST", "/api/v1/rules", map[string]any{"id": "roomy-daily", "scope": "app",
		"match": map[string]any{"app_ids": []string{"roomy"}}, "algorithm": "token_bucket", "limit": 1,
		"window_seconds": 86400, "burst": 100}))
	if got := admitted(t, g, 115, "GET", "/bucket/obj", "roomy", "roomy-daily", nil); got != 100 {
		t.Fatalf("%d of 115 admitted, want the rule's 100", got)
	}
	app, all := alertIDOf("block_rate_high", "roomy"), alertIDOf("block_rate_high", "*")
	raised(t, api, feed, app, "roomy over its limit")
	raised(t, api, feed, all, "roomy over its limit")
	// the counters of all 115 requests reach the control plane
	slowly(t, alertWait, "the alerts on all 115 requests", func() bool {
		l := activeAlerts(api)
		return strings.Contains(l[app].Message, "app roomy: 13% of 115 requests blocked") &&
			strings.Contains(l[all].Message, "all apps: 13% of 115 requests blocked")
	})
	l := activeAlerts(api)
	for _, id := range []string{app, all} {
		if a := l[id]; a.Severity != "warning" || a.Kind != "block_rate_high" {
			t.Fatalf("alert %+v", a)
		}
	}
	if a := l[all]; a.Resource != "*" {
		t.Fatalf("all-apps alert %+v, want resource *", a)
	}
	for _, other := range []string{"tight", "demo-p1"} {
		if a, ok := l[alertIDOf("block_rate_high", other)]; ok {
			t.Fatalf("an app without traffic alerted: %+v", a)
		}
	}
	// the limit lifted: 60 more admitted requests, 15 of 175 blocked
	s.waitVersion(api.change("DELETE", "/api/v1/rules/roomy-daily", nil))
	if got := admitted(t, g, 60, "GET", "/bucket/obj", "roomy", "", nil); got != 60 {
		t.Fatalf("%d of 60 admitted without the rule", got)
	}
	resolved(t, api, feed, app, "15 of 175 blocked")
	resolved(t, api, feed, all, "15 of 175 blocked")
}

// circuit_open: breaker "default" tripped by a backend that fails on command (breaker "named"
// stays closed and never alerts); healed, probes close it and the alert resolves.
func TestAlertCircuitOpen(t *testing.T) {
	s, api, feed := alertStack(t)
	g := s.gw()
	s.waitVersion(api.change("PUT", "/api/v1/breakers/default", breakerCfg(map[string]any{"open_timeout_ms": 1000})))
	s.waitVersion(api.change("PUT", "/api/v1/breakers/named", breakerCfg(nil)))
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("GET", g.TestURL+"/_named/o", nil)
		req.Header.Set("X-App-Id", "roomy")
		resp, err := g.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("backend named: %d", resp.StatusCode)
		}
	}
	waitBreaker(t, g, "named", "closed", 2)
	g.T("fail?status=503", nil)
	eventually(t, "breaker default open", func() bool {
		if breakersOf(g)["default"].State == "open" {
			return true
		}
		if r := g.Do("GET", "/b/o", "roomy", nil, nil); r.Status != 503 {
			t.Fatalf("failing backend: %d %s", r.Status, r.Body)
		}
		return false
	})
	id := alertIDOf("circuit_open", "default")
	a := raised(t, api, feed, id, "breaker default open")
	if a.Severity != "critical" || a.Resource != "default" || !strings.Contains(a.Message, g.NodeID+" (open)") {
		t.Fatalf("alert %+v", a)
	}
	if a, ok := activeAlerts(api)[alertIDOf("circuit_open", "named")]; ok {
		t.Fatalf("a closed breaker alerted: %+v", a)
	}
	g.T("heal", nil)
	eventually(t, "breaker default closed by its probes", func() bool {
		if breakersOf(g)["default"].State == "closed" {
			return true
		}
		if r := g.Do("GET", "/b/o", "roomy", nil, nil); r.Status != 200 && !isCircuitOpen(t, r, "default") {
			t.Fatalf("healed backend: %d %s", r.Status, r.Body)
		}
		return false
	})
	resolved(t, api, feed, id, "breaker default closed")
}

// connections_leaked and cleanup_stalled on a gateway whose cleanup runs every 15 s, judged
// stalled by the control plane after 8 s (TOLLGATE_ALERT_CLEANUP_STALLED): the cleanup has not
// run 8 s after the start, so the node is stalled; a worker killed with requests in flight
// leaves slots that the first cleanup run force-releases: leaked, and no longer stalled. The
// leak alert's 5-min hold is proven in controlplane/internal/live's unit tests.
func TestAlertConnectionsLeakedAndCleanup(t *testing.T) {
	s, api, feed := alertStackWith(t, alertOptions{
		gw: map[string]string{"TOLLGATE_CONN_TIMEOUT": "2", "TOLLGATE_CONN_CLEANUP_INTERVAL": "15"},
		cp: map[string]string{"TOLLGATE_ALERT_CLEANUP_STALLED": "8s"},
	})
	g := s.gw()
	seenByControlPlane(t, api, g.NodeID)
	h := newHolder(t, g)
	results := h.start("roomy", "leak", 4)
	eventually(t, "4 requests in flight", func() bool { return connStateOf(g, "roomy").AppCurrent == 4 })
	var ws []struct {
		PID     int  `json:"pid"`
		Live    bool `json:"live"`
		Records int  `json:"records"`
	}
	g.T("conn_workers", &ws)
	victim, held := 0, 0
	for _, w := range ws {
		if w.Live && w.Records > held {
			victim, held = w.PID, w.Records
		}
	}
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(g.PID())).Output()
	if victim == 0 || err != nil || !strings.Contains("\n"+string(out), "\n"+strconv.Itoa(victim)+"\n") {
		t.Fatalf("no worker of master %d holds the requests: %+v, children %q %v", g.PID(), ws, out, err)
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	stalled, leaked := alertIDOf("cleanup_stalled", g.NodeID), alertIDOf("connections_leaked", g.NodeID)
	a := raised(t, api, feed, stalled, "no cleanup run for 8 s")
	if a.Severity != "warning" || a.Resource != g.NodeID || !strings.Contains(a.Message, "more than 8s ago") {
		t.Fatalf("alert %+v", a)
	}
	if _, ok := feed.pushed(leaked, true); ok {
		t.Fatal("a leak alert before any cleanup run")
	}
	a = raised(t, api, feed, leaked, "the cleanup force-released the killed worker's slots")
	if a.Severity != "warning" || a.Resource != g.NodeID ||
		!strings.Contains(a.Message, "force-released "+strconv.Itoa(held)+" leaked") {
		t.Fatalf("alert %+v, want %d slots", a, held)
	}
	// resolved by that cleanup run (the report that shows the run shows the leak), not before
	slowly(t, alertWait, "cleanup_stalled resolved by the cleanup run", func() bool {
		_, ok := feed.pushed(stalled, false)
		return ok
	})
	if r, l := feed.index(stalled, false), feed.index(leaked, true); r < l {
		t.Fatalf("cleanup_stalled resolved (message %d) before the cleanup ran (leak raised, message %d)", r, l)
	}
	h.unhold("leak")
	for r := range results {
		_ = r // the killed worker's requests fail at the client, the others are answered
	}
}

// lastSeen is the node's last report as the control plane has it (GET /api/v1/nodes), Unix s.
func lastSeen(api *adminAPI, node string) int64 {
	var out struct {
		Data []struct {
			NodeID   string `json:"node_id"`
			LastSeen int64  `json:"last_seen"`
		} `json:"data"`
	}
	api.do("GET", "/api/v1/nodes", nil, &out)
	for _, n := range out.Data {
		if n.NodeID == node {
			return n.LastSeen
		}
	}
	return 0
}

// traffic_spike with the windows shortened (TOLLGATE_ALERT_SPIKE_*: the last 5 s against a
// baseline of at least 10 s, instead of 1 min against 10-30 min): an app at a steady ~4 req/s,
// then 600 requests at once, raises the alert for that app; once the burst is out of the
// window it resolves. The default windows are proven in controlplane/internal/live's unit tests.
// The node reports every second here: with the default 5 s, a 5 s window holds one or two
// reports' worth of requests, and steady traffic can read as twice its rate.
func TestAlertTrafficSpike(t *testing.T) {
	s, api, feed := alertStackWith(t, alertOptions{
		gw: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"},
		cp: map[string]string{"TOLLGATE_ALERT_SPIKE_WINDOW": "5s",
			"TOLLGATE_ALERT_SPIKE_BASELINE": "30s", "TOLLGATE_ALERT_SPIKE_MIN_HISTORY": "10s"}})
	g := s.gw()
	seenByControlPlane(t, api, g.NodeID)
	since := lastSeen(api, g.NodeID)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the steady traffic, paced by a ticker (a load shape, not a wait)
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				g.Do("GET", "/bucket/obj", "roomy", nil, nil)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	id := alertIDOf("traffic_spike", "roomy")
	// 15 s of steady traffic in the reports: a baseline of >= 10 s that ends 5 s ago
	slowly(t, alertWait, "15 s of steady traffic reported", func() bool { return lastSeen(api, g.NodeID) >= since+15 })
	if a, ok := activeAlerts(api)[id]; ok {
		t.Fatalf("steady traffic alerted: %+v", a)
	}
	var burst sync.WaitGroup
	var sent, failed atomic.Int64
	for i := 0; i < 6; i++ {
		burst.Add(1)
		go func() {
			defer burst.Done()
			for sent.Add(1) <= 600 {
				if r := g.Do("GET", "/bucket/obj", "roomy", nil, nil); r.Status != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	burst.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of 600 burst requests refused", n)
	}
	a := raised(t, api, feed, id, "600 requests at once")
	if a.Severity != "warning" || a.Resource != "roomy" || !strings.Contains(a.Message, "app roomy:") ||
		!strings.Contains(a.Message, "over the last 5s") {
		t.Fatalf("alert %+v", a)
	}
	for _, other := range []string{"tight", "demo-p1"} {
		if a, ok := activeAlerts(api)[alertIDOf("traffic_spike", other)]; ok {
			t.Fatalf("an app without traffic alerted: %+v", a)
		}
	}
	resolved(t, api, feed, id, "the burst out of the window")
}

// killGateway kills the gateway's nginx with SIGKILL, master first (so that it respawns no
// worker) then its workers, and waits until none of them runs: no final report, no lease
// returned, its shared memory gone.
func killGateway(t *testing.T, g *harness.Gateway) {
	t.Helper()
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(g.PID())).Output()
	if err != nil {
		t.Fatalf("workers of nginx %d: %v", g.PID(), err)
	}
	pids := []int{g.PID()}
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pgrep: %q", out)
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	eventually(t, "nginx killed", func() bool {
		for _, pid := range pids {
			if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil &&
				!strings.Contains(string(stat), ") Z ") {
				return false
			}
		}
		return true
	})
}

// drift_high. Drift is what an app's lease ledger cannot account for: per node, granted −
// consumed − returned − held − unreported (redis-scripts/README.md). A gateway killed with
// SIGKILL leaves a balanced ledger (its last report's held plus the grants since), which the
// reconciliation measures as no drift and would reap after TOLLGATE_CP_REAP_AFTER. Restarted
// under the same node id before that, the node's first report replaces the dead process's lease
// by its new one: the tokens the dead process held were granted and are never accounted for.
// With the reconciliation every 4 s, that lease (~1000 tokens) against the window's grants is
// far above 5 %: the alert is raised, the job corrects the ledger (above its 10 % tolerance) by
// exactly the lost tokens, and the next window is clean, so the alert resolves.
func TestAlertDriftHigh(t *testing.T) {
	o := alertOptions{
		// an idle node keeps its lease (by default it returns it to L2 after 1 s)
		gw: map[string]string{"TOLLGATE_IDLE_RETURN": "3600"},
		cp: map[string]string{"TOLLGATE_CP_JOBS": "true", "TOLLGATE_CP_RECONCILE_INTERVAL": "4s",
			"TOLLGATE_CP_REAP_AFTER": "10m"},
	}
	s, api, feed := alertStackWith(t, o)
	g := s.gw()
	node := g.NodeID
	for i := 0; i < 20; i++ {
		if r := g.Do("GET", "/bucket/obj", "roomy", nil, nil); r.Status != 200 {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	slowly(t, alertWait, "the consumption reported, the rest of the lease in the ledger", func() bool {
		l, led := g.State("roomy"), s.leases("roomy")
		held := int64(led[node+":held"])
		return l.PendingCost == 0 && l.Inflight == "" && led[node+":unreported"] == 0 && held > 0 &&
			held == l.Tokens-l.Debt
	})

	killGateway(t, g)
	killed := time.Now().Unix()
	led := s.leases("roomy")
	lost := int64(led[node+":held"] + led[node+":unreported"])
	if lost < 100 {
		t.Fatalf("the killed node held %d tokens, want a lease: %v", lost, led)
	}
	// the kill alone is no drift: the next reconciliation finds the ledger balanced
	slowly(t, alertWait, "a reconciliation after the kill", func() bool {
		return int64(s.stats("roomy")["last_reconcile"]) > killed
	})
	if st := s.stats("roomy"); st["last_drift_ppm"] != 0 || st["correction_count"] != 0 {
		t.Fatalf("drift measured before the restart: %v", st)
	}
	if _, ok := s.leases("roomy")[node+":granted"]; !ok {
		t.Fatalf("the killed node's ledger reaped within TOLLGATE_CP_REAP_AFTER: %v", s.leases("roomy"))
	}

	g2 := harness.StartGateway(t, harness.GatewayOptions{RedisURL: s.gwURL, NodeID: node,
		Env: o.gatewayEnv()})
	if r := g2.Do("GET", "/bucket/obj", "roomy", nil, nil); r.Status != 200 {
		t.Fatalf("restarted node: %d %s", r.Status, r.Body)
	}
	id := alertIDOf("drift_high", "roomy")
	a := raised(t, api, feed, id, "the restarted node's report")
	if a.Kind != "drift_high" || a.Severity != "warning" || a.Resource != "roomy" ||
		!strings.HasPrefix(a.Message, "app roomy: lease drift ") || !strings.HasSuffix(a.Message, "above 5%") {
		t.Fatalf("alert %+v", a)
	}
	if st := s.stats("roomy"); st["correction_count"] != 1 || int64(st["last_correction"]) != lost {
		t.Fatalf("stats %v, want one correction of the %d lost tokens", st, lost)
	}
	for other, al := range activeAlerts(api) {
		if al.Kind == "drift_high" && other != id {
			t.Fatalf("an app without drift alerted: %+v", al)
		}
	}
	t.Logf("lost %d tokens: %s", lost, a.Message)
	resolved(t, api, feed, id, "the next window clean")
}
