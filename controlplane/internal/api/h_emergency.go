package api

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/internal/keys"
	"tollgate/internal/ledger"
)

type activateRequest struct {
	ClusterID string `json:"cluster_id,omitempty"` // empty: every cluster
	Reason    string `json:"reason,omitempty"`
	Duration  int64  `json:"duration,omitempty"` // seconds, default 300
}

type deactivateRequest struct {
	ClusterID string `json:"cluster_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

type emergencyState struct {
	ClusterID string `json:"cluster_id"`
	Active    bool   `json:"active"`
	Until     int64  `json:"until,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func (s *server) emergencyStatus(c *gin.Context) {
	ids, err := s.clusterIDs(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	now := time.Now().Unix()
	out := make([]emergencyState, 0, len(ids))
	active := false
	for _, id := range ids {
		l1, err := s.opts.Ledger.ReadL1(c.Request.Context(), id)
		if errors.Is(err, ledger.ErrUnknownCluster) {
			continue
		}
		if err != nil {
			s.fail(c, err)
			return
		}
		st := emergencyState{ClusterID: id, Active: l1.EmergencyActive(now)}
		if st.Active {
			st.Until, st.Reason, active = l1.EmergencyUntil, l1.EmergencyReason, true
		}
		out = append(out, st)
	}
	ok(c, http.StatusOK, gin.H{"emergency_mode": active, "clusters": out})
}

func checkOptionalID(field, id string) error {
	if id != "" && !keys.ValidID(id) {
		return errBadRequest("invalid_id", field+" must match ^[A-Za-z0-9_-]{1,128}$")
	}
	return nil
}

func (s *server) activateEmergency(c *gin.Context) {
	var in activateRequest
	err := s.decodeJSON(c, &in)
	if err == nil {
		err = checkOptionalID("cluster_id", in.ClusterID)
	}
	if err == nil && (in.Duration < 0 || in.Duration > int64(changes.MaxEmergency/time.Second)) {
		err = errBadRequest("invalid_duration", "duration must be 1 to 86400 seconds")
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	res, err := s.opts.Changes.ActivateEmergency(c.Request.Context(), p.User, in.ClusterID, in.Reason,
		time.Duration(in.Duration)*time.Second)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, gin.H{"message": "emergency_mode_activated", "clusters": res})
}

func (s *server) deactivateEmergency(c *gin.Context) {
	var in deactivateRequest
	err := s.decodeJSON(c, &in)
	if err == nil {
		err = checkOptionalID("cluster_id", in.ClusterID)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	res, err := s.opts.Changes.DeactivateEmergency(c.Request.Context(), p.User, in.ClusterID, in.Reason)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, gin.H{"message": "emergency_mode_deactivated", "clusters": res})
}

type historyEntry struct {
	ClusterID string `json:"cluster_id"`
	ID        string `json:"id"`
	Event     string `json:"event"`
	Reason    string `json:"reason"`
	Source    string `json:"source"`
	Actor     string `json:"actor"`
	At        int64  `json:"at"`
	Until     int64  `json:"until"`
}

// emergencyHistory: GET /emergency/history?cluster_id=&limit= (newest first, every cluster
// merged when cluster_id is absent).
func (s *server) emergencyHistory(c *gin.Context) {
	cluster, err := queryID(c, "cluster_id")
	limit := 0
	if err == nil {
		limit, err = queryInt(c, "limit", 50, 1, 1000)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	ids := []string{cluster}
	if cluster == "" {
		if ids, err = s.clusterIDs(c); err != nil {
			s.fail(c, err)
			return
		}
	}
	out := []historyEntry{}
	for _, id := range ids {
		evs, err := s.opts.Ledger.EmergencyHistory(c.Request.Context(), id, int64(limit))
		if err != nil {
			s.fail(c, err)
			return
		}
		for _, e := range evs {
			out = append(out, historyEntry{ClusterID: id, ID: e.ID, Event: e.Event, Reason: e.Reason,
				Source: e.Source, Actor: e.Actor, At: e.At, Until: e.Until})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At > out[j].At })
	out = out[:min(limit, len(out))]
	okMeta(c, out, gin.H{"total": len(out)})
}
