package api

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/controlplane/internal/auth"
)

// startPrometheus runs Debian's prometheus on a free loopback port, scraping target (host:port)
// every second, and returns its base URL once /-/ready answers.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (scripts/install-deps.sh installs it)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"+
		"scrape_configs:\n  - job_name: test\n    static_configs: [{targets: ['%s']}]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, err := http.Get(base + "/-/ready"); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("prometheus not ready in 30 s:\n%s", b)
		}
	}
}

// TestHistoryFromARealPrometheus: the route turns the console's series names into range
// queries of a real Prometheus scraping two counters, and converts the matrix to its shape.
func TestHistoryFromARealPrometheus(t *testing.T) {
	var n atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		v := n.Add(10)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE tollgate_app_requests_total counter\n"+
			"tollgate_app_requests_total{app_id=\"app-a\",cluster_id=\"c1\"} %d\n"+
			"tollgate_app_requests_total{app_id=\"app-b\",cluster_id=\"c1\"} %d\n"+
			"# TYPE ratelimit_bytes_total counter\n"+
			"ratelimit_bytes_total{app_id=\"app-a\",direction=\"in\"} %d\n"+
			"ratelimit_bytes_total{app_id=\"app-a\",direction=\"out\"} %d\n"+
			"ratelimit_bytes_total{app_id=\"app-b\",direction=\"out\"} %d\n", v, 2*v, v, 1000*v, 3000*v)
	}))
	defer target.Close()
	prom := startPrometheus(t, strings.TrimPrefix(target.URL, "http://"))
	f := newFixtureWith(t, fixtureOptions{promURL: prom})
	viewer := f.user(t, "watcher", auth.Viewer)

	var res result
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		res = f.call(t, "GET", "/api/v1/metrics/history?series=request_rate&range=1h&app_id=app-a", viewer, nil)
		if res.code != 200 {
			t.Fatalf("history = %d %s", res.code, res.raw)
		}
		if s, _ := res.get("data", "series").([]any); len(s) == 1 && len(s[0].(map[string]any)["points"].([]any)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no points from Prometheus in 40 s: %s", res.raw)
		}
	}
	if res.str("data", "range") != "1h" || res.get("data", "step") != float64(15) {
		t.Fatalf("range/step = %s", res.raw)
	}
	s := res.get("data", "series").([]any)[0].(map[string]any)
	if s["name"] != "request_rate" || s["labels"].(map[string]any)["app_id"] != "app-a" {
		t.Fatalf("series = %v", s)
	}
	for _, p := range s["points"].([]any) {
		pt := p.([]any)
		if ts, v := pt[0].(float64), pt[1].(float64); ts < float64(time.Now().Add(-time.Hour-time.Minute).Unix()) ||
			ts > float64(time.Now().Unix()+1) || v <= 0 {
			t.Fatalf("point %v: want a time of the last hour and a positive rate", pt)
		}
	}

	all := f.call(t, "GET", "/api/v1/metrics/history?series=request_rate&range=7d", viewer, nil)
	if all.code != 200 || all.get("data", "step") != float64(2520) || len(all.get("data", "series").([]any)) != 2 {
		t.Fatalf("7d, all apps = %d %s", all.code, all.raw)
	}
	// the bandwidth series read the gateways' byte counters, by direction, with or without an
	// app (an empty selector leaves a trailing comma in the matchers)
	for _, q := range []struct {
		url  string
		apps map[string]bool
	}{
		{"/api/v1/metrics/history?series=bytes_out_rate&range=1h&app_id=app-a", map[string]bool{"app-a": true}},
		{"/api/v1/metrics/history?series=bytes_out_rate&range=1h", map[string]bool{"app-a": true, "app-b": true}},
		{"/api/v1/metrics/history?series=bytes_in_rate&range=1h", map[string]bool{"app-a": true}},
	} {
		var got map[string]bool
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			r := f.call(t, "GET", q.url, viewer, nil)
			if r.code != 200 {
				t.Fatalf("%s = %d %s", q.url, r.code, r.raw)
			}
			got = map[string]bool{}
			for _, x := range r.get("data", "series").([]any) {
				m := x.(map[string]any)
				if pts := m["points"].([]any); len(pts) > 0 && pts[len(pts)-1].([]any)[1].(float64) > 0 {
					got[m["labels"].(map[string]any)["app_id"].(string)] = true
				}
			}
			if len(got) == len(q.apps) || time.Now().After(deadline) {
				break
			}
		}
		for a := range q.apps {
			if !got[a] || len(got) != len(q.apps) {
				t.Fatalf("%s: apps with a positive rate %v, want %v", q.url, got, q.apps)
			}
		}
	}
	// A series nothing reports yet is an empty list, not an error.
	none := f.call(t, "GET", "/api/v1/metrics/history?series=rejected_rate&range=6h", viewer, nil)
	if none.code != 200 || none.get("data", "step") != float64(90) || len(none.get("data", "series").([]any)) != 0 {
		t.Fatalf("rejected_rate = %d %s", none.code, none.raw)
	}
}

// TestHistoryWithoutPrometheus: not configured, nothing listening, or too slow: a 503 with
// prometheus_unavailable, which the console shows as "Prometheus absent".
func TestHistoryWithoutPrometheus(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	notProm := httptest.NewServer(http.NotFoundHandler())
	defer notProm.Close()

	for name, o := range map[string]fixtureOptions{
		"not configured": {},
		"unreachable":    {promURL: closed},
		"too slow":       {promURL: slow.URL, promTimeout: 200 * time.Millisecond},
		"not prometheus": {promURL: notProm.URL},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixtureWith(t, o)
			res := f.call(t, "GET", "/api/v1/metrics/history?series=cost_rate&range=24h", f.login(t, "admin", adminPassword).access, nil)
			if res.code != 503 || res.errCode() != "prometheus_unavailable" || res.str("error", "message") == "" {
				t.Fatalf("= %d %s", res.code, res.raw)
			}
		})
	}
}

// TestHistoryBadInput: only the allowlisted series, the four ranges and a valid app id pass;
// nothing else reaches Prometheus.
func TestHistoryBadInput(t *testing.T) {
	var asked atomic.Int64
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
	}))
	defer prom.Close()
	f := newFixtureWith(t, fixtureOptions{promURL: prom.URL})
	tok := f.login(t, "admin", adminPassword).access
	for _, q := range []string{
		"", "series=up", "series=request_rate%7D", "series=request_rate&range=2h", "series=cost_rate&range=1d",
		"series=request_rate&app_id=a%22b", "series=request_rate&app_id=a%20b", "series=request_rate&app_id=" + strings.Repeat("a", 129),
	} {
		res := f.call(t, "GET", "/api/v1/metrics/history?"+q, tok, nil)
		if res.code != 400 || res.errCode() != "invalid_query" {
			t.Errorf("%q = %d %s", q, res.code, res.raw)
		}
	}
	if asked.Load() != 0 {
		t.Fatalf("bad input reached Prometheus %d times", asked.Load())
	}
	if res := f.call(t, "GET", "/api/v1/metrics/history?series=request_rate", "", nil); res.code != 401 {
		t.Fatalf("without a token = %d", res.code)
	}
	res := f.call(t, "GET", "/api/v1/metrics/history?series=request_rate&app_id=demo-p1", tok, nil)
	if res.code != 200 || res.str("data", "range") != "1h" || asked.Load() != 1 {
		t.Fatalf("good input = %d %s", res.code, res.raw)
	}
}
