// The Prometheus alerting rules of deploy/prometheus/tollgate-alerts.yml fire on the real stack:
// two gateways (real nginx + our Lua), a control plane and Redis, scraped and evaluated by
// Debian's Prometheus every second. Each condition is caused for real and the alert is read
// from Prometheus' /api/v1/alerts. The only change to the rules file is its timing: the group's
// evaluation interval and every `for:` are shortened to 1 s (the expressions are the file's).
package t

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tollgate/t/harness"
)

// promAlert is one alert of Prometheus' GET /api/v1/alerts.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

type promServer struct {
	t    *testing.T
	addr string
	log  string
}

// startPrometheus runs Prometheus on the rules file (timing shortened) with the gateways'
// metrics listeners as job gateway and the control plane as job controlplane (bearer token).
func startPrometheus(t *testing.T, gateways []string, cp, token string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(harness.RepoRoot(), "deploy", "prometheus", "tollgate-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	fast := regexp.MustCompile(`(?m)^(\s+)(interval|for): \S+$`).ReplaceAllString(string(rules), "${1}${2}: 1s")
	if fast == string(rules) || !strings.Contains(fast, "for: 1s") {
		t.Fatal("no interval or for: in the rules file to shorten")
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rulesPath := write("rules.yml", fast)
	tokenPath := write("token", token)
	host := func(u string) string {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return "'" + p.Host + "'"
	}
	var gws []string
	for _, g := range gateways {
		gws = append(gws, host(g))
	}
	cfg := write("prometheus.yml", fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s}
rule_files: ['%s']
scrape_configs:
  - job_name: gateway
    static_configs: [{targets: [%s]}]
  - job_name: controlplane
    authorization: {type: Bearer, credentials_file: '%s'}
    static_configs: [{targets: [%s]}]
`, rulesPath, strings.Join(gws, ", "), tokenPath, host(cp)))
	p := &promServer{t: t, addr: "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)), log: filepath.Join(dir, "prometheus.log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("prometheus log:\n%s", tail(string(b), 30))
		}
	})
	return p
}

// get decodes the data of a Prometheus API answer; false if Prometheus does not answer (yet).
func (p *promServer) get(path string, data any) bool {
	res, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if json.NewDecoder(res.Body).Decode(&body) != nil || body.Status != "success" {
		return false
	}
	return json.Unmarshal(body.Data, data) == nil
}

func (p *promServer) alerts() []promAlert {
	var d struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get("/api/v1/alerts", &d)
	return d.Alerts
}

// firing is the firing alert named name whose labels include want, if any.
func (p *promServer) firing(name string, want map[string]string) (promAlert, bool) {
	for _, a := range p.alerts() {
		if a.Labels["alertname"] != name || a.State != "firing" {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			return a, true
		}
	}
	return promAlert{}, false
}

// waitFiring polls /api/v1/alerts until the alert fires.
func (p *promServer) waitFiring(name string, want map[string]string, why string) promAlert {
	p.t.Helper()
	var a promAlert
	slowly(p.t, 90*time.Second, why+": "+name+fmt.Sprint(want)+" firing", func() bool {
		var ok bool
		a, ok = p.firing(name, want)
		return ok
	})
	return a
}

// up is whether every target of job was scraped successfully at least once by now.
func (p *promServer) up(job string, n int) bool {
	var d struct {
		Result []struct {
			Value []any `json:"value"`
		} `json:"result"`
	}
	if !p.get("/api/v1/query?query="+url.QueryEscape(`up{job="`+job+`"}`), &d) || len(d.Result) != n {
		return false
	}
	for _, r := range d.Result {
		if len(r.Value) != 2 || r.Value[1] != "1" {
			return false
		}
	}
	return true
}

func TestPrometheusAlertsFire(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus is not installed (scripts/install-deps.sh installs it)")
	}
	const token = "prometheus-alerts-test-metrics-token-0123456789"
	s := newStack(t, stackOptions{nodes: 2, env: map[string]string{
		"TOLLGATE_CONN_STATS_INTERVAL": "0.5", "TOLLGATE_REPORT_INTERVAL": "1",
		// a killed worker's slots are leaked after 2 s and released by a cleanup every second
		"TOLLGATE_CONN_TIMEOUT": "2", "TOLLGATE_CONN_CLEANUP_INTERVAL": "1"},
		apps: appsOf(app("roomy", 10000, 20000))})
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_ADMIN_PASSWORD": adminPassword, "TOLLGATE_CP_JOBS": "false", "TOLLGATE_LIVE_INTERVAL": "500ms",
		"TOLLGATE_API_RATE": "1000", "TOLLGATE_API_BURST": "1000", "TOLLGATE_METRICS_TOKEN": token})
	api := loginAdmin(t, cp)
	g, g2 := s.gws[0], s.gws[1]
	p := startPrometheus(t, []string{g.MetricsURL, g2.MetricsURL}, cp.URL, token)

	// a healthy, idle stack: every rule evaluated, every target up, none of these alerts pending
	// or firing (a rule that always fires fails here)
	mine := []string{"gateway_down", "controlplane_down", "node_stale", "l1_exhausted", "redis_slow",
		"connections_rejected", "connections_leaked"}
	slowly(t, 60*time.Second, "both gateways and the control plane scraped", func() bool {
		return p.up("gateway", 2) && p.up("controlplane", 1)
	})
	// two evaluations after every target is up, all healthy
	since := time.Now().Add(time.Second)
	slowly(t, 30*time.Second, "the rules evaluated twice on the scraped stack", func() bool {
		var d struct {
			Groups []struct {
				Rules []struct {
					Health         string    `json:"health"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if !p.get("/api/v1/rules?type=alert", &d) || len(d.Groups) != 1 {
			return false
		}
		for _, r := range d.Groups[0].Rules {
			if r.Health != "ok" || !r.LastEvaluation.After(since) {
				return false
			}
		}
		return true
	})
	for _, a := range p.alerts() {
		for _, m := range mine {
			if a.Labels["alertname"] == m {
				t.Fatalf("an idle stack has %s %s: %v", m, a.State, a.Labels)
			}
		}
	}

	// gateway 2 killed: its scrape fails (gateway_down), and after 30 s without a report the
	// control plane still lists it (node_stale); checked last, while the rest happens
	killGateway(t, g2)
	killed := time.Now()
	g2Instance := strings.TrimPrefix(g2.MetricsURL, "http://")
	p.waitFiring("gateway_down", map[string]string{"instance": g2Instance}, "gateway 2 killed")
	if a, ok := p.firing("gateway_down", map[string]string{"instance": strings.TrimPrefix(g.MetricsURL, "http://")}); ok {
		t.Fatalf("the live gateway is down: %v", a.Labels)
	}

	// connections_rejected: demo-p2 limited to 1 connection per node, one held, one refused
	api.change("PUT", "/api/v1/connections/demo-p2", map[string]any{"max_connections": 1, "burst_connections": 1})
	harness.Eventually(t, 10*time.Second, "limit applied", func() bool { return connStateOf(g, "demo-p2").Max == 1 })
	h := newHolder(t, g)
	held := h.start("demo-p2", "one", 1)
	harness.Eventually(t, 10*time.Second, "1 request held", func() bool { return h.held("one").Now == 1 })
	if r := g.Do("GET", "/bucket/obj", "demo-p2", nil, nil); r.Status != 429 {
		t.Fatalf("second connection of demo-p2: %d %s, want 429", r.Status, r.Body)
	}
	p.waitFiring("connections_rejected", map[string]string{"app_id": "demo-p2"}, "a connection refused")
	h.unhold("one")
	for r := range held {
		if r.err != nil || r.status != 200 {
			t.Fatalf("held request: %d %v", r.status, r.err)
		}
	}

	// connections_leaked: a worker killed with requests in flight; the cleanup releases them
	results := h.start("roomy", "leak", 4)
	harness.Eventually(t, 10*time.Second, "4 requests in flight", func() bool { return connStateOf(g, "roomy").AppCurrent == 4 })
	var ws []struct {
		PID     int  `json:"pid"`
		Live    bool `json:"live"`
		Records int  `json:"records"`
	}
	g.T("conn_workers", &ws)
	victim, most := 0, 0
	for _, w := range ws {
		if w.Live && w.Records > most {
			victim, most = w.PID, w.Records
		}
	}
	if victim == 0 {
		t.Fatalf("no worker holds the requests: %+v", ws)
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a := p.waitFiring("connections_leaked", map[string]string{"instance": strings.TrimPrefix(g.MetricsURL, "http://")},
		"a worker killed with requests in flight")
	if a.Value == "" || a.Value == "0" || a.Value == "0e+00" {
		t.Fatalf("leak alert %+v", a)
	}
	h.unhold("leak")
	for range results { // the killed worker's requests fail at the client, the others are answered
	}

	// l1_exhausted: a cluster whose app guarantees take all but its reserve
	api.change("PUT", "/api/v1/clusters/small", map[string]any{"capacity": 1000, "reserved_ratio": 0.1})
	if a, ok := p.firing("l1_exhausted", nil); ok {
		t.Fatalf("l1_exhausted before any allocation: %v", a.Labels)
	}
	api.change("POST", "/api/v1/apps", map[string]any{"app_id": "fills-small", "cluster_id": "small",
		"guaranteed_quota": 900, "burst_quota": 900, "priority": 1})
	p.waitFiring("l1_exhausted", map[string]string{"cluster_id": "small"}, "900 of 1000 guaranteed, 10 % reserved")
	if a, ok := p.firing("l1_exhausted", map[string]string{"cluster_id": "default"}); ok {
		t.Fatalf("cluster default exhausted: %v", a)
	}

	// redis_slow: Redis busy with scripts of 300 ms, a 2 ms gap between them
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); stall(s.redis.Client(), 300*time.Millisecond, 2*time.Millisecond, stop) }()
	p.waitFiring("redis_slow", nil, "Redis busy")
	close(stop)
	wg.Wait()

	// node_stale: 30 s after the kill, the control plane's view still has gateway 2's last report
	if d := time.Since(killed); d < 25*time.Second {
		t.Logf("node_stale waits %s more", (25*time.Second - d).Round(time.Second))
	}
	p.waitFiring("node_stale", map[string]string{"node_id": g2.NodeID}, "gateway 2 silent for 30 s")
	if a, ok := p.firing("node_stale", map[string]string{"node_id": g.NodeID}); ok {
		t.Fatalf("the live gateway is stale: %v", a.Labels)
	}

	// controlplane_down: the control plane stopped
	cp.Stop()
	p.waitFiring("controlplane_down", map[string]string{"job": "controlplane"}, "control plane stopped")

	var names []string
	for _, a := range p.alerts() {
		if a.State == "firing" {
			names = append(names, a.Labels["alertname"])
		}
	}
	sort.Strings(names)
	t.Logf("firing at the end: %v (after %s)", names, time.Since(killed).Round(time.Second))
}
