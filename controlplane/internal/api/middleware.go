package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/users"
	"tollgate/internal/keys"
)

// Gin context keys.
const (
	ctxPrincipal = "tollgate.principal"
	ctxRequestID = "tollgate.request_id"
	ctxUnaudited = "tollgate.unaudited" // refused by the client limit: counted, not audited
	wsProtocol   = "tollgate.v1"
	wsBearer     = "tollgate.bearer."
	wsPath       = "/api/v1/ws"
)

// principal is the authenticated caller: the user's current role (from the user record, not
// the token, so a demotion applies at once) and the session.
type principal struct {
	User    string
	Role    auth.Role
	SID     string
	Expires time.Time
}

func principalOf(c *gin.Context) (principal, bool) {
	p, ok := c.Get(ctxPrincipal)
	if !ok {
		return principal{}, false
	}
	pp, ok := p.(principal)
	return pp, ok
}

// Metrics records the API's own metrics and serves /metrics.
type Metrics interface {
	ObserveHTTP(route, method string, status int, d time.Duration)
	Handler() http.Handler
	ConfigViolations(n int) // stored config the config contract refuses (GET /config/violations)
}

type noMetrics struct{}

func (noMetrics) ObserveHTTP(string, string, int, time.Duration) {}
func (noMetrics) Handler() http.Handler                          { return http.NotFoundHandler() }
func (noMetrics) ConfigViolations(int)                           {}

func (s *server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			s.opts.Logger.Error("api panic", "route", c.FullPath(), "panic", v)
			s.fail(c, apiErr(http.StatusInternalServerError, "internal_error", "internal error"))
		}
	}()
	c.Next()
}

func (s *server) requestID(c *gin.Context) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	c.Set(ctxRequestID, id)
	c.Header("X-Request-Id", id)
	c.Next()
}

func (s *server) securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	c.Next()
}

// cors answers browsers of the allowlisted origins only (exact match, never "*", never with
// credentials: the API uses bearer tokens, not cookies). Other origins get no CORS headers, so
// their pages cannot read answers, and their preflights a 403.
func (s *server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		c.Next()
		return
	}
	c.Writer.Header().Add("Vary", "Origin")
	preflight := c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != ""
	if !s.origins[origin] {
		if preflight {
			s.fail(c, apiErr(http.StatusForbidden, "origin_not_allowed", "this origin is not in TOLLGATE_CORS_ORIGINS"))
			return
		}
		c.Next()
		return
	}
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After")
	if preflight {
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	c.Next()
}

// methodLabel is the method as the control plane records it (metric label, audit entry, log):
// one of the standard methods, else OTHER, so a client cannot mint label values or fill the
// audit log with its own method names.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// observe times every request for the metrics and audits every access to /api/ (Req 21.10).
func (s *server) observe(c *gin.Context) {
	start := time.Now()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	method := methodLabel(c.Request.Method)
	req := audit.Request{IP: c.ClientIP(), Method: method, Route: route,
		RequestID: c.GetString(ctxRequestID)}
	c.Request = c.Request.WithContext(audit.WithRequest(c.Request.Context(), req))
	c.Next()
	status := c.Writer.Status()
	s.opts.Metrics.ObserveHTTP(route, method, status, time.Since(start))
	if !strings.HasPrefix(c.Request.URL.Path, "/api/") || s.opts.Audit == nil {
		return
	}
	if c.GetBool(ctxUnaudited) {
		return
	}
	e := audit.Entry{Action: "access", Status: status, Outcome: outcomeOf(status), Anonymous: true}
	if p, ok := principalOf(c); ok {
		e.Actor, e.Role, e.Anonymous = p.User, string(p.Role), false
	}
	s.opts.Audit.Enqueue(c.Request.Context(), e)
}

// limitClients is the per-client limit before authentication: every request that ends refused
// (status >= 400) without an authenticated user spends one of the client's tokens (IPv4
// address or IPv6 /64, see auth.ClientID), and a client with none left gets 429
// client_rate_limited before its token is even looked at; those 429s are counted in the
// metrics, not audited one by one. /health is exempt.
func (s *server) limitClients(c *gin.Context) {
	l := s.opts.ClientLimiter
	if l == nil || c.Request.URL.Path == "/health" {
		c.Next()
		return
	}
	client := auth.ClientID(c.ClientIP())
	if allowed, wait := l.Check(client); !allowed {
		c.Set(ctxUnaudited, true)
		s.fail(c, &Error{Status: http.StatusTooManyRequests, Code: "client_rate_limited",
			Message: "too many refused requests from your address; slow down", RetryAfter: wait})
		return
	}
	c.Next()
	if _, authenticated := principalOf(c); !authenticated && c.Writer.Status() >= 400 {
		l.Spend(client)
	}
}

func outcomeOf(status int) string {
	switch {
	case status == 401 || status == 403:
		return audit.Denied
	case status >= 500:
		return audit.Failed
	case status >= 400:
		return audit.Rejected
	}
	return audit.OK
}

// bearer finds the access token: "Authorization: Bearer <token>", or on the WebSocket route
// only (browsers cannot give a socket headers) the subprotocol "tollgate.bearer.<token>".
func bearer(c *gin.Context) (string, error) {
	h := c.GetHeader("Authorization")
	if h == "" && c.FullPath() == wsPath {
		for _, p := range websocketProtocols(c.Request) {
			if t, ok := strings.CutPrefix(p, wsBearer); ok {
				h = "Bearer " + t
			}
		}
	}
	if h == "" {
		return "", errUnauthorized("missing_token", "an access token is required (Authorization: Bearer ...)")
	}
	if len(h) > auth.MaxTokenLen+7 {
		return "", errUnauthorized("invalid_token", "the token is too large")
	}
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", errUnauthorized("invalid_token", "use Authorization: Bearer <token>")
	}
	return strings.TrimSpace(tok), nil
}

func websocketProtocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return out
}

func (s *server) authenticate(c *gin.Context) {
	tok, err := bearer(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	p, err := s.principal(c.Request.Context(), tok)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.setPrincipal(c, p)
	c.Next()
}

func (s *server) setPrincipal(c *gin.Context, p principal) {
	c.Set(ctxPrincipal, p)
	ctx := c.Request.Context()
	if r, ok := audit.FromContext(ctx); ok {
		r.Actor, r.Role = p.User, string(p.Role)
		c.Request = c.Request.WithContext(audit.WithRequest(ctx, r))
	}
}

// principal verifies the token, then in one round trip that its session is alive and its user
// exists, is enabled and has not ended the session (password, role or state change).
func (s *server) principal(ctx context.Context, tok string) (principal, error) {
	cl, err := s.opts.Tokens.Verify(tok)
	if err != nil {
		return principal{}, err
	}
	var created, rec *redis.StringCmd
	_, err = s.opts.AuthRedis.Pipelined(ctx, func(p redis.Pipeliner) error {
		created = p.HGet(ctx, auth.SessionKey(cl.SID), auth.SessionCreatedField)
		rec = p.HGet(ctx, keys.AdminUsers(), cl.Subject)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return principal{}, err
	}
	since, cerr := created.Int64()
	doc, err := rec.Result()
	if cerr != nil || err != nil {
		return principal{}, auth.ErrSessionEnded
	}
	u, err := users.Decode(cl.Subject, doc)
	if err != nil || !u.Valid(since) {
		return principal{}, auth.ErrSessionEnded
	}
	return principal{User: u.Username, Role: u.Role, SID: cl.SID, Expires: cl.ExpiresAt.Time}, nil
}

// authenticateScrape lets Prometheus in with the static metrics token, else a user's token.
func (s *server) authenticateScrape(c *gin.Context) {
	if t := s.opts.MetricsToken; t != "" {
		if tok, err := bearer(c); err == nil && subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
			s.setPrincipal(c, principal{User: "_metrics", Role: auth.Viewer})
			c.Next()
			return
		}
	}
	s.authenticate(c)
}

func (s *server) require(min auth.Role) gin.HandlerFunc {
	return func(c *gin.Context) {
		p, _ := principalOf(c)
		if !p.Role.Allows(min) {
			s.fail(c, errForbidden())
			return
		}
		c.Next()
	}
}

// rateLimit is the per-user API rate limit (Req 21.9).
func (s *server) rateLimit(c *gin.Context) {
	p, _ := principalOf(c)
	if allowed, wait := s.opts.Limiter.Allow(p.User); !allowed {
		s.fail(c, &Error{Status: http.StatusTooManyRequests, Code: "rate_limited",
			Message: "too many API requests; slow down", RetryAfter: wait})
		return
	}
	c.Next()
}
