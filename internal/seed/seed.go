// Package seed writes the demo configuration into an empty Redis.
package seed

import (
	"context"
	"fmt"

	"tollgate/internal/store"
)

// Store is what seeding needs of the config store (implemented by *store.Store).
type Store interface {
	HasConfig(ctx context.Context) (bool, error)
	PutCluster(ctx context.Context, c store.Cluster) (store.Allocation, error)
	PutApp(ctx context.Context, a store.App) (store.Allocation, error)
}

// DemoCluster is the cluster every demo app belongs to.
func DemoCluster() store.Cluster {
	return store.Cluster{ID: "default", Capacity: 100000, ReservedRatio: 0.1}
}

// DemoApps are one app per priority P0-P3.
func DemoApps() []store.App {
	quotas := []struct {
		id         string
		priority   int
		guaranteed int64
		burst      int64
	}{
		{"demo-p0", 0, 20000, 80000},
		{"demo-p1", 1, 10000, 50000},
		{"demo-p2", 2, 5000, 20000},
		{"demo-p3", 3, 1000, 2000},
	}
	apps := make([]store.App, 0, len(quotas))
	for _, q := range quotas {
		apps = append(apps, store.App{
			AppID: q.id, ClusterID: DemoCluster().ID, GuaranteedQuota: q.guaranteed,
			BurstQuota: q.burst, Priority: q.priority, CBw: 1, MaxBorrow: q.guaranteed / 2,
			Enabled: true,
		})
	}
	return apps
}

// Demo seeds the demo cluster and apps when Redis holds no tollgate config (neither
// ratelimit:apps nor ratelimit:clusters). It reports whether it seeded.
func Demo(ctx context.Context, s Store) (bool, error) {
	has, err := s.HasConfig(ctx)
	if err != nil {
		return false, fmt.Errorf("seed: %w", err)
	}
	if has {
		return false, nil
	}
	if _, err := s.PutCluster(ctx, DemoCluster()); err != nil {
		return false, fmt.Errorf("seed: cluster: %w", err)
	}
	for _, a := range DemoApps() {
		if _, err := s.PutApp(ctx, a); err != nil {
			return false, fmt.Errorf("seed: app %s: %w", a.AppID, err)
		}
	}
	return true, nil
}
