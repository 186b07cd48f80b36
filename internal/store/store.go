// Package store reads and writes tollgate's config in Redis: clusters (L1) and apps (L2 plus the
// JSON index read by gateways). Every L1/L2 write goes through a script of redis-scripts/; every
// change bumps ratelimit:config:version and announces it on ratelimit:config:update.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

const scanCount = 200

// App is an application's L2 config; the JSON form is the one stored in ratelimit:apps.
type App struct {
	AppID           string `json:"app_id"`
	ClusterID       string `json:"cluster_id"`
	GuaranteedQuota int64  `json:"guaranteed_quota"`
	BurstQuota      int64  `json:"burst_quota"`
	Priority        int    `json:"priority"`
	CBw             int64  `json:"c_bw"`
	MaxBorrow       int64  `json:"max_borrow"`
	Enabled         bool   `json:"enabled"`
}

// Cluster is a storage cluster's L1 config.
type Cluster struct {
	ID            string  `json:"id"`
	Capacity      int64   `json:"capacity"`
	ReservedRatio float64 `json:"reserved_ratio"`
}

// Allocation is the L1 state returned by a config script.
type Allocation struct {
	Allocated int64 `json:"allocated"`
	Available int64 `json:"available"`
}

// ScriptRunner runs a script of redis-scripts/ by name (implemented by *scripts.Set).
type ScriptRunner interface {
	Run(ctx context.Context, rdb redis.Scripter, name string, keys []string, args ...any) *redis.Cmd
}

// Store is the config store over one Redis.
type Store struct {
	rdb     redis.Cmdable
	scripts ScriptRunner
	hooks   Hooks
	surplus surplusWatch // index members beyond the apps: repaired when they persist (appfilter.go)
	lock    *writeLock   // the config write lock (writelock.go)
}

// New returns a store using rdb and the script set.
func New(rdb redis.Cmdable, scripts ScriptRunner) *Store {
	return &Store{rdb: rdb, scripts: scripts, lock: newWriteLock()}
}

// KeepDebtorsSets gives every cluster's debtors set its placeholder member "" (as cluster_config
// does for a cluster it writes), for a store written before the placeholder: the set then always
// exists, which a Redis Cluster slot migration needs of every key l2_grant names (a script whose
// keys are not all on the importing node is refused with TRYAGAIN). Readers skip "" (not an id).
func (s *Store) KeepDebtorsSets(ctx context.Context) error {
	clusters, err := s.ListClusters(ctx)
	if err != nil {
		return err
	}
	for _, c := range clusters {
		if err := s.rdb.SAdd(ctx, keys.Debtors(c), "").Err(); err != nil {
			return fmt.Errorf("store: debtors set of %s: %w", c, err)
		}
	}
	return nil
}

// PutCluster creates or updates a cluster's capacity and reserved ratio.
func (s *Store) PutCluster(ctx context.Context, c Cluster) (Allocation, error) {
	if !keys.ValidID(c.ID) {
		return Allocation{}, invalidID("cluster", c.ID)
	}
	if math.IsNaN(c.ReservedRatio) || math.IsInf(c.ReservedRatio, 0) {
		return Allocation{}, invalidField("reserved_ratio")
	}
	if err := s.before(ctx); err != nil { // before the script writes anything
		return Allocation{}, err
	}
	ratio := strconv.FormatFloat(c.ReservedRatio, 'f', -1, 64)
	res, err := s.scripts.Run(ctx, s.rdb, "cluster_config",
		[]string{keys.L1(c.ID), keys.L1Apps(c.ID), keys.Debtors(c.ID)}, c.Capacity, ratio).Int64Slice()
	if err != nil {
		return Allocation{}, fmt.Errorf("store: put cluster %s: %w", c.ID, classifyScriptError(err))
	}
	if len(res) != 3 {
		return Allocation{}, fmt.Errorf("store: put cluster %s: cluster_config returned %v", c.ID, res)
	}
	index := func(ctx context.Context) error {
		if err := s.rdb.SAdd(ctx, keys.ClustersIndex(), c.ID).Err(); err != nil {
			return fmt.Errorf("index: %w", err)
		}
		return nil
	}
	if _, err := s.bumpVersion(WithChange(ctx, ChangeCluster, c.ID), index); err != nil {
		return Allocation{}, fmt.Errorf("store: put cluster %s: %w", c.ID, err)
	}
	return Allocation{Allocated: res[1], Available: res[2]}, nil
}

// GetCluster reads a cluster's config from its L1 hash.
func (s *Store) GetCluster(ctx context.Context, id string) (Cluster, error) {
	if !keys.ValidID(id) {
		return Cluster{}, invalidID("cluster", id)
	}
	v, err := s.rdb.HMGet(ctx, keys.L1(id), "capacity", "reserved_ratio").Result()
	if err != nil {
		return Cluster{}, fmt.Errorf("store: get cluster %s: %w", id, err)
	}
	capStr, ok1 := v[0].(string)
	ratioStr, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return Cluster{}, fmt.Errorf("store: get cluster %s: %w", id, ErrNotFound)
	}
	c := Cluster{ID: id}
	if c.Capacity, err = strconv.ParseInt(capStr, 10, 64); err != nil {
		return Cluster{}, fmt.Errorf("store: get cluster %s: capacity: %w", id, err)
	}
	if c.ReservedRatio, err = strconv.ParseFloat(ratioStr, 64); err != nil {
		return Cluster{}, fmt.Errorf("store: get cluster %s: reserved_ratio: %w", id, err)
	}
	return c, nil
}

// PutApp creates or updates an app: L2 and L1 allocation atomically by app_config, then the JSON
// index entry, the config version bump and its announcement.
func (s *Store) PutApp(ctx context.Context, a App) (Allocation, error) {
	old, had, err := s.checkAppIDs(ctx, a)
	if err != nil {
		return Allocation{}, err
	}
	doc, err := json.Marshal(a)
	if err != nil {
		return Allocation{}, fmt.Errorf("store: put app %s: %w", a.AppID, err)
	}
	if err := s.before(ctx); err != nil { // before the script writes anything
		return Allocation{}, err
	}
	res, err := s.scripts.Run(ctx, s.rdb, "app_config",
		[]string{keys.L1(a.ClusterID), keys.L1Apps(a.ClusterID), keys.L2(a.ClusterID, a.AppID)},
		a.AppID, a.GuaranteedQuota, a.BurstQuota, a.Priority, a.CBw, a.MaxBorrow, boolArg(a.Enabled),
	).Int64Slice()
	if err != nil {
		return Allocation{}, fmt.Errorf("store: put app %s: %w", a.AppID, classifyScriptError(err))
	}
	if len(res) != 2 {
		return Allocation{}, fmt.Errorf("store: put app %s: app_config returned %v", a.AppID, res)
	}
	// the id and value indexes first, the JSON index entry last, in one round trip: a reader
	// between them sees an index member more, never one less (see appfilter.go)
	index := func(ctx context.Context) error {
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			indexApp(ctx, p, a, old, had)
			p.HSet(ctx, keys.AppsIndex(), a.AppID, doc)
			return nil
		}); err != nil {
			return fmt.Errorf("index: %w", err)
		}
		return nil
	}
	if _, err := s.bumpVersion(WithChange(ctx, ChangeApp, a.AppID), index); err != nil {
		return Allocation{}, fmt.Errorf("store: put app %s: %w", a.AppID, err)
	}
	return Allocation{Allocated: res[0], Available: res[1]}, nil
}

// checkAppIDs validates the ids before any key is built and refuses to move an app to another
// cluster (its allocation would stay in the old cluster's L1). Returns the app's config as it
// is, when it exists.
func (s *Store) checkAppIDs(ctx context.Context, a App) (App, bool, error) {
	if !keys.ValidID(a.AppID) {
		return App{}, false, invalidID("app", a.AppID)
	}
	if keys.ReservedAppID(a.AppID) {
		return App{}, false, &FieldError{Field: "app_id", Code: "reserved_id"}
	}
	if !keys.ValidID(a.ClusterID) {
		return App{}, false, invalidID("cluster", a.ClusterID)
	}
	old, err := s.GetApp(ctx, a.AppID)
	switch {
	case errors.Is(err, ErrNotFound):
		return App{}, false, nil
	case err != nil:
		return App{}, false, err
	case old.ClusterID != a.ClusterID:
		return App{}, false, fmt.Errorf("store: put app %s: in cluster %s, not %s: %w",
			a.AppID, old.ClusterID, a.ClusterID, ErrClusterChange)
	}
	return old, true, nil
}

// bumpVersion runs extra (if any), then INCR of the config version, then publishes the new
// version, one after the other: whoever sees a version also sees the writes before it. (No
// MULTI: the untagged keys live in different Redis Cluster slots.)
func (s *Store) bumpVersion(ctx context.Context, extra func(context.Context) error) (int64, error) {
	if err := s.before(ctx); err != nil {
		return 0, err
	}
	if extra != nil {
		if err := extra(ctx); err != nil {
			return 0, err
		}
	}
	v, err := s.incr(ctx)
	if err != nil {
		return 0, fmt.Errorf("bump config version: %w", err)
	}
	if err := s.logChange(ctx, v); err != nil {
		return 0, err
	}
	if err := s.rdb.Publish(ctx, keys.ConfigChannel(), v).Err(); err != nil {
		return 0, fmt.Errorf("publish config version %d: %w", v, err)
	}
	if s.hooks.After != nil {
		s.hooks.After(v)
	}
	return v, nil
}

// GetApp reads an app's config from the JSON index.
func (s *Store) GetApp(ctx context.Context, id string) (App, error) {
	if !keys.ValidID(id) {
		return App{}, invalidID("app", id)
	}
	doc, err := s.rdb.HGet(ctx, keys.AppsIndex(), id).Result()
	if errors.Is(err, redis.Nil) {
		return App{}, fmt.Errorf("store: app %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return App{}, fmt.Errorf("store: get app %s: %w", id, err)
	}
	return decodeApp(id, doc)
}

// ListApps returns every app of the index, sorted by id, reading it with HSCAN.
func (s *Store) ListApps(ctx context.Context) ([]App, error) {
	apps := []App{}
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, keys.AppsIndex(), cursor, "", scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("store: list apps: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			a, err := decodeApp(kv[i], kv[i+1])
			if err != nil {
				return nil, err
			}
			apps = append(apps, a)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	sort.Slice(apps, func(i, j int) bool { return apps[i].AppID < apps[j].AppID })
	return dedupe(apps), nil
}

// HasConfig reports whether Redis holds any tollgate config (apps or clusters index). One EXISTS
// per key: the two untagged keys live in different Redis Cluster slots (CROSSSLOT together).
func (s *Store) HasConfig(ctx context.Context) (bool, error) {
	for _, k := range []string{keys.AppsIndex(), keys.ClustersIndex()} {
		n, err := s.rdb.Exists(ctx, k).Result()
		if err != nil {
			return false, fmt.Errorf("store: has config: %w", err)
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}

// ConfigVersion returns the current config version (0 before the first change).
func (s *Store) ConfigVersion(ctx context.Context) (int64, error) {
	v, err := s.rdb.Get(ctx, keys.ConfigVersion()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: config version: %w", err)
	}
	return v, nil
}

func decodeApp(id, doc string) (App, error) {
	var a App
	if err := json.Unmarshal([]byte(doc), &a); err != nil {
		return App{}, fmt.Errorf("store: decode app %q: %w", id, err)
	}
	if a.AppID == "" {
		a.AppID = id
	}
	if a.AppID != id {
		return App{}, fmt.Errorf("store: app %q: index entry names app %q", id, a.AppID)
	}
	return a, nil
}

// dedupe drops repeated ids of a sorted slice (HSCAN may return an entry twice).
func dedupe(apps []App) []App {
	out := apps[:0]
	for i, a := range apps {
		if i == 0 || a.AppID != apps[i-1].AppID {
			out = append(out, a)
		}
	}
	return out
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
