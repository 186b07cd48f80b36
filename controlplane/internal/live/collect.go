package live

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/ledger"
	"tollgate/internal/store"
)

// Catalog reads the config (implemented by *store.Store).
type Catalog interface {
	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
	CountApps(ctx context.Context) (int64, error)
	ListClusters(ctx context.Context) ([]string, error)
	ConfigVersion(ctx context.Context) (int64, error)
}

// L1Reader reads a cluster's L1 hash and the indexes the scripts keep per cluster (implemented
// by *ledger.Ledger).
type L1Reader interface {
	ReadL1(ctx context.Context, cluster string) (ledger.L1, error)
	ActiveApps(ctx context.Context, cluster string) ([]string, error)
	ClusterTotals(ctx context.Context, cluster string) (ledger.Totals, error)
}

const scanCount = 200

// collector reads one snapshot from Redis: a handful of round trips (one pipeline per stage),
// HSCAN for the registry, never KEYS. Its work is the number of active apps, not the number
// of apps: per cluster it reads the apps of the cluster's active set (granted, reported or with
// connections in flight lately; keys.Active) and the cluster's totals hash, which the
// scripts keep — an idle app costs nothing here and is absent from the snapshot.
type collector struct {
	rdb      redis.UniversalClient
	cat      Catalog
	l1       L1Reader
	poolSize int
}

func newCollector(rdb redis.UniversalClient, cat Catalog, l1 L1Reader, poolSize int) *collector {
	if poolSize <= 0 {
		poolSize = 10 * runtime.GOMAXPROCS(0) // go-redis' default
	}
	return &collector{rdb: rdb, cat: cat, l1: l1, poolSize: poolSize}
}

func (c *collector) collect(ctx context.Context, now time.Time) (*Snapshot, error) {
	start := time.Now()
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("live: ping: %w", err)
	}
	snap := &Snapshot{At: now, RedisLatency: time.Since(start)}
	if ps := c.rdb.PoolStats(); ps != nil {
		snap.PoolUsage = float64(ps.TotalConns-ps.IdleConns) / float64(c.poolSize)
	}
	var err error
	if snap.ConfigVersion, err = c.cat.ConfigVersion(ctx); err != nil {
		return nil, err
	}
	if snap.Nodes, err = c.nodes(ctx, now, snap.ConfigVersion); err != nil {
		return nil, err
	}
	if snap.TotalApps, err = c.cat.CountApps(ctx); err != nil {
		return nil, err
	}
	clusters, err := c.cat.ListClusters(ctx)
	if err != nil {
		return nil, err
	}
	apps, err := c.activeApps(ctx, clusters)
	if err != nil {
		return nil, err
	}
	if snap.Apps, err = c.apps(ctx, now, apps, snap.Nodes); err != nil {
		return nil, err
	}
	if snap.Clusters, err = c.clusters(ctx, clusters, snap.Apps); err != nil {
		return nil, err
	}
	return snap, nil
}

// activeApps returns the configs of the apps of every cluster's active set, sorted by id (an
// app indexed in a cluster it no longer belongs to is left out).
func (c *collector) activeApps(ctx context.Context, clusters []string) ([]store.App, error) {
	var ids []string
	in := map[string]map[string]bool{} // app -> the clusters whose active set holds it
	for _, cl := range clusters {
		act, err := c.l1.ActiveApps(ctx, cl)
		if err != nil {
			return nil, err
		}
		for _, a := range act {
			if in[a] == nil {
				in[a] = map[string]bool{}
				ids = append(ids, a)
			}
			in[a][cl] = true
		}
	}
	conf, err := c.cat.GetApps(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]store.App, 0, len(conf))
	for _, a := range conf {
		if in[a.AppID][a.ClusterID] {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppID < out[j].AppID })
	return out, nil
}

func (c *collector) nodes(ctx context.Context, now time.Time, version int64) ([]Node, error) {
	out := []Node{}
	seen := map[string]bool{}
	var cursor uint64
	for {
		kv, next, err := c.rdb.HScan(ctx, keys.Gateways(), cursor, "", scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("live: gateways: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if n, ok := parseNode(kv[i], kv[i+1], now, version, keys.ValidID); ok && !seen[n.NodeID] {
				seen[n.NodeID] = true
				out = append(out, n)
			}
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

type appCmds struct {
	stats  *redis.SliceCmd
	l2     *redis.SliceCmd
	leases *redis.MapStringStringCmd
	nodes  *redis.StringSliceCmd
	conn   *redis.SliceCmd
}

func (c *collector) apps(ctx context.Context, now time.Time, apps []store.App, nodes []Node) ([]AppState, error) {
	cmds := make([]appCmds, len(apps))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range apps {
			cmds[i] = appCmds{
				stats: p.HMGet(ctx, keys.Stats(a.ClusterID, a.AppID), "total_requests", "total_consumed",
					"correction_count", "last_drift_ppm"),
				l2:     p.HMGet(ctx, keys.L2(a.ClusterID, a.AppID), "current_tokens", "borrowed", "debt"),
				leases: p.HGetAll(ctx, keys.Leases(a.ClusterID, a.AppID)),
				nodes:  p.ZRange(ctx, keys.Nodes(a.ClusterID, a.AppID), 0, -1),
				conn:   p.HMGet(ctx, keys.ConnConfig(a.ClusterID, a.AppID), "max_connections"),
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("live: app state: %w", err)
	}
	out := make([]AppState, len(apps))
	reporters := make([][]string, len(apps))
	for i, a := range apps {
		st, l2 := cmds[i].stats.Val(), cmds[i].l2.Val()
		s := AppState{ID: a.AppID, Cluster: a.ClusterID, Priority: a.Priority, Enabled: a.Enabled,
			Burst: a.BurstQuota, Guaranteed: a.GuaranteedQuota}
		if len(st) == 4 && len(l2) == 3 {
			s.Requests, s.Cost, s.Corrections, s.DriftPPM = num(st[0]), num(st[1]), num(st[2]), num(st[3])
			s.L2Tokens, s.Borrowed, s.Debt = fnum(l2[0]), num(l2[1]), num(l2[2])
		}
		s.L3Held, s.ActiveNodes = leaseHeld(cmds[i].leases.Val())
		if v := cmds[i].conn.Val(); len(v) == 1 {
			s.ConnMax = num(v[0])
		}
		reporters[i] = cmds[i].nodes.Val()
		out[i] = s
	}
	return out, c.connections(ctx, now, out, reporters, nodes)
}

// connections sums the connection statistics every node reported per app (Req 19.7), and
// keeps the busiest fresh node of each app (limits apply per node).
func (c *collector) connections(ctx context.Context, now time.Time, apps []AppState, reporters [][]string, nodes []Node) error {
	type ref struct {
		app  int
		node string
		cmd  *redis.SliceCmd
	}
	var refs []ref
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range apps {
			ids := map[string]bool{}
			for _, n := range nodes {
				ids[n.NodeID] = true
			}
			for _, n := range reporters[i] {
				if keys.ValidID(n) {
					ids[n] = true
				}
			}
			for n := range ids {
				refs = append(refs, ref{i, n, p.HMGet(ctx, keys.ConnNodeStats(a.Cluster, a.ID, n),
					"current", "peak", "rejected", "last_seen")})
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("live: connection stats: %w", err)
	}
	for _, r := range refs {
		if v := r.cmd.Val(); len(v) == 4 {
			a := &apps[r.app]
			cur := num(v[0])
			a.ConnCurrent += cur
			a.ConnPeak += num(v[1])
			a.ConnRejected += num(v[2])
			if seen := num(v[3]); seen > 0 && now.Sub(time.Unix(seen, 0)) <= StaleAfter {
				a.nodeConn = append(a.nodeConn, nodeCount{r.node, cur})
				if cur > a.ConnNodeCurrent {
					a.ConnNodeCurrent, a.ConnNode = cur, r.node
				}
			}
		}
	}
	return nil
}

func (c *collector) clusters(ctx context.Context, ids []string, apps []AppState) ([]ClusterState, error) {
	conn := make([]*redis.SliceCmd, len(ids))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			conn[i] = p.HMGet(ctx, keys.ConnCluster(id), "max_connections")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("live: cluster connection limits: %w", err)
	}
	out := make([]ClusterState, 0, len(ids))
	for i, id := range ids {
		l1, err := c.l1.ReadL1(ctx, id)
		if errors.Is(err, ledger.ErrUnknownCluster) {
			continue
		}
		if err != nil {
			return nil, err
		}
		cs := ClusterState{ID: id, Capacity: l1.Capacity, ReservedRatio: l1.ReservedRatio,
			Allocated: l1.Allocated, Available: l1.Available, Borrowed: l1.Borrowed,
			Emergency: l1.EmergencyActive(time.Now().Unix()), Corrections: l1.Corrections}
		if cs.Emergency {
			cs.EmergencyUntil, cs.EmergencyReason = l1.EmergencyUntil, l1.EmergencyReason
		}
		if v := conn[i].Val(); len(v) == 1 {
			cs.ConnMax = num(v[0])
		}
		t, err := c.l1.ClusterTotals(ctx, id)
		if err != nil {
			return nil, err
		}
		cs.Requests, cs.Cost = t.Requests, t.Consumed
		perNode := map[string]int64{}
		for _, a := range apps {
			if a.Cluster == id {
				cs.ConnCurrent += a.ConnCurrent
				cs.ConnPeak += a.ConnPeak
				cs.ConnRejected += a.ConnRejected
				for _, nc := range a.nodeConn {
					perNode[nc.node] += nc.n
				}
			}
		}
		for node, n := range perNode {
			if n > cs.ConnNodeCurrent || (n == cs.ConnNodeCurrent && node < cs.ConnNode) {
				cs.ConnNodeCurrent, cs.ConnNode = n, node
			}
		}
		out = append(out, cs)
	}
	return out, nil
}
