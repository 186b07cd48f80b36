// Package config reads the control plane's settings from the environment: one struct, defaults,
// validation into a list of errors, and a printable form without secrets.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/redisconn"
)

// Environment variable names and their defaults.
const (
	EnvAddr     = "TOLLGATE_CP_ADDR"   // HTTP listen address of the API, console and /metrics (127.0.0.1:9090; host:port)
	EnvRedisURL = "TOLLGATE_REDIS_URL" // Redis: redis://[:password@]host:port[/db], rediss://, redis-sentinel://, redis-cluster:// (redis://127.0.0.1:6390/0)
	EnvSeedDemo = "TOLLGATE_SEED_DEMO" // seed the demo config into an empty Redis that was never a config store; make run sets true (false; true or false)
	EnvTLSCert  = "TOLLGATE_TLS_CERT"  // PEM certificate (chain) file: serve HTTPS (with TOLLGATE_TLS_KEY) (none; a file path)
	EnvTLSKey   = "TOLLGATE_TLS_KEY"   // PEM private key file of TOLLGATE_TLS_CERT (none; a file path)

	DefaultAddr     = "127.0.0.1:9090"
	DefaultRedisURL = "redis://127.0.0.1:6390/0"
	DefaultSeedDemo = false // make run (scripts/stack.sh) turns it on
)

// Config is the control plane's configuration.
type Config struct {
	Addr     string  // HTTP listen address host:port
	RedisURL string  // redis://, rediss://, redis-sentinel:// or redis-cluster:// URL; may carry a password
	SeedDemo bool    // seed the demo config into an empty Redis that was never a config store
	TLSCert  string  // PEM certificate file; with TLSKey the API and console are served over HTTPS
	TLSKey   string  // PEM private key file
	Jobs     Jobs    // periodic jobs of the elected leader (jobs.go)
	Admin    Admin   // admin API: auth, CORS, limits, audit (admin.go)
	Durable  Durable // snapshots, WAIT for replicas, the store's epoch check (durable.go)

	redis redisconn.Target
}

// FromEnv fills a Config from getenv (os.Getenv in production) with defaults for unset
// variables, and returns every validation error joined.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Addr:     orDefault(getenv(EnvAddr), DefaultAddr),
		RedisURL: orDefault(getenv(EnvRedisURL), DefaultRedisURL),
		SeedDemo: DefaultSeedDemo,
		TLSCert:  strings.TrimSpace(getenv(EnvTLSCert)),
		TLSKey:   strings.TrimSpace(getenv(EnvTLSKey)),
	}
	var errs []error
	if v := strings.TrimSpace(getenv(EnvSeedDemo)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", EnvSeedDemo, v))
		}
		c.SeedDemo = b
	}
	jobs, jerrs := jobsFromEnv(getenv)
	c.Jobs = jobs
	errs = append(errs, jerrs...)
	admin, aerrs := adminFromEnv(getenv)
	c.Admin = admin
	errs = append(errs, aerrs...)
	durable, derrs := durableFromEnv(getenv)
	c.Durable = durable
	errs = append(errs, derrs...)
	errs = append(errs, c.validate()...)
	return c, errors.Join(errs...)
}

func (c *Config) validate() []error {
	var errs []error
	if err := validateAddr(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: %w", EnvAddr, c.Addr, err))
	}
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		errs = append(errs, fmt.Errorf("%s and %s: set both or neither", EnvTLSCert, EnvTLSKey))
	case c.TLSCert != "":
		if _, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q, %s=%q: %w", EnvTLSCert, c.TLSCert, EnvTLSKey, c.TLSKey, err))
		}
	}
	target, err := redisconn.Parse(c.RedisURL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: %w", EnvRedisURL, redactURL(c.RedisURL), scrubURLError(err)))
	} else {
		c.redis = target
	}
	return errs
}

// RedisOptions returns the client options of a single-server RedisURL (nil for Sentinel and
// Cluster URLs), with context deadlines honoured by reads and writes (so a health check's 500 ms
// budget holds against a frozen Redis). Only valid on a Config returned by FromEnv without error.
func (c Config) RedisOptions() *redis.Options {
	return c.redis.Options()
}

// Redis is the parsed RedisURL (one server, Sentinel or Cluster); its NewClient makes the
// control plane's client. Only valid on a Config returned by FromEnv without error.
func (c Config) Redis() redisconn.Target {
	return c.redis
}

// LogValue prints the config without secrets (the Redis password is redacted).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("redis_url", c.redisURLForLog()),
		slog.Bool("seed_demo", c.SeedDemo),
		slog.String("tls_cert", c.TLSCert),
		slog.Any("jobs", c.Jobs),
		slog.Any("admin", c.Admin),
		slog.Any("durable", c.Durable),
	)
}

func (c Config) redisURLForLog() string {
	if c.redis.Kind != "" {
		return c.redis.String()
	}
	return redactURL(c.RedisURL)
}

func validateAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostname(host) {
		return fmt.Errorf("bad host %q", host)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("bad port %q: want 1-65535", port)
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return false
		}
	}
	return true
}

// scrubURLError keeps a URL parse error from echoing the raw URL and its password.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = "<redacted>"
	}
	return err
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable>"
	}
	return u.Redacted()
}

func orDefault(v, def string) string {
	if v = strings.TrimSpace(v); v == "" {
		return def
	}
	return v
}
