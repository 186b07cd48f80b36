package durable

// Export: the whole config read out of Redis as one document.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// Reader reads the config out of Redis.
type Reader struct {
	Redis redis.UniversalClient
	Store *store.Store
}

// exportBatch is how many apps Export reads per pipelined round trip.
const exportBatch = 500

// Export reads the whole config; withSecrets adds the users (with their password hashes) and
// the JWT signing secret.
func (r Reader) Export(ctx context.Context, withSecrets bool) (Document, error) {
	d := Document{Kind: Kind, Clusters: []Cluster{}, Apps: []App{}, Rules: []rules.Rule{}, Breakers: []rules.Breaker{}}
	ids, err := r.Store.ListClusters(ctx)
	if err != nil {
		return d, err
	}
	for _, id := range ids {
		c, err := r.Store.GetCluster(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return d, err
		}
		cl := Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}
		v, err := r.Redis.HMGet(ctx, keys.ConnCluster(id), "max_connections", "reserved_ratio").Result()
		if err != nil {
			return d, fmt.Errorf("durable: cluster %s connections: %w", id, err)
		}
		if m, err := strconv.ParseInt(str(v[0]), 10, 64); err == nil {
			ratio, err := strconv.ParseFloat(str(v[1]), 64)
			if err != nil {
				ratio = 0.1
			}
			cl.Connections = &ClusterConn{MaxConnections: m, ReservedRatio: ratio}
		}
		d.Clusters = append(d.Clusters, cl)
	}
	sort.Slice(d.Clusters, func(i, j int) bool { return d.Clusters[i].ID < d.Clusters[j].ID })
	apps, err := r.Store.ListApps(ctx)
	if err != nil {
		return d, err
	}
	// per batch of apps three pipelined round trips (connection limits, access key and bucket
	// sets, their owners), not five round trips per app: 100,000 apps export in seconds
	d.Apps = make([]App, 0, len(apps))
	for from := 0; from < len(apps); from += exportBatch {
		batch := apps[from:min(from+exportBatch, len(apps))]
		conns := make([]*redis.SliceCmd, len(batch))
		if _, err := r.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, a := range batch {
				conns[i] = p.HMGet(ctx, keys.ConnConfig(a.ClusterID, a.AppID), "max_connections", "burst_connections")
			}
			return nil
		}); err != nil {
			return d, fmt.Errorf("durable: app connections: %w", err)
		}
		ids := make([]string, len(batch))
		for i, a := range batch {
			ids[i] = a.AppID
		}
		akeys, buckets, err := r.Store.AppsIdentity(ctx, ids)
		if err != nil {
			return d, err
		}
		for i, a := range batch {
			app := App{App: a, AccessKeys: akeys[a.AppID], Buckets: buckets[a.AppID]}
			v := conns[i].Val()
			if m, err := strconv.ParseInt(str(v[0]), 10, 64); err == nil {
				b, err := strconv.ParseInt(str(v[1]), 10, 64)
				if err != nil {
					b = m
				}
				app.Connections = &validate.ConnLimits{MaxConnections: m, BurstConnections: b}
			}
			d.Apps = append(d.Apps, app)
		}
	}
	if err := readHash(ctx, r.Redis, keys.RulesIndex(), func(id, doc string) error {
		var x rules.Rule
		if err := json.Unmarshal([]byte(doc), &x); err != nil || x.ID != id {
			return fmt.Errorf("durable: rule %q is damaged", id)
		}
		d.Rules = append(d.Rules, x)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Rules, func(i, j int) bool { return d.Rules[i].ID < d.Rules[j].ID })
	if err := readHash(ctx, r.Redis, keys.BreakersIndex(), func(name, doc string) error {
		var x rules.Breaker
		if err := json.Unmarshal([]byte(doc), &x); err != nil || x.Name != name {
			return fmt.Errorf("durable: breaker %q is damaged", name)
		}
		d.Breakers = append(d.Breakers, x)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Breakers, func(i, j int) bool { return d.Breakers[i].Name < d.Breakers[j].Name })
	if !withSecrets {
		return d, nil
	}
	if err := r.exportSecrets(ctx, d.Apps); err != nil {
		return d, err
	}
	d.Users = []users.User{}
	if err := readHash(ctx, r.Redis, keys.AdminUsers(), func(name, doc string) error {
		u, err := users.Decode(name, doc)
		if err != nil {
			return err
		}
		d.Users = append(d.Users, u)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Users, func(i, j int) bool { return d.Users[i].Username < d.Users[j].Username })
	s, err := r.Redis.Get(ctx, keys.AdminSecret()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return d, fmt.Errorf("durable: jwt secret: %w", err)
	}
	d.JWTSecret = s
	return d, nil
}

func str(v any) string { s, _ := v.(string); return s }

// readHash calls fn for every field of hash key (HSCAN; a field seen twice is passed once).
func readHash(ctx context.Context, rdb redis.Cmdable, key string, fn func(k, v string) error) error {
	seen := map[string]bool{}
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "", 200).Result()
		if err != nil {
			return fmt.Errorf("durable: read %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if seen[kv[i]] {
				continue
			}
			seen[kv[i]] = true
			if err := fn(kv[i], kv[i+1]); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// exportSecrets adds the sealed secrets of the apps' access keys (one HMGET per 1,000 keys).
func (r Reader) exportSecrets(ctx context.Context, apps []App) error {
	var all []string
	for _, a := range apps {
		all = append(all, a.AccessKeys...)
	}
	sealed, err := r.Store.SealedSecrets(ctx, all)
	if err != nil {
		return err
	}
	for i := range apps {
		for _, k := range apps[i].AccessKeys {
			if v, ok := sealed[k]; ok {
				if apps[i].AccessKeySecrets == nil {
					apps[i].AccessKeySecrets = map[string]string{}
				}
				apps[i].AccessKeySecrets[k] = v
			}
		}
	}
	return nil
}
