package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/live"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/ledger"
	"tollgate/internal/store"
)

// DefaultReservedRatio of a new cluster (docs/design.md §3).
const DefaultReservedRatio = 0.1

type clusterFields struct {
	Capacity      *int64   `json:"capacity,omitempty"`
	ReservedRatio *float64 `json:"reserved_ratio,omitempty"`
}

type connFields struct {
	MaxConnections   *int64   `json:"max_connections,omitempty"`
	BurstConnections *int64   `json:"burst_connections,omitempty"`
	ReservedRatio    *float64 `json:"reserved_ratio,omitempty"`
}

// clusterView is a cluster with its L1 state, emergency state and connection limits.
type clusterView struct {
	ID              string                     `json:"id"`
	Capacity        int64                      `json:"capacity"`
	ReservedRatio   float64                    `json:"reserved_ratio"`
	Allocated       int64                      `json:"allocated"`
	Available       int64                      `json:"available"`
	Borrowed        int64                      `json:"borrowed"`
	EmergencyMode   bool                       `json:"emergency_mode"`
	EmergencyUntil  int64                      `json:"emergency_until,omitempty"`
	EmergencyReason string                     `json:"emergency_reason,omitempty"`
	Corrections     int64                      `json:"reconcile_corrections"`
	Connections     *changes.ClusterConnLimits `json:"connections,omitempty"`
}

func (s *server) clusterView(c *gin.Context, id string) (clusterView, error) {
	ctx := c.Request.Context()
	l1, err := s.opts.Ledger.ReadL1(ctx, id)
	if err != nil {
		return clusterView{}, err
	}
	conn, err := s.opts.Changes.ClusterConnections(ctx, id)
	if err != nil {
		return clusterView{}, err
	}
	v := clusterView{ID: id, Capacity: l1.Capacity, ReservedRatio: l1.ReservedRatio, Allocated: l1.Allocated,
		Available: l1.Available, Borrowed: l1.Borrowed, EmergencyMode: l1.EmergencyActive(time.Now().Unix()),
		Corrections: l1.Corrections, Connections: conn}
	if v.EmergencyMode {
		v.EmergencyUntil, v.EmergencyReason = l1.EmergencyUntil, l1.EmergencyReason
	}
	return v, nil
}

func (s *server) clusterIDs(c *gin.Context) ([]string, error) {
	return s.opts.Changes.ClusterIDs(c.Request.Context())
}

func (s *server) listClusters(c *gin.Context) {
	ids, err := s.clusterIDs(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]clusterView, 0, len(ids))
	for _, id := range ids {
		v, err := s.clusterView(c, id)
		if errors.Is(err, ledger.ErrUnknownCluster) {
			continue
		}
		if err != nil {
			s.fail(c, err)
			return
		}
		out = append(out, v)
	}
	okMeta(c, out, gin.H{"total": len(out)})
}

func (s *server) getCluster(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	v, err := s.clusterView(c, id)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, v)
}

// putCluster creates or updates a cluster: fields left out keep their value (a new cluster
// needs capacity; its reserved_ratio defaults to 0.1).
func (s *server) putCluster(c *gin.Context) {
	var in clusterFields
	w, read := s.readWrite(c, "id", &in)
	if !read {
		return
	}
	id, dry := w.id, w.dry
	f := changes.ClusterFields{Capacity: in.Capacity, ReservedRatio: in.ReservedRatio}
	out, err := s.opts.Changes.UpdateCluster(c.Request.Context(), w.actor, id, f, DefaultReservedRatio, dry)
	s.answerChange(c, out, err, false, func() (any, error) { return s.clusterView(c, id) })
}

func (s *server) putClusterConnections(c *gin.Context) {
	var in connFields
	w, read := s.readWrite(c, "id", &in)
	if !read {
		return
	}
	if in.MaxConnections == nil || in.BurstConnections != nil {
		s.fail(c, errBadRequest("invalid_body", "a cluster takes max_connections (required) and reserved_ratio"))
		return
	}
	l := changes.ClusterConnLimits{MaxConnections: *in.MaxConnections, ReservedRatio: DefaultReservedRatio}
	if in.ReservedRatio != nil {
		l.ReservedRatio = *in.ReservedRatio
	}
	out, err := s.opts.Changes.PutClusterConnections(c.Request.Context(), w.actor, w.id, l, w.dry)
	s.answerChange(c, out, err, false, func() (any, error) { return s.clusterView(c, w.id) })
}

// listConnections: GET /connections?page=&limit= — the connection limits of one page of apps
// in id order (read from the id index: never every app) and the usage per app and cluster summed
// over the gateway nodes; meta.total is the number of apps.
func (s *server) listConnections(c *gin.Context) {
	page, err := queryInt(c, "page", 1, 1, 1000000)
	if err != nil {
		s.fail(c, err)
		return
	}
	limit, err := queryInt(c, "limit", 1000, 1, 1000)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	p, err := s.opts.Changes.PageApps(ctx, store.AppFilter{}, int64(page-1)*int64(limit), int64(limit))
	if err != nil {
		s.fail(c, err)
		return
	}
	apps := p.Apps
	limits, err := s.opts.Changes.Connections(ctx, apps)
	if err != nil {
		s.fail(c, err)
		return
	}
	usage, err := s.opts.Live.Connections(ctx)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]gin.H, 0, len(apps))
	onPage := make(map[string]bool, len(apps))
	for _, a := range apps {
		out = append(out, gin.H{"app_id": a.AppID, "cluster_id": a.ClusterID, "limits": limits[a.AppID]})
		onPage[a.AppID] = true
	}
	// the usage of the page's apps only (the snapshot has every app with connection state)
	pageUsage := usage
	pageUsage.Apps = make([]live.AppConnections, 0, len(apps))
	for _, u := range usage.Apps {
		if onPage[u.AppID] {
			pageUsage.Apps = append(pageUsage.Apps, u)
		}
	}
	okMeta(c, gin.H{"apps": out, "usage": pageUsage}, gin.H{"total": p.Total, "page": page, "limit": limit})
}

func (s *server) getConnections(c *gin.Context) {
	id, err := pathID(c, "app_id")
	if err != nil {
		s.fail(c, err)
		return
	}
	a, err := s.opts.Changes.GetApp(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, gin.H{"app_id": id, "cluster_id": a.ClusterID, "limits": a.Connections})
}

func (s *server) putConnections(c *gin.Context) {
	var in connFields
	w, read := s.readWrite(c, "app_id", &in)
	if !read {
		return
	}
	if in.MaxConnections == nil || in.ReservedRatio != nil {
		s.fail(c, errBadRequest("invalid_body", "an app takes max_connections (required) and burst_connections"))
		return
	}
	l := validate.ConnLimits{MaxConnections: *in.MaxConnections, BurstConnections: *in.MaxConnections}
	if in.BurstConnections != nil {
		l.BurstConnections = *in.BurstConnections
	}
	out, err := s.opts.Changes.PutAppConnections(c.Request.Context(), w.actor, w.id, l, w.dry)
	s.answerChange(c, out, err, false, func() (any, error) {
		return gin.H{"app_id": w.id, "limits": l}, nil
	})
}
