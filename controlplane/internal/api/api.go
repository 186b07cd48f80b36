// Package api is the control plane's HTTP interface: one Gin router, one route table (routes.go),
// one response envelope and one mapping of the error taxonomy to HTTP (errors.go), strict JSON
// input (decode.go), JWT authentication, roles, per-user rate limits, CORS and audit
// (middleware.go), and the handlers of /api/v1 grouped by resource.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/internal/ledger"
)

// DefaultHealthTimeout is how long /health waits for Redis to answer.
const DefaultHealthTimeout = 500 * time.Millisecond

// DefaultWSRecheck is how often a WebSocket re-checks its session (one pipelined read).
const DefaultWSRecheck = 5 * time.Second

// Redis is what /health needs of the Redis client.
type Redis interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
}

// Scripts reloads missing scripts and counts the loaded ones (implemented by *scripts.Set).
type Scripts interface {
	Ensure(ctx context.Context, rdb redis.Scripter) (int, error)
}

// ConfigVersions reads the current config version (implemented by *store.Store).
type ConfigVersions interface {
	ConfigVersion(ctx context.Context) (int64, error)
}

// Ledger reads L1 state and emergency history (implemented by *ledger.Ledger).
type Ledger interface {
	ReadL1(ctx context.Context, cluster string) (ledger.L1, error)
	EmergencyHistory(ctx context.Context, cluster string, n int64) ([]ledger.EmergencyEvent, error)
}

// Options are the dependencies and settings of the router.
type Options struct {
	Redis         Redis
	Scripts       Scripts
	Config        ConfigVersions
	Logger        *slog.Logger
	HealthTimeout time.Duration // default DefaultHealthTimeout

	AuthRedis redis.Cmdable // sessions and users, read together on every request
	Tokens    *auth.Tokens
	Sessions  *auth.Sessions
	Throttle  *auth.Throttle
	Limiter   *auth.Limiter
	// ClientLimiter is the budget of refused requests per client before authentication (nil:
	// none); TrustedProxies the CIDRs whose X-Forwarded-For names the client (none: the
	// connection's address is the client).
	ClientLimiter  *auth.Limiter
	TrustedProxies []string
	Hasher         *auth.Hasher
	Users          *users.Store
	Audit          *audit.Log
	Changes        *changes.Service
	Rules          *rules.Service
	Ledger         Ledger
	Live           Live
	Metrics        Metrics
	CORSOrigins    []string      // exact browser origins allowed (CORS and WebSocket)
	MetricsToken   string        // static bearer token accepted by GET /metrics (optional)
	MaxBody        int64         // default DefaultMaxBody
	WSRecheck      time.Duration // how often a WebSocket re-checks its session; default DefaultWSRecheck

	Guard   *durable.Guard   // the config store's epoch watch (nil: not watched)
	Backups *durable.Backups // the snapshot directory (nil: none)
	Writer  durable.Writer   // export, import and restore

	PrometheusURL     string        // base URL of the Prometheus behind /metrics/history; empty: absent
	PrometheusTimeout time.Duration // of one range query; default DefaultPrometheusTimeout
	PrometheusClient  *http.Client  // default http.DefaultClient
}

type server struct {
	opts    Options
	origins map[string]bool
}

// New returns the router: release mode, panic recovery, X-Forwarded-For believed only from
// o.TrustedProxies. It fails on a trusted proxy that is not an address or a CIDR.
func New(o Options) (*gin.Engine, error) {
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = DefaultHealthTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WSRecheck <= 0 {
		o.WSRecheck = DefaultWSRecheck
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if gin.Mode() != gin.ReleaseMode {
		gin.SetMode(gin.ReleaseMode)
	}
	s := &server{opts: o, origins: map[string]bool{}}
	for _, origin := range o.CORSOrigins {
		s.origins[origin] = true
	}
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RemoteIPHeaders = []string{"X-Forwarded-For"}               // never X-Real-IP
	if err := r.SetTrustedProxies(o.TrustedProxies); err != nil { // nil: trust none
		return nil, fmt.Errorf("api: trusted proxies: %w", err)
	}
	r.Use(s.recover, s.requestID, s.securityHeaders, s.cors, s.observe, s.limitClients)
	for _, rt := range s.table() {
		r.Handle(rt.method, rt.path, s.chain(rt)...)
	}
	r.NoRoute(func(c *gin.Context) { s.fail(c, errNotFound()) })
	r.NoMethod(func(c *gin.Context) {
		s.fail(c, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed here"))
	})
	return r, nil
}
