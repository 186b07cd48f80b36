package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/durable"
	"tollgate/internal/version"
)

type healthOK struct {
	Status        string          `json:"status"` // ok, or config_store_lost
	Reason        string          `json:"reason,omitempty"`
	Redis         string          `json:"redis"`
	Scripts       int             `json:"scripts"`
	ConfigVersion int64           `json:"config_version"`
	ConfigStore   *durable.Status `json:"config_store,omitempty"`
	Version       string          `json:"version"` // of this build (internal/version)
}

type healthDown struct {
	Status  string `json:"status"`
	Redis   string `json:"redis"`
	Version string `json:"version"`
}

// health answers 200 when Redis answers PING within the health timeout (reloading any script
// missing from its cache), else 503 with a short reason. A lost config store answers 200 with
// status config_store_lost and the reason: the control plane still serves (reads, restore), so
// a load balancer must not drop it, while monitoring sees a status that is not "ok".
func (s *server) health(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opts.HealthTimeout)
	defer cancel()
	body, err := s.check(ctx)
	if err != nil {
		reason := redisReason(err)
		s.opts.Logger.Warn("health: redis unavailable", "reason", reason, "err", err)
		c.JSON(http.StatusServiceUnavailable, healthDown{Status: "unavailable", Redis: reason,
			Version: version.Version})
		return
	}
	c.JSON(http.StatusOK, body)
}

func (s *server) check(ctx context.Context) (healthOK, error) {
	if err := s.opts.Redis.Ping(ctx).Err(); err != nil {
		return healthOK{}, err
	}
	n, err := s.opts.Scripts.Ensure(ctx, s.opts.Redis)
	if err != nil {
		return healthOK{}, err
	}
	v, err := s.opts.Config.ConfigVersion(ctx)
	if err != nil {
		return healthOK{}, err
	}
	h := healthOK{Status: "ok", Redis: "ok", Scripts: n, ConfigVersion: v,
		Version: version.Version}
	if s.opts.Guard != nil {
		st := s.opts.Guard.Status()
		h.ConfigStore = &st
		if st.State == "lost" {
			h.Status, h.Reason = "config_store_lost", st.Reason+": "+st.Message
		}
	}
	return h, nil
}

// redisReason maps a Redis failure to a short, fixed reason (the details go to the log only).
func redisReason(err error) string {
	var nerr net.Error
	var rerr redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.As(err, &rerr):
		return replyReason(rerr.Error())
	default:
		return "unreachable"
	}
}

func replyReason(msg string) string {
	for _, code := range []string{"LOADING", "READONLY", "MASTERDOWN", "NOAUTH", "WRONGPASS", "OOM", "MISCONF", "BUSY"} {
		if strings.HasPrefix(msg, code) {
			return strings.ToLower(code)
		}
	}
	return "error"
}
