package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/validate"
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

type appFilter struct {
	search   string
	cluster  string
	priority int // -1: any
	enabled  *bool
}

func (f appFilter) match(a store.App) bool {
	return (f.search == "" || strings.HasPrefix(strings.ToLower(a.AppID), f.search)) &&
		(f.cluster == "" || a.ClusterID == f.cluster) &&
		(f.priority < 0 || a.Priority == f.priority) &&
		(f.enabled == nil || a.Enabled == *f.enabled)
}

func parseAppFilter(c *gin.Context) (appFilter, error) {
	f := appFilter{search: strings.ToLower(c.Query("search"))}
	if len(f.search) > 128 {
		return f, errBadRequest("invalid_query", "search must be at most 128 bytes")
	}
	var err error
	if f.cluster, err = queryID(c, "cluster_id"); err != nil {
		return f, err
	}
	if f.priority, err = queryInt(c, "priority", -1, 0, 3); err != nil {
		return f, err
	}
	f.enabled, err = queryBool(c, "enabled")
	return f, err
}

// onlySearch: the filter is at most an id prefix, which the id index answers.
func (f appFilter) onlySearch() bool {
	return f.cluster == "" && f.priority < 0 && f.enabled == nil
}

// listApps: GET /apps?page=&limit=&search=&cluster_id=&priority=&enabled= — search is an id
// prefix (case ignored). Without the other filters a page is read from the id index (one page
// of apps from Redis, whatever their number); with them, the cached list is filtered.
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
	ctx := c.Request.Context()
	var pageApps []store.App
	var total int
	if f.onlySearch() {
		p, err := s.opts.Changes.PageApps(ctx, f.search, int64(page-1)*int64(limit), int64(limit))
		if err != nil {
			s.fail(c, err)
			return
		}
		pageApps, total = p.Apps, int(p.Total)
	} else {
		all, err := s.opts.Changes.ListApps(ctx)
		if err != nil {
			s.fail(c, err)
			return
		}
		matched := make([]store.App, 0, len(all)) // all is shared: never filter it in place
		for _, a := range all {
			if f.match(a) {
				matched = append(matched, a)
			}
		}
		from := min((page-1)*limit, len(matched))
		pageApps, total = matched[from:min(from+limit, len(matched))], len(matched)
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
	okMeta(c, out, gin.H{"total": total, "page": page, "limit": limit})
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
