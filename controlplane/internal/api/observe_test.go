package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/testutil"
)

// report writes what gateways write: the registry, stats, leases, the cluster's active set and
// connection statistics.
func (f *fixture) report(t *testing.T, now time.Time) {
	t.Helper()
	ctx := context.Background()
	node := func(id string, seen time.Time, extra string) string {
		return fmt.Sprintf(`{"node_id":%q,"last_seen":%d,"config_version":5,"mode":"redis"%s}`, id, seen.Unix(), extra)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.rdb.HSet(ctx, keys.Gateways(),
		"gw-1", node("gw-1", now, `,"degradation_level":2,"redis_latency_ms":150.5,"l3_hit_ratio":0.99`),
		"gw-2", node("gw-2", now.Add(-time.Minute), `,"degradation_level":0`),
		"bad id!", node("bad id!", now, ""),
		"gw-3", "not json").Err())
	must(f.rdb.HSet(ctx, keys.Stats("default", "demo-p1"), "total_requests", 1000, "total_consumed", 6000,
		"correction_count", 2, "last_drift_ppm", 80000).Err())
	must(f.rdb.HSet(ctx, keys.Leases("default", "demo-p1"), "gw-1:granted", 900, "gw-1:held", 300,
		"gw-2:held", 50).Err())
	must(f.rdb.ZAdd(ctx, keys.Nodes("default", "demo-p1"), redisZ(now, "gw-1"), redisZ(now, "gw-2")).Err())
	must(f.rdb.ZAdd(ctx, keys.Active("default"), redisZ(now, "demo-p1")).Err()) // as l2_grant and l3_report mark it
	must(f.rdb.HSet(ctx, keys.ConnNodeStats("default", "demo-p1", "gw-1"), "current", 7, "peak", 9, "rejected", 3).Err())
	must(f.rdb.HSet(ctx, keys.ConnNodeStats("default", "demo-p1", "gw-2"), "current", 1, "peak", 2, "rejected", 0).Err())
}

func TestClusterViewFromGatewayReports(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	f.report(t, time.Now())
	tok := f.user(t, "vic", "viewer")
	steps := []step{
		{"nodes", "GET", "/api/v1/nodes", nil, 200, "", func(t *testing.T, res result) {
			nodes, _ := res.get("data").([]any)
			if len(nodes) != 2 || !strings.Contains(res.raw, `"degradation_level":2`) || !strings.Contains(res.raw, `"stale":true`) {
				t.Fatalf("nodes %s", res.raw)
			}
		}},
		{"dashboard", "GET", "/api/v1/metrics?range=6h", nil, 200, "", func(t *testing.T, res result) {
			for _, want := range []string{`"total_apps":4`, `"l3_cache_hit":0.99`, `"active":8`, `"status":"degraded"`,
				`"emergency_mode":false`, `"range":"6h"`} {
				if !strings.Contains(res.raw, want) {
					t.Errorf("dashboard lacks %s: %.600s", want, res.raw)
				}
			}
		}},
		{"app", "GET", "/api/v1/metrics/apps/demo-p1", nil, 200, "", func(t *testing.T, res result) {
			if res.get("data", "app", "l3_tokens") != 350.0 || res.get("data", "app", "connections_rejected") != 3.0 ||
				res.get("data", "app", "drift_ppm") != 80000.0 {
				t.Fatalf("app metrics %s", res.raw)
			}
		}},
		{"idle app", "GET", "/api/v1/metrics/apps/demo-p2", nil, 200, "", func(t *testing.T, res result) {
			// not in the active set: outside the snapshot, read on demand
			if res.get("data", "app", "app_id") != "demo-p2" || res.get("data", "app", "l2_tokens") == 0.0 {
				t.Fatalf("idle app metrics %s", res.raw)
			}
		}},
		{"unknown app", "GET", "/api/v1/metrics/apps/nope", nil, 404, "not_found", nil},
		{"connections", "GET", "/api/v1/metrics/connections", nil, 200, "", func(t *testing.T, res result) {
			if !strings.Contains(res.raw, `"connections_active":8`) {
				t.Fatalf("connections %s", res.raw)
			}
		}},
		{"alerts", "GET", "/api/v1/alerts", nil, 200, "", func(t *testing.T, res result) {
			for _, id := range []string{"node_degraded-gw-1", "node_stale-gw-2", "drift_high-demo-p1"} {
				if !strings.Contains(res.raw, `"id":"`+id+`"`) {
					t.Errorf("no alert %s in %s", id, res.raw)
				}
			}
		}},
		{"viewer cannot ack", "POST", "/api/v1/alerts/node_stale-gw-2/ack", nil, 403, "forbidden", nil},
	}
	runSteps(t, f, tok, steps)
	adm := f.admin(t)
	if res := f.call(t, "POST", "/api/v1/alerts/node_stale-gw-2/ack", adm, nil); res.code != 200 || res.get("data", "acknowledged") != true {
		t.Fatalf("ack = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "POST", "/api/v1/alerts/nope/ack", adm, nil); res.code != 404 {
		t.Fatalf("ack unknown = %d", res.code)
	}
	prom := f.call(t, "GET", "/metrics", tok, nil)
	for _, want := range []string{
		`tollgate_l3_tokens{app_id="demo-p1",cluster_id="default"} 350`,
		`tollgate_app_connections_active{app_id="demo-p1",cluster_id="default"} 8`,
		`tollgate_gateway_degradation_level{node_id="gw-1"} 2`,
		`tollgate_emergency_mode{cluster_id="default"} 0`,
		`tollgate_app_reconcile_corrections_total{app_id="demo-p1",cluster_id="default"} 2`,
		`tollgate_cp_http_requests_total{code="200",method="GET",route="/api/v1/nodes"} 1`,
		`tollgate_build_info{component="controlplane",version="dev"} 1`,
	} {
		if !strings.Contains(prom.raw, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(prom.raw, "bad id") {
		t.Error("/metrics shows an invalid node id")
	}
}

func TestMetricsTokenForPrometheus(t *testing.T) {
	tok := strings.Repeat("m", 40)
	f := newFixtureWith(t, fixtureOptions{metricsToken: tok})
	if res := f.call(t, "GET", "/metrics", tok, nil); res.code != 200 || !strings.Contains(res.raw, "go_goroutines") {
		t.Fatalf("scrape with the metrics token = %d", res.code)
	}
	if res := f.call(t, "GET", "/api/v1/apps", tok, nil); res.code != 401 {
		t.Fatalf("the metrics token opened /api/v1/apps: %d", res.code)
	}
	if res := f.call(t, "GET", "/metrics", tok+"x", nil); res.code != 401 {
		t.Fatalf("a wrong metrics token = %d", res.code)
	}
}

func TestAuditQueries(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	for i := 0; i < 3; i++ {
		f.call(t, "PUT", "/api/v1/apps/demo-p1", tok, map[string]any{"priority": 1 + i%2})
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		res := f.call(t, "GET", "/api/v1/audit?action=access&limit=500", tok, nil)
		return strings.Count(res.raw, `"route":"/api/v1/apps/:id"`) >= 3
	}, "access entries written by the background writer")
	res := f.call(t, "GET", "/api/v1/audit?action=app.*&actor=admin&limit=2", tok, nil)
	entries, _ := res.get("data").([]any)
	cursor := res.str("meta", "next_cursor")
	if res.code != 200 || len(entries) != 2 || cursor == "" {
		t.Fatalf("page 1 = %d %s", res.code, res.raw)
	}
	res = f.call(t, "GET", "/api/v1/audit?action=app.*&limit=2&cursor="+cursor, tok, nil)
	if entries, _ = res.get("data").([]any); len(entries) != 1 {
		t.Fatalf("page 2 = %s", res.raw)
	}
	for _, q := range []string{"cursor=abc", "since=-1", "limit=0", "limit=501", "actor=a%20b", "until=x"} {
		if res := f.call(t, "GET", "/api/v1/audit?"+q, tok, nil); res.code != 400 || res.errCode() != "invalid_query" {
			t.Errorf("audit?%s = %d %s", q, res.code, res.raw)
		}
	}
}

func dialWS(t *testing.T, srv *httptest.Server, hdr http.Header, protocols ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 2 * time.Second}
	return d.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/api/v1/ws", hdr)
}

func readType(t *testing.T, c *websocket.Conn, want string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_ = c.SetReadDeadline(deadline)
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if m["type"] == want {
			return m
		}
	}
	t.Fatalf("no %s message", want)
	return nil
}

func TestWebSocketPushesLiveMessages(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{origins: []string{"https://console.example.com"}})
	f.seed(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.live.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	tok := f.admin(t)
	if _, resp, err := dialWS(t, srv, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("no token: %v %v", resp, err)
	}
	evil := http.Header{"Origin": {"https://evil.example.com"}}
	if _, resp, err := dialWS(t, srv, evil, "tollgate.v1", "tollgate.bearer."+tok); err == nil || resp.StatusCode != 403 {
		t.Fatalf("foreign origin: %v %v", resp, err)
	}
	good := http.Header{"Origin": {"https://console.example.com"}}
	c, resp, err := dialWS(t, srv, good, "tollgate.v1", "tollgate.bearer."+tok)
	if err != nil || resp.Header.Get("Sec-WebSocket-Protocol") != "tollgate.v1" {
		t.Fatalf("dial: %v %v", resp, err)
	}
	defer c.Close()
	m := readType(t, c, "metrics")
	if !strings.Contains(fmt.Sprint(m["data"]), "overview") {
		t.Fatalf("metrics message %v", m)
	}
	f.call(t, "PUT", "/api/v1/apps/demo-p2", tok, map[string]any{"priority": 1})
	readType(t, c, "config_change")
	f.call(t, "POST", "/api/v1/emergency/activate", tok, map[string]any{"cluster_id": "default", "duration": 30})
	e := readType(t, c, "emergency")
	if b, _ := json.Marshal(e); !strings.Contains(string(b), `"active":true`) {
		t.Fatalf("emergency message %s", b)
	}
	readType(t, c, "alert")
	start := time.Now()
	readType(t, c, "metrics")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("metrics every %s, want the 1 s interval", d)
	}
	// the read limit: a client message over 1 KiB closes the socket
	if err := c.WriteMessage(websocket.TextMessage, []byte(strings.Repeat("x", 4096))); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			if websocket.IsCloseError(err, websocket.CloseMessageTooBig) || !strings.Contains(err.Error(), "timeout") {
				return
			}
			t.Fatalf("socket still open after an oversized message: %v", err)
		}
	}
}

func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(at.Unix()), Member: member}
}
