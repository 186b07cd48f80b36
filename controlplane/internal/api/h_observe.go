package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/live"
	"tollgate/controlplane/internal/openapi"
)

// Live is the cluster view (implemented by *live.Service).
type Live interface {
	Dashboard(ctx context.Context, rng string) (live.Dashboard, error)
	App(ctx context.Context, id, rng string) (live.AppDetail, error)
	Connections(ctx context.Context) (live.ConnectionsView, error)
	Nodes(ctx context.Context) ([]live.Node, error)
	Alerts(ctx context.Context, activeOnly bool) ([]live.Alert, error)
	Ack(ctx context.Context, id, actor string) (live.Alert, error)
	Subscribe() (<-chan []byte, func())
}

func (s *server) metricsOverview(c *gin.Context) {
	rng, err := queryRange(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	d, err := s.opts.Live.Dashboard(c.Request.Context(), rng)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, d)
}

func (s *server) metricsApp(c *gin.Context) {
	id, err := pathID(c, "id")
	rng := ""
	if err == nil {
		rng, err = queryRange(c)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	d, err := s.opts.Live.App(c.Request.Context(), id, rng)
	if errors.Is(err, live.ErrAppNotFound) {
		err = errNotFound()
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, d)
}

func (s *server) metricsConnections(c *gin.Context) {
	v, err := s.opts.Live.Connections(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, v)
}

func (s *server) listNodes(c *gin.Context) {
	nodes, err := s.opts.Live.Nodes(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, nodes, gin.H{"total": len(nodes)})
}

// listAlerts: GET /alerts?active=true|false (default: active only).
func (s *server) listAlerts(c *gin.Context) {
	active, err := queryBool(c, "active")
	if err != nil {
		s.fail(c, err)
		return
	}
	alerts, err := s.opts.Live.Alerts(c.Request.Context(), active == nil || *active)
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, alerts, gin.H{"total": len(alerts)})
}

func (s *server) ackAlert(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	a, err := s.opts.Live.Ack(c.Request.Context(), id, p.User)
	if errors.Is(err, live.ErrAlertNotFound) {
		err = errNotFound()
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	_ = s.opts.Audit.Record(c.Request.Context(), audit.Entry{Action: "alert.ack", Resource: "alert/" + id,
		Outcome: audit.OK})
	ok(c, http.StatusOK, a)
}

// queryAudit: GET /audit?stream=&actor=&action=&resource=&outcome=&since=&until=&limit=&cursor=
// (stream: authenticated, the default, or anonymous: requests refused before authentication)
func (s *server) queryAudit(c *gin.Context) {
	f, err := auditFilter(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	page, err := s.opts.Audit.Query(c.Request.Context(), f)
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, page.Entries, gin.H{"next_cursor": page.NextCursor, "count": len(page.Entries)})
}

func auditFilter(c *gin.Context) (audit.Filter, error) {
	var f audit.Filter
	var err error
	if f.Actor, err = queryID(c, "actor"); err != nil {
		return f, err
	}
	f.Action, f.Resource, f.Outcome, f.Cursor = c.Query("action"), c.Query("resource"), c.Query("outcome"), c.Query("cursor")
	for _, v := range []string{f.Action, f.Resource, f.Outcome, f.Cursor} {
		if len(v) > 300 {
			return f, errBadRequest("invalid_query", "query values must be at most 300 bytes")
		}
	}
	switch f.Stream = c.Query("stream"); f.Stream {
	case "", audit.StreamAuthenticated, audit.StreamAnonymous:
	default:
		return f, errBadRequest("invalid_query", "stream must be authenticated or anonymous")
	}
	if f.Since, f.Until, err = queryTimeRange(c); err != nil {
		return f, err
	}
	f.Limit, err = queryInt(c, "limit", audit.DefaultLimit, 1, audit.MaxLimit)
	return f, err
}

func (s *server) openapi(c *gin.Context) {
	doc, err := openapi.JSON()
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", doc)
}

func (s *server) prometheus(c *gin.Context) {
	s.opts.Metrics.Handler().ServeHTTP(c.Writer, c.Request)
}
