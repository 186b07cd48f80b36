package api

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"tollgate/controlplane/internal/auth"
	"tollgate/internal/keys"
	"tollgate/internal/testutil"
)

// knownMethods are the only method labels the control plane may record.
var knownMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "PATCH": true,
	"DELETE": true, "OPTIONS": true, "CONNECT": true, "TRACE": true, "OTHER": true}

// httpSeries lists the label sets of the control plane's HTTP metrics.
func httpSeries(t *testing.T, f *fixture) []map[string]string {
	t.Helper()
	mfs, err := f.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tollgate_cp_http_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{"__name__": mf.GetName()}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, labels)
		}
	}
	return out
}

func randomMethod(r *rand.Rand) string {
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, 3+r.IntN(60))
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	return string(b)
}

// Item 2: 1,000 random methods add no metric series, and their audit entries say OTHER.
func TestRandomMethodsAddNoMetricSeries(t *testing.T) {
	f := newFixture(t)
	adm := f.admin(t)
	paths := []string{"/api/v1/apps", "/api/v1/nope", "/health", "/metrics", "/x"}
	for _, p := range paths { // one request per path of a standard and of an unknown method
		f.call(t, "GET", p, "", nil)
		f.call(t, "FOO", p, "", nil)
		f.call(t, "BAR", p, adm, nil)
	}
	before := len(httpSeries(t, f))
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		m := randomMethod(r)
		tok := ""
		if i%2 == 0 {
			tok = adm
		}
		f.call(t, m, paths[i%len(paths)], tok, nil)
	}
	series := httpSeries(t, f)
	for _, s := range series {
		if m, ok := s["method"]; ok && !knownMethods[m] {
			t.Fatalf("metric series with method %.40q: %v", m, s)
		}
	}
	if added := len(series) - before; added != 0 {
		t.Fatalf("1000 random methods added %d series", added)
	}
	t.Logf("HTTP metric series: %d before, %d after 1000 random methods", before, len(series))
	testutil.Eventually(t, 5*time.Second, func() bool {
		n, _ := f.rdb.XLen(context.Background(), keys.AdminAudit()).Result()
		m, _ := f.rdb.XLen(context.Background(), keys.AdminAuditAnonymous()).Result()
		return n+m >= 400 // the 2 of 5 paths under /api/
	}, "the access entries of the random methods")
	for _, key := range []string{keys.AdminAudit(), keys.AdminAuditAnonymous()} {
		xs, err := f.rdb.XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			var e struct{ Method string }
			_ = json.Unmarshal([]byte(x.Values["e"].(string)), &e)
			if e.Method != "" && !knownMethods[e.Method] {
				t.Fatalf("audit entry with method %.40q in %s", e.Method, key)
			}
		}
	}
}

// auditWritten is how many access entries of the outcome the writer has written or dropped.
func auditWritten(t *testing.T, f *fixture, outcome string) float64 {
	t.Helper()
	mfs, err := f.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := float64(f.audit.Dropped())
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_cp_audit_entries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lv := map[string]string{}
			for _, l := range m.GetLabel() {
				lv[l.GetName()] = l.GetValue()
			}
			if lv["action"] == "access" && lv["outcome"] == outcome {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// Item 3: anonymous refusals, many more than either stream keeps, do not evict a change.
func TestAnonymousRefusalsDoNotEvictChanges(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{auditMaxLen: 1000, anonMaxLen: 300})
	f.seed(t)
	adm := f.admin(t)
	if res := f.call(t, "PUT", "/api/v1/apps/demo-p1", adm, map[string]any{"priority": 2}); res.code != 200 {
		t.Fatalf("change = %d %s", res.code, res.raw)
	}
	const flood = 4000
	for i := 0; i < flood; i++ {
		path := []string{"/api/v1/apps", "/api/v1/users", "/api/v1/audit"}[i%3]
		if res := f.call(t, "GET", path, "", nil); res.code != 401 {
			t.Fatalf("anonymous %s = %d", path, res.code)
		}
	}
	testutil.Eventually(t, 20*time.Second, func() bool { return auditWritten(t, f, "denied") >= flood },
		"the anonymous refusals written")
	res := f.call(t, "GET", "/api/v1/audit?action=app.update", adm, nil)
	if entries, _ := res.get("data").([]any); res.code != 200 || len(entries) != 1 {
		t.Fatalf("the change's entry after %d anonymous 401s: %d %s", flood, res.code, res.raw)
	}
	// the refusals are kept, in their own bounded stream
	res = f.call(t, "GET", "/api/v1/audit?stream=anonymous&action=access&limit=5", adm, nil)
	if entries, _ := res.get("data").([]any); res.code != 200 || len(entries) != 5 || !strings.Contains(res.raw, `"actor":"_anonymous"`) {
		t.Fatalf("anonymous stream: %d %.300s", res.code, res.raw)
	}
	n, err := f.rdb.XLen(context.Background(), keys.AdminAuditAnonymous()).Result()
	if err != nil || n > 300+200 { // MAXLEN ~ trims whole stream nodes (100 entries)
		t.Fatalf("anonymous stream holds %d entries (cap 300): %v", n, err)
	}
	m, _ := f.rdb.XLen(context.Background(), keys.AdminAudit()).Result()
	t.Logf("after %d anonymous 401s: anonymous stream %d entries (cap 300), authenticated stream %d (cap 1000)", flood, n, m)
	if res := f.call(t, "GET", "/api/v1/audit?stream=nope", adm, nil); res.code != 400 || res.errCode() != "invalid_query" {
		t.Fatalf("stream=nope: %d %s", res.code, res.raw)
	}
}

// Item 3: a per-client limit applies before authentication: 429 with a reason for the client
// that keeps being refused, while another client still gets through.
func TestPerClientLimitBeforeAuthentication(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{ipRate: 0.01, ipBurst: 20})
	tok := f.admin(t)
	from := func(addr, token string) result {
		return f.send(t, "GET", "/api/v1/apps", nil, map[string]string{remoteAddr: addr, "Authorization": bearerOf(token)})
	}
	limited := 0
	var last result
	for i := 0; i < 40; i++ {
		if last = from("198.51.100.7:1000", ""); last.code == 429 {
			limited++
			if last.errCode() != "client_rate_limited" || last.hdr.Get("Retry-After") == "" {
				t.Fatalf("429 without reason or Retry-After: %v %s", last.hdr, last.raw)
			}
		}
	}
	if limited < 15 {
		t.Fatalf("%d of 40 anonymous requests from one address got 429, want >= 15 (burst 20)", limited)
	}
	if res := from("198.51.100.7:1001", tok); res.code != 429 { // before authentication: even with a token
		t.Fatalf("limited address with a token = %d", res.code)
	}
	if res := from("198.51.100.8:1000", tok); res.code != 200 {
		t.Fatalf("another address with a token = %d %s", res.code, res.raw)
	}
	if res := from("198.51.100.8:1000", ""); res.code != 401 {
		t.Fatalf("another address without a token = %d %s", res.code, res.raw)
	}
	for i := 0; i < 30; i++ { // authenticated requests do not spend the budget
		if res := from("198.51.100.9:1000", tok); res.code != 200 {
			t.Fatalf("authenticated request %d = %d", i, res.code)
		}
	}
}

// clientFrom is an HTTP client whose connections leave from the loopback address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

func postLogin(t *testing.T, c *http.Client, url, user, password string, hdr map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"username": user, "password": password})
	req, _ := http.NewRequest("POST", url+"/api/v1/auth/login", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, resp.Header, body
}

// Item 4: failures count per (user, client) with a backoff: the right password from another
// client works during an attack, and the attacked client gets back in after the backoff.
func TestLoginBackoffPerUserAndClient(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{loginMaxUser: 3, loginMaxIP: 1000})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	attacker, other := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	for i := 0; i < 3; i++ {
		if code, _, _ := postLogin(t, attacker, srv.URL, "admin", "wrong-password-1", nil); code != 401 {
			t.Fatalf("failure %d = %d", i, code)
		}
	}
	code, hdr, body := postLogin(t, attacker, srv.URL, "admin", adminPassword, nil)
	if code != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("attacked client after 3 failures = %d %v", code, body)
	}
	for i := 0; i < 5; i++ { // the attack goes on
		postLogin(t, attacker, srv.URL, "admin", "wrong-password-1", nil)
	}
	if code, _, body := postLogin(t, other, srv.URL, "admin", adminPassword, nil); code != 200 {
		t.Fatalf("the right password from another client during the attack = %d %v", code, body)
	}
	third := clientFrom("127.0.0.4")
	for i := 0; i < 3; i++ {
		postLogin(t, third, srv.URL, "admin", "wrong-password-1", nil)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, _, _ := postLogin(t, third, srv.URL, "admin", adminPassword, nil)
		return code == 200
	}, "the right password after the backoff")
	// the backoff doubles: after the next failure the wait is longer than the first
	for i := 0; i < 3; i++ {
		postLogin(t, third, srv.URL, "admin", "wrong-password-1", nil)
	}
	_, h1, _ := postLogin(t, third, srv.URL, "admin", "wrong-password-1", nil)
	testutil.Eventually(t, 10*time.Second, func() bool {
		code, _, _ := postLogin(t, third, srv.URL, "admin", "wrong-password-1", nil)
		return code == 401
	}, "a counted failure after the first wait")
	_, h2, _ := postLogin(t, third, srv.URL, "admin", "wrong-password-1", nil)
	r1, _ := strconv.Atoi(h1.Get("Retry-After"))
	r2, _ := strconv.Atoi(h2.Get("Retry-After"))
	if r1 < 1 || r2 <= r1 {
		t.Fatalf("Retry-After %d then %d, want a growing backoff", r1, r2)
	}
}

// lastLoginIP is the client address of the newest auth.login entry.
func lastLoginIP(t *testing.T, f *fixture, adm string) string {
	t.Helper()
	res := f.call(t, "GET", "/api/v1/audit?stream=anonymous&action=auth.login&limit=1", adm, nil)
	entries, _ := res.get("data").([]any)
	if len(entries) != 1 {
		t.Fatalf("no auth.login entry: %s", res.raw)
	}
	ip, _ := entries[0].(map[string]any)["ip"].(string)
	return ip
}

// Item 4: X-Forwarded-For is believed from the trusted proxies only.
func TestTrustedProxiesForwardTheClientAddress(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{loginMaxUser: 3, loginMaxIP: 1000, trustedProxies: []string{"127.0.0.2/32"}})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	adm := f.admin(t)
	proxy, direct := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	xff := func(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }
	for i := 0; i < 3; i++ {
		postLogin(t, proxy, srv.URL, "admin", "wrong-password-1", xff("198.51.100.7"))
	}
	if code, _, _ := postLogin(t, proxy, srv.URL, "admin", adminPassword, xff("198.51.100.7")); code != 429 {
		t.Fatalf("the attacking client behind the proxy = %d", code)
	}
	if code, _, body := postLogin(t, proxy, srv.URL, "admin", adminPassword, xff("198.51.100.8")); code != 200 {
		t.Fatalf("another client behind the same proxy = %d %v", code, body)
	}
	// an untrusted sender's X-Forwarded-For is ignored
	postLogin(t, direct, srv.URL, "nobody", "wrong-password-1", xff("198.51.100.9"))
	if ip := lastLoginIP(t, f, adm); ip != "127.0.0.3" {
		t.Fatalf("untrusted X-Forwarded-For: audited ip %q, want 127.0.0.3", ip)
	}
	postLogin(t, proxy, srv.URL, "nobody", "wrong-password-1", xff("203.0.113.5, 198.51.100.9"))
	if ip := lastLoginIP(t, f, adm); ip != "198.51.100.9" {
		t.Fatalf("through the trusted proxy: audited ip %q, want 198.51.100.9", ip)
	}
	// X-Real-IP is not believed, not even from a trusted proxy (it may pass on the client's)
	postLogin(t, proxy, srv.URL, "nobody", "wrong-password-1", map[string]string{"X-Real-IP": "203.0.113.77"})
	if ip := lastLoginIP(t, f, adm); ip != "127.0.0.2" {
		t.Fatalf("X-Real-IP through the trusted proxy: audited ip %q, want 127.0.0.2", ip)
	}
}

// Item 4: IPv6 clients count per /64.
func TestLoginFailuresCountPerIPv6Slash64(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{loginMaxUser: 1000, loginMaxIP: 3})
	login := func(addr, user, password string) result {
		return f.send(t, "POST", "/api/v1/auth/login", map[string]string{"username": user, "password": password},
			map[string]string{remoteAddr: addr})
	}
	for i, u := range []string{"u1", "u2", "u3"} {
		addr := "[2001:db8:0:1::" + strconv.Itoa(i+1) + "]:1000"
		if res := login(addr, u, "wrong-password-1"); res.code != 401 {
			t.Fatalf("failure %d = %d", i, res.code)
		}
	}
	if res := login("[2001:db8:0:1:ffff::9]:1000", "admin", adminPassword); res.code != 429 {
		t.Fatalf("same /64 after 3 failures = %d %s", res.code, res.raw)
	}
	if res := login("[2001:db8:0:2::1]:1000", "admin", adminPassword); res.code != 200 {
		t.Fatalf("another /64 = %d %s", res.code, res.raw)
	}
}

func TestClientIDGroupsIPv6By64(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff", true},
		{"2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"192.0.2.1", "::ffff:192.0.2.1", true},
		{"192.0.2.1", "192.0.2.2", false},
		{"fe80::1", "fe80::2", true},
	} {
		if got := auth.ClientID(c.a) == auth.ClientID(c.b); got != c.same {
			t.Errorf("ClientID(%s) == ClientID(%s): %v, want %v (%q, %q)", c.a, c.b, got, c.same,
				auth.ClientID(c.a), auth.ClientID(c.b))
		}
	}
	if auth.ClientID("not an ip") != "unknown" {
		t.Errorf("ClientID of garbage = %q", auth.ClientID("not an ip"))
	}
}

// Item 6: a user deleted and created again does not revive the old user's refresh token.
func TestRecreatedUserDoesNotReviveRefreshToken(t *testing.T) {
	f := newFixture(t)
	adm := f.admin(t)
	f.user(t, "dora", auth.Operator)
	old := f.login(t, "dora", "dora-password-123")
	if res := f.call(t, "DELETE", "/api/v1/users/dora", adm, nil); res.code != 200 {
		t.Fatalf("delete = %d", res.code)
	}
	if res := f.call(t, "POST", "/api/v1/users", adm, map[string]any{"username": "dora",
		"password": "another-password-1", "role": "admin"}); res.code != 201 {
		t.Fatalf("create = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": old.refresh}); res.code != 401 {
		t.Fatalf("the deleted user's refresh token after re-creation = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "GET", "/api/v1/auth/me", old.access, nil); res.code != 401 {
		t.Fatalf("the deleted user's access token after re-creation = %d %s", res.code, res.raw)
	}
}

// Item 6: delete, disable and a role change revoke the user's sessions: refresh tokens are gone.
func TestUserChangesRevokeSessions(t *testing.T) {
	f := newFixture(t)
	adm := f.admin(t)
	for _, c := range []struct {
		name   string
		change func(name string) result
	}{
		{"delete", func(n string) result { return f.call(t, "DELETE", "/api/v1/users/"+n, adm, nil) }},
		{"disable", func(n string) result {
			return f.call(t, "PUT", "/api/v1/users/"+n, adm, map[string]any{"disabled": true})
		}},
		{"role", func(n string) result {
			return f.call(t, "PUT", "/api/v1/users/"+n, adm, map[string]any{"role": "viewer"})
		}},
	} {
		name := "u-" + c.name
		f.user(t, name, auth.Operator)
		s := f.login(t, name, name+"-password-123")
		if res := c.change(name); res.code != 200 {
			t.Fatalf("%s: %d %s", c.name, res.code, res.raw)
		}
		sid, _, _ := strings.Cut(s.refresh, ".")
		if n, _ := f.rdb.Exists(context.Background(), keys.AdminSession(sid)).Result(); n != 0 {
			t.Errorf("%s: the session is still in Redis", c.name)
		}
		if res := f.call(t, "POST", "/api/v1/auth/refresh", "", map[string]string{"refresh_token": s.refresh}); res.code != 401 {
			t.Errorf("%s: refresh = %d", c.name, res.code)
		}
	}
}

// wsClosed waits for the socket to be closed by the server.
func wsClosed(t *testing.T, c *websocket.Conn) (int, bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				return ce.Code, true
			}
			return 0, !strings.Contains(err.Error(), "timeout")
		}
	}
}

// Item 6: the WebSocket ends after logout, disable, delete or a role change.
func TestWebSocketEndsWithItsSession(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{wsRecheck: 100 * time.Millisecond})
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	adm := f.admin(t)
	for _, c := range []struct {
		name  string
		event func(n string, s session) result
	}{
		{"logout", func(n string, s session) result {
			return f.call(t, "POST", "/api/v1/auth/logout", "", map[string]string{"refresh_token": s.refresh})
		}},
		{"disable", func(n string, s session) result {
			return f.call(t, "PUT", "/api/v1/users/"+n, adm, map[string]any{"disabled": true})
		}},
		{"delete", func(n string, s session) result { return f.call(t, "DELETE", "/api/v1/users/"+n, adm, nil) }},
		{"role", func(n string, s session) result {
			return f.call(t, "PUT", "/api/v1/users/"+n, adm, map[string]any{"role": "viewer"})
		}},
	} {
		name := "ws-" + c.name
		f.user(t, name, auth.Operator)
		s := f.login(t, name, name+"-password-123")
		conn, _, err := dialWS(t, srv, nil, "tollgate.v1", "tollgate.bearer."+s.access)
		if err != nil {
			t.Fatalf("%s: dial: %v", c.name, err)
		}
		if res := c.event(name, s); res.code != 200 {
			t.Fatalf("%s: %d %s", c.name, res.code, res.raw)
		}
		code, closed := wsClosed(t, conn)
		conn.Close()
		if !closed || code != 4001 {
			t.Errorf("%s: socket closed=%v code=%d, want closed with 4001", c.name, closed, code)
		}
	}
	// a socket whose session lives stays open past several re-checks
	s := f.login(t, "admin", adminPassword)
	conn, _, err := dialWS(t, srv, nil, "tollgate.v1", "tollgate.bearer."+s.access)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			if !strings.Contains(err.Error(), "timeout") {
				t.Fatalf("a live session's socket ended: %v", err)
			}
			break
		}
	}
}

// Item 10: the bearer token in Sec-WebSocket-Protocol opens /api/v1/ws only.
func TestWebSocketProtocolTokenOnlyOnTheSocket(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	hdr := map[string]string{"Sec-WebSocket-Protocol": "tollgate.v1, tollgate.bearer." + tok}
	for _, p := range []string{"/api/v1/apps", "/api/v1/auth/me", "/metrics", "/api/v1/users"} {
		if res := f.send(t, "GET", p, nil, hdr); res.code != 401 || res.errCode() != "missing_token" {
			t.Errorf("GET %s with the token in Sec-WebSocket-Protocol = %d %s", p, res.code, res.raw)
		}
	}
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	c, _, err := dialWS(t, srv, nil, "tollgate.v1", "tollgate.bearer."+tok)
	if err != nil {
		t.Fatalf("the socket refused the subprotocol token: %v", err)
	}
	c.Close()
}

// Item 4: attempts refused during the backoff are not failures: they do not use up the
// client's failure budget (TOLLGATE_LOGIN_MAX_IP).
func TestWaitingAttemptsDoNotCountAgainstTheClient(t *testing.T) {
	f := newFixtureWith(t, fixtureOptions{loginMaxUser: 2, loginMaxIP: 4})
	login := func(user, password string) result {
		return f.send(t, "POST", "/api/v1/auth/login", map[string]string{"username": user, "password": password},
			map[string]string{remoteAddr: "198.51.100.20:1000"})
	}
	for i := 0; i < 2; i++ {
		login("admin", "wrong-password-1")
	}
	for i := 0; i < 10; i++ {
		if res := login("admin", "wrong-password-1"); res.code != 429 {
			t.Fatalf("attempt %d during the backoff = %d", i, res.code)
		}
	}
	if res := login("someone", "wrong-password-1"); res.code != 401 {
		t.Fatalf("a third failure of the client = %d %s, want 401 (2 of 4 failures used)", res.code, res.raw)
	}
}
