package durable

import (
	"fmt"
	"sort"

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
	ids := make([]string, 0, len(sum))
	for id := range sum {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
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
