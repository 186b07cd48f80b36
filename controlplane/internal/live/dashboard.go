package live

import (
	"math"
	"sort"
	"strconv"
	"time"
)

// Dashboard is the console's dashboard data (GET /api/v1/metrics), plus the clusters and nodes it
// summarises.
type Dashboard struct {
	Overview      Overview       `json:"overview"`
	Metrics       DashMetrics    `json:"metrics"`
	TopApps       []TopApp       `json:"top_apps"`
	Alerts        []Alert        `json:"alerts"`
	RedisHealth   RedisHealth    `json:"redis_health"`
	Clusters      []ClusterState `json:"clusters"`
	Nodes         []Node         `json:"nodes"`
	Range         string         `json:"range"`
	ConfigVersion int64          `json:"config_version"`
	Timestamp     int64          `json:"timestamp"`
}

// Overview is the dashboard's headline numbers.
type Overview struct {
	TotalApps        int     `json:"total_apps"`
	ActiveApps       int     `json:"active_apps"` // enabled, with requests in the last hour
	TotalRequests1h  int64   `json:"total_requests_1h"`
	TotalCost1h      int64   `json:"total_cost_1h"`
	TotalBytesIn1h   int64   `json:"total_bytes_in_1h"`  // body bytes through the gateways
	TotalBytesOut1h  int64   `json:"total_bytes_out_1h"` // (in: uploads, out: downloads)
	L1AvailableRatio float64 `json:"l1_available_ratio"`
	EmergencyMode    bool    `json:"emergency_mode"`
}

// DashMetrics are the dashboard's series (request_rate over the chosen range; cost_rate and the
// bandwidth in bytes/s, in and out, added).
type DashMetrics struct {
	RequestRate       []TimePoint       `json:"request_rate"`
	CostRate          []TimePoint       `json:"cost_rate"`
	BytesInRate       []TimePoint       `json:"bytes_in_rate"`
	BytesOutRate      []TimePoint       `json:"bytes_out_rate"`
	CostDistribution  Histogram         `json:"cost_distribution"`
	TokenAvailability TokenAvailability `json:"token_availability"`
	ConnectionStats   ConnectionStats   `json:"connection_stats"`
}

// Histogram of the average cost per request, counting the last hour's requests of each app in
// the bucket of that app's average.
type Histogram struct {
	Buckets []Bucket `json:"buckets"`
}

// Bucket of a histogram ("le" is the upper bound, "+Inf" for the last).
type Bucket struct {
	Le    string `json:"le"`
	Count int64  `json:"count"`
}

// TokenAvailability: L1 available / capacity, mean L2 tokens / burst of enabled apps, mean L3
// hit ratio reported by fresh gateways (null when none reports it).
type TokenAvailability struct {
	L1         float64  `json:"l1"`
	L2Avg      float64  `json:"l2_avg"`
	L3CacheHit *float64 `json:"l3_cache_hit"`
}

// ConnectionStats summed over apps and nodes. Leaked slots are counted per node only
// (gateway metric connlimit_leaked_total), not reported to Redis: null here.
type ConnectionStats struct {
	Active     int64  `json:"active"`
	Peak       int64  `json:"peak"`
	Rejected1h int64  `json:"rejected_1h"`
	Leaked1h   *int64 `json:"leaked_1h"`
}

// TopApp is one row of the dashboard's top apps (bytes: body bytes through the gateways, in:
// uploads, out: downloads; the rates are the live figures of AppState).
type TopApp struct {
	AppID        string  `json:"app_id"`
	Requests1h   int64   `json:"requests_1h"`
	Cost1h       int64   `json:"cost_1h"`
	BytesIn1h    int64   `json:"bytes_in_1h"`
	BytesOut1h   int64   `json:"bytes_out_1h"`
	BytesInRate  float64 `json:"bytes_in_rate"`
	BytesOutRate float64 `json:"bytes_out_rate"`
	Connections  int64   `json:"connections"`
	Status       string  `json:"status"` // normal, warning, critical
}

// RedisHealth is the dashboard's Redis health: status, p99 of the control plane's PING over recent
// collections (ms), the worst latency a fresh gateway reports, and the pool usage.
type RedisHealth struct {
	Status              string  `json:"status"` // healthy, degraded, down
	LatencyP99          float64 `json:"latency_p99"`
	NodeLatencyMax      float64 `json:"node_latency_max_ms"`
	ConnectionPoolUsage float64 `json:"connection_pool_usage"`
}

const topN = 10

// costBuckets are the upper bounds of the cost histogram (+Inf after them).
func costBuckets() []float64 { return []float64{1, 2, 5, 10, 20, 50, 100, 1000} }

// buildDashboard assembles the dashboard of snapshot s over range rng.
func buildDashboard(s *Snapshot, h *history, rng string, alerts []Alert, pings []time.Duration, down bool) Dashboard {
	d := Dashboard{Range: rng, Timestamp: s.At.Unix(), ConfigVersion: s.ConfigVersion, Alerts: alerts,
		Clusters: s.Clusters, Nodes: s.Nodes, TopApps: []TopApp{}}
	d.Metrics.RequestRate, d.Metrics.CostRate = h.total.rates(rng)
	d.Metrics.BytesInRate, d.Metrics.BytesOutRate = h.total.byteRates(rng)
	total := h.total.within("1h")
	d.Overview = Overview{TotalApps: int(s.TotalApps), TotalRequests1h: total.req, TotalCost1h: total.cost,
		TotalBytesIn1h: total.bin, TotalBytesOut1h: total.bout}
	var capSum, availSum int64
	for _, c := range s.Clusters {
		capSum, availSum = capSum+c.Capacity, availSum+c.Available
		d.Overview.EmergencyMode = d.Overview.EmergencyMode || c.Emergency
		d.Metrics.ConnectionStats.Active += c.ConnCurrent
		d.Metrics.ConnectionStats.Peak += c.ConnPeak
	}
	if capSum > 0 {
		d.Overview.L1AvailableRatio = clamp01(float64(availSum) / float64(capSum))
	}
	d.Metrics.ConnectionStats.Rejected1h = total.rej
	d.Metrics.TokenAvailability = tokens(s, d.Overview.L1AvailableRatio)
	d.Metrics.CostDistribution, d.TopApps, d.Overview.ActiveApps = apps(s, h)
	d.RedisHealth = redisHealth(s, pings, down)
	return d
}

func tokens(s *Snapshot, l1 float64) TokenAvailability {
	t := TokenAvailability{L1: l1}
	var l2 float64
	n := 0
	for _, a := range s.Apps {
		if a.Enabled && a.Burst > 0 {
			l2 += clamp01(a.L2Tokens / float64(a.Burst))
			n++
		}
	}
	if n > 0 {
		t.L2Avg = l2 / float64(n)
	}
	var hit float64
	m := 0
	for _, nd := range s.Nodes {
		if !nd.Stale && nd.L3HitRatio != nil {
			hit += *nd.L3HitRatio
			m++
		}
	}
	if m > 0 {
		v := hit / float64(m)
		t.L3CacheHit = &v
	}
	return t
}

func apps(s *Snapshot, h *history) (Histogram, []TopApp, int) {
	bounds := costBuckets()
	hist := Histogram{Buckets: make([]Bucket, len(bounds)+1)}
	for i, le := range bounds {
		hist.Buckets[i].Le = formatLe(le)
	}
	hist.Buckets[len(bounds)].Le = "+Inf"
	emergency := map[string]bool{}
	for _, c := range s.Clusters {
		emergency[c.ID] = c.Emergency
	}
	top := make([]TopApp, 0, len(s.Apps))
	active := 0
	for _, a := range s.Apps {
		var w point
		if sr := h.apps[a.ID]; sr != nil {
			w = sr.within("1h")
		}
		if a.Enabled && w.req > 0 {
			active++
		}
		if w.req > 0 {
			avg := float64(w.cost) / float64(w.req)
			i := sort.SearchFloat64s(bounds, avg)
			hist.Buckets[i].Count += w.req
		}
		top = append(top, TopApp{AppID: a.ID, Requests1h: w.req, Cost1h: w.cost, BytesIn1h: w.bin,
			BytesOut1h: w.bout, BytesInRate: a.BytesInRate, BytesOutRate: a.BytesOutRate,
			Connections: a.ConnCurrent, Status: appStatus(a, emergency[a.Cluster])})
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].Cost1h != top[j].Cost1h {
			return top[i].Cost1h > top[j].Cost1h
		}
		return top[i].AppID < top[j].AppID
	})
	return hist, top[:min(topN, len(top))], active
}

// appStatus: critical when the app is nearly out of tokens while in use, or blocked by an
// emergency (P3); warning when low, in debt or drifting.
func appStatus(a AppState, emergency bool) string {
	ratio := 1.0
	if a.Burst > 0 {
		ratio = a.L2Tokens / float64(a.Burst)
	}
	switch {
	case emergency && a.Priority >= 3, ratio < 0.05 && a.RequestRate > 0:
		return "critical"
	case ratio < 0.2 && a.RequestRate > 0, a.Debt > 0, float64(a.DriftPPM)/1e6 > DriftAlert:
		return "warning"
	}
	return "normal"
}

func redisHealth(s *Snapshot, pings []time.Duration, down bool) RedisHealth {
	r := RedisHealth{Status: "healthy", ConnectionPoolUsage: clamp01(s.PoolUsage)}
	if len(pings) > 0 {
		sorted := append([]time.Duration(nil), pings...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		idx := int(math.Ceil(0.99*float64(len(sorted)))) - 1
		r.LatencyP99 = float64(sorted[max(idx, 0)].Microseconds()) / 1000
	}
	degraded := r.LatencyP99 > 10
	for _, n := range s.Nodes {
		if n.Stale {
			continue
		}
		if n.RedisLatencyMS != nil {
			r.NodeLatencyMax = math.Max(r.NodeLatencyMax, *n.RedisLatencyMS)
		}
		if n.DegradationLevel != nil && *n.DegradationLevel > 0 {
			degraded = true
		}
	}
	switch {
	case down:
		r.Status = "down"
	case degraded || r.NodeLatencyMax > 10:
		r.Status = "degraded"
	}
	return r
}

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }

func formatLe(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
