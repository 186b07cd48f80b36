package store

import (
	"context"
	"fmt"
	"sort"

	"tollgate/internal/keys"
)

// ListClusters returns the ids of the cluster index, sorted; ids that are not valid are skipped
// (they could never have been written by the store).
func (s *Store) ListClusters(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, keys.ClustersIndex()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list clusters: %w", err)
	}
	out := ids[:0]
	for _, id := range ids {
		if keys.ValidID(id) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ClusterApps returns, sorted, every app of a cluster: those the index places in it and those
// its L1 allocation set holds (an app whose config write was cut short is in only one of them).
func (s *Store) ClusterApps(ctx context.Context, cluster string) ([]string, error) {
	if !keys.ValidID(cluster) {
		return nil, invalidID("cluster", cluster)
	}
	apps, err := s.ListApps(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, a := range apps {
		if a.ClusterID == cluster {
			seen[a.AppID] = true
		}
	}
	members, err := s.rdb.ZRange(ctx, keys.L1Apps(cluster), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: cluster apps %s: %w", cluster, err)
	}
	for _, m := range members {
		if keys.ValidID(m) {
			seen[m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}
