package t

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/t/harness"
)

// brkState is one breaker of a node (/_t/breakers, the node report's `breakers`).
type brkState struct {
	State    string `json:"state"`
	Failures int64  `json:"failures"`
	Requests int64  `json:"requests"`
	OpenedAt int64  `json:"opened_at"`
	RetryAt  int64  `json:"retry_at"`
}

func breakersOf(g *harness.Gateway) map[string]brkState {
	m := map[string]brkState{}
	g.T("breakers", &m)
	return m
}

// putBreaker writes a breaker config the way the control plane does (config bump + notice)
// and waits until the node enforces that version.
func (s *stack) putBreaker(name string, cfg map[string]any) {
	s.t.Helper()
	cfg["name"] = name
	b, _ := json.Marshal(cfg)
	ctx := context.Background()
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, keys.BreakersIndex(), name, string(b))
	ver := pipe.Incr(ctx, keys.ConfigVersion())
	pipe.Publish(ctx, keys.ConfigChannel(), "breaker")
	if _, err := pipe.Exec(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.waitVersion(ver.Val())
}

// waitBreaker polls the node until breaker key is in state `state` after `requests` outcomes
// (requests < 0: any count).
func waitBreaker(t *testing.T, g *harness.Gateway, key, state string, requests int64) brkState {
	t.Helper()
	var b brkState
	eventually(t, "breaker "+key+" "+state, func() bool {
		b = breakersOf(g)[key]
		return b.State == state && (requests < 0 || b.Requests == requests)
	})
	return b
}

type circuitBody struct {
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	Backend    string `json:"backend"`
	RetryAfter int    `json:"retry_after"`
}

// isCircuitOpen: the breaker's own 503 (not a 503 of the backend).
func isCircuitOpen(t *testing.T, r *harness.Response, backend string) bool {
	t.Helper()
	if r.Status != 503 || r.Header.Get("Content-Type") != "application/json" {
		return false
	}
	var b circuitBody
	r.JSON(t, &b)
	if b.Reason != "circuit_open" {
		return false
	}
	if b.Error != "service_unavailable" || b.Backend != backend || b.RetryAfter < 1 ||
		r.Header.Get("Retry-After") != strconv.Itoa(b.RetryAfter) {
		t.Fatalf("circuit_open response: body %s, Retry-After %q", r.Body, r.Header.Get("Retry-After"))
	}
	return true
}

func backendHits(g *harness.Gateway) int64 {
	var h struct {
		Hits int64 `json:"hits"`
	}
	g.T("backend_hits", &h)
	return h.Hits
}

func breakerCfg(overrides map[string]any) map[string]any {
	c := map[string]any{
		"enabled": true, "per_app": false, "window_ms": 60000, "min_requests": 4,
		"failure_threshold": 3, "failure_ratio": 0.5, "open_timeout_ms": 1500,
		"success_threshold": 2, "half_open_max_inflight": 1,
		"failure_statuses": []int{500, 502, 503, 504},
	}
	for k, v := range overrides {
		c[k] = v
	}
	return c
}

// The whole state machine, driven by a backend that fails on command: closed -> open after
// threshold and ratio, refusals while open (never charged), half-open probe limit, a failed
// probe re-opens, success_threshold probes close.
func TestBreaker01StateMachine(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-a", 10000, 20000), app("brk-fresh", 10000, 20000))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(nil))

	for i := 0; i < 2; i++ {
		if r := g.Do("GET", "/b/o", "brk-a", nil, nil); r.Status != 200 {
			t.Fatalf("healthy backend: %d %s", r.Status, r.Body)
		}
	}
	g.T("fail?status=503", nil)
	// 2 failures of 4 requests: under the threshold of 3
	for i := 0; i < 2; i++ {
		if r := g.Do("GET", "/b/o", "brk-a", nil, nil); r.Status != 503 || isCircuitOpen(t, r, "default") {
			t.Fatalf("failing backend: want its own 503, got %d %s", r.Status, r.Body)
		}
	}
	b := waitBreaker(t, g, "default", "closed", 4)
	if b.Failures != 2 {
		t.Fatalf("window after 2 failures: %+v", b)
	}
	// the third failure (3 of 5, ratio 0.6) opens it
	if r := g.Do("GET", "/b/o", "brk-a", nil, nil); r.Status != 503 || isCircuitOpen(t, r, "default") {
		t.Fatalf("third failure must still reach the backend: %d %s", r.Status, r.Body)
	}
	b = waitBreaker(t, g, "default", "open", 5)
	if b.Failures != 3 || b.OpenedAt == 0 || b.RetryAt < b.OpenedAt {
		t.Fatalf("open breaker: %+v", b)
	}

	// open: refused with the contract's 503, nothing reaches the backend, nothing is charged
	hits := backendHits(g)
	for i := 0; i < 5; i++ {
		if r := g.Do("GET", "/b/o", "brk-fresh", nil, nil); !isCircuitOpen(t, r, "default") {
			t.Fatalf("open breaker let a request through: %d %s", r.Status, r.Body)
		}
	}
	if h := backendHits(g); h != hits {
		t.Fatalf("backend served %d requests while the breaker was open", h-hits)
	}
	if st := g.State("brk-fresh"); st.Tokens != 0 || st.PendingCount != 0 || st.PendingCost != 0 {
		t.Fatalf("refused requests were charged: %+v", st)
	}
	if l := s.leases("brk-fresh"); len(l) != 0 {
		t.Fatalf("refused requests took a lease: %v", l)
	}
	eventually(t, "ratelimit_circuit_rejected_total", func() bool {
		return g.Metric(`ratelimit_circuit_rejected_total{backend="default"}`) >= 5
	})
	if v := g.Metric(`ratelimit_circuit_state{backend="default"}`); v != 2 {
		t.Fatalf("ratelimit_circuit_state = %v while open", v)
	}

	// half-open after open_timeout_ms: one probe at a time; a failed probe re-opens
	var r *harness.Response
	eventually(t, "a half-open probe reaching the failing backend", func() bool {
		r = g.Do("GET", "/b/o", "brk-a", nil, nil)
		return !isCircuitOpen(t, r, "default")
	})
	if r.Status != 503 {
		t.Fatalf("probe to the failing backend: %d %s", r.Status, r.Body)
	}
	waitBreaker(t, g, "default", "open", -1)
	if r := g.Do("GET", "/b/o", "brk-a", nil, nil); !isCircuitOpen(t, r, "default") {
		t.Fatalf("a failed probe must re-open the breaker: %d %s", r.Status, r.Body)
	}

	// heal; once the open timeout passed, the first probe is held at the backend while a
	// second request is refused; two successful probes close the breaker
	g.T("heal", nil)
	retryAt := waitBreaker(t, g, "default", "open", -1).RetryAt
	eventually(t, "the open timeout to pass", func() bool { return time.Now().Unix() > retryAt })
	hits = backendHits(g)
	probe := make(chan *harness.Response, 1)
	go func() { probe <- g.Do("GET", "/b/o?ms=1500", "brk-a", nil, nil) }()
	eventually(t, "the probe at the backend", func() bool { return backendHits(g) > hits })
	if b := breakersOf(g)["default"]; b.State != "half_open" {
		t.Fatalf("breaker while probing: %+v", b)
	}
	if r := g.Do("GET", "/b/o", "brk-a", nil, nil); !isCircuitOpen(t, r, "default") {
		t.Fatalf("half_open_max_inflight 1: a second request went through: %d %s", r.Status, r.Body)
	}
	if r := <-probe; r.Status != 200 {
		t.Fatalf("probe: %d %s", r.Status, r.Body)
	}
	eventually(t, "the second probe", func() bool {
		r = g.Do("GET", "/b/o", "brk-a", nil, nil)
		return !isCircuitOpen(t, r, "default")
	})
	if r.Status != 200 {
		t.Fatalf("probe: %d %s", r.Status, r.Body)
	}
	waitBreaker(t, g, "default", "closed", -1)
	if r := g.Do("GET", "/b/o", "brk-a", nil, nil); r.Status != 200 {
		t.Fatalf("closed breaker: %d %s", r.Status, r.Body)
	}

	// metrics and events of the transitions
	eventually(t, "transition counters", func() bool {
		return g.Metric(`ratelimit_circuit_transitions_total{backend="default",to="open"}`) == 2 &&
			g.Metric(`ratelimit_circuit_transitions_total{backend="default",to="half_open"}`) == 2 &&
			g.Metric(`ratelimit_circuit_transitions_total{backend="default",to="closed"}`) == 1
	})
	eventually(t, "circuit events in the stream", func() bool {
		return len(s.eventsOf("circuit_opened", "")) == 2 && len(s.eventsOf("circuit_closed", "")) == 1
	}, func() { t.Logf("stream: %v", s.streamEvents()) })
	ev := s.eventsOf("circuit_opened", "")[0]
	for k, v := range map[string]string{"rule_id": "default", "rule_type": "breaker",
		"action_taken": "opened", "severity": "error", "current_usage": "3", "node_id": "node-1"} {
		if ev[k] != v {
			t.Errorf("circuit_opened %s = %v, want %s (%v)", k, ev[k], v, ev)
		}
	}
	if blocked := s.eventsOf("request_blocked", "brk-fresh"); len(blocked) == 0 ||
		blocked[0]["rule_type"] != "breaker" || blocked[0]["response_code"] != "503" {
		t.Errorf("request_blocked events of circuit refusals: %v", blocked)
	}
}

// per_app: one app's failures open its own breaker only.
func TestBreaker02PerAppIsolation(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-bad", 10000, 20000), app("brk-good", 10000, 20000))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(map[string]any{"per_app": true, "open_timeout_ms": 60000}))
	for i := 0; i < 4; i++ {
		if r := g.Do("GET", "/b/o?code=500", "brk-bad", nil, nil); r.Status != 500 {
			t.Fatalf("failing request: %d %s", r.Status, r.Body)
		}
	}
	waitBreaker(t, g, "default/brk-bad", "open", 4)
	if r := g.Do("GET", "/b/o", "brk-bad", nil, nil); !isCircuitOpen(t, r, "default") {
		t.Fatalf("brk-bad's breaker is open: %d %s", r.Status, r.Body)
	}
	for i := 0; i < 5; i++ {
		if r := g.Do("GET", "/b/o", "brk-good", nil, nil); r.Status != 200 {
			t.Fatalf("brk-good must not be refused by brk-bad's breaker: %d %s", r.Status, r.Body)
		}
	}
	b := waitBreaker(t, g, "default/brk-good", "closed", 5)
	if b.Failures != 0 {
		t.Fatalf("brk-good's breaker: %+v", b)
	}
	if v := g.Metric(`ratelimit_circuit_state{backend="default"}`); v != 2 {
		t.Fatalf("ratelimit_circuit_state{backend} is the worst of its breakers: %v", v)
	}
	eventually(t, "circuit_opened of brk-bad", func() bool { return len(s.eventsOf("circuit_opened", "brk-bad")) == 1 })
}

// No trip below min_requests, however many of the requests failed.
func TestBreaker03MinRequests(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-min", 10000, 20000))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(map[string]any{"min_requests": 8}))
	for i := 1; i <= 8; i++ {
		if r := g.Do("GET", "/b/o?code=503", "brk-min", nil, nil); r.Status != 503 || isCircuitOpen(t, r, "default") {
			t.Fatalf("request %d: want the backend's 503, got %d %s", i, r.Status, r.Body)
		}
		if i < 8 {
			if b := waitBreaker(t, g, "default", "closed", int64(i)); b.Failures != int64(i) {
				t.Fatalf("after %d failures: %+v", i, b)
			}
		}
	}
	waitBreaker(t, g, "default", "open", 8)
}

// Statuses outside failure_statuses are successes; the ratio counts them.
func TestBreaker04NonFailureStatuses(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-st", 10000, 20000))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(map[string]any{"failure_statuses": []int{503},
		"failure_ratio": 0.5}))
	for _, code := range []int{500, 404, 502, 500, 504, 403} {
		if r := g.Do("GET", "/b/o?code="+strconv.Itoa(code), "brk-st", nil, nil); r.Status != code {
			t.Fatalf("backend status %d passed through as %d", code, r.Status)
		}
	}
	if b := waitBreaker(t, g, "default", "closed", 6); b.Failures != 0 {
		t.Fatalf("statuses outside failure_statuses counted as failures: %+v", b)
	}
	// 5 failures of 11 requests: ratio 0.45 < 0.5 keeps it closed, the 6th (6 of 12) opens it
	for i := 1; i <= 5; i++ {
		g.Do("GET", "/b/o?code=503", "brk-st", nil, nil)
	}
	if b := waitBreaker(t, g, "default", "closed", 11); b.Failures != 5 {
		t.Fatalf("after 5 failures: %+v", b)
	}
	g.Do("GET", "/b/o?code=503", "brk-st", nil, nil)
	waitBreaker(t, g, "default", "open", 12)
}

// A backend nobody listens on: nginx's 502 counts as a failure even when 502 is not in
// failure_statuses; a location names its backend with $tollgate_backend.
func TestBreaker05ConnectErrorsAndNamedBackends(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-c", 10000, 20000))})
	g := s.gw()
	s.putBreaker("dead", breakerCfg(map[string]any{"failure_statuses": []int{500},
		"min_requests": 2, "failure_threshold": 2, "open_timeout_ms": 60000}))
	s.putBreaker("named", breakerCfg(nil))
	do := func(path string) *harness.Response {
		req, _ := http.NewRequest("GET", g.TestURL+path, nil)
		req.Header.Set("X-App-Id", "brk-c")
		resp, err := g.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b []byte
		b, _ = io.ReadAll(resp.Body)
		return &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}
	for i := 0; i < 2; i++ {
		if r := do("/_dead/o"); r.Status != 502 {
			t.Fatalf("connect error: %d %s", r.Status, r.Body)
		}
	}
	waitBreaker(t, g, "dead", "open", 2)
	if r := do("/_dead/o"); !isCircuitOpen(t, r, "dead") {
		t.Fatalf("open breaker of backend dead: %d %s", r.Status, r.Body)
	}
	// other backends are not affected; the named one counts its own requests
	if r := do("/_named/o"); r.Status != 200 {
		t.Fatalf("backend named: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/b/o", "brk-c", nil, nil); r.Status != 200 {
		t.Fatalf("default backend: %d %s", r.Status, r.Body)
	}
	waitBreaker(t, g, "named", "closed", 1)
	if _, ok := breakersOf(g)["default"]; ok {
		t.Fatal("no breaker is configured for backend default")
	}
}

// A damaged config keeps the last good one on the node and counts a config error.
func TestBreaker06DamagedConfigKeepsLastGood(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("brk-dmg", 10000, 20000))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(map[string]any{"min_requests": 2, "failure_threshold": 2}))
	errs := g.Metric("ratelimit_config_errors_total")
	ctx := context.Background()
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, keys.BreakersIndex(), "default", `{"name":"default","window_ms":"soon"}`)
	ver := pipe.Incr(ctx, keys.ConfigVersion())
	pipe.Publish(ctx, keys.ConfigChannel(), "breaker")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	s.waitVersion(ver.Val())
	if e := g.Metric("ratelimit_config_errors_total"); e <= errs {
		t.Fatalf("config errors %v -> %v after a damaged breaker", errs, e)
	}
	for i := 0; i < 2; i++ {
		g.Do("GET", "/b/o?code=500", "brk-dmg", nil, nil)
	}
	waitBreaker(t, g, "default", "open", 2)
}
