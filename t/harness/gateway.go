// Package harness starts real nginx gateways with tollgate's Lua for integration tests:
// the demo gateway template of nginx/, its own prefix, port and node id, and a test server in
// the same nginx (a storage backend with controllable responses, and /_t/ endpoints that call
// the Lua modules directly). Readiness is polled, never slept for.
package harness

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// GatewayOptions configures one gateway node.
type GatewayOptions struct {
	RedisURL string
	NodeID   string
	Workers  int               // default 2
	Env      map[string]string // extra TOLLGATE_* settings
	LogLevel string            // default "info"
	Backend  string            // host:port the gateway proxies to (default: the test server)
	// ConfigDict is the size of lua_shared_dict config_dict (default: nginx/tollgate_http.conf's)
	ConfigDict string
	// Loading: return once /health answers, before the node reports a loaded config
	Loading bool
	// ExtraHTTP: directives added to nginx's http block (e.g. "proxy_read_timeout 1s;")
	ExtraHTTP string
}

// Gateway is one running nginx with tollgate.
type Gateway struct {
	t      testing.TB
	Prefix string
	URL    string // gateway (limited) base URL: the tenants' listener
	// MetricsURL is the base URL of the gateway's /health and /metrics (their own listener)
	MetricsURL string
	TestURL    string // test server base URL (backend and /_t/ endpoints)
	NodeID     string
	cmd        *exec.Cmd
	done       chan struct{}
	Client     *http.Client
}

// RepoRoot is the repository root (two levels above this file).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("harness: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// MetricsAllow is what scripts/render-gateway.sh renders without TOLLGATE_METRICS_ALLOW.
const MetricsAllow = "allow 127.0.0.0/8; allow ::1; deny all;"

// Render writes nginx.conf for a gateway into prefix, the same way scripts/render-gateway.sh
// does, plus the test server include. Returns the config path.
func Render(t testing.TB, prefix string, listen, metricsListen, backend string, workers int,
	level string, extra string) string {
	t.Helper()
	repo := RepoRoot()
	for _, d := range []string{"conf", "logs", "tmp", "lua"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// tollgate's modules are loaded by the master (root) at start; tgtest is required by the
	// workers (nobody), which may not be able to traverse the checkout's path: copy it
	link := filepath.Join(prefix, "lua", "tollgate")
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Join(repo, "lua", "tollgate"), link); err != nil {
		t.Fatal(err)
	}
	build := "return { version = \"" + Version(t) + "\" }\n" // as scripts/render-gateway.sh writes it
	if err := os.WriteFile(filepath.Join(prefix, "lua", "tollgate_build.lua"), []byte(build), 0o644); err != nil {
		t.Fatal(err)
	}
	tg, err := os.ReadFile(filepath.Join(repo, "t", "nginx", "tgtest.lua"))
	if err == nil {
		err = os.WriteFile(filepath.Join(prefix, "lua", "tgtest.lua"), tg, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(repo, "nginx", "gateway.conf.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer(
		"@TMP@", filepath.Join(prefix, "tmp"), "@PREFIX@", prefix, "@REPO@", repo, "@LISTEN@", listen, "@BACKEND@", backend,
		"@METRICS_LISTEN@", metricsListen, "@METRICS_ALLOW@", MetricsAllow,
		"@WORKERS@", strconv.Itoa(workers), "@LOG_LEVEL@", level, "@EXTRA_HTTP@", extra,
		// the suites read nginx's own view of each request's duration from this log
		// and the settled cost ($tg_s) and the bytes received ($request_length) of each request
		"@ACCESS_LOG@", "log_format tgtest '$request_time $status $uri $tg_s $request_length'; access_log "+
			filepath.Join(prefix, "logs", "access.log")+" tgtest;",
	).Replace(string(tmpl))
	path := filepath.Join(prefix, "conf", "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartGateway starts nginx (master + workers) and waits until /health answers.
func StartGateway(t testing.TB, o GatewayOptions) *Gateway {
	t.Helper()
	if o.Workers == 0 {
		o.Workers = 2
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.NodeID == "" {
		o.NodeID = "node-" + strconv.Itoa(os.Getpid())
	}
	prefix := t.TempDir()
	// workers of a root master run as nobody: they must reach the prefix (temp dirs are 0700)
	for _, d := range []string{prefix, filepath.Dir(prefix)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gwPort, metricsPort, testPort := FreePort(t), FreePort(t), FreePort(t)
	testConf, err := os.ReadFile(filepath.Join(RepoRoot(), "t", "nginx", "test_server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	extraPath := filepath.Join(prefix, "conf", "test_server.conf")
	if err := os.MkdirAll(filepath.Dir(extraPath), 0o755); err != nil {
		t.Fatal(err)
	}
	// DeadAddr: a port nothing listens on (FreePort closed it), for connect errors
	deadPort := FreePort(t)
	extra := strings.NewReplacer("@TEST_LISTEN@", "127.0.0.1:"+strconv.Itoa(testPort),
		"@REPO@", RepoRoot(), "@DEAD_ADDR@", "127.0.0.1:"+strconv.Itoa(deadPort),
	).Replace(string(testConf))
	if err := os.WriteFile(extraPath, []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	backend := "127.0.0.1:" + strconv.Itoa(testPort)
	if o.Backend != "" {
		backend = o.Backend
	}
	conf := Render(t, prefix, "127.0.0.1:"+strconv.Itoa(gwPort), "127.0.0.1:"+strconv.Itoa(metricsPort),
		backend, o.Workers, o.LogLevel, "include "+extraPath+";"+o.ExtraHTTP)
	if o.ConfigDict != "" {
		resizeConfigDict(t, prefix, conf, o.ConfigDict)
	}

	g := &Gateway{
		t: t, Prefix: prefix, NodeID: o.NodeID,
		URL:        "http://127.0.0.1:" + strconv.Itoa(gwPort),
		MetricsURL: "http://127.0.0.1:" + strconv.Itoa(metricsPort),
		TestURL:    "http://127.0.0.1:" + strconv.Itoa(testPort),
		Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0,
		}},
	}
	cmd := exec.Command("nginx", "-p", prefix, "-c", conf)
	cmd.Env = append(os.Environ(), "TOLLGATE_REDIS_URL="+o.RedisURL, "TOLLGATE_NODE_ID="+o.NodeID)
	for k, v := range o.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: start nginx: %v", err)
	}
	g.cmd = cmd
	g.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(g.kill)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-g.done:
			t.Fatalf("harness: nginx exited at start: %s\n%s", out.String(), g.ErrorLog())
		default:
		}
		if g.healthy() || o.Loading && g.answers() {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("harness: nginx not healthy after 15s\n%s", g.ErrorLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running is a gateway started by someone else (scripts/stack.sh), for Do and Monitor.
func Running(t testing.TB, url, metricsURL string) *Gateway {
	return &Gateway{t: t, URL: url, MetricsURL: metricsURL, Client: &http.Client{Timeout: 10 * time.Second}}
}

func (g *Gateway) healthy() bool {
	resp, err := http.Get(g.MetricsURL + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		ConfigVersion *int `json:"config_version"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return resp.StatusCode == 200 && h.ConfigVersion != nil
}

// answers: /health answers at all (whatever its config).
func (g *Gateway) answers() bool {
	resp, err := http.Get(g.MetricsURL + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// PID of the nginx master.
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Signal sends sig to the nginx master.
func (g *Gateway) Signal(sig os.Signal) {
	if err := g.cmd.Process.Signal(sig); err != nil {
		g.t.Fatalf("harness: signal nginx: %v", err)
	}
}

// Stop shuts nginx down gracefully (SIGQUIT) and waits.
func (g *Gateway) Stop() {
	if g.cmd == nil {
		return
	}
	stopProcess(g.cmd.Process, g.done, syscall.SIGQUIT, 10*time.Second)
	g.cmd = nil
}

// stopProcess sends sig, waits up to grace for the process to exit (done closed), then kills it.
func stopProcess(p *os.Process, done <-chan struct{}, sig os.Signal, grace time.Duration) {
	_ = p.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
	}
}

func (g *Gateway) kill() {
	if g.cmd == nil {
		return
	}
	stopProcess(g.cmd.Process, g.done, syscall.SIGTERM, 5*time.Second)
	g.cmd = nil
	if g.t.Failed() {
		g.t.Logf("nginx error.log of %s:\n%s", g.NodeID, tail(g.ErrorLog(), 60))
	}
}

// SlowestRequest is the longest $request_time of a gateway request in the access log whose URI
// starts with prefix (nginx's own measure, free of client-side scheduling delays).
func (g *Gateway) SlowestRequest(prefix string) time.Duration {
	b, _ := os.ReadFile(filepath.Join(g.Prefix, "logs", "access.log"))
	var slowest float64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[2], prefix) {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil && v > slowest {
				slowest = v
			}
		}
	}
	return time.Duration(slowest * float64(time.Second))
}

// AccessLog returns the lines of the access log ($request_time $status $uri $tg_s
// $request_length).
func (g *Gateway) AccessLog() []string {
	b, _ := os.ReadFile(filepath.Join(g.Prefix, "logs", "access.log"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// ErrorLog returns the contents of nginx's error.log.
func (g *Gateway) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(g.Prefix, "logs", "error.log"))
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Do sends a request to the gateway with the given app id (none when app == "").
func (g *Gateway) Do(method, path, app string, body io.Reader, hdr map[string]string) *Response {
	g.t.Helper()
	req, err := http.NewRequest(method, g.URL+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	if app != "" {
		req.Header.Set("X-App-Id", app)
	}
	for k, v := range hdr {
		if strings.EqualFold(k, "Transfer-Encoding") && v == "chunked" {
			// hide the length: Go then really sends the body chunked
			req.ContentLength = -1
			req.TransferEncoding = []string{"chunked"}
			continue
		}
		req.Header.Set(k, v)
	}
	return g.send(req)
}

// DoHeader sends a request with exactly the header fields of h (a name may repeat), in the
// order Go writes them (sorted by name).
func (g *Gateway) DoHeader(method, path string, h http.Header) *Response {
	g.t.Helper()
	req, err := http.NewRequest(method, g.URL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = append([]string(nil), vs...)
	}
	return g.send(req)
}

// Monitor sends a GET to the gateway's monitoring listener (path: /health, /metrics).
func (g *Gateway) Monitor(path string) *Response {
	g.t.Helper()
	req, err := http.NewRequest("GET", g.MetricsURL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	return g.send(req)
}

func (g *Gateway) send(req *http.Request) *Response {
	g.t.Helper()
	resp, err := g.Client.Do(req)
	if err != nil {
		g.t.Fatalf("harness: %s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Response is a fully read HTTP response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v or fails the test.
func (r *Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("harness: body is not JSON (%v): %q", err, r.Body)
	}
}

// Cost is the X-RateLimit-Cost header as a number (-1 when absent).
func (r *Response) Cost() int {
	v, err := strconv.Atoi(r.Header.Get("X-RateLimit-Cost"))
	if err != nil {
		return -1
	}
	return v
}

// T calls a /_t/ endpoint of the test server and decodes its JSON answer into v.
func (g *Gateway) T(path string, v any) {
	g.t.Helper()
	resp, err := g.Client.Get(g.TestURL + "/_t/" + path)
	if err != nil {
		g.t.Fatalf("harness: /_t/%s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		g.t.Fatalf("harness: /_t/%s: %d %s", path, resp.StatusCode, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			g.t.Fatalf("harness: /_t/%s: %v: %s", path, err, b)
		}
	}
}

// SettleMetrics waits until every worker has finished two flushes of its metrics since the
// call: what any worker counted before the call is then in /metrics, so a counter that must
// not have moved can be read (a read right away may miss another worker's part).
func (g *Gateway) SettleMetrics() {
	g.t.Helper()
	var start []int64
	g.T("flushes", &start)
	Eventually(g.t, 10*time.Second, "every worker flushed its metrics twice", func() bool {
		var now []int64
		g.T("flushes", &now)
		for i := range start {
			if i >= len(now) || now[i] < start[i]+2 {
				return false
			}
		}
		return true
	})
}

// Lease is the local state of one app on a node (from /_t/state).
type Lease struct {
	Tokens        int64   `json:"tokens"`
	PendingCost   int64   `json:"pending_cost"`
	PendingCount  int64   `json:"pending_count"`
	Debt          int64   `json:"debt"`
	Target        int64   `json:"target"`
	FailOpen      int64   `json:"fail_open"`
	RollbackCount int64   `json:"rollback_count"`
	Neg           float64 `json:"neg"`
	Inflight      string  `json:"inflight"`
}

// State reads the local lease of app.
func (g *Gateway) State(app string) Lease {
	var l Lease
	g.T("state?app="+app, &l)
	return l
}

// Metric returns the value of one series of /metrics (0 when absent).
func (g *Gateway) Metric(series string) float64 {
	g.t.Helper()
	resp, err := g.Client.Get(g.MetricsURL + "/metrics")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(line, series+" "), 64)
			return v
		}
	}
	return 0
}

// Eventually polls cond every 10 ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resizeConfigDict points the rendered conf at a copy of tollgate_http.conf whose config_dict
// has `size`.
func resizeConfigDict(t testing.TB, prefix, conf, size string) {
	t.Helper()
	orig := filepath.Join(RepoRoot(), "nginx", "tollgate_http.conf")
	b, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`lua_shared_dict config_dict \S+;`)
	if !re.Match(b) {
		t.Fatal("harness: no config_dict in tollgate_http.conf")
	}
	cp := filepath.Join(prefix, "conf", "tollgate_http.conf")
	if err := os.WriteFile(cp, re.ReplaceAll(b, []byte("lua_shared_dict config_dict "+size+";")), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := os.ReadFile(conf)
	if err == nil {
		err = os.WriteFile(conf, []byte(strings.ReplaceAll(string(c), orig, cp)), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
