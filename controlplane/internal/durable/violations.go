package durable

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// Violations lists what of a stored config d the config contract refuses (validate.CheckCluster,
// CheckClusterConnLimits, CheckApp, the cluster an app names, the allocation cap), named by id:
// "clusters[<id>].<field>", "apps[<id>].<field>". Such config was stored before the contract
// (or written to Redis by hand); it stays editable — every change that does not add to a
// defect is accepted, and one that removes it clears it from this list. The control plane
// reports it at start and at GET /api/v1/config/violations.
func Violations(d Document) []validate.Violation {
	out := []validate.Violation{}
	clusters := map[string]Cluster{}
	for _, c := range d.Clusters {
		f := "clusters[" + c.ID + "]."
		out = append(out, validate.Prefixed(f, validate.CheckCluster(store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}))...)
		if c.Connections != nil {
			out = append(out, validate.Prefixed(f+"connections.", validate.CheckClusterConnLimits(*c.Connections))...)
		}
		clusters[c.ID] = c
	}
	sum := map[string]int64{}
	for _, a := range d.Apps {
		f := "apps[" + a.AppID + "]."
		out = append(out, validate.Prefixed(f, validate.CheckApp(validate.App{App: a.App, Connections: a.Connections}))...)
		if _, ok := clusters[a.ClusterID]; !ok && keys.ValidID(a.ClusterID) {
			out = append(out, validate.Violation{Field: f + "cluster_id", Code: "unknown_cluster",
				Message: fmt.Sprintf("cluster %s does not exist", a.ClusterID)})
		}
		sum[a.ClusterID] += a.GuaranteedQuota
	}
	for _, id := range slices.Sorted(maps.Keys(sum)) {
		c, ok := clusters[id]
		if !ok {
			continue
		}
		// as stored: any excess is reported (before = 0, whatever the change that made it)
		sc := store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}
		if v := validate.CheckAllocation(sc, 0, sum[id], validate.Allocatable(c.Capacity, c.ReservedRatio)); v != nil {
			v.Field = "clusters[" + id + "]." + v.Field
			out = append(out, *v)
		}
	}
	return out
}

// Drift lists the apps whose config as the API shows it (the apps index, doc) is not what the
// gateway enforces: the L2 hash app_config wrote and the app's member of L1's allocation set
// (code "l2_differs" on the field that differs, "l2_missing" without an L2 hash). Writes are
// serialized, so this is left only by a control plane that stopped between an app's script
// and its index write, or by a hand edit; writing the app again (PUT, unchanged) repairs it.
// Pipelined per batch of apps: one round trip per 500 apps.
func (r Reader) Drift(ctx context.Context, doc Document) ([]validate.Violation, error) {
	out := []validate.Violation{}
	fields := []string{"guaranteed_quota", "burst_quota", "priority", "c_bw", "max_borrow", "enabled"}
	for from := 0; from < len(doc.Apps); from += exportBatch {
		batch := doc.Apps[from:min(from+exportBatch, len(doc.Apps))]
		l2 := make([]*redis.SliceCmd, len(batch))
		alloc := make([]*redis.FloatCmd, len(batch))
		if _, err := r.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, a := range batch {
				l2[i] = p.HMGet(ctx, keys.L2(a.ClusterID, a.AppID), fields...)
				alloc[i] = p.ZScore(ctx, keys.L1Apps(a.ClusterID), a.AppID)
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("durable: drift: %w", err)
		}
		for i, a := range batch {
			f := "apps[" + a.AppID + "]."
			v := l2[i].Val()
			if len(v) != len(fields) || v[0] == nil {
				out = append(out, validate.Violation{Field: f + "guaranteed_quota", Code: "l2_missing",
					Message: fmt.Sprintf("app %s has no L2 state: the gateway refuses it; write it again", a.AppID)})
				continue
			}
			want := []string{strconv.FormatInt(a.GuaranteedQuota, 10), strconv.FormatInt(a.BurstQuota, 10),
				strconv.Itoa(a.Priority), strconv.FormatInt(a.CBw, 10), strconv.FormatInt(a.MaxBorrow, 10), boolDigit(a.Enabled)}
			for j, name := range fields {
				if got := str(v[j]); got != want[j] {
					out = append(out, validate.Violation{Field: f + name, Code: "l2_differs",
						Message: fmt.Sprintf("app %s: the API shows %s %s, the gateway enforces %q; write it again", a.AppID, name, want[j], got)})
				}
			}
			if z, err := alloc[i].Result(); err != nil || int64(z) != a.GuaranteedQuota {
				out = append(out, validate.Violation{Field: f + "guaranteed_quota", Code: "l2_differs",
					Message: fmt.Sprintf("app %s: the API shows guaranteed_quota %d, L1's allocation set holds %v; write it again", a.AppID, a.GuaranteedQuota, z)})
			}
		}
	}
	return out, nil
}

func boolDigit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// StoredViolations reads the stored config and lists what the config contract refuses
// (Violations) and where the gateway enforces something else than the API shows (Drift).
func (r Reader) StoredViolations(ctx context.Context) ([]validate.Violation, Document, error) {
	doc, err := r.Export(ctx, false)
	if err != nil {
		return nil, doc, err
	}
	drift, err := r.Drift(ctx, doc)
	if err != nil {
		return nil, doc, err
	}
	return append(Violations(doc), drift...), doc, nil
}
