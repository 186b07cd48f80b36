package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// The value indexes (keys.AppsBy) hold, for each value of an app's cluster, priority and
// enabled flag, the ids of the apps that have it, in the id index's shape (lower(id) NUL id,
// scored 0). PutApp writes them in the same pipeline as the id index, after it, and moves an
// app whose priority or enabled flag changed; RemoveApp removes the app from them. A store
// written before them, a write cut short or two concurrent updates of one app that raced show as
// the priority sets or the enabled sets holding a total other than the number of apps; the
// first filtered list then rebuilds them from the JSON index (EnsureAppValueIndexes).

// Fields of the value indexes.
const (
	byCluster  = "cluster"
	byPriority = "priority"
	byEnabled  = "enabled"
)

// valueIndexes returns the value-index keys an app belongs to: its cluster's, its priority's
// and its enabled flag's.
func valueIndexes(a App) [3]string {
	return [3]string{
		keys.AppsBy(byCluster, a.ClusterID),
		keys.AppsBy(byPriority, strconv.Itoa(a.Priority)),
		keys.AppsBy(byEnabled, boolArg(a.Enabled)),
	}
}

// indexApp queues the id index and value index writes of a (whose previous config was old, when
// had) on p: the new members before the old ones leave.
func indexApp(ctx context.Context, p redis.Pipeliner, a App, old App, had bool) {
	m := idMember(a.AppID)
	p.ZAdd(ctx, keys.AppIDs(), redis.Z{Member: m})
	now := valueIndexes(a)
	for _, k := range now {
		p.ZAdd(ctx, k, redis.Z{Member: m})
	}
	if had {
		for i, k := range valueIndexes(old) {
			if k != now[i] {
				p.ZRem(ctx, k, m)
			}
		}
	}
}

// StaleRepairAfter is how long an index must keep the same surplus of members (more than the
// JSON index has apps) before a list rebuilds it. Every write adds index members before the
// JSON entry and removes them after it, so a write in flight shows as a surplus for a moment and
// must not cost a rebuild; a surplus that stays (a write cut short, two updates of one app that
// raced) only makes a total too large and costs a check per listed app, and is repaired then.
// A deficit (a store from before the index) is rebuilt at once.
var StaleRepairAfter = 10 * time.Second

// surplusWatch remembers, per index, the counts at which a surplus was first seen.
type surplusWatch struct {
	mu    sync.Mutex
	first map[string]surplusSeen
}

type surplusSeen struct {
	apps, members int64
	at            time.Time
}

// needsRebuild: the index (members for apps in the JSON index) must be rebuilt now — it misses
// members, or it has kept the same surplus for StaleRepairAfter.
func (w *surplusWatch) needsRebuild(index string, apps, members int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case members < apps:
		delete(w.first, index)
		return true
	case members == apps:
		delete(w.first, index)
		return false
	}
	if w.first == nil {
		w.first = map[string]surplusSeen{}
	}
	seen, ok := w.first[index]
	if !ok || seen.apps != apps || seen.members != members {
		w.first[index] = surplusSeen{apps: apps, members: members, at: time.Now()}
		return false
	}
	if time.Since(seen.at) < StaleRepairAfter {
		return false
	}
	delete(w.first, index)
	return true
}

// priorities and enabled values a value index can have.
var (
	allPriorities = []string{"0", "1", "2", "3"}
	allEnabled    = []string{"0", "1"}
)

// EnsureAppValueIndexes checks, in one round trip, that the priority sets and the enabled sets
// each hold as many ids as the JSON index has apps, and when not rebuilds every value index from
// the JSON index (O(N), once). Returns whether it rebuilt.
func (s *Store) EnsureAppValueIndexes(ctx context.Context) (bool, error) {
	var n *redis.IntCmd
	var prio, en []*redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		n = p.HLen(ctx, keys.AppsIndex())
		for _, v := range allPriorities {
			prio = append(prio, p.ZCard(ctx, keys.AppsBy(byPriority, v)))
		}
		for _, v := range allEnabled {
			en = append(en, p.ZCard(ctx, keys.AppsBy(byEnabled, v)))
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: count app value indexes: %w", err)
	}
	sum := func(cs []*redis.IntCmd) (t int64) {
		for _, c := range cs {
			t += c.Val()
		}
		return t
	}
	// a deficit in either sum is rebuilt at once, a surplus once it stays
	rebuild := s.surplus.needsRebuild("priority", n.Val(), sum(prio))
	if s.surplus.needsRebuild("enabled", n.Val(), sum(en)) {
		rebuild = true
	}
	if !rebuild {
		return false, nil
	}
	return true, s.rebuildValueIndexes(ctx)
}

// rebuildValueIndexes adds every app of the JSON index to its value indexes, then removes from
// every value index the members that do not belong there.
func (s *Store) rebuildValueIndexes(ctx context.Context) error {
	want := map[string][3]string{} // member -> its value indexes
	sets := map[string]bool{}
	for _, v := range allPriorities {
		sets[keys.AppsBy(byPriority, v)] = true
	}
	for _, v := range allEnabled {
		sets[keys.AppsBy(byEnabled, v)] = true
	}
	clusters, err := s.ListClusters(ctx)
	if err != nil {
		return err
	}
	for _, c := range clusters {
		sets[keys.AppsBy(byCluster, c)] = true
	}
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, keys.AppsIndex(), cursor, "", 1000).Result()
		if err != nil {
			return fmt.Errorf("store: rebuild app value indexes: %w", err)
		}
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i+1 < len(kv); i += 2 {
				a, err := decodeApp(kv[i], kv[i+1])
				if err != nil {
					return err
				}
				m, ix := idMember(a.AppID), valueIndexes(a)
				want[m] = ix
				for _, k := range ix {
					sets[k] = true
					p.ZAdd(ctx, k, redis.Z{Member: m})
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: rebuild app value indexes: %w", err)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	for k := range sets {
		var zc uint64
		for {
			ms, next, err := s.rdb.ZScan(ctx, k, zc, "", 1000).Result()
			if err != nil {
				return fmt.Errorf("store: rebuild app value indexes: %w", err)
			}
			var gone []any
			for i := 0; i < len(ms); i += 2 {
				ix, ok := want[ms[i]]
				if !ok || (ix[0] != k && ix[1] != k && ix[2] != k) {
					gone = append(gone, ms[i])
				}
			}
			if len(gone) > 0 {
				if err := s.rdb.ZRem(ctx, k, gone...).Err(); err != nil {
					return fmt.Errorf("store: rebuild app value indexes: %w", err)
				}
			}
			if zc = next; zc == 0 {
				break
			}
		}
	}
	return nil
}

// AppFilter selects apps: an id prefix (case ignored) and any of a cluster, a priority and an
// enabled flag.
type AppFilter struct {
	Prefix   string
	Cluster  string // "": any
	Priority *int
	Enabled  *bool
}

// indexes returns the value indexes the filter names.
func (f AppFilter) indexes() []string {
	var ks []string
	if f.Cluster != "" {
		ks = append(ks, keys.AppsBy(byCluster, f.Cluster))
	}
	if f.Priority != nil {
		ks = append(ks, keys.AppsBy(byPriority, strconv.Itoa(*f.Priority)))
	}
	if f.Enabled != nil {
		ks = append(ks, keys.AppsBy(byEnabled, boolArg(*f.Enabled)))
	}
	return ks
}

// ValueFilters is the number of value filters (cluster, priority, enabled) f names.
func (f AppFilter) ValueFilters() int { return len(f.indexes()) }

// lexRange is the lex range of the members whose id starts with prefix (case ignored).
func lexRange(prefix string) (string, string) {
	if prefix == "" {
		return "-", "+"
	}
	p := strings.ToLower(prefix)
	return "[" + p, "[" + p + "\xff"
}

// PageAppsWhere is PageApps over the value index of one filter (cluster, priority or enabled),
// with an optional id prefix: a ZLEXCOUNT, a ZRANGE BYLEX … LIMIT and one HMGET of the page,
// whatever the number of apps. f must name exactly one value filter.
func (s *Store) PageAppsWhere(ctx context.Context, f AppFilter, offset, limit int64) (AppPage, error) {
	ks := f.indexes()
	if len(ks) != 1 {
		return AppPage{}, fmt.Errorf("store: page apps: %d value filters, want 1", len(ks))
	}
	if _, err := s.EnsureAppValueIndexes(ctx); err != nil {
		return AppPage{}, err
	}
	min, max := lexRange(f.Prefix)
	total, err := s.rdb.ZLexCount(ctx, ks[0], min, max).Result()
	if err != nil {
		return AppPage{}, fmt.Errorf("store: page apps: %w", err)
	}
	page := AppPage{Apps: []App{}, Total: total}
	if offset >= total || limit <= 0 {
		return page, nil
	}
	ms, err := s.rdb.ZRangeByLex(ctx, ks[0], &redis.ZRangeBy{Min: min, Max: max, Offset: offset, Count: limit}).Result()
	if err != nil {
		return AppPage{}, fmt.Errorf("store: page apps: %w", err)
	}
	apps, err := s.appsOf(ctx, ms)
	if err != nil {
		return AppPage{}, err
	}
	for _, a := range apps { // a member an update left behind is not listed under its old value
		if f.Match(a) {
			page.Apps = append(page.Apps, a)
		}
	}
	return page, nil
}

// Match reports whether a passes every filter of f.
func (f AppFilter) Match(a App) bool {
	return strings.HasPrefix(strings.ToLower(a.AppID), strings.ToLower(f.Prefix)) &&
		(f.Cluster == "" || a.ClusterID == f.Cluster) &&
		(f.Priority == nil || a.Priority == *f.Priority) &&
		(f.Enabled == nil || a.Enabled == *f.Enabled)
}

// appsOf reads the apps of id-index members in one HMGET, in their order.
func (s *Store) appsOf(ctx context.Context, members []string) ([]App, error) {
	ids := make([]string, 0, len(members))
	for _, m := range members {
		if _, id, ok := strings.Cut(m, "\x00"); ok {
			ids = append(ids, id)
		}
	}
	apps, err := s.GetApps(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]App, 0, len(ids))
	for _, id := range ids {
		if a, ok := apps[id]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// AppScan is one step of a scan of the apps that match several value filters.
type AppScan struct {
	Apps []App
	// Examined is how many ids of the scanned index were checked against the other filters.
	Examined int64
	// AtMost is the number of ids the scanned index holds in the prefix's range: no more apps
	// than that match.
	AtMost int64
	// Next is the id to continue after ("" when the scan reached the end of the range).
	Next string
}

// scanBatch is how many candidates ScanAppsWhere checks with one ZMSCORE per other filter.
const scanBatch = 256

// ScanAppsWhere returns up to limit apps, in id order after the id after (exclusive; "" from the
// start), that match every filter of f. It walks the smallest of the value indexes f names (within
// the prefix's range) and checks each candidate against the others with one ZMSCORE per other
// index per batch of candidates; it stops after examining maxExamined candidates, so a request
// costs at most maxExamined / 256 batches whatever the number of apps, and returns where to
// continue.
func (s *Store) ScanAppsWhere(ctx context.Context, f AppFilter, after string, limit, maxExamined int64) (AppScan, error) {
	ks := f.indexes()
	if len(ks) < 2 {
		return AppScan{}, fmt.Errorf("store: scan apps: %d value filters, want 2 or more", len(ks))
	}
	if _, err := s.EnsureAppValueIndexes(ctx); err != nil {
		return AppScan{}, err
	}
	min, max := lexRange(f.Prefix)
	counts := make([]*redis.IntCmd, len(ks))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range ks {
			counts[i] = p.ZLexCount(ctx, k, min, max)
		}
		return nil
	}); err != nil {
		return AppScan{}, fmt.Errorf("store: scan apps: %w", err)
	}
	small := 0
	for i := range ks {
		if counts[i].Val() < counts[small].Val() {
			small = i
		}
	}
	scan, others := ks[small], append(append([]string{}, ks[:small]...), ks[small+1:]...)
	out := AppScan{Apps: []App{}, AtMost: counts[small].Val()}
	from := min
	if after != "" {
		if m := idMember(after); min == "-" || m >= min[1:] {
			from = "(" + m
		}
	}
	var matched []string
	for int64(len(matched)) < limit && out.Examined < maxExamined {
		n := min64(scanBatch, maxExamined-out.Examined)
		ms, err := s.rdb.ZRangeByLex(ctx, scan, &redis.ZRangeBy{Min: from, Max: max, Count: n}).Result()
		if err != nil {
			return AppScan{}, fmt.Errorf("store: scan apps: %w", err)
		}
		if len(ms) == 0 {
			out.Next = ""
			break
		}
		scores := make([]*redis.Cmd, len(others))
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range others {
				args := make([]any, 0, len(ms)+2)
				args = append(args, "ZMSCORE", k)
				for _, m := range ms {
					args = append(args, m)
				}
				scores[i] = p.Do(ctx, args...)
			}
			return nil
		}); err != nil {
			return AppScan{}, fmt.Errorf("store: scan apps: %w", err)
		}
		for j, m := range ms {
			out.Examined++
			_, id, _ := strings.Cut(m, "\x00")
			out.Next = id
			if inAll(scores, j) {
				matched = append(matched, m)
				if int64(len(matched)) == limit {
					break
				}
			}
		}
		from = "(" + idMember(out.Next)
		if int64(len(ms)) < n && int64(len(matched)) < limit {
			out.Next = "" // the range is exhausted
			break
		}
	}
	if out.Next != "" { // is anything left after it?
		rest, err := s.rdb.ZRangeByLex(ctx, scan, &redis.ZRangeBy{Min: "(" + idMember(out.Next), Max: max, Count: 1}).Result()
		if err != nil {
			return AppScan{}, fmt.Errorf("store: scan apps: %w", err)
		}
		if len(rest) == 0 {
			out.Next = ""
		}
	}
	apps, err := s.appsOf(ctx, matched)
	if err != nil {
		return AppScan{}, err
	}
	for _, a := range apps {
		if f.Match(a) {
			out.Apps = append(out.Apps, a)
		}
	}
	return out, nil
}

// inAll: candidate j has a score (is a member) in every other index.
func inAll(scores []*redis.Cmd, j int) bool {
	for _, c := range scores {
		v, _ := c.Val().([]any)
		if j >= len(v) || v[j] == nil {
			return false
		}
	}
	return true
}

func min64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
