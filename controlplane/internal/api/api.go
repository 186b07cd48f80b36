// Package api is the control plane's HTTP interface: one Gin router, one route table.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// DefaultHealthTimeout is how long /health waits for Redis to answer.
const DefaultHealthTimeout = 500 * time.Millisecond

// Redis is what the API needs of the Redis client.
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

// Options are the dependencies of the router.
type Options struct {
	Redis         Redis
	Scripts       Scripts
	Config        ConfigVersions
	Logger        *slog.Logger
	HealthTimeout time.Duration // default DefaultHealthTimeout
}

type server struct {
	opts Options
}

// New returns the router: release mode, panic recovery, no proxy headers trusted, no CORS
// headers at all (a dashboard origin allowlist comes with the dashboard).
func New(o Options) *gin.Engine {
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = DefaultHealthTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if gin.Mode() != gin.ReleaseMode {
		gin.SetMode(gin.ReleaseMode)
	}
	r := gin.New()
	r.Use(gin.Recovery())
	_ = r.SetTrustedProxies(nil) // nil never fails: trust no X-Forwarded-For
	routes(r, &server{opts: o})
	return r
}

// routes is the one route table of the control plane.
func routes(r *gin.Engine, s *server) {
	r.GET("/health", s.health)
	r.NoRoute(func(c *gin.Context) {
		c.JSON(http.StatusNotFound, gin.H{"error": "not_found"})
	})
}
