package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// The app id index (keys.AppIDs) is a sorted set with one member per id of the JSON index,
// lower(id) NUL id, all scored 0, so that apps sort by id without regard to case and a search
// ignores case: a page is one ZRANGE by rank, a prefix search one ZRANGE by
// lex, and neither reads the apps that are not shown. PutApp adds the id in the same step as the
// index entry; RemoveApp removes both. A store written before the id index existed, or a write
// cut between the two commands, shows as a different count and is repaired by EnsureAppIDs.

// GetApps reads the apps of ids from the JSON index in one HMGET; ids that are not configured (or
// not valid) are absent from the map.
func (s *Store) GetApps(ctx context.Context, ids []string) (map[string]App, error) {
	out := make(map[string]App, len(ids))
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if keys.ValidID(id) {
			valid = append(valid, id)
		}
	}
	if len(valid) == 0 {
		return out, nil
	}
	docs, err := s.rdb.HMGet(ctx, keys.AppsIndex(), valid...).Result()
	if err != nil {
		return nil, fmt.Errorf("store: get apps: %w", err)
	}
	for i, d := range docs {
		doc, ok := d.(string)
		if !ok {
			continue
		}
		a, err := decodeApp(valid[i], doc)
		if err != nil {
			return nil, err
		}
		out[a.AppID] = a
	}
	return out, nil
}

// ClusterAllocated returns the sum of the guaranteed quotas allocated in a cluster, as app_config
// maintains it in the cluster's L1 hash (0 for a cluster without apps). A cluster hash from
// before the field was kept is summed from its allocation set once.
func (s *Store) ClusterAllocated(ctx context.Context, cluster string) (int64, error) {
	if !keys.ValidID(cluster) {
		return 0, invalidID("cluster", cluster)
	}
	v, err := s.rdb.HGet(ctx, keys.L1(cluster), "allocated").Result()
	if err == nil {
		n, perr := strconv.ParseFloat(v, 64)
		if perr != nil {
			return 0, fmt.Errorf("store: cluster %s allocated %q: %w", cluster, v, perr)
		}
		return int64(n), nil
	}
	if !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("store: cluster %s allocated: %w", cluster, err)
	}
	z, err := s.rdb.ZRangeWithScores(ctx, keys.L1Apps(cluster), 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("store: cluster %s allocation set: %w", cluster, err)
	}
	var sum int64
	for _, m := range z {
		sum += int64(m.Score)
	}
	return sum, nil
}

// RemoveApp removes an app from the JSON index, the id index and its value indexes.
func (s *Store) RemoveApp(ctx context.Context, id string) error {
	a, err := s.GetApp(ctx, id)
	had := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	m := idMember(id)
	// the JSON index entry first, then the index members, in one round trip: a reader between
	// them sees an index member more, never one less
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys.AppsIndex(), id)
		p.ZRem(ctx, keys.AppIDs(), m)
		if had {
			for _, k := range valueIndexes(a) {
				p.ZRem(ctx, k, m)
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("store: remove app %s: %w", id, err)
	}
	return nil
}

// CountApps returns the number of configured apps (HLEN of the index).
func (s *Store) CountApps(ctx context.Context) (int64, error) {
	n, err := s.rdb.HLen(ctx, keys.AppsIndex()).Result()
	if err != nil {
		return 0, fmt.Errorf("store: count apps: %w", err)
	}
	return n, nil
}

// EnsureAppIDs checks that the id index has as many ids as the JSON index (two O(1) commands)
// and, when not, rebuilds it from the JSON index (O(N), once: a store from before the id index,
// or a write cut between the two). Returns whether it rebuilt.
func (s *Store) EnsureAppIDs(ctx context.Context) (bool, error) {
	n, err := s.CountApps(ctx)
	if err != nil {
		return false, err
	}
	z, err := s.rdb.ZCard(ctx, keys.AppIDs()).Result()
	if err != nil {
		return false, fmt.Errorf("store: count app ids: %w", err)
	}
	if n == z {
		return false, nil
	}
	have := map[string]bool{}
	var cursor uint64
	for {
		ks, next, err := s.rdb.HScan(ctx, keys.AppsIndex(), cursor, "", 1000).Result()
		if err != nil {
			return false, fmt.Errorf("store: rebuild app ids: %w", err)
		}
		var add []redis.Z
		for i := 0; i < len(ks); i += 2 {
			if m := idMember(ks[i]); !have[m] {
				have[m] = true
				add = append(add, redis.Z{Member: m})
			}
		}
		if len(add) > 0 {
			if err := s.rdb.ZAdd(ctx, keys.AppIDs(), add...).Err(); err != nil {
				return false, fmt.Errorf("store: rebuild app ids: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	// ids of apps no longer in the JSON index
	var zc uint64
	for {
		ms, next, err := s.rdb.ZScan(ctx, keys.AppIDs(), zc, "", 1000).Result()
		if err != nil {
			return false, fmt.Errorf("store: rebuild app ids: %w", err)
		}
		var gone []any
		for i := 0; i < len(ms); i += 2 {
			if !have[ms[i]] {
				gone = append(gone, ms[i])
			}
		}
		if len(gone) > 0 {
			if err := s.rdb.ZRem(ctx, keys.AppIDs(), gone...).Err(); err != nil {
				return false, fmt.Errorf("store: rebuild app ids: %w", err)
			}
		}
		if zc = next; zc == 0 {
			break
		}
	}
	return true, nil
}

// idMember is an app's member of the id index.
func idMember(id string) string { return strings.ToLower(id) + "\x00" + id }

// AppPage is one page of apps in id order and the number of apps that match.
type AppPage struct {
	Apps  []App
	Total int64
}

// PageApps returns the apps whose id starts with prefix, ignoring case (every app for ""), in
// case-insensitive id order, from
// offset, at most limit: a ZLEXCOUNT, a ZRANGE BYLEX … LIMIT and one HMGET of the page. (The
// offset is walked by Redis in the skiplist, O(log N + offset) at worst, never a read of apps.)
func (s *Store) PageApps(ctx context.Context, prefix string, offset, limit int64) (AppPage, error) {
	min, max := lexRange(prefix)
	// one round trip: the two counts that check the id index, and the prefix's count
	var n, z, cnt *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n, z = p.HLen(ctx, keys.AppsIndex()), p.ZCard(ctx, keys.AppIDs())
		if prefix != "" {
			cnt = p.ZLexCount(ctx, keys.AppIDs(), min, max)
		}
		return nil
	})
	if err != nil {
		return AppPage{}, fmt.Errorf("store: page apps: %w", err)
	}
	if s.surplus.needsRebuild("ids", n.Val(), z.Val()) {
		if _, err := s.EnsureAppIDs(ctx); err != nil {
			return AppPage{}, err
		}
		return s.PageApps(ctx, prefix, offset, limit)
	}
	total := z.Val()
	if cnt != nil {
		total = cnt.Val()
	}
	page := AppPage{Apps: []App{}, Total: total}
	if offset >= total || limit <= 0 {
		return page, nil
	}
	ms, err := s.rdb.ZRangeByLex(ctx, keys.AppIDs(), &redis.ZRangeBy{Min: min, Max: max, Offset: offset, Count: limit}).Result()
	if err != nil {
		return AppPage{}, fmt.Errorf("store: page apps: %w", err)
	}
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		if _, id, ok := strings.Cut(m, "\x00"); ok {
			ids = append(ids, id)
		}
	}
	apps, err := s.GetApps(ctx, ids)
	if err != nil {
		return AppPage{}, err
	}
	for _, id := range ids {
		if a, ok := apps[id]; ok {
			page.Apps = append(page.Apps, a)
		}
	}
	return page, nil
}

// ReleaseApp takes a removed app's allocation out of its cluster's L1 and deletes its L2 bucket
// (the app_remove script: a ZSCORE and an HGET, never a read of the cluster's other apps).
func (s *Store) ReleaseApp(ctx context.Context, cluster, id string) (Allocation, error) {
	if !keys.ValidID(cluster) {
		return Allocation{}, invalidID("cluster", cluster)
	}
	if !keys.ValidID(id) {
		return Allocation{}, invalidID("app", id)
	}
	res, err := s.scripts.Run(ctx, s.rdb, "app_remove",
		[]string{keys.L1(cluster), keys.L1Apps(cluster), keys.L2(cluster, id),
			keys.Active(cluster), keys.Debtors(cluster)}, id).Int64Slice()
	if err != nil {
		return Allocation{}, fmt.Errorf("store: release app %s: %w", id, classifyScriptError(err))
	}
	if len(res) != 3 {
		return Allocation{}, fmt.Errorf("store: release app %s: app_remove returned %v", id, res)
	}
	return Allocation{Allocated: res[0], Available: res[1]}, nil
}
