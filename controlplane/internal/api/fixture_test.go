package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/bcrypt"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/jobs/emergency"
	"tollgate/controlplane/internal/live"
	"tollgate/controlplane/internal/metrics"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// testSecret signs the fixture's tokens (tests forge tokens with it).
var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

const adminPassword = "admin-password-123"

type fixture struct {
	redis   *testutil.Redis
	rdb     *redis.Client
	set     *scripts.Set
	store   *store.Store
	users   *users.Store
	tokens  *auth.Tokens
	audit   *audit.Log
	live    *live.Service
	metrics *metrics.Metrics
	handler http.Handler
}

type fixtureOptions struct {
	rate, burst  float64
	loginMaxUser int
	loginMaxIP   int
	origins      []string
	metricsToken string
	maxBody      int64
	promURL      string
	promTimeout  time.Duration

	auditMaxLen     int64         // authenticated audit stream retention (default 100000)
	anonMaxLen      int64         // anonymous audit stream retention
	ipRate, ipBurst float64       // per-client budget of anonymous refusals (default: unlimited)
	trustedProxies  []string      // CIDRs whose X-Forwarded-For is believed
	wsRecheck       time.Duration // how often a WebSocket re-checks its session
}

func newFixture(t testing.TB) *fixture { return newFixtureWith(t, fixtureOptions{}) }

// newFixtureWith builds the whole admin API over a real redis-server, as main does, with a
// cheap bcrypt cost; the audit writer runs until the test ends.
func newFixtureWith(t testing.TB, o fixtureOptions) *fixture {
	t.Helper()
	if o.rate == 0 {
		o.rate, o.burst = 1e6, 1e6
	}
	if o.loginMaxUser == 0 {
		o.loginMaxUser, o.loginMaxIP = 1000, 1000
	}
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	r := testutil.StartRedis(t)
	f := &fixture{redis: r, rdb: r.Client(), set: set}
	f.store = store.New(f.rdb, set)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hasher, err := auth.NewHasher(bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	f.users = users.New(f.rdb, hasher, nil)
	if f.tokens, err = auth.NewTokens(testSecret, 15*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	f.audit = audit.New(f.rdb, audit.Options{Logger: log, MaxLen: o.auditMaxLen, AnonMaxLen: o.anonMaxLen,
		OnWrite: func(action, outcome string) { f.metrics.AuditWrite(action, outcome) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.audit.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	led := ledger.New(f.rdb, set)
	cat := changes.NewCatalog(f.store)
	ch := changes.New(changes.Options{Store: f.store, Validator: validate.New(cat, log, f.audit),
		Emergency: emergency.NewManager(led, log), Audit: f.audit, Redis: f.rdb, Catalog: cat, Logger: log})
	f.live = live.New(live.Options{Redis: f.rdb, Catalog: f.store, L1: led, Interval: time.Second, Logger: log})
	f.metrics = metrics.New(metrics.Options{AuditDropped: f.audit.Dropped, WSClients: f.live.Subscribers,
		Snapshot: f.live.Current})
	var clients *auth.Limiter
	if o.ipRate > 0 {
		clients = auth.NewLimiter(o.ipRate, int(o.ipBurst), nil)
	}
	h, err := New(Options{Redis: f.rdb, Scripts: set, Config: f.store, Logger: log, AuthRedis: f.rdb,
		Tokens: f.tokens, Sessions: auth.NewSessions(f.rdb, time.Hour, nil),
		Throttle: auth.NewThrottle(f.rdb, o.loginMaxUser, o.loginMaxIP, time.Minute),
		Limiter:  auth.NewLimiter(o.rate, int(o.burst), nil), Hasher: hasher, Users: f.users, Audit: f.audit,
		Changes: ch, Rules: rules.New(rules.Options{Redis: f.rdb, Store: f.store, Apps: cat, Audit: f.audit, Logger: log}),
		Ledger: led, Live: f.live, Metrics: f.metrics, CORSOrigins: o.origins,
		MetricsToken: o.metricsToken, MaxBody: o.maxBody, PrometheusURL: o.promURL,
		PrometheusTimeout: o.promTimeout, WSRecheck: o.wsRecheck,
		ClientLimiter: clients, TrustedProxies: o.trustedProxies,
		Writer: durable.Writer{Reader: durable.Reader{Redis: f.rdb, Store: f.store}}})
	if err != nil {
		t.Fatal(err)
	}
	f.handler = h
	if _, _, err := f.users.Bootstrap(context.Background(), "admin", adminPassword); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) seed(t testing.TB) {
	t.Helper()
	if _, err := seed.Demo(context.Background(), f.store); err != nil {
		t.Fatal(err)
	}
}

// user creates a user with a role and returns an access token for it.
func (f *fixture) user(t testing.TB, name string, role auth.Role) string {
	t.Helper()
	if _, err := f.users.Create(context.Background(), name, name+"-password-123", role); err != nil {
		t.Fatal(err)
	}
	return f.login(t, name, name+"-password-123").access
}

type session struct{ access, refresh string }

func (f *fixture) login(t testing.TB, name, password string) session {
	t.Helper()
	res := f.call(t, "POST", "/api/v1/auth/login", "", map[string]string{"username": name, "password": password})
	if res.code != 200 {
		t.Fatalf("login %s: %d %s", name, res.code, res.raw)
	}
	return session{access: res.str("data", "access_token"), refresh: res.str("data", "refresh_token")}
}

func (f *fixture) admin(t testing.TB) string { return f.login(t, "admin", adminPassword).access }

type result struct {
	code int
	hdr  http.Header
	raw  string
	body map[string]any
}

// get walks nested objects: res.get("data", "validation", "valid").
func (r result) get(path ...string) any {
	var v any = r.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func (r result) str(path ...string) string { s, _ := r.get(path...).(string); return s }

func (r result) errCode() string { return r.str("error", "code") }

// call sends a request with an optional bearer token and a body (a string is sent as is, any
// other value as JSON).
func (f *fixture) call(t testing.TB, method, path, token string, body any) result {
	t.Helper()
	return f.send(t, method, path, body, map[string]string{"Authorization": bearerOf(token)})
}

func bearerOf(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// remoteAddr in send's header map sets the request's client address (ip:port) instead.
const remoteAddr = ":remote"

func (f *fixture) send(t testing.TB, method, path string, body any, hdr map[string]string) result {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	if a := hdr[remoteAddr]; a != "" {
		req.RemoteAddr = a
		delete(hdr, remoteAddr)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	res := result{code: rec.Code, hdr: rec.Header(), raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &res.body)
	return res
}
