package live

import (
	"sort"
	"strings"
	"time"
)

// The alert kinds of docs/rules-contract.md §9 that read the node reports of §6 and the
// connection statistics; thresholds are the constants and AlertSettings of alerts.go.

// GlobalResource is the resource of the alerts about all apps together.
const GlobalResource = "*"

// trafficAlerts: block_rate_high (per app and for all apps) and traffic_spike (per app).
func trafficAlerts(s *Snapshot, tr *traffic, set AlertSettings) []Alert {
	if tr == nil {
		return nil
	}
	now := s.At.Unix()
	var out []Alert
	blockRate := func(resource, what string, t *track) {
		d, _ := t.over(now, BlockRateWindow)
		if d.req < BlockRateMinRequests {
			return
		}
		r := min(float64(d.blk)/float64(d.req), 1)
		if r > BlockRateAlert {
			out = append(out, cond("block_rate_high", resource, "warning",
				"%s: %.0f%% of %d requests blocked over the last %s (alert above %.0f%%)",
				what, r*100, d.req, BlockRateWindow, BlockRateAlert*100))
		}
	}
	blockRate(GlobalResource, "all apps", tr.total)
	ids := make([]string, 0, len(tr.apps))
	for id := range tr.apps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		t := tr.apps[id]
		blockRate(id, "app "+id, t)
		if rate, base, ok := spike(t, now, set); ok {
			out = append(out, cond("traffic_spike", id, "warning",
				"app %s: %.1f requests/s over the last %s, %.1f× its baseline of %.1f/s",
				id, rate, set.SpikeWindow, rate/base, base))
		}
	}
	return out
}

// spike returns the request rate over the last set.SpikeWindow and the baseline rate over the
// set.SpikeBaseline before it; ok when the rate is a spike (docs/rules-contract.md §9).
func spike(t *track, now int64, set AlertSettings) (rate, base float64, ok bool) {
	w, span := t.over(now, set.SpikeWindow)
	if span <= 0 {
		return 0, 0, false
	}
	rate = float64(w.req) / float64(span)
	end, ok1 := t.at(now - int64(set.SpikeWindow/time.Second))
	start, ok2 := t.at(end.t - int64(set.SpikeBaseline/time.Second))
	bspan := end.t - start.t
	if !ok1 || !ok2 || bspan < int64(set.SpikeMinHistory/time.Second) {
		return rate, 0, false
	}
	base = float64(end.c.req-start.c.req) / float64(bspan)
	return rate, base, base >= SpikeMinBaseline && rate >= SpikeFactor*base
}

// nodeAlerts: circuit_open (per breaker over all nodes), connections_leaked and
// cleanup_stalled (per fresh node).
func nodeAlerts(s *Snapshot, tr *traffic, set AlertSettings) []Alert {
	var out []Alert
	open := map[string][]string{} // breaker key -> "node (state)"
	for _, n := range s.Nodes {
		if n.Stale {
			continue
		}
		for key, b := range n.Breakers {
			if b.State == "open" || b.State == "half_open" { // tripped and not yet closed
				open[key] = append(open[key], n.NodeID+" ("+b.State+")")
			}
		}
		if tr != nil {
			if t := tr.leaks[n.NodeID]; t != nil {
				if d, _ := t.over(s.At.Unix(), LeakWindow); d.req > 0 {
					out = append(out, cond("connections_leaked", n.NodeID, "warning",
						"gateway %s force-released %d leaked connection slots in the last %s",
						n.NodeID, d.req, LeakWindow))
				}
			}
		}
		if r := n.ConnCleanupLastRun; r != nil && *r > 0 && s.At.Sub(time.Unix(*r, 0)) > set.CleanupStalled {
			out = append(out, cond("cleanup_stalled", n.NodeID, "warning",
				"gateway %s: connection cleanup last ran at %s (more than %s ago)",
				n.NodeID, time.Unix(*r, 0).UTC().Format(time.RFC3339), set.CleanupStalled))
		}
	}
	keys := make([]string, 0, len(open))
	for k := range open {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		nodes := open[k]
		sort.Strings(nodes)
		out = append(out, cond("circuit_open", k, "critical", "circuit breaker %s is open on %s",
			k, strings.Join(nodes, ", ")))
	}
	return out
}

// connectionAlerts: connections_high, per app and per cluster, on the busiest fresh node
// (the gateways enforce the limits per node).
func connectionAlerts(s *Snapshot) []Alert {
	var out []Alert
	high := func(cur, limit int64) bool { return cur > 0 && float64(cur) >= ConnHighRatio*float64(limit) }
	for _, a := range s.Apps {
		limit := a.ConnLimit()
		if high(a.ConnNodeCurrent, limit) {
			out = append(out, cond("connections_high", a.ID, "warning",
				"app %s: %d of %d connections in flight on gateway %s (alert at %.0f%%)",
				a.ID, a.ConnNodeCurrent, limit, a.ConnNode, ConnHighRatio*100))
		}
	}
	for _, c := range s.Clusters {
		limit := c.ConnLimit()
		if high(c.ConnNodeCurrent, limit) {
			out = append(out, cond("connections_high", "cluster:"+c.ID, "warning",
				"cluster %s: %d of %d connections in flight on gateway %s (alert at %.0f%%)",
				c.ID, c.ConnNodeCurrent, limit, c.ConnNode, ConnHighRatio*100))
		}
	}
	return out
}

// ConnLimit is the app's connection limit per node: its max_connections, else the gateway's
// default.
func (a AppState) ConnLimit() int64 {
	if a.ConnMax > 0 {
		return a.ConnMax
	}
	return DefaultAppConns
}

// ConnLimit is the cluster's connection limit per node: its max_connections, else the
// gateway's default.
func (c ClusterState) ConnLimit() int64 {
	if c.ConnMax > 0 {
		return c.ConnMax
	}
	return DefaultClusterConns
}
