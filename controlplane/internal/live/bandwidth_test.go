package live

import (
	"fmt"
	"math"
	"testing"
	"time"

	"tollgate/internal/keys"
)

// report is one node's entry in the registry as the collector parses it: requests_total and
// per app {requests, bytes_in, bytes_out}, taken at `at` (Unix s).
func report(t *testing.T, node string, at float64, req int64, apps map[string][2]int64) Node {
	t.Helper()
	doc := fmt.Sprintf(`{"node_id":%q,"last_seen":%d,"reported_at":%.3f,"requests_total":%d,"blocked_total":0,"apps":{`,
		node, int64(at), at, req)
	first := true
	for id, b := range apps {
		if !first {
			doc += ","
		}
		first = false
		doc += fmt.Sprintf(`%q:{"requests":%d,"blocked":0,"bytes_in":%d,"bytes_out":%d}`, id, req, b[0], b[1])
	}
	doc += "}}"
	n, ok := parseNode(node, doc, time.Unix(int64(at), 0), 1, keys.ValidID)
	if !ok {
		t.Fatalf("report %s dropped", doc)
	}
	return n
}

// view is a snapshot at `at` of apps a and b (cluster c1) and c (cluster c2) and nodes.
func view(at float64, nodes ...Node) *Snapshot {
	return &Snapshot{At: time.Unix(0, int64(at*1e9)), Nodes: nodes,
		Apps:     []AppState{{ID: "a", Cluster: "c1"}, {ID: "b", Cluster: "c1"}, {ID: "c", Cluster: "c2"}},
		Clusters: []ClusterState{{ID: "c1"}, {ID: "c2"}}}
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-6*math.Max(1, math.Abs(want)) }

const mib = 1 << 20

// Two nodes report cumulative counters every 5 s; the app's bytes/s is the sum of each node's
// growth over its own report interval, the cluster's the sum of its apps'; totals count every
// growth once; the first report of a node is its baseline.
func TestBandwidthSumsNodesOverTheirReportIntervals(t *testing.T) {
	b := newBandwidth()
	t0 := 1_800_000_000.0
	// baselines: bytes moved before this control plane saw the nodes are not new traffic
	s := view(t0, report(t, "n1", t0, 100, map[string][2]int64{"a": {50 * mib, 70 * mib}}),
		report(t, "n2", t0+2.5, 100, map[string][2]int64{"a": {9 * mib, 0}}))
	b.observe(s)
	if s.Apps[0].BytesInRate != 0 || s.Apps[0].BytesOutRate != 0 || s.BytesIn != 0 {
		t.Fatalf("first reports counted: %+v, total %d", s.Apps[0], s.BytesIn)
	}
	// n1: a uploads 1 MiB/s and downloads 4 MiB/s, b downloads 512 KiB/s, c uploads 10 KiB/s;
	// n2 (whose reports are 2.5 s later and 4.75 s apart): a downloads 2 MiB/s
	s = view(t0+5,
		report(t, "n1", t0+5, 200, map[string][2]int64{"a": {55 * mib, 90 * mib}, "b": {0, 2560 << 10}, "c": {50 << 10, 0}}),
		report(t, "n2", t0+7.25, 200, map[string][2]int64{"a": {9 * mib, 9.5 * mib}}))
	b.observe(s)
	want := map[string][2]float64{"a": {mib, 6 * mib}, "b": {0, 512 << 10}, "c": {10 << 10, 0}}
	for _, a := range s.Apps {
		if w := want[a.ID]; !near(a.BytesInRate, w[0]) || !near(a.BytesOutRate, w[1]) {
			t.Errorf("app %s: %.0f in, %.0f out B/s, want %.0f, %.0f", a.ID, a.BytesInRate, a.BytesOutRate, w[0], w[1])
		}
	}
	if c := s.Clusters[0]; !near(c.BytesInRate, mib) || !near(c.BytesOutRate, 6.5*mib) {
		t.Errorf("cluster c1: %.0f in, %.0f out, want the sum of a and b", c.BytesInRate, c.BytesOutRate)
	}
	if c := s.Clusters[1]; !near(c.BytesInRate, 10<<10) || c.BytesOutRate != 0 {
		t.Errorf("cluster c2: %.0f in, %.0f out", c.BytesInRate, c.BytesOutRate)
	}
	if a := s.Apps[0]; a.BytesIn != 5*mib || a.BytesOut != 20*mib+9.5*mib {
		t.Errorf("a's totals %d in, %d out", a.BytesIn, a.BytesOut)
	}
	if s.BytesIn != 5*mib+50<<10 || s.BytesOut != 29.5*mib+2560<<10 {
		t.Errorf("view totals %d in, %d out", s.BytesIn, s.BytesOut)
	}
	// a collection between two reports (the console's 1 s view, 5 s reports): the same
	// reports, the same rates, nothing counted twice
	again := view(t0+6, s.Nodes...)
	b.observe(again)
	if !near(again.Apps[0].BytesOutRate, 6*mib) || again.BytesOut != s.BytesOut {
		t.Errorf("unchanged reports: rate %.0f, total %d (was %d)", again.Apps[0].BytesOutRate, again.BytesOut, s.BytesOut)
	}
}

// A node that restarts counts from zero; a stale node counts for nothing until it reports
// again, and then the bytes of its silence count once, over its silence.
func TestBandwidthRestartAndStaleNode(t *testing.T) {
	b := newBandwidth()
	t0 := 1_800_000_000.0
	b.observe(view(t0, report(t, "n1", t0, 1000, map[string][2]int64{"a": {0, 1 * mib}})))
	b.observe(view(t0+5, report(t, "n1", t0+5, 1100, map[string][2]int64{"a": {0, 2 * mib}})))
	// restarted (requests_total went back): its 3 MiB since are all new, though above the
	// counter it had before
	s := view(t0+10, report(t, "n1", t0+10, 5, map[string][2]int64{"a": {0, 3 * mib}}))
	b.observe(s)
	if a := s.Apps[0]; a.BytesOut != 4*mib || !near(a.BytesOutRate, 3*mib/5.0) {
		t.Fatalf("after a restart: total %d, rate %.0f; want 4 MiB, 3 MiB / 5 s", a.BytesOut, a.BytesOutRate)
	}
	stale := report(t, "n1", t0+10, 5, map[string][2]int64{"a": {0, 3 * mib}})
	stale.Stale = true
	s = view(t0+45, stale)
	b.observe(s)
	if a := s.Apps[0]; a.BytesOutRate != 0 {
		t.Fatalf("a stale node's rate counted: %.0f", a.BytesOutRate)
	}
	s = view(t0+50, report(t, "n1", t0+50, 9, map[string][2]int64{"a": {0, 43 * mib}}))
	b.observe(s)
	if a := s.Apps[0]; a.BytesOut != 44*mib || !near(a.BytesOutRate, mib) {
		t.Fatalf("back from stale: total %d, rate %.0f; want 44 MiB, 40 MiB / 40 s", a.BytesOut, a.BytesOutRate)
	}
	// a node the registry no longer lists is forgotten: its next report is a baseline
	b.observe(view(t0 + 55))
	s = view(t0+60, report(t, "n1", t0+60, 10, map[string][2]int64{"a": {0, 50 * mib}}))
	b.observe(s)
	if a := s.Apps[0]; a.BytesOut != 44*mib || a.BytesOutRate != 0 {
		t.Fatalf("a node back in the registry counted its past: total %d, rate %.0f", a.BytesOut, a.BytesOutRate)
	}
}

// The history keeps the byte totals: the app's bytes of the last hour, its bytes/s series and
// the dashboard's, from the app's first bytes (an app new to the view counts from zero).
func TestHistoryBandwidth(t *testing.T) {
	h := newHistory()
	b := newBandwidth()
	t0 := 1_800_000_000.0
	step := func(i int, apps map[string][2]int64) *Snapshot {
		at := t0 + float64(5*i)
		s := &Snapshot{At: time.Unix(int64(at), 0), Nodes: []Node{report(t, "n1", at, int64(10*i), apps)},
			Clusters: []ClusterState{{ID: "c1"}}}
		if i > 0 {
			s.Apps = []AppState{{ID: "a", Cluster: "c1", Requests: int64(10 * i)}}
		}
		b.observe(s)
		h.observe(s)
		return s
	}
	step(0, nil) // the node's baseline; a is not active yet
	// a uploads 64 KiB and downloads 1 MiB every 5 s for 10 minutes
	for i := 1; i <= 120; i++ {
		s := step(i, map[string][2]int64{"a": {int64(i) * 64 << 10, int64(i) * mib}})
		if a := s.Apps[0]; !near(a.BytesInRate, 64<<10/5.0) || !near(a.BytesOutRate, mib/5.0) {
			t.Fatalf("step %d: %+v", i, a)
		}
	}
	w := h.apps["a"].within("1h")
	if w.bin != 120*64<<10 || w.bout != 120*mib {
		t.Fatalf("last hour: %d in, %d out; want every byte (%d, %d)", w.bin, w.bout, 120*64<<10, 120*mib)
	}
	in, out := h.apps["a"].byteRates("1h")
	if len(out) < 10 || !near(out[len(out)-1].Value, mib/5.0) || !near(in[len(in)-1].Value, 64<<10/5.0) {
		t.Fatalf("1h series: in %v, out %v", in, out)
	}
	tin, tout := h.total.byteRates("1h")
	if len(tout) < 10 || !near(tout[len(tout)-1].Value, mib/5.0) || !near(tin[len(tin)-1].Value, 64<<10/5.0) {
		t.Fatalf("dashboard series: in %v, out %v", tin, tout)
	}
	d := buildDashboard(step(121, map[string][2]int64{"a": {121 * 64 << 10, 121 * mib}}), h, "1h", nil, nil, false)
	if d.Overview.TotalBytesOut1h != 121*mib || d.Overview.TotalBytesIn1h != 121*64<<10 {
		t.Errorf("overview: %+v", d.Overview)
	}
	if len(d.TopApps) != 1 || d.TopApps[0].BytesOut1h != 121*mib || !near(d.TopApps[0].BytesOutRate, mib/5.0) {
		t.Errorf("top apps: %+v", d.TopApps)
	}
}

// The report's byte fields: absent reads 0 (an older gateway, or 0 left out), damaged reads 0
// without costing the app its other counters; reported_at dates them.
func TestParseNodeBytes(t *testing.T) {
	doc := `{"node_id":"n1","last_seen":1800000000,"reported_at":1800000000.25,"apps":{` +
		`"a":{"requests":3,"blocked":1,"bytes_in":4096,"bytes_out":1e9},"b":{"requests":2,"blocked":0},` +
		`"c":{"requests":5,"blocked":0,"bytes_in":-1,"bytes_out":"x"}}}`
	n, ok := parseNode("n1", doc, time.Unix(1_800_000_000, 0), 1, keys.ValidID)
	if !ok {
		t.Fatal("dropped")
	}
	want := map[string]NodeAppCounts{"a": {Requests: 3, Blocked: 1, BytesIn: 4096, BytesOut: 1e9},
		"b": {Requests: 2}, "c": {Requests: 5}}
	for id, w := range want {
		if n.Apps[id] != w {
			t.Errorf("app %s: %+v, want %+v", id, n.Apps[id], w)
		}
	}
	if n.ReportedAt != 1800000000.25 {
		t.Errorf("reported_at %v", n.ReportedAt)
	}
}
