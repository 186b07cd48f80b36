// Package live is the control plane's cluster view: every few seconds it reads what the
// gateways reported to Redis (stats, leases, connection statistics, the gateway registry) and
// the L1/L2 state, keeps short histories, derives alerts, and pushes metrics, alerts, config
// changes and emergency notices to WebSocket subscribers. The console's dashboard data
// and the Prometheus cluster collector are built from its snapshots.
package live

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Snapshot is the cluster view at one instant.
type Snapshot struct {
	At            time.Time
	ConfigVersion int64
	TotalApps     int64         // configured apps; Apps holds the active ones only
	RedisLatency  time.Duration // the control plane's own PING
	PoolUsage     float64       // busy / size of the control plane's Redis pool
	Clusters      []ClusterState
	Apps          []AppState // the apps of the clusters' active sets
	Nodes         []Node
	// body bytes of every app the fresh nodes reported since this control plane first saw them
	// (monotonic; bandwidth.go)
	BytesIn, BytesOut int64
}

// ClusterState is one cluster: L1, emergency, reconcile corrections and connections summed
// over its apps and nodes.
type ClusterState struct {
	ID              string  `json:"cluster_id"`
	Capacity        int64   `json:"capacity"`
	ReservedRatio   float64 `json:"reserved_ratio"`
	Allocated       int64   `json:"allocated"`
	Available       int64   `json:"available"`
	Borrowed        int64   `json:"borrowed"`
	Emergency       bool    `json:"emergency_mode"`
	EmergencyUntil  int64   `json:"emergency_until,omitempty"`
	EmergencyReason string  `json:"emergency_reason,omitempty"`
	Corrections     int64   `json:"reconcile_corrections"`
	ConnMax         int64   `json:"max_connections,omitempty"` // 0: the gateway default
	ConnCurrent     int64   `json:"connections_active"`
	ConnPeak        int64   `json:"connections_peak"`
	ConnRejected    int64   `json:"connections_rejected"`
	RequestRate     float64 `json:"request_rate"`
	CostRate        float64 `json:"cost_rate"`
	Requests        int64   `json:"requests_total"` // reported by the gateways, all apps (keys.Totals)
	Cost            int64   `json:"cost_total"`
	// bytes/s through the gateways, summed over the cluster's active apps (bandwidth.go)
	BytesInRate  float64 `json:"bytes_in_rate"`
	BytesOutRate float64 `json:"bytes_out_rate"`
	// the busiest fresh node: limits are enforced per node
	ConnNodeCurrent int64  `json:"-"`
	ConnNode        string `json:"-"`
}

// AppState is one app: L2 and L3 tokens, totals and rates from the node reports, drift,
// corrections and connections summed over nodes.
type AppState struct {
	ID           string  `json:"app_id"`
	Cluster      string  `json:"cluster_id"`
	Priority     int     `json:"priority"`
	Enabled      bool    `json:"enabled"`
	Burst        int64   `json:"burst_quota"`
	Guaranteed   int64   `json:"guaranteed_quota"`
	L2Tokens     float64 `json:"l2_tokens"`
	Borrowed     int64   `json:"borrowed"`
	Debt         int64   `json:"debt"`
	L3Held       int64   `json:"l3_tokens"` // tokens leased to nodes and not yet used
	Requests     int64   `json:"requests_total"`
	Cost         int64   `json:"cost_total"`
	RequestRate  float64 `json:"request_rate"`
	CostRate     float64 `json:"cost_rate"`
	Corrections  int64   `json:"reconcile_corrections"`
	DriftPPM     int64   `json:"drift_ppm"`
	ActiveNodes  int     `json:"active_nodes"`
	ConnCurrent  int64   `json:"connections_active"`
	ConnPeak     int64   `json:"connections_peak"`
	ConnRejected int64   `json:"connections_rejected"`
	ConnMax      int64   `json:"max_connections,omitempty"` // 0: the gateway default
	// body bytes per second through the gateways (in: uploads, out: downloads), summed over the
	// fresh nodes, each over its last report interval (bandwidth.go)
	BytesInRate  float64 `json:"bytes_in_rate"`
	BytesOutRate float64 `json:"bytes_out_rate"`
	// body bytes since this control plane first saw the app's traffic (monotonic, for history)
	BytesIn, BytesOut int64 `json:"-"`
	// the busiest fresh node: limits are enforced per node
	ConnNodeCurrent int64       `json:"-"`
	ConnNode        string      `json:"-"`
	nodeConn        []nodeCount // in flight per fresh node
}

type nodeCount struct {
	node string
	n    int64
}

// Node is one gateway as it announces itself in ratelimit:gateways.
type Node struct {
	NodeID           string   `json:"node_id"`
	LastSeen         int64    `json:"last_seen"`
	ConfigVersion    int64    `json:"config_version"`
	Mode             string   `json:"mode,omitempty"`
	DegradationLevel *int     `json:"degradation_level"`
	RedisLatencyMS   *float64 `json:"redis_latency_ms"`
	L3HitRatio       *float64 `json:"l3_hit_ratio"`
	Stale            bool     `json:"stale"`
	ConfigCurrent    bool     `json:"config_current"`
	// docs/rules-contract.md §6 (absent from older gateways)
	RequestsTotal      *int64                   `json:"requests_total,omitempty"`
	BlockedTotal       *int64                   `json:"blocked_total,omitempty"`
	Apps               map[string]NodeAppCounts `json:"-"`
	Breakers           map[string]BreakerState  `json:"breakers,omitempty"`
	ConnLeakedTotal    *int64                   `json:"conn_leaked_total,omitempty"`
	ConnCleanupLastRun *int64                   `json:"conn_cleanup_last_run,omitempty"`
	// when the node took its counters (Unix seconds, ms precision; 0 from older gateways,
	// which date them by LastSeen)
	ReportedAt float64 `json:"-"`
}

// StaleAfter: a node that has not announced itself for this long is reported stale (it
// announces every 5 s).
const StaleAfter = 30 * time.Second

// parseNode reads one registry entry; ok is false for a damaged one or an odd id.
func parseNode(field, doc string, now time.Time, version int64, validID func(string) bool) (Node, bool) {
	var raw struct {
		NodeID           string   `json:"node_id"`
		LastSeen         float64  `json:"last_seen"`
		ConfigVersion    float64  `json:"config_version"`
		Mode             string   `json:"mode"`
		DegradationLevel *float64 `json:"degradation_level"`
		RedisLatencyMS   *float64 `json:"redis_latency_ms"`
		L3HitRatio       *float64 `json:"l3_hit_ratio"`
	}
	if json.Unmarshal([]byte(doc), &raw) != nil || !validID(field) {
		return Node{}, false
	}
	n := Node{NodeID: field, LastSeen: int64(raw.LastSeen), ConfigVersion: int64(raw.ConfigVersion),
		RedisLatencyMS: raw.RedisLatencyMS, L3HitRatio: raw.L3HitRatio}
	if validID(raw.Mode) {
		n.Mode = raw.Mode
	}
	if d := raw.DegradationLevel; d != nil && *d >= 0 && *d <= 3 {
		lvl := int(*d)
		n.DegradationLevel = &lvl
	}
	applyReport(&n, doc, validID)
	n.Stale = now.Sub(time.Unix(n.LastSeen, 0)) > StaleAfter
	n.ConfigCurrent = n.ConfigVersion == version
	return n, true
}

// leaseHeld sums the positive "<node>:held" fields of a leases hash and counts the nodes.
func leaseHeld(m map[string]string) (int64, int) {
	var sum int64
	nodes := 0
	for k, v := range m {
		if !strings.HasSuffix(k, ":held") {
			continue
		}
		nodes++
		if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
			sum += int64(n)
		}
	}
	return sum, nodes
}

func num(v any) int64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return int64(f)
}

func fnum(v any) float64 {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
