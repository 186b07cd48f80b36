package redisenv

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// Names of what the benchmark seeds.
const (
	ClusterID = "bench"
	AppID     = "bench"
)

// BenchCluster is large enough that the limiter never rejects during a benchmark.
func BenchCluster() store.Cluster {
	return store.Cluster{ID: ClusterID, Capacity: 10_000_000, ReservedRatio: 0.1}
}

// BenchApp is the only app: far more quota than two cores can spend.
func BenchApp() store.App {
	return store.App{AppID: AppID, ClusterID: ClusterID, GuaranteedQuota: 5_000_000,
		BurstQuota: 20_000_000, Priority: 0, CBw: 1, MaxBorrow: 0, Enabled: true}
}

// Seed writes the benchmark's cluster and app through the control plane's store.
func Seed(ctx context.Context, rdb *redis.Client) error {
	set, err := scripts.New()
	if err != nil {
		return fmt.Errorf("redisenv: seed: %w", err)
	}
	st := store.New(rdb, set)
	if _, err := st.PutCluster(ctx, BenchCluster()); err != nil {
		return fmt.Errorf("redisenv: seed: %w", err)
	}
	if _, err := st.PutApp(ctx, BenchApp()); err != nil {
		return fmt.Errorf("redisenv: seed: %w", err)
	}
	return nil
}
