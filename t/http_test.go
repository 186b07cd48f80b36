package t

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tollgate/internal/store"
)

type rejection struct {
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	RetryAfter *int   `json:"retry_after"`
	Remaining  *int   `json:"remaining"`
	Cost       *int   `json:"cost"`
}

func TestAdmittedRequestCarriesCostHeaders(t *testing.T) {
	s := newStack(t, stackOptions{})
	r := s.gw().Do("PUT", "/bucket/obj", "demo-p1", strings.NewReader(strings.Repeat("a", 70000)), nil)
	if r.Status != 200 {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	if r.Cost() != 5+2 {
		t.Fatalf("X-RateLimit-Cost = %q, want 7 (PUT 5 + 2 units of 64 KiB)", r.Header.Get("X-RateLimit-Cost"))
	}
	if rem, err := strconv.Atoi(r.Header.Get("X-RateLimit-Remaining")); err != nil || rem < 0 {
		t.Fatalf("X-RateLimit-Remaining = %q, want a non-negative number", r.Header.Get("X-RateLimit-Remaining"))
	}
}

// X-RateLimit-Remaining is the lease's exact remaining tokens at any size: up to 65535 the
// header variable takes a cached string, above it the digits are written into a C buffer
// (tollgate.request.numvar) — both sides of that edge, every digit count, and random values. (Never 0:
// an empty lease would start a refill that lands in a later case.)
func TestRemainingHeaderIsExact(t *testing.T) {
	s := newStack(t, stackOptions{env: quiet(map[string]string{"TOLLGATE_RESERVE_TARGET": "1"})})
	g := s.gw()
	remaining := func(tokens int64) (got string, cost int64) {
		g.T("set?app=demo-p0&tokens="+strconv.FormatInt(tokens, 10), nil)
		r := g.Do("PUT", "/bucket/obj", "demo-p0", strings.NewReader("x"), nil)
		if r.Status != 200 || r.Cost() <= 0 {
			t.Fatalf("status %d, cost %q: %s", r.Status, r.Header.Get("X-RateLimit-Cost"), r.Body)
		}
		return r.Header.Get("X-RateLimit-Remaining"), int64(r.Cost())
	}
	_, cost := remaining(1000)
	check := func(want int64) {
		got, c := remaining(want + cost)
		if c != cost || got != strconv.FormatInt(want, 10) {
			t.Fatalf("lease %d, cost %d: X-RateLimit-Remaining = %q, want %d", want+cost, c, got, want)
		}
	}
	for _, want := range []int64{1, 9, 65535, 65536, 99999, 100000, 123456789012, 1<<52 - 1} {
		check(want)
	}
	rapid.Check(t, func(rt *rapid.T) {
		check(rapid.Int64Range(1, 1<<52).Draw(rt, "remaining"))
	})
}

func TestInvalidAppIDs(t *testing.T) {
	s := newStack(t, stackOptions{})
	before := s.scriptCalls()
	cases := []struct {
		name   string
		values []string
		status int
		reason string
	}{
		{"empty", []string{""}, 400, "invalid_app_id"},
		{"space", []string{"a b"}, 400, "invalid_app_id"},
		{"colon", []string{"demo:p1"}, 400, "invalid_app_id"},
		{"brace", []string{"{default}"}, 400, "invalid_app_id"},
		{"traversal", []string{"../etc"}, 400, "invalid_app_id"},
		{"unicode", []string{"démo"}, 400, "invalid_app_id"},
		{"129 chars", []string{strings.Repeat("a", 129)}, 400, "invalid_app_id"},
		{"duplicated", []string{"demo-p1", "demo-p1"}, 400, "duplicate_app_id"},
		{"duplicated differing", []string{"demo-p1", "demo-p2"}, 400, "duplicate_app_id"},
		{"unknown", []string{"no-such-app"}, 403, "unknown_app"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", s.gw().URL+"/bucket/key", nil)
			for _, v := range c.values {
				req.Header.Add("X-App-Id", v)
			}
			resp, err := s.gw().Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body rejection
			if err := jsonDecode(resp, &body); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != c.status || body.Reason != c.reason {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body.Reason, c.status, c.reason)
			}
			if body.Message == "" {
				t.Fatalf("rejection without a message: %+v", body)
			}
		})
	}
	if after := s.scriptCalls(); after != before {
		t.Fatalf("invalid and unknown app ids reached Redis: %d script calls", after-before)
	}
}

// A huge app id is refused by tollgate's own check (400 invalid_app_id, before any Redis call)
// up to the largest header nginx takes (8 KiB per line by default); beyond that nginx refuses the
// request itself, still with a 4xx.
func TestHugeAppIDIsRefusedWith4xx(t *testing.T) {
	s := newStack(t, stackOptions{})
	before := s.scriptCalls()
	for _, n := range []int{1000, 8000} {
		r := s.gw().Do("GET", "/bucket/key", strings.Repeat("x", n), nil, nil)
		var body rejection
		if err := json.Unmarshal(r.Body, &body); err != nil || r.Status != 400 || body.Reason != "invalid_app_id" {
			t.Fatalf("%d-byte app id: %d %q, want tollgate's 400 invalid_app_id", n, r.Status, r.Body)
		}
	}
	if after := s.scriptCalls(); after != before {
		t.Fatalf("huge app ids reached Redis: %d script calls", after-before)
	}
	if r := s.gw().Do("GET", "/bucket/key", strings.Repeat("x", 10*1024), nil, nil); r.Status < 400 || r.Status >= 500 {
		t.Fatalf("10 KiB app id (beyond nginx's header limit): status %d, want 4xx", r.Status)
	}
}

func TestUnsupportedMethods(t *testing.T) {
	s := newStack(t, stackOptions{})
	for _, m := range []string{"FOO", "PROPFIND", "TRACE"} {
		r := s.gw().Do(m, "/bucket/key", "demo-p1", nil, nil)
		if r.Status != 405 {
			t.Fatalf("%s: status %d, want 405", m, r.Status)
		}
		// nginx answers TRACE itself; the others reach the limiter
		if m != "TRACE" {
			var body rejection
			r.JSON(t, &body)
			if body.Reason != "unsupported_method" {
				t.Fatalf("%s: reason %q", m, body.Reason)
			}
		}
	}
	if r := s.gw().Do("OPTIONS", "/bucket/key", "demo-p1", nil, nil); r.Status != 200 || r.Cost() != 1 {
		t.Fatalf("OPTIONS: status %d cost %d, want 200 and cost 1", r.Status, r.Cost())
	}
}

// An exhausted app gets the seed's 429 body and headers; Retry-After is never earlier than the
// time L2 needs to refill the deficit.
func TestExhaustedAppGets429WithRetryAfter(t *testing.T) {
	s := newStack(t, stackOptions{apps: []store.App{app("tiny", 10, 20)}})
	g := s.gw()
	admitted := 0
	var last *rejectionResponse
	for i := 0; i < 100 && last == nil; i++ {
		r := g.Do("DELETE", "/bucket/k"+strconv.Itoa(i), "tiny", nil, nil)
		switch r.Status {
		case 200:
			admitted++
		case 429:
			var body rejection
			r.JSON(t, &body)
			last = &rejectionResponse{r.Header, body}
		default:
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
	}
	if last == nil {
		t.Fatalf("no 429 after 100 DELETEs (cost 2) on an app with burst 20")
	}
	// burst 20 at cost 2 each plus what refilled meanwhile
	if admitted < 10 || admitted > 14 {
		t.Fatalf("admitted %d DELETEs of cost 2 from burst 20 at 10 tokens/s before a 429 %q; lease %+v, L2 %v",
			admitted, last.body.Reason, s.gw().State("tiny"), s.l2("tiny"))
	}
	b := last.body
	if b.Error != "rate_limit_exceeded" || b.Reason != "app_exhausted" || b.Cost == nil || *b.Cost != 2 ||
		b.RetryAfter == nil || b.Remaining == nil {
		t.Fatalf("429 body: %+v", b)
	}
	h := last.header
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || ra < 1 || ra != *b.RetryAfter {
		t.Fatalf("Retry-After %q vs body %d", h.Get("Retry-After"), *b.RetryAfter)
	}
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < time.Now().Unix() || reset > time.Now().Unix()+3 {
		t.Fatalf("X-RateLimit-Reset = %q, want within 3 s from now", h.Get("X-RateLimit-Reset"))
	}
	if h.Get("X-RateLimit-Cost") != "2" || h.Get("X-RateLimit-Remaining") == "" {
		t.Fatalf("X-RateLimit headers: %v", h)
	}
	if !strings.Contains(h.Get("RateLimit-Policy"), "q=10") || h.Get("RateLimit") == "" {
		t.Fatalf("IETF headers: policy %q limit %q", h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}
	eventually(t, "rejection counted", func() bool {
		return s.gw().Metric(`ratelimit_rejected_total{app_id="tiny",reason="app_exhausted"}`) >= 1
	})
	// the deficit is at most 2 tokens at 10 tokens/s: Retry-After is 1 s, and waiting that long works
	time.Sleep(time.Duration(ra) * time.Second)
	if r := g.Do("DELETE", "/bucket/after", "tiny", nil, nil); r.Status != 200 {
		t.Fatalf("after Retry-After: status %d, want 200", r.Status)
	}
}

type rejectionResponse struct {
	header http.Header
	body   rejection
}

// While the limiter refuses an app, /health and /metrics (on the monitoring listener) answer
// 200, and the limiter neither counts nor charges them (they never enter its access phase).
func TestHealthAndMetricsAreNeverLimited(t *testing.T) {
	s := newStack(t, stackOptions{apps: []store.App{app("tiny", 1, 1)}})
	g := s.gw()
	refused := func() bool {
		for i := 0; i < 20; i++ {
			if g.Do("GET", "/bucket/k", "tiny", nil, nil).Status == 429 {
				return true
			}
		}
		return false
	}
	if !refused() {
		t.Fatal("the limiter never refused app tiny (quota 1): nothing to show")
	}
	g.SettleMetrics()
	counted := sumSeries(t, g, "ratelimit_requests_total")
	for i := 0; i < 50; i++ {
		for _, p := range []string{"/health", "/metrics"} {
			if r := g.Monitor(p); r.Status != 200 {
				t.Fatalf("%s while app tiny is refused: %d", p, r.Status)
			}
		}
	}
	g.SettleMetrics()
	if after := sumSeries(t, g, "ratelimit_requests_total"); after != counted {
		t.Fatalf("the limiter counted %v of the /health and /metrics requests", after-counted)
	}
	if !refused() {
		t.Fatal("app tiny admitted again after the /health and /metrics requests")
	}
}

// Issue 19 item 8: /health and /metrics (every app id and its token levels) are served on
// their own listener only; on the tenants' listener they are ordinary, limited requests for a
// bucket, and the monitoring listener serves nothing else.
func TestMonitoringHasItsOwnListener(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	g.Do("GET", "/bucket/k", "demo-p0", nil, nil)
	eventually(t, "the monitoring listener's /metrics lists demo-p0", func() bool {
		return strings.Contains(string(g.Monitor("/metrics").Body), `app_id="demo-p0"`)
	})
	for _, p := range []string{"/health", "/metrics"} {
		if r := g.Do("GET", p, "", nil, nil); r.Status != 403 || r.Header.Get("X-Tollgate-Reason") != "missing_app_id" ||
			strings.Contains(string(r.Body), "ratelimit_") || strings.Contains(string(r.Body), "config_version") {
			t.Fatalf("tenant listener, %s without an app id: %d %s, want the gateway's 403", p, r.Status, r.Body)
		}
		if r := g.Do("GET", p, "demo-p1", nil, nil); strings.Contains(string(r.Body), "ratelimit_") ||
			strings.Contains(string(r.Body), "config_version") {
			t.Fatalf("tenant listener, %s as demo-p1 answered the gateway's own %s: %d %s", p, p, r.Status, r.Body)
		}
	}
	// the tenants' GETs of /health and /metrics were charged to demo-p1 like any request
	metricIs(t, g, `ratelimit_requests_total{app_id="demo-p1",method="GET",status="200"}`, 2)
	if r := g.Monitor("/bucket/k"); r.Status != 404 {
		t.Fatalf("monitoring listener, /bucket/k: %d, want 404", r.Status)
	}
}

func TestMetricsExposition(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	// the node's first grant of the app takes the first request alone (a miss) and the reserve
	// follows asynchronously: the other 19 are served from the lease (hits)
	g.Do("GET", "/bucket/k", "demo-p2", nil, nil)
	eventually(t, "lease", func() bool { return g.State("demo-p2").Tokens > 0 })
	for i := 1; i < 20; i++ {
		g.Do("GET", "/bucket/k", "demo-p2", nil, nil)
	}
	g.Do("GET", "/bucket/k", "", nil, nil)
	want := []string{
		`ratelimit_requests_total{app_id="demo-p2",method="GET",status="200"} 20`,
		`ratelimit_requests_total{app_id="_invalid",method="GET",status="403"} 1`,
		`# TYPE ratelimit_request_cost histogram`,
		`ratelimit_request_cost_bucket{le="+Inf"} 20`,
		`ratelimit_request_cost_count 20`,
		`# TYPE ratelimit_redis_latency_seconds histogram`,
		`ratelimit_l3_tokens{app_id="demo-p2"}`,
		`ratelimit_l3_cache_hit_ratio`,
	}
	eventually(t, "metrics of 21 requests", func() bool {
		body := string(g.Monitor("/metrics").Body)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	// each worker flushes its counters once a second: poll until both have
	eventually(t, "at least 19 local hits of 20 requests", func() bool {
		return g.Metric(`ratelimit_l3_hits_total`) >= 19
	}, func() { t.Logf("local hits: %v", g.Metric(`ratelimit_l3_hits_total`)) })
}

// Chunked uploads are charged on the real body bytes after the request (log phase).
func TestChunkedUploadChargedOnRealBytes(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_SYNC_INTERVAL": "3600"}})
	g := s.gw()
	g.Do("GET", "/bucket/warm", "demo-p1", nil, nil) // take a lease
	eventually(t, "lease", func() bool { return g.State("demo-p1").Tokens > 500 })
	before := g.State("demo-p1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	size := 200000 // 4 units of 64 KiB
	fmt.Fprintf(conn, "PUT /bucket/chunked HTTP/1.1\r\nHost: x\r\nX-App-Id: demo-p1\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := strings.Repeat("z", 10000)
	for sent := 0; sent < size; sent += len(chunk) {
		fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	fmt.Fprintf(conn, "0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Cost") != "5" {
		t.Fatalf("status %d cost %q, want 200 and access-time cost 5", resp.StatusCode, resp.Header.Get("X-RateLimit-Cost"))
	}
	eventually(t, "post-hoc charge of 4 units", func() bool {
		after := g.State("demo-p1")
		return after.PendingCost-before.PendingCost == 5+4
	})
}

// Downloads pay their bandwidth after the response: ceil(bytes / 64 KiB) * C_bw.
func TestDownloadBandwidthChargedAfterResponse(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_SYNC_INTERVAL": "3600", "TOLLGATE_PACING": "off"}})
	g := s.gw()
	g.Do("GET", "/bucket/warm", "demo-p1", nil, nil)
	eventually(t, "lease", func() bool { return g.State("demo-p1").Tokens > 500 })
	before := g.State("demo-p1")
	r := g.Do("GET", "/bucket/blob?size=300000", "demo-p1", nil, nil)
	if r.Status != 200 || len(r.Body) != 300000 || r.Cost() != 1 {
		t.Fatalf("status %d len %d cost %d", r.Status, len(r.Body), r.Cost())
	}
	eventually(t, "bandwidth charge", func() bool {
		after := g.State("demo-p1")
		return after.PendingCost-before.PendingCost == 1+5 && before.Tokens-after.Tokens == 6
	})
}
