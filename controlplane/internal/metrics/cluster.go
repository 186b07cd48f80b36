package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"tollgate/controlplane/internal/live"
)

// clusterCollector exposes the newest cluster view: every value comes from what the gateways
// reported to Redis and from the L1/L2 state, summed across nodes by the live collector. Label
// values are ids that passed keys.ValidID.
type clusterCollector struct {
	snapshot func() *live.Snapshot
	descs    map[string]*prometheus.Desc
}

type metricDef struct {
	name, help string
	labels     []string
}

func defs() []metricDef {
	clusterLabels, appLabels, nodeLabels := []string{"cluster_id"}, []string{"app_id", "cluster_id"}, []string{"node_id"}
	return []metricDef{
		{"tollgate_config_version", "Config version the control plane sees.", nil},
		{"tollgate_view_timestamp_seconds", "When the cluster view was collected.", nil},
		{"tollgate_l1_capacity_tokens", "Cluster capacity (tokens/s).", clusterLabels},
		{"tollgate_l1_available_tokens", "L1 borrowable pool of the cluster.", clusterLabels},
		{"tollgate_l1_reserve_tokens", "Part of the cluster capacity L1 never lends (reserved_ratio x capacity).", clusterLabels},
		{"tollgate_l1_allocated_tokens", "Sum of guaranteed quotas of the cluster.", clusterLabels},
		{"tollgate_l1_borrowed_tokens", "Tokens borrowed by the cluster's apps.", clusterLabels},
		{"tollgate_emergency_mode", "1 while the cluster is in emergency mode.", clusterLabels},
		{"tollgate_cluster_reconcile_corrections_total", "L1 reconciliation corrections.", clusterLabels},
		{"tollgate_cluster_connections_active", "Connections in flight, summed over nodes.", clusterLabels},
		{"tollgate_cluster_connections_rejected_total", "Rejected connections, summed over nodes.", clusterLabels},
		{"tollgate_cluster_request_rate", "Requests per second of the cluster's apps.", clusterLabels},
		{"tollgate_cluster_bytes_rate", "Body bytes per second through the gateways of the cluster's active apps, by direction (in: uploads, out: downloads).", []string{"cluster_id", "direction"}},
		{"tollgate_cluster_connections_limit", "Connection limit of the cluster per gateway node.", clusterLabels},
		{"tollgate_l2_tokens", "Tokens in the app's L2 bucket.", appLabels},
		{"tollgate_l3_tokens", "Tokens leased to gateway nodes and not yet used.", appLabels},
		{"tollgate_app_requests_total", "Requests reported by the gateways.", appLabels},
		{"tollgate_app_cost_total", "Cost consumed, reported by the gateways.", appLabels},
		{"tollgate_app_request_rate", "Requests per second over the last collection period.", appLabels},
		{"tollgate_app_cost_rate", "Cost per second over the last collection period.", appLabels},
		{"tollgate_app_bytes_rate", "Body bytes per second through the gateways, by direction (in: uploads, out: downloads), summed over fresh nodes over their last report interval.", []string{"app_id", "cluster_id", "direction"}},
		{"tollgate_app_debt_tokens", "Outstanding debt of the app.", appLabels},
		{"tollgate_app_drift_ratio", "Lease drift of the last reconciliation window.", appLabels},
		{"tollgate_app_reconcile_corrections_total", "Drift corrections of the app.", appLabels},
		{"tollgate_app_connections_active", "Connections in flight, summed over nodes.", appLabels},
		{"tollgate_app_connections_peak", "Sum of the nodes' connection peaks.", appLabels},
		{"tollgate_app_connections_rejected_total", "Rejected connections, summed over nodes.", appLabels},
		{"tollgate_app_connections_limit", "Connection limit of the app per gateway node.", appLabels},
		{"tollgate_gateway_degradation_level", "Degradation level a gateway reports (0-3).", nodeLabels},
		{"tollgate_gateway_redis_latency_seconds", "Redis latency a gateway measures.", nodeLabels},
		{"tollgate_gateway_l3_hit_ratio", "Local lease hit ratio a gateway reports.", nodeLabels},
		{"tollgate_gateway_last_seen_timestamp_seconds", "Last announcement of a gateway.", nodeLabels},
		{"tollgate_gateway_config_current", "1 when the gateway runs the current config version.", nodeLabels},
		{"tollgate_gateway_conn_leaked_total", "Leaked connection slots a gateway force-released since it started.", nodeLabels},
		{"tollgate_gateway_conn_cleanup_last_run_timestamp_seconds", "Last run of a gateway's connection cleanup.", nodeLabels},
	}
}

func newClusterCollector(snapshot func() *live.Snapshot) *clusterCollector {
	c := &clusterCollector{snapshot: snapshot, descs: map[string]*prometheus.Desc{}}
	for _, d := range defs() {
		c.descs[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, nil)
	}
	return c
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	if s == nil {
		return
	}
	g := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	k := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, v, labels...)
	}
	g("tollgate_config_version", float64(s.ConfigVersion))
	g("tollgate_view_timestamp_seconds", float64(s.At.Unix()))
	for _, cl := range s.Clusters {
		g("tollgate_l1_capacity_tokens", float64(cl.Capacity), cl.ID)
		g("tollgate_l1_available_tokens", float64(cl.Available), cl.ID)
		g("tollgate_l1_reserve_tokens", float64(int64(cl.ReservedRatio*float64(cl.Capacity))), cl.ID)
		g("tollgate_l1_allocated_tokens", float64(cl.Allocated), cl.ID)
		g("tollgate_l1_borrowed_tokens", float64(cl.Borrowed), cl.ID)
		g("tollgate_emergency_mode", b2f(cl.Emergency), cl.ID)
		k("tollgate_cluster_reconcile_corrections_total", float64(cl.Corrections), cl.ID)
		g("tollgate_cluster_connections_active", float64(cl.ConnCurrent), cl.ID)
		k("tollgate_cluster_connections_rejected_total", float64(cl.ConnRejected), cl.ID)
		g("tollgate_cluster_request_rate", cl.RequestRate, cl.ID)
		g("tollgate_cluster_bytes_rate", cl.BytesInRate, cl.ID, "in")
		g("tollgate_cluster_bytes_rate", cl.BytesOutRate, cl.ID, "out")
		g("tollgate_cluster_connections_limit", float64(cl.ConnLimit()), cl.ID)
	}
	for _, a := range s.Apps {
		g("tollgate_l2_tokens", a.L2Tokens, a.ID, a.Cluster)
		g("tollgate_l3_tokens", float64(a.L3Held), a.ID, a.Cluster)
		k("tollgate_app_requests_total", float64(a.Requests), a.ID, a.Cluster)
		k("tollgate_app_cost_total", float64(a.Cost), a.ID, a.Cluster)
		g("tollgate_app_request_rate", a.RequestRate, a.ID, a.Cluster)
		g("tollgate_app_cost_rate", a.CostRate, a.ID, a.Cluster)
		g("tollgate_app_bytes_rate", a.BytesInRate, a.ID, a.Cluster, "in")
		g("tollgate_app_bytes_rate", a.BytesOutRate, a.ID, a.Cluster, "out")
		g("tollgate_app_debt_tokens", float64(a.Debt), a.ID, a.Cluster)
		g("tollgate_app_drift_ratio", float64(a.DriftPPM)/1e6, a.ID, a.Cluster)
		k("tollgate_app_reconcile_corrections_total", float64(a.Corrections), a.ID, a.Cluster)
		g("tollgate_app_connections_active", float64(a.ConnCurrent), a.ID, a.Cluster)
		g("tollgate_app_connections_peak", float64(a.ConnPeak), a.ID, a.Cluster)
		k("tollgate_app_connections_rejected_total", float64(a.ConnRejected), a.ID, a.Cluster)
		g("tollgate_app_connections_limit", float64(a.ConnLimit()), a.ID, a.Cluster)
	}
	for _, n := range s.Nodes {
		if n.DegradationLevel != nil {
			g("tollgate_gateway_degradation_level", float64(*n.DegradationLevel), n.NodeID)
		}
		if n.RedisLatencyMS != nil {
			g("tollgate_gateway_redis_latency_seconds", *n.RedisLatencyMS/1000, n.NodeID)
		}
		if n.L3HitRatio != nil {
			g("tollgate_gateway_l3_hit_ratio", *n.L3HitRatio, n.NodeID)
		}
		g("tollgate_gateway_last_seen_timestamp_seconds", float64(n.LastSeen), n.NodeID)
		g("tollgate_gateway_config_current", b2f(n.ConfigCurrent), n.NodeID)
		if n.ConnLeakedTotal != nil {
			k("tollgate_gateway_conn_leaked_total", float64(*n.ConnLeakedTotal), n.NodeID)
		}
		if n.ConnCleanupLastRun != nil {
			g("tollgate_gateway_conn_cleanup_last_run_timestamp_seconds", float64(*n.ConnCleanupLastRun), n.NodeID)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
