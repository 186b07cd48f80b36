package changes

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/store"
)

// Emergency limits (those of the emergency scripts, checked here first for a field-level 400).
const (
	MaxEmergency     = 24 * time.Hour
	maxReasonBytes   = 256
	DefaultEmergency = 300 * time.Second
)

// EmergencyResult is the state of one cluster after an activation or deactivation.
type EmergencyResult struct {
	ClusterID string `json:"cluster_id"`
	Active    bool   `json:"active"`
	Until     int64  `json:"until,omitempty"` // Unix seconds
	Changed   bool   `json:"changed"`
}

// ActivateEmergency puts cluster (every cluster when empty) in emergency mode for d.
func (s *Service) ActivateEmergency(ctx context.Context, actor, cluster, reason string, d time.Duration) ([]EmergencyResult, error) {
	if d == 0 {
		d = DefaultEmergency
	}
	if reason == "" {
		reason = "manual activation"
	}
	var vs []validate.Violation
	if d < time.Second || d > MaxEmergency || d%time.Second != 0 {
		vs = append(vs, validate.Violation{Field: "duration", Code: "invalid_duration",
			Message: "duration must be a whole number of seconds from 1 to 86400"})
	}
	vs = append(vs, checkReason(reason)...)
	if len(vs) > 0 {
		return nil, &InvalidError{Result: validate.Result{Violations: vs, Diff: []validate.DiffEntry{}}}
	}
	ids, err := s.clusters(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out := make([]EmergencyResult, 0, len(ids))
	for _, id := range ids {
		until, err := s.o.Emergency.Activate(ctx, id, d, reason, "manual", actor)
		s.recordEmergency(ctx, actor, "emergency.activate", id, reason, err)
		if err != nil {
			return out, err
		}
		out = append(out, EmergencyResult{ClusterID: id, Active: true, Until: until.Unix(), Changed: true})
	}
	return out, nil
}

// DeactivateEmergency ends the emergency mode of cluster (every cluster when empty).
func (s *Service) DeactivateEmergency(ctx context.Context, actor, cluster, reason string) ([]EmergencyResult, error) {
	if reason == "" {
		reason = "manual deactivation"
	}
	if vs := checkReason(reason); len(vs) > 0 {
		return nil, &InvalidError{Result: validate.Result{Violations: vs, Diff: []validate.DiffEntry{}}}
	}
	ids, err := s.clusters(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out := make([]EmergencyResult, 0, len(ids))
	for _, id := range ids {
		ended, err := s.o.Emergency.Deactivate(ctx, id, reason, "manual", actor)
		s.recordEmergency(ctx, actor, "emergency.deactivate", id, reason, err)
		if err != nil {
			return out, err
		}
		out = append(out, EmergencyResult{ClusterID: id, Changed: ended})
	}
	return out, nil
}

func checkReason(r string) []validate.Violation {
	ok := len(r) <= maxReasonBytes && utf8.ValidString(r)
	for _, c := range r {
		if c < 0x20 || c == 0x7f {
			ok = false
		}
	}
	if ok {
		return nil
	}
	return []validate.Violation{{Field: "reason", Code: "invalid_reason",
		Message: fmt.Sprintf("reason must be at most %d bytes of UTF-8 without control characters", maxReasonBytes)}}
}

// clusters resolves a cluster id (checked to exist) or, when empty, every cluster.
func (s *Service) clusters(ctx context.Context, id string) ([]string, error) {
	if id == "" {
		return s.o.Store.ListClusters(ctx)
	}
	_, err := s.o.Store.GetCluster(ctx, id)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidID) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return []string{id}, nil
}

func (s *Service) recordEmergency(ctx context.Context, actor, action, cluster, reason string, err error) {
	outcome, d := audit.OK, map[string]any{"reason": reason}
	if err != nil {
		outcome, d["error"] = audit.Failed, errorCode(err)
	}
	_ = s.o.Audit.Record(ctx, audit.Entry{Actor: actor, Action: action, Resource: "cluster/" + cluster,
		Outcome: outcome, Details: audit.Details(d)})
}
