package changes

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// Defaults of the optional fields of a new app.
const (
	DefaultCBw       = 1
	DefaultMaxBorrow = 0
)

// AppFields is an app as the API receives it: on create the required fields are app_id,
// cluster_id, guaranteed_quota, burst_quota and priority; on update every field left out keeps
// its value. max_connections / burst_connections set the app's connection limits (burst
// defaults to max).
type AppFields struct {
	AppID            *string `json:"app_id,omitempty"`
	ClusterID        *string `json:"cluster_id,omitempty"`
	GuaranteedQuota  *int64  `json:"guaranteed_quota,omitempty"`
	BurstQuota       *int64  `json:"burst_quota,omitempty"`
	Priority         *int    `json:"priority,omitempty"`
	CBw              *int64  `json:"c_bw,omitempty"`
	MaxBorrow        *int64  `json:"max_borrow,omitempty"`
	Enabled          *bool   `json:"enabled,omitempty"`
	MaxConnections   *int64  `json:"max_connections,omitempty"`
	BurstConnections *int64  `json:"burst_connections,omitempty"`
}

// GetApp reads an app with its connection limits.
func (s *Service) GetApp(ctx context.Context, id string) (validate.App, error) {
	a, err := s.o.Store.GetApp(ctx, id)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidID) {
		return validate.App{}, ErrNotFound
	}
	if err != nil {
		return validate.App{}, err
	}
	conns, err := s.Connections(ctx, []store.App{a})
	if err != nil {
		return validate.App{}, err
	}
	return validate.App{App: a, Connections: conns[a.AppID]}, nil
}

// PageApps returns one page of the apps that match f (at most one value filter), in id order,
// and how many match: read from the id index or the filter's value index, never every app.
func (s *Service) PageApps(ctx context.Context, f store.AppFilter, offset, limit int64) (store.AppPage, error) {
	if f.ValueFilters() == 0 {
		return s.o.Store.PageApps(ctx, f.Prefix, offset, limit)
	}
	return s.o.Store.PageAppsWhere(ctx, f, offset, limit)
}

// ScanApps returns up to limit apps after the id after that match f (two or more value
// filters), examining at most maxExamined candidates (see store.ScanAppsWhere).
func (s *Service) ScanApps(ctx context.Context, f store.AppFilter, after string, limit, maxExamined int64) (store.AppScan, error) {
	return s.o.Store.ScanAppsWhere(ctx, f, after, limit, maxExamined)
}

// Connections reads the connection limits of apps in one pipeline; apps without limits in
// Redis (the gateway defaults apply) are absent from the map.
func (s *Service) Connections(ctx context.Context, apps []store.App) (map[string]*validate.ConnLimits, error) {
	cmds := make([]*redis.SliceCmd, len(apps))
	_, err := s.o.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range apps {
			cmds[i] = p.HMGet(ctx, keys.ConnConfig(a.ClusterID, a.AppID), "max_connections", "burst_connections")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("changes: read connection limits: %w", err)
	}
	out := make(map[string]*validate.ConnLimits, len(apps))
	for i, c := range cmds {
		if l := connLimits(c.Val()); l != nil {
			out[apps[i].AppID] = l
		}
	}
	return out, nil
}

func connLimits(v []any) *validate.ConnLimits {
	if len(v) != 2 {
		return nil
	}
	ms, _ := v[0].(string)
	max, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return nil
	}
	bs, _ := v[1].(string)
	burst, err := strconv.ParseInt(bs, 10, 64)
	if err != nil {
		burst = max
	}
	return &validate.ConnLimits{MaxConnections: max, BurstConnections: burst}
}

// CreateApp validates and (unless dryRun) creates an app; ErrExists when the id is taken.
func (s *Service) CreateApp(ctx context.Context, actor string, f AppFields, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.createApp(ctx, actor, f, dryRun)
		return err
	})
	return out, err
}

func (s *Service) createApp(ctx context.Context, actor string, f AppFields, dryRun bool) (Outcome, error) {
	a, missing := newApp(f)
	if len(missing) > 0 {
		return s.rejectFields(ctx, actor, validate.Change{Apps: []validate.App{a}}, missing, dryRun)
	}
	if _, err := s.o.Store.GetApp(ctx, a.AppID); err == nil {
		return Outcome{}, ErrExists
	} else if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalidID) {
		return Outcome{}, err
	}
	res, err := s.validated(ctx, actor, validate.Change{Apps: []validate.App{a}}, dryRun)
	if err != nil || dryRun {
		return Outcome{Validation: res}, err
	}
	return s.writeApp(ctx, actor, "app.create", a, res)
}

// UpdateApp merges f into app id, validates and (unless dryRun) writes it.
func (s *Service) UpdateApp(ctx context.Context, actor, id string, f AppFields, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.updateApp(ctx, actor, id, f, dryRun)
		return err
	})
	return out, err
}

func (s *Service) updateApp(ctx context.Context, actor, id string, f AppFields, dryRun bool) (Outcome, error) {
	cur, err := s.GetApp(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	a := merge(cur, f)
	var vs []validate.Violation
	if f.AppID != nil && *f.AppID != id {
		vs = append(vs, validate.Violation{Field: "app_id", Code: "app_id_mismatch",
			Message: "app_id in the body must match the path (an app cannot be renamed)"})
	}
	if f.BurstConnections != nil && f.MaxConnections == nil && cur.Connections == nil {
		vs = append(vs, validate.Violation{Field: "max_connections", Code: "required",
			Message: "max_connections is required to set burst_connections"})
	}
	if len(vs) > 0 {
		return s.rejectFields(ctx, actor, validate.Change{Apps: []validate.App{a}}, vs, dryRun)
	}
	res, err := s.validated(ctx, actor, validate.Change{Apps: []validate.App{a}}, dryRun)
	if err != nil || dryRun {
		return Outcome{Validation: res}, err
	}
	return s.writeApp(ctx, actor, "app.update", a, res)
}

// writeApp writes the connection limits first (no notice yet), then the app, whose version bump
// announces both; a failed app write puts the old limits back.
func (s *Service) writeApp(ctx context.Context, actor, action string, a validate.App, res validate.Result) (Outcome, error) {
	out := Outcome{Validation: res}
	restore := func() {}
	if a.Connections != nil {
		k := keys.ConnConfig(a.ClusterID, a.AppID)
		old, err := s.o.Redis.HMGet(ctx, k, "max_connections", "burst_connections").Result()
		if err == nil {
			err = store.SetConnLimits(ctx, s.o.Redis, a.ClusterID, a.AppID, a.Connections.MaxConnections,
				a.Connections.BurstConnections)
		}
		if err != nil {
			s.record(ctx, actor, action, "app/"+a.AppID, out, err)
			return out, fmt.Errorf("changes: write connection limits: %w", err)
		}
		restore = func() { s.restoreConn(ctx, a.ClusterID, a.AppID, old) }
	}
	if _, err := s.o.Store.PutApp(ctx, a.App); err != nil {
		restore()
		s.record(ctx, actor, action, "app/"+a.AppID, out, err)
		return out, err
	}
	out.Written = true
	out.Version, _ = s.o.Store.ConfigVersion(ctx)
	s.record(ctx, actor, action, "app/"+a.AppID, out, nil)
	return out, nil
}

func (s *Service) restoreConn(ctx context.Context, cluster, app string, old []any) {
	var err error
	if l := connLimits(old); l != nil {
		err = store.SetConnLimits(ctx, s.o.Redis, cluster, app, l.MaxConnections, l.BurstConnections)
	} else {
		err = store.DelConnLimits(ctx, s.o.Redis, cluster, app)
	}
	if err != nil {
		s.o.Logger.Error("connection limits not restored after a failed app write", "err", err)
	}
}

// DeleteApp removes an app: out of the index first, with its access keys and buckets (gateways
// answer unknown_app from the next notice on), then its allocation leaves L1 and its L2 bucket is
// deleted by app_remove (the app's quota and debt subtracted from the cluster's maintained sums:
// no read of the cluster's other apps), then its lease, stats and connection keys.
func (s *Service) DeleteApp(ctx context.Context, actor, id string, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.deleteApp(ctx, actor, id, dryRun)
		return err
	})
	return out, err
}

func (s *Service) deleteApp(ctx context.Context, actor, id string, dryRun bool) (Outcome, error) {
	cur, err := s.GetApp(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Validation: validate.Result{Valid: true, DryRun: dryRun, Violations: []validate.Violation{},
		Diff: []validate.DiffEntry{{Path: "apps[" + id + "]", Old: cur, New: nil}}}}
	if dryRun {
		return out, nil
	}
	c := cur.ClusterID
	// the app, then its access keys and buckets, leave in one config version
	v, err := s.o.Store.Bump(store.WithChange(ctx, store.ChangeApp, id), func(ctx context.Context) error {
		if err := s.o.Store.RemoveApp(ctx, id); err != nil {
			return err
		}
		return s.o.Store.RemoveAppIdentity(ctx, id)
	})
	if err == nil {
		_, err = s.o.Store.ReleaseApp(ctx, c, id)
	}
	if err == nil {
		err = s.o.Redis.Del(ctx, keys.Leases(c, id), keys.Nodes(c, id), keys.Stats(c, id)).Err()
	}
	if err == nil {
		err = store.DelConnLimits(ctx, s.o.Redis, c, id)
	}
	out.Version, out.Written = v, err == nil
	s.record(ctx, actor, "app.delete", "app/"+id, out, err)
	return out, err
}
