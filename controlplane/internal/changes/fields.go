package changes

import (
	"context"
	"time"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/store"
)

// newApp builds a new app from f with the defaults, and lists the required fields left out.
func newApp(f AppFields) (validate.App, []validate.Violation) {
	var missing []validate.Violation
	need := func(ok bool, field string) {
		if !ok {
			missing = append(missing, validate.Violation{Field: field, Code: "required",
				Message: field + " is required"})
		}
	}
	need(f.AppID != nil, "app_id")
	need(f.ClusterID != nil, "cluster_id")
	need(f.GuaranteedQuota != nil, "guaranteed_quota")
	need(f.BurstQuota != nil, "burst_quota")
	need(f.Priority != nil, "priority")
	need(f.MaxConnections != nil || f.BurstConnections == nil, "max_connections")
	a := validate.App{App: store.App{CBw: DefaultCBw, MaxBorrow: DefaultMaxBorrow, Enabled: true}}
	return merge(a, f), missing
}

// merge sets the fields of f that are present over a.
func merge(a validate.App, f AppFields) validate.App {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&a.AppID, f.AppID)
	set(&a.ClusterID, f.ClusterID)
	for _, p := range []struct{ dst, v *int64 }{
		{&a.GuaranteedQuota, f.GuaranteedQuota}, {&a.BurstQuota, f.BurstQuota},
		{&a.CBw, f.CBw}, {&a.MaxBorrow, f.MaxBorrow},
	} {
		if p.v != nil {
			*p.dst = *p.v
		}
	}
	if f.Priority != nil {
		a.Priority = *f.Priority
	}
	if f.Enabled != nil {
		a.Enabled = *f.Enabled
	}
	if f.MaxConnections != nil {
		l := validate.ConnLimits{MaxConnections: *f.MaxConnections, BurstConnections: *f.MaxConnections}
		if a.Connections != nil && a.Connections.BurstConnections > l.BurstConnections {
			l.BurstConnections = a.Connections.BurstConnections
		}
		a.Connections = &l
	}
	if f.BurstConnections != nil && a.Connections != nil {
		l := *a.Connections
		l.BurstConnections = *f.BurstConnections
		a.Connections = &l
	}
	return a
}

// rejectFields answers a change that breaks rules checked before the validator runs (required
// fields, a renamed app), recording the attempt like the validator records its own.
func (s *Service) rejectFields(ctx context.Context, actor string, ch validate.Change,
	vs []validate.Violation, dryRun bool) (Outcome, error) {
	res := validate.Result{Valid: false, DryRun: dryRun, Violations: vs, Diff: []validate.DiffEntry{}}
	s.o.Audit.ValidationAttempt(ctx, validate.Attempt{At: time.Now(), Actor: actor, Change: ch, Result: res})
	return Outcome{Validation: res}, &InvalidError{Result: res}
}
