// The Grafana dashboards of deploy/grafana, proven against real Prometheus: make run's
// Prometheus config (scripts/stack.sh prometheus-config, scrape interval cut to 1 s) scrapes a
// real gateway and control plane while real traffic flows (admissions, exhausted quota, a rule
// refusing, a breaker opening, Redis frozen so the gateway fails open); then every PromQL
// expression of every panel, and every template variable's query, with the variables
// substituted, goes through Prometheus' HTTP API: none may fail to parse or return nothing.
package t

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/t/harness"
)

type grafanaDashboard struct {
	file       string
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a row's panels
}

// promExpr is one expression to evaluate and where it comes from.
type promExpr struct{ where, expr string }

func loadDashboards(t *testing.T) []grafanaDashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.RepoRoot(), "deploy", "grafana", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tollgate-app.json", "tollgate-connections.json", "tollgate-node.json",
		"tollgate-overview.json", "tollgate-redis.json", "tollgate-rules-breakers.json"}
	var got []string
	var ds []grafanaDashboard
	uids := map[string]bool{}
	for _, f := range files {
		got = append(got, filepath.Base(f))
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := grafanaDashboard{file: filepath.Base(f)}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] || d.Title == "" {
			t.Errorf("%s: uid %q (unique, set) and title %q wanted", d.file, d.UID, d.Title)
		}
		uids[d.UID] = true
		ds = append(ds, d)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("dashboards %v, want %v", got, want)
	}
	return ds
}

// labelValues turns a variable's label_values(<selector>, <label>) into the selector to query
// and the label its series must carry.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// expressions collects every panel expression and variable query of the dashboards, with
// the template variables replaced by vars; a variable no dashboard defines, or an expression
// left with a $, fails the test.
func expressions(t *testing.T, ds []grafanaDashboard, vars map[string]string) []promExpr {
	t.Helper()
	subst := func(where, s string) string {
		keys := make([]string, 0, len(vars))
		for k := range vars {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) }) // $__rate_interval before $__range…
		for _, k := range keys {
			s = strings.ReplaceAll(s, "${"+k+"}", vars[k])
			s = strings.ReplaceAll(s, "$"+k, vars[k])
		}
		if strings.Contains(s, "$") {
			t.Errorf("%s: a template variable without a value in %q", where, s)
		}
		return s
	}
	var out []promExpr
	for _, d := range ds {
		defined := map[string]bool{}
		for _, v := range d.Templating.List {
			defined[v.Name] = true
			if v.Type != "query" {
				continue
			}
			var q struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &q); err != nil {
				_ = json.Unmarshal(v.Query, &q.Query) // the older plain-string form
			}
			m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
			if m == nil {
				t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", d.file, v.Name, q.Query)
				continue
			}
			where := d.file + " variable " + v.Name
			out = append(out, promExpr{where + " (label " + m[2] + ")", subst(where, m[1])})
		}
		if !defined["datasource"] {
			t.Errorf("%s: no datasource variable", d.file)
		}
		var walk func(ps []grafanaPanel)
		walk = func(ps []grafanaPanel) {
			for _, p := range ps {
				walk(p.Panels)
				if len(p.Targets) > 0 && p.Datasource.UID != "${datasource}" {
					t.Errorf("%s %q: datasource %q, want ${datasource}", d.file, p.Title, p.Datasource.UID)
				}
				for i, tg := range p.Targets {
					for _, ref := range regexp.MustCompile(`\$\{?([a-z][a-z_]*)`).FindAllStringSubmatch(tg.Expr, -1) {
						if !defined[ref[1]] {
							t.Errorf("%s %q: $%s is not a variable of the dashboard", d.file, p.Title, ref[1])
						}
					}
					where := d.file + " panel \"" + p.Title + "\" target " + strconv.Itoa(i)
					out = append(out, promExpr{where, subst(where, tg.Expr)})
				}
			}
		}
		walk(d.Panels)
	}
	return out
}

type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
		} `json:"result"`
	} `json:"data"`
}

func promQuery(t *testing.T, base, expr string) promResult {
	t.Helper()
	res, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	defer res.Body.Close()
	var r promResult
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		t.Fatalf("prometheus answer to %s: %v", expr, err)
	}
	return r
}

func TestGrafanaDashboardsAgainstPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (scripts/install-deps.sh installs it)")
	}
	dashboards := loadDashboards(t)
	s := newStack(t, stackOptions{apps: appsOf(app("grafana", 100, 200)),
		env: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"}})
	g := s.gw()
	token := strings.Repeat("g", 32)
	cp := harness.StartControlPlane(t, s.redis.URL(), map[string]string{
		"TOLLGATE_METRICS_TOKEN": token, "TOLLGATE_LIVE_INTERVAL": "1s"})
	gwAddr, cpAddr := strings.TrimPrefix(g.URL, "http://"), strings.TrimPrefix(cp.URL, "http://")
	metricsAddr := strings.TrimPrefix(g.MetricsURL, "http://") // the gateway's /metrics listener

	// make run's Prometheus: the config scripts/stack.sh writes, scraping every second here
	dir := t.TempDir()
	gen := exec.Command(filepath.Join(harness.RepoRoot(), "scripts", "stack.sh"), "prometheus-config")
	gen.Env = append(os.Environ(), "TOLLGATE_RUN_DIR="+dir, "TOLLGATE_GATEWAY_ADDR="+gwAddr,
		"TOLLGATE_METRICS_ADDR="+metricsAddr, "TOLLGATE_CP_ADDR="+cpAddr, "TOLLGATE_METRICS_TOKEN="+token)
	out, err := gen.CombinedOutput()
	if err != nil {
		t.Fatalf("stack.sh prometheus-config: %v\n%s", err, out)
	}
	cfgPath := strings.TrimSpace(string(out))
	cfg, _ := os.ReadFile(cfgPath)
	fast := strings.Replace(string(cfg), "scrape_interval: 5s, evaluation_interval: 5s", "scrape_interval: 1s, evaluation_interval: 1s", 1)
	if fast == string(cfg) {
		t.Fatalf("the Prometheus config of stack.sh changed shape:\n%s", cfg)
	}
	if err := os.WriteFile(cfgPath, []byte(fast), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	prom := harness.StartProcess(t, "prometheus", exec.Command(bin, "--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr))
	promURL := "http://" + promAddr
	prom.WaitHTTP(t, promURL+"/-/ready", 60*time.Second)

	// traffic: admissions, an exhausted app, a rule refusing DELETEs, a breaker opening, and
	// a frozen Redis the gateway fails open on
	s.putRules(nil, base("grafana-deletes", 1, 60, rule{"match": rule{"app_ids": []string{"grafana"}, "methods": []string{"DELETE"}}}))
	s.putBreaker("default", breakerCfg(nil))
	for i := 0; i < 20; i++ {
		g.Do("PUT", "/b/o"+strconv.Itoa(i), "demo-p1", strings.NewReader("some bytes"), nil)
		g.Do("GET", "/b/o"+strconv.Itoa(i), "demo-p2", nil, nil)
	}
	for i := 0; i < 3; i++ {
		g.Do("DELETE", "/b/x", "grafana", nil, nil)
	}
	rejected := 0
	for i := 0; i < 400 && rejected < 20; i++ {
		if r := g.Do("GET", "/b/k", "grafana", nil, nil); r.Status == 429 {
			rejected++
		}
	}
	if rejected < 20 {
		t.Fatalf("app grafana (burst 200) was never exhausted: %d refusals", rejected)
	}
	g.T("fail?status=503", nil)
	harness.Eventually(t, 10*time.Second, "the breaker of backend default to open and refuse", func() bool {
		g.Do("GET", "/b/f", "demo-p1", nil, nil)
		return g.Metric(`ratelimit_circuit_rejected_total{backend="default"}`) > 0
	})
	g.T("heal", nil)
	s.redis.Freeze()
	harness.Eventually(t, 10*time.Second, "the gateway to fail open on the frozen Redis", func() bool {
		g.Do("GET", "/b/k", "demo-p0", nil, nil) // no lease yet: needs Redis
		return g.Metric(`ratelimit_fail_open_total{app_id="demo-p0"}`) > 0 &&
			g.Metric(`ratelimit_redis_errors_total{kind="unavailable"}`)+g.Metric(`ratelimit_redis_errors_total{kind="reply"}`) > 0
	})
	s.redis.Thaw()
	for i := 0; i < 10; i++ {
		g.Do("GET", "/b/o"+strconv.Itoa(i), "demo-p2", nil, nil)
	}

	// the panels of one app show a live app: the node keeps lease and connection gauges only for
	// the apps with local state on it (lua/tollgate/lease/active.lua), so its traffic goes on
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				req, _ := http.NewRequest("GET", g.URL+"/b/live", nil)
				req.Header.Set("X-App-Id", "grafana")
				if resp, err := g.Client.Do(req); err == nil { // not g.Do: no t.Fatal off the test goroutine
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()

	exprs := expressions(t, dashboards, map[string]string{
		"cluster": "default", "app": "grafana", "node": metricsAddr,
		"__rate_interval": "1m", "__interval": "15s", "__range": "5m"})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d expressions in %d dashboards", len(exprs), len(dashboards))
	var empty []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		empty = empty[:0]
		for _, e := range exprs {
			r := promQuery(t, promURL, e.expr)
			if r.Status != "success" {
				t.Fatalf("%s: Prometheus refuses %q: %s %s", e.where, e.expr, r.ErrorType, r.Error)
			}
			if len(r.Data.Result) == 0 {
				empty = append(empty, e.where+": "+e.expr)
				continue
			}
			if i := strings.Index(e.where, "(label "); i >= 0 { // a variable's values: the label is there
				label := strings.TrimSuffix(e.where[i+len("(label "):], ")")
				if r.Data.Result[0].Metric[label] == "" {
					empty = append(empty, e.where+": no label "+label+" in "+e.expr)
				}
			}
		}
		if len(empty) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(empty) > 0 {
		t.Fatalf("%d of %d expressions return nothing after 60 s:\n%s", len(empty), len(exprs), strings.Join(empty, "\n"))
	}
	// the node variable's values are the gateway's instance, the build is the checkout's
	r := promQuery(t, promURL, `tollgate_build_info{component="gateway"}`)
	if len(r.Data.Result) != 1 || r.Data.Result[0].Metric["version"] != harness.Version(t) ||
		r.Data.Result[0].Metric["instance"] != metricsAddr || r.Data.Result[0].Metric["node_id"] != g.NodeID {
		t.Errorf("gateway build info in Prometheus: %+v", r.Data.Result)
	}
}
