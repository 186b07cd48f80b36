package changes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// ClusterConnLimits are a cluster's connection limits (the config contract's type).
type ClusterConnLimits = validate.ClusterConnLimits

// ClusterFields are a cluster as the API receives it: fields left out keep their value.
type ClusterFields struct {
	Capacity      *int64
	ReservedRatio *float64
}

// UpdateCluster creates or updates cluster id with the fields of f (a new cluster needs
// capacity; its reserved_ratio defaults to defaultRatio): read, merged and written under the
// config write lock, so that two partial updates never lose one another's field.
func (s *Service) UpdateCluster(ctx context.Context, actor, id string, f ClusterFields, defaultRatio float64, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		cl, err := s.o.Store.GetCluster(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			cl, err = store.Cluster{ID: id, ReservedRatio: defaultRatio}, nil
			if f.Capacity == nil {
				err = &InvalidError{Result: validate.Result{DryRun: dryRun, Diff: []validate.DiffEntry{},
					Violations: []validate.Violation{{Field: "capacity", Code: "required", Message: "capacity is required for a new cluster"}}}}
			}
		}
		if err != nil {
			return err
		}
		if f.Capacity != nil {
			cl.Capacity = *f.Capacity
		}
		if f.ReservedRatio != nil {
			cl.ReservedRatio = *f.ReservedRatio
		}
		out, err = s.putCluster(ctx, actor, cl, dryRun)
		return err
	})
	return out, err
}

// PutCluster validates and (unless dryRun) creates or updates a cluster's capacity and ratio.
func (s *Service) PutCluster(ctx context.Context, actor string, c store.Cluster, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.putCluster(ctx, actor, c, dryRun)
		return err
	})
	return out, err
}

func (s *Service) putCluster(ctx context.Context, actor string, c store.Cluster, dryRun bool) (Outcome, error) {
	res, err := s.validated(ctx, actor, validate.Change{Cluster: &c}, dryRun)
	out := Outcome{Validation: res}
	if err != nil || dryRun {
		return out, err
	}
	if _, err := s.o.Store.PutCluster(ctx, c); err != nil {
		s.record(ctx, actor, "cluster.update", "cluster/"+c.ID, out, err)
		return out, err
	}
	out.Written = true
	out.Version, _ = s.o.Store.ConfigVersion(ctx)
	s.record(ctx, actor, "cluster.update", "cluster/"+c.ID, out, nil)
	return out, nil
}

// ClusterConnections reads a cluster's connection limits (nil: the gateway defaults).
func (s *Service) ClusterConnections(ctx context.Context, cluster string) (*ClusterConnLimits, error) {
	v, err := s.o.Redis.HMGet(ctx, keys.ConnCluster(cluster), "max_connections", "reserved_ratio").Result()
	if err != nil {
		return nil, fmt.Errorf("changes: read cluster connection limits: %w", err)
	}
	ms, _ := v[0].(string)
	max, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return nil, nil
	}
	rs, _ := v[1].(string)
	ratio, err := strconv.ParseFloat(rs, 64)
	if err != nil {
		ratio = 0.1
	}
	return &ClusterConnLimits{MaxConnections: max, ReservedRatio: ratio}, nil
}

// PutAppConnections sets an app's connection limits (validated with the app, Req 20.6-7).
func (s *Service) PutAppConnections(ctx context.Context, actor, id string, l validate.ConnLimits, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.putAppConnections(ctx, actor, id, l, dryRun)
		return err
	})
	return out, err
}

func (s *Service) putAppConnections(ctx context.Context, actor, id string, l validate.ConnLimits, dryRun bool) (Outcome, error) {
	cur, err := s.GetApp(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	old := cur.Connections
	cur.Connections = &l
	res, err := s.validated(ctx, actor, validate.Change{Apps: []validate.App{cur}}, dryRun)
	res.Diff = connDiff(id, old, l)
	out := Outcome{Validation: res}
	if err != nil || dryRun {
		return out, err
	}
	out.Version, err = s.o.Store.Bump(store.WithChange(ctx, store.ChangeConnApp, id), func(ctx context.Context) error {
		return store.SetConnLimits(ctx, s.o.Redis, cur.ClusterID, id, l.MaxConnections, l.BurstConnections)
	})
	out.Written = err == nil
	s.record(ctx, actor, "connections.update", "app/"+id, out, err)
	return out, err
}

func connDiff(id string, old *validate.ConnLimits, l validate.ConnLimits) []validate.DiffEntry {
	p := "apps[" + id + "].connections."
	if old == nil {
		return []validate.DiffEntry{{Path: p + "max_connections", New: l.MaxConnections},
			{Path: p + "burst_connections", New: l.BurstConnections}}
	}
	out := []validate.DiffEntry{}
	if old.MaxConnections != l.MaxConnections {
		out = append(out, validate.DiffEntry{Path: p + "max_connections", Old: old.MaxConnections, New: l.MaxConnections})
	}
	if old.BurstConnections != l.BurstConnections {
		out = append(out, validate.DiffEntry{Path: p + "burst_connections", Old: old.BurstConnections, New: l.BurstConnections})
	}
	return out
}

// PutClusterConnections sets a cluster's connection limits: max_connections a positive integer
// below 2^53, reserved_ratio in [0, 1), the cluster known.
func (s *Service) PutClusterConnections(ctx context.Context, actor, cluster string, l ClusterConnLimits, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.putClusterConnections(ctx, actor, cluster, l, dryRun)
		return err
	})
	return out, err
}

func (s *Service) putClusterConnections(ctx context.Context, actor, cluster string, l ClusterConnLimits, dryRun bool) (Outcome, error) {
	res, err := s.checkClusterConn(ctx, cluster, l, dryRun)
	if err != nil {
		return Outcome{}, err
	}
	s.o.Audit.ValidationAttempt(ctx, validate.Attempt{At: time.Now(), Actor: actor,
		Change: validate.Change{Cluster: &store.Cluster{ID: cluster}}, Result: res})
	out := Outcome{Validation: res}
	if !res.Valid {
		return out, &InvalidError{Result: res}
	}
	if dryRun {
		return out, nil
	}
	ratio := strconv.FormatFloat(l.ReservedRatio, 'f', -1, 64)
	out.Version, err = s.o.Store.Bump(store.WithChange(ctx, store.ChangeConnCluster, cluster), func(ctx context.Context) error {
		return s.o.Redis.HSet(ctx, keys.ConnCluster(cluster), "max_connections", l.MaxConnections,
			"reserved_ratio", ratio).Err()
	})
	out.Written = err == nil
	s.record(ctx, actor, "cluster_connections.update", "cluster/"+cluster, out, err)
	return out, err
}

func (s *Service) checkClusterConn(ctx context.Context, cluster string, l ClusterConnLimits, dryRun bool) (validate.Result, error) {
	if _, err := s.o.Store.GetCluster(ctx, cluster); errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidID) {
		return validate.Result{}, ErrNotFound
	} else if err != nil {
		return validate.Result{}, err
	}
	old, err := s.ClusterConnections(ctx, cluster)
	if err != nil {
		return validate.Result{}, err
	}
	res := validate.Result{DryRun: dryRun, Violations: []validate.Violation{}, Diff: []validate.DiffEntry{}}
	res.Violations = append(res.Violations, validate.CheckClusterConnLimits(l)...)
	res.Valid = len(res.Violations) == 0
	p := "clusters[" + cluster + "].connections."
	if old == nil {
		res.Diff = append(res.Diff, validate.DiffEntry{Path: p + "max_connections", New: l.MaxConnections},
			validate.DiffEntry{Path: p + "reserved_ratio", New: l.ReservedRatio})
	} else {
		if old.MaxConnections != l.MaxConnections {
			res.Diff = append(res.Diff, validate.DiffEntry{Path: p + "max_connections", Old: old.MaxConnections, New: l.MaxConnections})
		}
		if old.ReservedRatio != l.ReservedRatio {
			res.Diff = append(res.Diff, validate.DiffEntry{Path: p + "reserved_ratio", Old: old.ReservedRatio, New: l.ReservedRatio})
		}
	}
	return res, nil
}

// GetCluster reads a cluster's config (store.ErrNotFound when absent).
func (s *Service) GetCluster(ctx context.Context, id string) (store.Cluster, error) {
	return s.o.Store.GetCluster(ctx, id)
}

// ClusterIDs lists the clusters.
func (s *Service) ClusterIDs(ctx context.Context) ([]string, error) {
	return s.o.Store.ListClusters(ctx)
}
