package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"tollgate/controlplane/internal/live"
	"tollgate/internal/keys"
	"tollgate/internal/secrets"
)

// Environment variables of the admin API (docs/operations.md "Settings").
const (
	EnvAdminUser     = "TOLLGATE_ADMIN_USER"         // first admin account, created on an empty user store (admin; [A-Za-z0-9_-]{1,128})
	EnvAdminPassword = "TOLLGATE_ADMIN_PASSWORD"     // password of the first admin on first run (generated, printed once; 12 to 72 bytes)
	EnvJWTSecret     = "TOLLGATE_JWT_SECRET"         // HS256 signing key of the tokens (generated, kept in Redis; at least 32 bytes)
	EnvAccessTTL     = "TOLLGATE_ACCESS_TTL"         // access token lifetime (15m; 1m to 1h)
	EnvRefreshTTL    = "TOLLGATE_REFRESH_TTL"        // session / refresh token lifetime (12h; 5m to 720h)
	EnvCORSOrigins   = "TOLLGATE_CORS_ORIGINS"       // comma-separated browser origins allowed by CORS (none; like https://console.example.com)
	EnvMetricsToken  = "TOLLGATE_METRICS_TOKEN"      // static bearer token for /metrics scrapes (none; at least 32 bytes)
	EnvAPIRate       = "TOLLGATE_API_RATE"           // API requests per second per user (20; 0.1 to 1e6)
	EnvAPIBurst      = "TOLLGATE_API_BURST"          // API burst per user (40; 1 to 1000000)
	EnvAuditMaxLen   = "TOLLGATE_AUDIT_MAXLEN"       // retention of the audit stream of authenticated actions, in entries (100000; 1000 to 100000000)
	EnvLiveInterval  = "TOLLGATE_LIVE_INTERVAL"      // cluster view refresh and WebSocket push (5s; 100ms to 5s)
	EnvLoginMaxUser  = "TOLLGATE_LOGIN_MAX_USER"     // failed logins per account and client before the backoff (5; 1 to 1000)
	EnvLoginMaxIP    = "TOLLGATE_LOGIN_MAX_IP"       // failed logins per client (IPv4 address or IPv6 /64) per window (20; 1 to 100000)
	EnvLoginWindow   = "TOLLGATE_LOGIN_WINDOW"       // login count window and longest backoff (15m; 1s to 24h)
	EnvAnonRate      = "TOLLGATE_API_ANON_RATE"      // refused unauthenticated requests per client per second, then 429 client_rate_limited (1; 0.001 to 1e6)
	EnvAnonBurst     = "TOLLGATE_API_ANON_BURST"     // burst of refused unauthenticated requests per client (100; 1 to 1000000)
	EnvAuditAnonMax  = "TOLLGATE_AUDIT_ANON_MAXLEN"  // retention of the audit stream of requests refused before authentication, in entries (10000; 100 to 100000000)
	EnvTrustedProxy  = "TOLLGATE_CP_TRUSTED_PROXIES" // comma-separated proxy addresses or CIDRs whose X-Forwarded-For names the client (none; like 10.0.0.0/8)
	EnvPrometheusURL = "TOLLGATE_PROMETHEUS_URL"     // Prometheus answering the console's history (none; an http:// or https:// URL)
	EnvSecretsKey    = "TOLLGATE_SECRETS_KEY_FILE"   // key file sealing the S3 secret access keys the gateways verify signatures with, the gateways' file (none: no secret is stored; a 0600 file of 32-byte keys, base64 or hex)

	// alert thresholds (docs/operations.md "Alerts")
	EnvAlertCleanupStalled  = "TOLLGATE_ALERT_CLEANUP_STALLED"   // alert cleanup_stalled: a node's last cleanup older than (120s; 1s to 24h)
	EnvAlertSpikeWindow     = "TOLLGATE_ALERT_SPIKE_WINDOW"      // alert traffic_spike: the recent window (1m; 1s to 1h)
	EnvAlertSpikeBaseline   = "TOLLGATE_ALERT_SPIKE_BASELINE"    // alert traffic_spike: the baseline before it (30m; 1s to 24h)
	EnvAlertSpikeMinHistory = "TOLLGATE_ALERT_SPIKE_MIN_HISTORY" // alert traffic_spike: history needed (10m; 1s to 24h, at most the baseline)
)

// Admin configures the admin API.
type Admin struct {
	User         string
	Password     string // empty: generated and printed on first run
	JWTSecret    []byte // empty: generated once and kept in Redis
	AccessTTL    time.Duration
	RefreshTTL   time.Duration
	CORSOrigins  []string
	MetricsToken string
	APIRate      float64
	APIBurst     int
	AuditMaxLen  int64
	AuditAnonMax int64   // retention of the anonymous audit stream
	AnonRate     float64 // refused unauthenticated requests per client per second
	AnonBurst    int
	// TrustedProxies are the CIDRs of reverse proxies whose X-Forwarded-For names the client
	// (none: the connection's address is the client).
	TrustedProxies []string
	LiveInterval   time.Duration
	LoginMaxUser   int
	LoginMaxIP     int
	LoginWindow    time.Duration
	MinSecretSize  int
	PrometheusURL  string // empty: no history ranges (the console says Prometheus is absent)
	// Secrets seals access key secrets (nil: TOLLGATE_SECRETS_KEY_FILE unset, none stored)
	Secrets        *secrets.Keyring
	SecretsKeyFile string
	Alerts         live.AlertSettings
}

// DefaultAdmin are the admin API settings without environment overrides.
func DefaultAdmin() Admin {
	return Admin{User: "admin", AccessTTL: 15 * time.Minute, RefreshTTL: 12 * time.Hour,
		APIRate: 20, APIBurst: 40, AuditMaxLen: 100000, AuditAnonMax: 10000, AnonRate: 1, AnonBurst: 100,
		LiveInterval: 5 * time.Second,
		LoginMaxUser: 5, LoginMaxIP: 20, LoginWindow: 15 * time.Minute, MinSecretSize: 32,
		Alerts: live.AlertSettings{CleanupStalled: live.CleanupStalled, SpikeWindow: live.SpikeWindow,
			SpikeBaseline: live.SpikeBaseline, SpikeMinHistory: live.SpikeMinSpan}}
}

// adminFromEnv reads the admin settings over the defaults and returns every error.
func adminFromEnv(getenv func(string) string) (Admin, []error) {
	a := DefaultAdmin()
	var errs []error
	if v := strings.TrimSpace(getenv(EnvAdminUser)); v != "" {
		if !keys.ValidID(v) {
			errs = append(errs, fmt.Errorf("%s=%q: want ^[A-Za-z0-9_-]{1,128}$", EnvAdminUser, v))
		}
		a.User = v
	}
	a.Password = getenv(EnvAdminPassword)
	if a.Password != "" && (len(a.Password) < 12 || len(a.Password) > 72) {
		errs = append(errs, fmt.Errorf("%s: want 12 to 72 bytes", EnvAdminPassword))
	}
	if s := getenv(EnvJWTSecret); s != "" {
		if len(s) < a.MinSecretSize {
			errs = append(errs, fmt.Errorf("%s: want at least %d bytes", EnvJWTSecret, a.MinSecretSize))
		}
		a.JWTSecret = []byte(s)
	}
	if p := strings.TrimSpace(getenv(EnvSecretsKey)); p != "" {
		kr, err := secrets.Load(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", EnvSecretsKey, err))
		}
		a.Secrets, a.SecretsKeyFile = kr, p
	}
	a.MetricsToken = getenv(EnvMetricsToken)
	if a.MetricsToken != "" && len(a.MetricsToken) < 32 {
		errs = append(errs, fmt.Errorf("%s: want at least 32 bytes", EnvMetricsToken))
	}
	if v := strings.TrimSpace(getenv(EnvPrometheusURL)); v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			errs = append(errs, fmt.Errorf("%s=%q: want a URL like http://127.0.0.1:9091", EnvPrometheusURL, v))
		} else {
			a.PrometheusURL = strings.TrimRight(v, "/")
		}
	}
	proxies, perrs := parseProxies(getenv(EnvTrustedProxy))
	a.TrustedProxies, errs = proxies, append(errs, perrs...)
	origins, oerrs := parseOrigins(getenv(EnvCORSOrigins))
	a.CORSOrigins, errs = origins, append(errs, oerrs...)
	errs = append(errs, adminDurations(getenv, &a)...)
	errs = append(errs, adminNumbers(getenv, &a)...)
	return a, errs
}

func adminDurations(getenv func(string) string, a *Admin) []error {
	var errs []error
	for _, d := range []struct {
		name     string
		dst      *time.Duration
		min, max time.Duration
	}{
		{EnvAccessTTL, &a.AccessTTL, time.Minute, time.Hour},
		{EnvRefreshTTL, &a.RefreshTTL, 5 * time.Minute, 30 * 24 * time.Hour},
		{EnvLiveInterval, &a.LiveInterval, 100 * time.Millisecond, 5 * time.Second},
		{EnvLoginWindow, &a.LoginWindow, time.Second, 24 * time.Hour},
		{EnvAlertCleanupStalled, &a.Alerts.CleanupStalled, time.Second, 24 * time.Hour},
		{EnvAlertSpikeWindow, &a.Alerts.SpikeWindow, time.Second, time.Hour},
		{EnvAlertSpikeBaseline, &a.Alerts.SpikeBaseline, time.Second, 24 * time.Hour},
		{EnvAlertSpikeMinHistory, &a.Alerts.SpikeMinHistory, time.Second, 24 * time.Hour},
	} {
		v := strings.TrimSpace(getenv(d.name))
		if v == "" {
			continue
		}
		p, err := time.ParseDuration(v)
		if err != nil || p < d.min || p > d.max {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration from %s to %s", d.name, v, d.min, d.max))
			continue
		}
		*d.dst = p
	}
	if a.Alerts.SpikeMinHistory > a.Alerts.SpikeBaseline {
		errs = append(errs, fmt.Errorf("%s=%s: want at most %s=%s (the spike alert could never fire)",
			EnvAlertSpikeMinHistory, a.Alerts.SpikeMinHistory, EnvAlertSpikeBaseline, a.Alerts.SpikeBaseline))
	}
	return errs
}

func adminNumbers(getenv func(string) string, a *Admin) []error {
	var errs []error
	for _, r := range []struct {
		name     string
		dst      *float64
		min, max float64
	}{
		{EnvAPIRate, &a.APIRate, 0.1, 1e6},
		{EnvAnonRate, &a.AnonRate, 0.001, 1e6},
	} {
		if v := strings.TrimSpace(getenv(r.name)); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= r.min && f <= r.max) {
				errs = append(errs, fmt.Errorf("%s=%q: want %g to %g", r.name, v, r.min, r.max))
				continue
			}
			*r.dst = f
		}
	}
	for _, n := range []struct {
		name     string
		dst      *int
		min, max int
	}{
		{EnvAPIBurst, &a.APIBurst, 1, 1000000},
		{EnvAnonBurst, &a.AnonBurst, 1, 1000000},
		{EnvLoginMaxUser, &a.LoginMaxUser, 1, 1000},
		{EnvLoginMaxIP, &a.LoginMaxIP, 1, 100000},
	} {
		if v := strings.TrimSpace(getenv(n.name)); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i < n.min || i > n.max {
				errs = append(errs, fmt.Errorf("%s=%q: want %d to %d", n.name, v, n.min, n.max))
				continue
			}
			*n.dst = i
		}
	}
	for _, n := range []struct {
		name     string
		dst      *int64
		min, max int64
	}{
		{EnvAuditMaxLen, &a.AuditMaxLen, 1000, 100000000},
		{EnvAuditAnonMax, &a.AuditAnonMax, 100, 100000000},
	} {
		if v := strings.TrimSpace(getenv(n.name)); v != "" {
			i, err := strconv.ParseInt(v, 10, 64)
			if err != nil || i < n.min || i > n.max {
				errs = append(errs, fmt.Errorf("%s=%q: want %d to %d", n.name, v, n.min, n.max))
				continue
			}
			*n.dst = i
		}
	}
	return errs
}

// parseProxies reads a comma list of proxy addresses or CIDRs (a bare address is its /32 or
// /128).
func parseProxies(v string) ([]string, []error) {
	var out []string
	var errs []error
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if ip := net.ParseIP(p); ip != nil {
			bits := 128
			if ip.To4() != nil {
				bits = 32
			}
			p = fmt.Sprintf("%s/%d", ip, bits)
		}
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an address or CIDR like 10.0.0.0/8", EnvTrustedProxy, p))
			continue
		}
		out = append(out, n.String())
	}
	return out, errs
}

// parseOrigins reads a comma list of exact origins (scheme://host[:port], no path, no "*").
func parseOrigins(v string) ([]string, []error) {
	var out []string
	var errs []error
	for _, o := range strings.Split(v, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || strings.Contains(o, "*") {
			errs = append(errs, fmt.Errorf("%s: %q is not an origin like https://console.example.com", EnvCORSOrigins, o))
			continue
		}
		out = append(out, u.Scheme+"://"+strings.ToLower(u.Host))
	}
	return out, errs
}

// LogValue prints the admin settings without secrets.
func (a Admin) LogValue() slog.Value {
	set := func(b bool) string {
		if b {
			return "set"
		}
		return "unset"
	}
	return slog.GroupValue(
		slog.String("user", a.User),
		slog.String("password", set(a.Password != "")),
		slog.String("jwt_secret", set(len(a.JWTSecret) > 0)),
		slog.String("metrics_token", set(a.MetricsToken != "")),
		slog.String("secrets_key_file", a.SecretsKeyFile), slog.String("secrets_key_id", a.Secrets.CurrentID()),
		slog.Duration("access_ttl", a.AccessTTL), slog.Duration("refresh_ttl", a.RefreshTTL),
		slog.Any("cors_origins", a.CORSOrigins),
		slog.Float64("api_rate", a.APIRate), slog.Int("api_burst", a.APIBurst),
		slog.Int64("audit_maxlen", a.AuditMaxLen), slog.Int64("audit_anon_maxlen", a.AuditAnonMax),
		slog.Float64("api_anon_rate", a.AnonRate), slog.Int("api_anon_burst", a.AnonBurst),
		slog.Any("trusted_proxies", a.TrustedProxies), slog.Duration("live_interval", a.LiveInterval),
		slog.Int("login_max_user", a.LoginMaxUser), slog.Int("login_max_ip", a.LoginMaxIP),
		slog.Duration("login_window", a.LoginWindow),
		slog.String("prometheus_url", a.PrometheusURL),
		slog.Duration("alert_cleanup_stalled", a.Alerts.CleanupStalled),
		slog.Duration("alert_spike_window", a.Alerts.SpikeWindow),
		slog.Duration("alert_spike_baseline", a.Alerts.SpikeBaseline),
		slog.Duration("alert_spike_min_history", a.Alerts.SpikeMinHistory),
	)
}
