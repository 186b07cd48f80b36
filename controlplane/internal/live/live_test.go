package live

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tollgate/internal/testutil"
)

// snap is a snapshot of cluster c1 and apps, whose totals are the cluster's.
func snap(at time.Time, apps ...AppState) *Snapshot {
	c := ClusterState{ID: "c1", Capacity: 1000, ReservedRatio: 0.1, Available: 500}
	for _, a := range apps {
		c.Requests, c.Cost = c.Requests+a.Requests, c.Cost+a.Cost
	}
	return &Snapshot{At: at, Apps: apps, TotalApps: int64(len(apps)), Clusters: []ClusterState{c}}
}

func TestHistoryRatesAndHourTotals(t *testing.T) {
	h := newHistory()
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i <= 120; i++ { // 10 minutes every 5 s: 10 requests/s, cost 3 each
		s := snap(t0.Add(time.Duration(i)*5*time.Second),
			AppState{ID: "a", Cluster: "c1", Requests: int64(i * 50), Cost: int64(i * 150)})
		h.observe(s)
		if i > 0 && (s.Apps[0].RequestRate != 10 || s.Apps[0].CostRate != 30 || s.Clusters[0].RequestRate != 10) {
			t.Fatalf("step %d: rates %+v %+v", i, s.Apps[0], s.Clusters[0])
		}
	}
	if w := h.apps["a"].within("1h"); w.req != 6000 || w.cost != 18000 {
		t.Fatalf("last hour = %+v, want 6000 requests, 18000 cost", w)
	}
	req, _ := h.total.rates("1h")
	if len(req) < 10 || req[len(req)-1].Value != 10 {
		t.Fatalf("1h series %v", req)
	}
	// a counter that goes back (stats reset) never counts negative
	h.observe(snap(t0.Add(605*time.Second), AppState{ID: "a", Cluster: "c1", Requests: 10, Cost: 30}))
	if w := h.apps["a"].within("1h"); w.req != 6010 {
		t.Fatalf("after a reset = %+v, want 6010", w)
	}
	h.observe(snap(t0.Add(610 * time.Second)))
	if len(h.apps) != 0 {
		t.Fatal("the history of a removed app stayed")
	}
}

func TestEvaluateAlerts(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	lvl3 := 3
	s := &Snapshot{At: now, RedisLatency: 150 * time.Millisecond,
		Clusters: []ClusterState{{ID: "c1", Capacity: 1000, ReservedRatio: 0.1, Available: 100, Emergency: true,
			EmergencyUntil: now.Unix() + 60, EmergencyReason: "incident"}},
		Nodes: []Node{{NodeID: "n1", DegradationLevel: &lvl3}, {NodeID: "n2", Stale: true}},
		Apps:  []AppState{{ID: "a", DriftPPM: 60000, ConnRejected: 5}}}
	prev := &Snapshot{Apps: []AppState{{ID: "a", ConnRejected: 2}}}
	got := map[string]string{}
	for _, a := range evaluate(s, prev, nil, AlertSettings{}.withDefaults()) {
		got[a.ID] = a.Severity
	}
	want := map[string]string{"emergency-c1": "critical", "l1_exhausted-c1": "warning", "node_degraded-n1": "critical",
		"node_stale-n2": "warning", "drift_high-a": "warning", "connections_rejected-a": "info",
		"redis_slow-controlplane": "warning"}
	for id, sev := range want {
		if got[id] != sev {
			t.Errorf("alert %s = %q, want %q (all: %v)", id, got[id], sev, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("alerts %v, want %v", got, want)
	}
}

func TestAlertLifeCycle(t *testing.T) {
	a := alertStore{rdb: testutil.StartRedis(t).Client()}
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	c := cond("node_stale", "n1", "warning", "gone")
	if ch, err := a.sync(ctx, now, []Alert{c}); err != nil || len(ch) != 1 || !ch[0].Active {
		t.Fatalf("raise = %+v %v", ch, err)
	}
	if _, err := a.ack(ctx, c.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	if ch, _ := a.sync(ctx, now.Add(time.Second), []Alert{c}); len(ch) != 0 {
		t.Fatalf("an unchanged alert was raised again: %+v", ch)
	}
	ch, _ := a.sync(ctx, now.Add(2*time.Second), nil)
	if len(ch) != 1 || ch[0].Active || ch[0].ResolvedAt != now.Unix()+2 || !ch[0].Acknowledged {
		t.Fatalf("resolve = %+v", ch)
	}
	if l, _ := a.list(ctx, true); len(l) != 0 {
		t.Fatalf("active after resolve: %+v", l)
	}
	_, _ = a.sync(ctx, now.Add(25*time.Hour), nil)
	if l, _ := a.list(ctx, false); len(l) != 0 {
		t.Fatalf("resolved alert kept past the retention: %+v", l)
	}
	if _, err := a.ack(ctx, "nope", "ops"); err != ErrAlertNotFound {
		t.Fatalf("ack unknown = %v", err)
	}
}

func TestDashboardTopAppsAndStatus(t *testing.T) {
	h := newHistory()
	t0 := time.Unix(1_800_000_000, 0)
	apps := func(k int64) []AppState {
		return []AppState{
			{ID: "big", Cluster: "c1", Enabled: true, Burst: 100, L2Tokens: 2, Requests: 100 * k, Cost: 1000 * k},
			{ID: "small", Cluster: "c1", Enabled: true, Burst: 100, L2Tokens: 90, Requests: 10 * k, Cost: 10 * k},
			{ID: "idle", Cluster: "c1", Enabled: true, Burst: 100, L2Tokens: 100, Debt: 5},
		}
	}
	h.observe(snap(t0, apps(0)...))
	s := snap(t0.Add(10*time.Second), apps(1)...)
	h.observe(s)
	d := buildDashboard(s, h, "1h", nil, []time.Duration{time.Millisecond}, false)
	if d.TopApps[0].AppID != "big" || d.TopApps[0].Status != "critical" || d.TopApps[1].Status != "normal" ||
		d.TopApps[2].Status != "warning" {
		t.Fatalf("top apps %+v", d.TopApps)
	}
	if d.Overview.TotalRequests1h != 110 || d.Overview.ActiveApps != 2 || d.Overview.L1AvailableRatio != 0.5 {
		t.Fatalf("overview %+v", d.Overview)
	}
	// big: 10 per request -> bucket le=10; small: 1 -> le=1
	if d.Metrics.CostDistribution.Buckets[0].Count != 10 || d.Metrics.CostDistribution.Buckets[3].Count != 100 {
		t.Fatalf("cost distribution %+v", d.Metrics.CostDistribution)
	}
	if d.RedisHealth.Status != "healthy" || d.RedisHealth.LatencyP99 != 1 {
		t.Fatalf("redis health %+v", d.RedisHealth)
	}
}

// The history holds series only for apps with traffic, at most max of them, and drops an app's
// series once it has been idle for the longest range: 20,000 idle apps cost no series.
func TestHistoryKeepsSeriesOnlyForAppsWithTraffic(t *testing.T) {
	h := newHistory()
	h.max = 3
	t0 := time.Unix(1_800_000_000, 0)
	apps := func(k int64, active int) []AppState {
		out := make([]AppState, 20000)
		for i := range out {
			out[i] = AppState{ID: fmt.Sprintf("app-%05d", i), Cluster: "c1"}
			if i < active {
				out[i].Requests, out[i].Cost = k*10, k*20
			}
		}
		return out
	}
	h.observe(snap(t0, apps(0, 0)...))
	h.observe(snap(t0.Add(5*time.Second), apps(1, 2)...))
	if len(h.apps) != 2 {
		t.Fatalf("%d series for 2 apps with traffic", len(h.apps))
	}
	if w := h.apps["app-00001"].within("1h"); w.req != 10 || w.cost != 20 {
		t.Fatalf("the first traffic of an app is lost: %+v", w)
	}
	h.observe(snap(t0.Add(10*time.Second), apps(2, 5)...))
	if len(h.apps) != 3 || h.skipped != 2 {
		t.Fatalf("%d series (%d skipped) at a cap of 3", len(h.apps), h.skipped)
	}
	// the same counters for longer than the longest range: the series go
	h.observe(snap(t0.Add(10*time.Second+8*24*time.Hour), apps(2, 5)...))
	if len(h.apps) != 0 {
		t.Fatalf("%d series of apps idle for 8 days", len(h.apps))
	}
}
