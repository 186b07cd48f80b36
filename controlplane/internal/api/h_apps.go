package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// appView is an app as the API shows it: its config and, when set, its connection limits.
type appView struct {
	store.App
	MaxConnections   *int64 `json:"max_connections,omitempty"`
	BurstConnections *int64 `json:"burst_connections,omitempty"`
}

func viewOf(a store.App, l *validate.ConnLimits) appView {
	v := appView{App: a}
	if l != nil {
		v.MaxConnections, v.BurstConnections = &l.MaxConnections, &l.BurstConnections
	}
	return v
}

// MaxExamined bounds the candidates one list request with several value filters checks (see
// listApps); a variable for the tests.
var MaxExamined int64 = 5000

func parseAppFilter(c *gin.Context) (store.AppFilter, error) {
	f := store.AppFilter{Prefix: strings.ToLower(c.Query("search"))}
	if len(f.Prefix) > 128 {
		return f, errBadRequest("invalid_query", "search must be at most 128 bytes")
	}
	var err error
	if f.Cluster, err = queryID(c, "cluster_id"); err != nil {
		return f, err
	}
	p, err := queryInt(c, "priority", -1, 0, 3)
	if err != nil {
		return f, err
	}
	if p >= 0 {
		f.Priority = &p
	}
	f.Enabled, err = queryBool(c, "enabled")
	return f, err
}

// listApps: GET /apps?page=&limit=&search=&cluster_id=&priority=&enabled=&after= — search is an
// id prefix (case ignored). With at most one of cluster_id, priority and enabled a page is read
// from the id index or that filter's value index (one page of apps from Redis, whatever their
// number) and meta has the exact total. With two or more, the smallest of their indexes is
// walked from after (an app id, exclusive) and each candidate checked against the others; one
// request examines at most MaxExamined candidates, and meta.next, when present, is the after of
// the next request (meta.total is then absent; meta.total_at_most bounds it).
func (s *server) listApps(c *gin.Context) {
	page, err := queryInt(c, "page", 1, 1, 1000000)
	if err != nil {
		s.fail(c, err)
		return
	}
	limit, err := queryInt(c, "limit", 20, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	f, err := parseAppFilter(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	after, hasAfter := c.GetQuery("after")
	ctx := c.Request.Context()
	var pageApps []store.App
	var meta gin.H
	switch n := f.ValueFilters(); {
	case n >= 2:
		if page > 1 {
			s.fail(c, errBadRequest("invalid_query", "with more than one of cluster_id, priority and enabled, page through meta.next with after=, not page="))
			return
		}
		if hasAfter && !keys.ValidID(after) {
			s.fail(c, errBadRequest("invalid_query", "after must be an app id"))
			return
		}
		sc, err := s.opts.Changes.ScanApps(ctx, f, after, int64(limit), MaxExamined)
		if err != nil {
			s.fail(c, err)
			return
		}
		pageApps = sc.Apps
		meta = gin.H{"limit": limit, "examined": sc.Examined, "total_at_most": sc.AtMost}
		if sc.Next != "" {
			meta["next"] = sc.Next
		}
	default:
		if hasAfter {
			s.fail(c, errBadRequest("invalid_query", "after pages a list with more than one of cluster_id, priority and enabled; use page="))
			return
		}
		p, err := s.opts.Changes.PageApps(ctx, f, int64(page-1)*int64(limit), int64(limit))
		if err != nil {
			s.fail(c, err)
			return
		}
		pageApps, meta = p.Apps, gin.H{"total": p.Total, "page": page, "limit": limit}
	}
	conns, err := s.opts.Changes.Connections(ctx, pageApps)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]appView, 0, len(pageApps))
	for _, a := range pageApps {
		out = append(out, viewOf(a, conns[a.AppID]))
	}
	okMeta(c, out, meta)
}

func (s *server) getApp(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	a, err := s.opts.Changes.GetApp(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, viewOf(a.App, a.Connections))
}

// changeResponse is the answer to a change: the validation result with the diff, the new config
// version when written, and the resource as it now is.
type changeResponse struct {
	changes.Outcome
	Resource any `json:"resource,omitempty"`
}

// answerChange answers a change: a dry run is always 200 with its validation result (valid or
// not); a rejected write is a 400 with the violations; a write is 200, or 201 when created.
func (s *server) answerChange(c *gin.Context, out changes.Outcome, err error, created bool, resource func() (any, error)) {
	var inv *changes.InvalidError
	if err != nil && errors.As(err, &inv) && inv.Result.DryRun {
		ok(c, http.StatusOK, changeResponse{Outcome: changes.Outcome{Validation: inv.Result}})
		return
	}
	var rinv *rules.InvalidError
	if err != nil && errors.As(err, &rinv) && rinv.Result.DryRun {
		ok(c, http.StatusOK, changeResponse{Outcome: changes.Outcome{Validation: rinv.Result}})
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	resp := changeResponse{Outcome: out}
	if out.Written && resource != nil {
		if resp.Resource, err = resource(); err != nil {
			s.fail(c, err)
			return
		}
	}
	status := http.StatusOK
	if created && out.Written {
		status = http.StatusCreated
	}
	ok(c, status, resp)
}

func (s *server) createApp(c *gin.Context) {
	var in changes.AppFields
	w, read := s.readWrite(c, "", &in)
	if !read {
		return
	}
	out, err := s.opts.Changes.CreateApp(c.Request.Context(), w.actor, in, w.dry)
	s.answerChange(c, out, err, true, func() (any, error) { return s.appResource(c, *in.AppID) })
}

func (s *server) appResource(c *gin.Context, id string) (any, error) {
	a, err := s.opts.Changes.GetApp(c.Request.Context(), id)
	if err != nil {
		return nil, err
	}
	return viewOf(a.App, a.Connections), nil
}

func (s *server) updateApp(c *gin.Context) {
	var in changes.AppFields
	w, read := s.readWrite(c, "id", &in)
	if !read {
		return
	}
	out, err := s.opts.Changes.UpdateApp(c.Request.Context(), w.actor, w.id, in, w.dry)
	s.answerChange(c, out, err, false, func() (any, error) { return s.appResource(c, w.id) })
}

func (s *server) deleteApp(c *gin.Context) {
	w, read := s.readWrite(c, "id", nil)
	if !read {
		return
	}
	out, err := s.opts.Changes.DeleteApp(c.Request.Context(), w.actor, w.id, w.dry)
	s.answerChange(c, out, err, false, nil)
}
