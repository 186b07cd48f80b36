package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// SetConnLimits writes an app's connection limits and its member of the cluster's set of apps
// with limits (keys.ConnLimited), in one transaction: a node loading every app reads the limits
// of the apps in that set only.
func SetConnLimits(ctx context.Context, rdb redis.Cmdable, cluster, app string, max, burst int64) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.ConnConfig(cluster, app), "max_connections", max, "burst_connections", burst)
		p.SAdd(ctx, keys.ConnLimited(cluster), app)
		return nil
	})
	return err
}

// DelConnLimits removes an app's connection limits and its member of the cluster's set, in one
// transaction.
func DelConnLimits(ctx context.Context, rdb redis.Cmdable, cluster, app string) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, keys.ConnConfig(cluster, app))
		p.SRem(ctx, keys.ConnLimited(cluster), app)
		return nil
	})
	return err
}

// IndexConnLimits makes sure the sets of apps with connection limits are complete: once per
// store (keys.ConnIndexed unset: a store written before the sets) it adds every app that has a
// ConnConfig hash (SCAN, never KEYS; every master of a Redis Cluster), then sets ConnIndexed.
// Gateways read every app's limits until it is set. Returns the apps indexed (0 when the store
// was indexed already).
func IndexConnLimits(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	done, err := rdb.Exists(ctx, keys.ConnIndexed()).Result()
	if err != nil || done == 1 {
		return 0, err
	}
	pattern := keys.ConnConfig("*", "*")
	n := 0
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			cluster, app, ok := parseConnConfig(iter.Val())
			if !ok {
				continue
			}
			if err := c.SAdd(ctx, keys.ConnLimited(cluster), app).Err(); err != nil {
				return err
			}
			n++
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return n, fmt.Errorf("store: index connection limits: %w", err)
	}
	return n, rdb.Set(ctx, keys.ConnIndexed(), "1", 0).Err()
}

// parseConnConfig splits a keys.ConnConfig key into its cluster and app.
func parseConnConfig(k string) (cluster, app string, ok bool) {
	head, rest, found := strings.Cut(k, "}:config:")
	if !found {
		return "", "", false
	}
	prefix := strings.TrimSuffix(keys.ConnConfig("", ""), "}:config:")
	cluster, found = strings.CutPrefix(head, prefix)
	if !found || !keys.ValidID(cluster) || !keys.ValidID(rest) {
		return "", "", false
	}
	return cluster, rest, true
}
