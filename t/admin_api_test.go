// The admin API against a real gateway: changes made over the control plane's REST API are
// validated, written with a version bump, published, and applied by nginx within 1 s.
package t

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"tollgate/t/harness"
)

const adminPassword = "integration-admin-pw-1"

type adminAPI struct {
	t     *testing.T
	url   string
	token string
}

// loginAdmin signs in to the control plane as the admin set by TOLLGATE_ADMIN_PASSWORD.
func loginAdmin(t *testing.T, cp *harness.ControlPlane) *adminAPI {
	t.Helper()
	a := &adminAPI{t: t, url: cp.URL}
	var out struct {
		Data struct {
			AccessToken string `json:"access_token"`
		} `json:"data"`
	}
	if code := a.do("POST", "/api/v1/auth/login", map[string]string{"username": "admin", "password": adminPassword}, &out); code != 200 {
		t.Fatalf("login: %d", code)
	}
	a.token = out.Data.AccessToken
	return a
}

func (a *adminAPI) do(method, path string, body, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && json.Unmarshal(raw, out) != nil {
		a.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// change sends a write that must succeed and returns the config version it produced.
func (a *adminAPI) change(method, path string, body any) int64 {
	a.t.Helper()
	var out struct {
		Data struct {
			Version int64 `json:"config_version"`
			Written bool  `json:"written"`
		} `json:"data"`
	}
	if code := a.do(method, path, body, &out); code/100 != 2 || out.Data.Version == 0 {
		a.t.Fatalf("%s %s = %d %+v", method, path, code, out)
	}
	return out.Data.Version
}

// within polls cond for at most 1 s after a change and logs how long the gateway took.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	t0 := time.Now()
	harness.Eventually(t, time.Second, what+" within 1 s", cond)
	t.Logf("%s after %v", what, time.Since(t0).Round(time.Millisecond))
}

func TestAdminAPIChangesReachTheGatewayWithin1s(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "1s"})
	api := loginAdmin(t, cp)
	status := func(app string) (int, string) {
		r := g.Do("GET", "/bucket/obj", app, nil, nil)
		var body struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(r.Body, &body)
		return r.Status, body.Reason
	}
	if code, reason := status("fresh-app"); code != 403 || reason != "unknown_app" {
		t.Fatalf("before: %d %s, want 403 unknown_app", code, reason)
	}
	v := api.change("POST", "/api/v1/apps", map[string]any{"app_id": "fresh-app", "cluster_id": "default",
		"guaranteed_quota": 1000, "burst_quota": 5000, "priority": 1})
	within(t, "new app admitted", func() bool { code, _ := status("fresh-app"); return code != 403 && code != 429 })
	within(t, "config version applied", func() bool { return g.Metric("ratelimit_config_version") >= float64(v) })

	api.change("PUT", "/api/v1/apps/fresh-app", map[string]any{"enabled": false})
	within(t, "disabled app refused", func() bool { _, reason := status("fresh-app"); return reason == "app_disabled" })

	api.change("PUT", "/api/v1/connections/demo-p2", map[string]any{"max_connections": 3, "burst_connections": 4})
	within(t, "connection limits applied", func() bool { st := connStateOf(g, "demo-p2"); return st.Max == 3 && st.Burst == 4 })

	api.change("PUT", "/api/v1/clusters/default/connections", map[string]any{"max_connections": 70})
	within(t, "cluster connection limit applied", func() bool { return connStateOf(g, "demo-p2").ClusterMax == 70 })

	var em struct{}
	if code := api.do("POST", "/api/v1/emergency/activate", map[string]any{"cluster_id": "default", "duration": 60}, &em); code != 200 {
		t.Fatalf("emergency: %d", code)
	}
	within(t, "emergency blocks P3", func() bool { code, reason := status("demo-p3"); return code == 429 && reason == "emergency_blocked" })

	api.change("DELETE", "/api/v1/apps/fresh-app", nil)
	within(t, "removed app unknown", func() bool { _, reason := status("fresh-app"); return reason == "unknown_app" })

	var nodes struct {
		Data []struct {
			NodeID        string `json:"node_id"`
			ConfigCurrent bool   `json:"config_current"`
		} `json:"data"`
	}
	harness.Eventually(t, 10*time.Second, "the gateway listed by /api/v1/nodes with the current config", func() bool {
		api.do("GET", "/api/v1/nodes", nil, &nodes)
		return len(nodes.Data) == 1 && nodes.Data[0].NodeID == g.NodeID && nodes.Data[0].ConfigCurrent
	})
}

// The cluster view of the control plane sums what the gateway reports.
func TestAdminAPIMetricsFromGatewayReports(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "500ms"})
	api := loginAdmin(t, cp)
	for i := 0; i < 50; i++ {
		if r := g.Do("GET", "/bucket/obj", "demo-p1", nil, nil); r.Status == 403 || r.Status == 429 {
			t.Fatalf("request %d refused: %d", i, r.Status)
		}
	}
	var m struct {
		Data struct {
			App struct {
				Requests int64 `json:"requests_total"`
				Cost     int64 `json:"cost_total"`
				L3       int64 `json:"l3_tokens"`
			} `json:"app"`
		} `json:"data"`
	}
	harness.Eventually(t, 10*time.Second, "the 50 requests in /api/v1/metrics/apps/demo-p1", func() bool {
		api.do("GET", "/api/v1/metrics/apps/demo-p1", nil, &m)
		return m.Data.App.Requests >= 50 && m.Data.App.Cost >= 50
	})
	t.Logf("demo-p1: %+v", m.Data.App)
	var d struct {
		Data struct {
			Overview struct {
				Requests1h int64 `json:"total_requests_1h"`
			} `json:"overview"`
			Nodes []struct {
				NodeID string `json:"node_id"`
			} `json:"nodes"`
		} `json:"data"`
	}
	harness.Eventually(t, 10*time.Second, "the dashboard counts the requests of the last hour", func() bool {
		api.do("GET", "/api/v1/metrics", nil, &d)
		return d.Data.Overview.Requests1h >= 50 && len(d.Data.Nodes) == 1
	})
}
