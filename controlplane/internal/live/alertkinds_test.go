package live

import (
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/testutil"
)

// alertFixture: a real Redis with cluster c1 (apps a1, a2), the service on a fake clock, and
// helpers that write what gateways write (node reports, connection statistics).
type alertFixture struct {
	*testutil.Fixture
	svc  *Service
	msgs <-chan []byte
}

func newAlertFixture(t *testing.T) *alertFixture {
	t.Helper()
	f := &alertFixture{Fixture: testutil.NewFixture(t)}
	f.Cluster("c1", 100000)
	f.App("c1", "a1", 100, 1000, 1, 0)
	f.App("c1", "a2", 100, 1000, 1, 0)
	f.svc = New(Options{Redis: f.RDB, Catalog: f.Store, L1: f.Ledger, Clock: f.Clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	msgs, cancel := f.svc.Subscribe()
	t.Cleanup(cancel)
	f.msgs = msgs
	return f
}

// report writes node's registry entry, last seen now, with the given §6 fields.
func (f *alertFixture) report(node string, fields map[string]any) {
	f.T.Helper()
	doc := map[string]any{"node_id": node, "last_seen": f.Clock.Now().Unix(), "config_version": 1,
		"degradation_level": 0}
	for k, v := range fields {
		doc[k] = v
	}
	b, _ := json.Marshal(doc)
	if err := f.RDB.HSet(f.Ctx, keys.Gateways(), node, b).Err(); err != nil {
		f.T.Fatal(err)
	}
}

// counts is a node report of apps' cumulative requests and blocked requests (a1, a2).
func counts(a1req, a1blk, a2req, a2blk int64) map[string]any {
	return map[string]any{"requests_total": a1req + a2req, "blocked_total": a1blk + a2blk,
		"apps": map[string]any{"a1": map[string]int64{"requests": a1req, "blocked": a1blk},
			"a2": map[string]int64{"requests": a2req, "blocked": a2blk}}}
}

// step advances the clock by d, refreshes, and returns the active alerts by id.
func (f *alertFixture) step(d time.Duration) map[string]Alert {
	f.T.Helper()
	f.Clock.Advance(d)
	if err := f.svc.Refresh(f.Ctx); err != nil {
		f.T.Fatal(err)
	}
	l, err := f.svc.Alerts(f.Ctx, true)
	if err != nil {
		f.T.Fatal(err)
	}
	out := map[string]Alert{}
	for _, a := range l {
		out[a.ID] = a
	}
	return out
}

// pushed drains the WebSocket hub and returns the alert messages ("<id> active|resolved").
func (f *alertFixture) pushed() []string {
	var out []string
	for {
		select {
		case b := <-f.msgs:
			var m struct {
				Type string `json:"type"`
				Data Alert  `json:"data"`
			}
			if json.Unmarshal(b, &m) == nil && m.Type == "alert" {
				st := "resolved"
				if m.Data.Active {
					st = "active"
				}
				out = append(out, m.Data.ID+" "+st)
			}
		default:
			return out
		}
	}
}

func TestParseNodeReportIsDefensive(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	doc := `{"node_id":"n1","last_seen":1800000000,"requests_total":120,"blocked_total":"x",
		"apps":{"a1":{"requests":100,"blocked":20},"bad id":{"requests":1,"blocked":0},"a2":{"requests":-1,"blocked":0},
		        "a3":{"requests":5},"a4":"nope"},
		"breakers":{"demo":{"state":"open","failures":7,"requests":9,"opened_at":1799999990,"retry_at":1800000020},
		            "demo/a1":{"state":"half_open"},"x/y/z":{"state":"open"},"odd":{"state":"ajar"},"s3":{"state":5}},
		"conn_leaked_total":1e300,"conn_cleanup_last_run":1799999999}`
	n, ok := parseNode("n1", doc, now, 1, keys.ValidID)
	if !ok {
		t.Fatal("a node with damaged §6 fields was dropped")
	}
	if n.RequestsTotal == nil || *n.RequestsTotal != 120 || n.BlockedTotal != nil {
		t.Errorf("totals %v %v, want 120 and absent", n.RequestsTotal, n.BlockedTotal)
	}
	if len(n.Apps) != 1 || n.Apps["a1"] != (NodeAppCounts{Requests: 100, Blocked: 20}) {
		t.Errorf("apps %+v, want only a1", n.Apps)
	}
	want := map[string]BreakerState{"demo": {State: "open", Failures: 7, Requests: 9, OpenedAt: 1799999990, RetryAt: 1800000020},
		"demo/a1": {State: "half_open"}}
	if len(n.Breakers) != len(want) || n.Breakers["demo"] != want["demo"] || n.Breakers["demo/a1"] != want["demo/a1"] {
		t.Errorf("breakers %+v, want %+v", n.Breakers, want)
	}
	if n.ConnLeakedTotal != nil || n.ConnCleanupLastRun == nil || *n.ConnCleanupLastRun != 1799999999 {
		t.Errorf("leaked %v (want absent: out of range), cleanup %v", n.ConnLeakedTotal, n.ConnCleanupLastRun)
	}
	// an older gateway: no §6 fields at all
	n, ok = parseNode("n2", `{"node_id":"n2","last_seen":1800000000,"apps":[],"breakers":null}`, now, 1, keys.ValidID)
	if !ok || n.RequestsTotal != nil || n.Apps != nil || n.Breakers != nil || n.ConnCleanupLastRun != nil {
		t.Errorf("old report %+v", n)
	}
}

// block_rate_high per app and for all apps over a 5-minute window of counter deltas: the
// totals a node had before the control plane saw it are no new traffic, and the alert resolves
// when the window's rate falls.
func TestBlockRateHighRaisedAndResolved(t *testing.T) {
	f := newAlertFixture(t)
	f.report("n1", counts(100000, 90000, 500, 0)) // history from before: a baseline only
	if got := f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts from a node's first report: %v", got)
	}
	f.report("n1", counts(100080, 90010, 560, 0)) // a1: 80 requests, 10 blocked: under 100 requests
	if got := f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts below %d requests: %v", BlockRateMinRequests, got)
	}
	f.report("n1", counts(100200, 90030, 600, 0)) // a1: 200, 30 blocked (15 %); all: 300, 30 (10 %, not above)
	got := f.step(5 * time.Second)
	a, ok := got["block_rate_high-a1"]
	if !ok || a.Severity != "warning" || !strings.Contains(a.Message, "15% of 200 requests") {
		t.Fatalf("block_rate_high-a1 = %+v (all: %v)", a, got)
	}
	if _, ok := got[alertID("block_rate_high", GlobalResource)]; ok || len(got) != 1 {
		t.Fatalf("alerts %v, want only a1 (10%% overall is not above 10%%)", got)
	}
	f.report("n1", counts(100200, 90030, 900, 40)) // all: 600 requests, 70 blocked; a2: 400, 40 (10 %)
	got = f.step(5 * time.Second)
	g, ok := got[alertID("block_rate_high", GlobalResource)]
	if !ok || g.Resource != GlobalResource || len(got) != 2 {
		t.Fatalf("global block rate: %v", got)
	}
	if p := f.pushed(); strings.Join(p, ",") != "block_rate_high-a1 active,"+g.ID+" active" {
		t.Fatalf("pushed %v, want each alert once", p)
	}
	// the condition holds on: one alert, raised once, nothing pushed again
	f.report("n1", counts(100210, 90032, 900, 40))
	if got = f.step(5 * time.Second); got["block_rate_high-a1"].Timestamp != a.Timestamp || len(f.pushed()) != 0 {
		t.Fatalf("a holding alert changed: %+v", got["block_rate_high-a1"])
	}
	// admitted traffic dilutes a1 (410 requests, 32 blocked) and all apps (810, 72) under 10 %
	f.report("n1", counts(100410, 90032, 900, 40))
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts under 10%%: %v", got)
	}
	if p := f.pushed(); len(p) != 2 || !strings.HasSuffix(p[0], " resolved") || !strings.HasSuffix(p[1], " resolved") {
		t.Fatalf("pushed %v, want two resolutions", p)
	}
	// a2 blocks heavily, then the traffic stops: the window empties after 5 minutes
	f.report("n1", counts(100410, 90032, 1100, 240))
	if got = f.step(5 * time.Second); len(got) != 2 {
		t.Fatalf("alerts %v, want a2 and global", got)
	}
	for i := 0; i < 59; i++ {
		f.report("n1", counts(100410, 90032, 1100, 240))
		if got = f.step(5 * time.Second); len(got) != 2 {
			t.Fatalf("%d s after: alerts %v, want a2 and global", 5*(i+1), got)
		}
	}
	f.report("n1", counts(100410, 90032, 1100, 240))
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts after 5 quiet minutes: %v", got)
	}
}

// A node that restarts reports its counters from zero: traffic since the restart counts,
// nothing goes negative, and the drop is not read as blocked traffic.
func TestNodeRestartIsNoFalseBlockRate(t *testing.T) {
	f := newAlertFixture(t)
	f.report("n1", counts(5000, 0, 0, 0))
	f.report("n2", counts(7000, 0, 0, 0))
	f.step(5 * time.Second)
	f.report("n1", counts(6000, 10, 0, 0)) // +1000, +10
	f.report("n2", counts(7100, 0, 0, 0))  // +100
	f.step(5 * time.Second)
	f.report("n1", counts(300, 20, 0, 0)) // restarted: +300, +20 (not +10: all counters start at 0)
	f.report("n2", counts(7200, 0, 0, 0)) // +100
	got := f.step(5 * time.Second)
	if len(got) != 0 {
		t.Fatalf("alerts after a restart: %v", got)
	}
	if acc := f.svc.tr.apps["a1"].acc; acc != (tally{1500, 30}) {
		t.Fatalf("a1 totals %+v, want 1500 requests, 30 blocked", acc)
	}
	if acc := f.svc.tr.total.acc; acc != (tally{1500, 30}) {
		t.Fatalf("all-app totals %+v, want 1500, 30", acc)
	}
	// after the restart the node's counters grow from their new values
	f.report("n1", counts(400, 120, 0, 0)) // +100, +100: 1600 requests, 130 blocked (8 %)
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts: %v", got)
	}
	f.report("n1", counts(500, 220, 0, 0)) // 1700, 230 (13.5 %)
	if got = f.step(5 * time.Second); len(got) != 2 {
		t.Fatalf("alerts %v, want a1 and global", got)
	}
}

// traffic_spike: the last minute's rate against the 30 minutes before it.
func TestSpikeBaselineMath(t *testing.T) {
	feed := func(baseRate, spikeRate int64) *track {
		tr := &track{}
		t0 := int64(1_800_000_000)
		tr.add(t0, tally{})
		i := int64(1)
		for ; i <= 40*12; i++ { // 40 minutes of 5 s steps at baseRate
			tr.add(t0+i*5, tally{req: 5 * baseRate})
		}
		for j := int64(1); j <= 12; j++ { // one minute at spikeRate
			tr.add(t0+(i+j-1)*5, tally{req: 5 * spikeRate})
		}
		return tr
	}
	now := int64(1_800_000_000) + 41*60
	cases := []struct {
		base, spike int64
		want        bool
	}{{2, 10, true}, {2, 9, false}, {1, 5, true}, {0, 50, false}, {10, 10, false}}
	for _, c := range cases {
		tr := feed(c.base, c.spike)
		rate, base, ok := spike(tr, now, AlertSettings{}.withDefaults())
		if ok != c.want || math.Abs(rate-float64(c.spike)) > 1e-9 || math.Abs(base-float64(c.base)) > 1e-9 {
			t.Errorf("base %d/s, last minute %d/s: spike = %.2f, %.2f, %v; want %v", c.base, c.spike, rate, base, ok, c.want)
		}
	}
	// the trace keeps only what the windows need
	if tr := feed(1, 1); len(tr.pts) > int(trafficKeep/trafficStep)+2 {
		t.Errorf("%d points kept, want at most %d", len(tr.pts), int(trafficKeep/trafficStep)+2)
	}
	// less than SpikeMinSpan of history: no baseline yet
	tr := &track{}
	for i := int64(0); i <= 5*12; i++ {
		tr.add(1_800_000_000+i*5, tally{req: 5})
	}
	for i := int64(1); i <= 12; i++ {
		tr.add(1_800_000_300+i*5, tally{req: 500})
	}
	if _, _, ok := spike(tr, 1_800_000_360, AlertSettings{}.withDefaults()); ok {
		t.Error("a spike over 5 minutes of history")
	}
}

func TestTrafficSpikeRaisedAndResolved(t *testing.T) {
	f := newAlertFixture(t)
	var a1 int64
	for i := 0; i <= 31*12; i++ { // 31 minutes at 2 requests/s
		f.report("n1", counts(a1, 0, 0, 0))
		if got := f.step(5 * time.Second); len(got) != 0 {
			t.Fatalf("minute %d: alerts %v", i/12, got)
		}
		a1 += 10
	}
	var got map[string]Alert
	for i := 0; i < 12; i++ { // a minute at 20 requests/s
		a1 += 100
		f.report("n1", counts(a1, 0, 0, 0))
		got = f.step(5 * time.Second)
	}
	s, ok := got["traffic_spike-a1"]
	if !ok || len(got) != 1 || !strings.Contains(s.Message, "×") {
		t.Fatalf("after a minute at 10× the baseline: %v", got)
	}
	for i := 0; i < 12; i++ { // back to 2/s: the last minute is no spike
		a1 += 10
		f.report("n1", counts(a1, 0, 0, 0))
		got = f.step(5 * time.Second)
	}
	if len(got) != 0 {
		t.Fatalf("a minute after the spike: %v", got)
	}
}

func TestCircuitOpenRaisedAndResolved(t *testing.T) {
	f := newAlertFixture(t)
	br := func(states map[string]string) map[string]any {
		m := map[string]any{}
		for k, s := range states {
			m[k] = map[string]any{"state": s, "failures": 5, "requests": 10}
		}
		return map[string]any{"breakers": m}
	}
	f.report("n1", br(map[string]string{"demo": "closed", "s3/a1": "closed"}))
	f.report("n2", br(map[string]string{"demo": "closed"}))
	if got := f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("closed breakers alerted: %v", got)
	}
	f.report("n1", br(map[string]string{"demo": "open", "s3/a1": "open"}))
	got := f.step(5 * time.Second)
	d, per := got["circuit_open-demo"], got[alertID("circuit_open", "s3/a1")]
	if len(got) != 2 || d.Severity != "critical" || !strings.Contains(d.Message, "n1 (open)") || per.Resource != "s3/a1" {
		t.Fatalf("alerts %v", got)
	}
	if !keys.ValidID(per.ID) {
		t.Fatalf("id %q cannot be acknowledged", per.ID)
	}
	if _, err := f.svc.Ack(f.Ctx, per.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	// half-open is still tripped; another node opening keeps the one alert
	f.report("n1", br(map[string]string{"demo": "half_open", "s3/a1": "closed"}))
	f.report("n2", br(map[string]string{"demo": "open"}))
	got = f.step(5 * time.Second)
	if d2 := got["circuit_open-demo"]; len(got) != 1 || d2.Timestamp != d.Timestamp ||
		!strings.Contains(d2.Message, "n1 (half_open), n2 (open)") {
		t.Fatalf("alerts %v", got)
	}
	f.report("n1", br(map[string]string{"demo": "closed"}))
	f.report("n2", br(map[string]string{"demo": "closed"}))
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("closed again: %v", got)
	}
	if p := f.pushed(); len(p) != 4 {
		t.Fatalf("pushed %v, want 2 raised and 2 resolved", p)
	}
}

func TestConnectionsHighRaisedAndResolved(t *testing.T) {
	f := newAlertFixture(t)
	f.report("n1", nil)
	f.report("n2", nil)
	stats := func(app, node string, cur int64, seen time.Time) {
		if err := f.RDB.HSet(f.Ctx, keys.ConnNodeStats("c1", app, node), "current", cur, "peak", cur, "rejected", 0,
			"last_seen", seen.Unix()).Err(); err != nil {
			t.Fatal(err)
		}
		// as the gateway's statistics timer: an app with connections in flight is active
		if err := f.RDB.ZAdd(f.Ctx, keys.Active("c1"), redis.Z{Score: float64(seen.Unix()), Member: app}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.RDB.HSet(f.Ctx, keys.ConnConfig("c1", "a1"), "max_connections", 10, "burst_connections", 12).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.RDB.HSet(f.Ctx, keys.ConnCluster("c1"), "max_connections", 20, "reserved_ratio", 0.1).Err(); err != nil {
		t.Fatal(err)
	}
	now := f.Clock.Now().Add(5 * time.Second)
	stats("a1", "n1", 8, now)
	stats("a1", "n2", 8, now) // 16 in all, but the limit is per node: 80 %
	stats("a2", "n1", 9, now) // the default limit (1000): far off
	if got := f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts at 80%%: %v", got)
	}
	now = now.Add(5 * time.Second)
	stats("a1", "n2", 9, now) // a1 at 90 % on n2
	stats("a2", "n2", 9, now) // n2: 18 of the cluster's 20
	got := f.step(5 * time.Second)
	a, c := got["connections_high-a1"], got[alertID("connections_high", "cluster:c1")]
	if len(got) != 2 || !strings.Contains(a.Message, "9 of 10") || !strings.Contains(a.Message, "n2") ||
		!strings.Contains(c.Message, "18 of 20") {
		t.Fatalf("alerts %v", got)
	}
	// a node that stopped reporting its statistics no longer counts
	now = now.Add(StaleAfter + 5*time.Second)
	f.Clock.Advance(StaleAfter)
	f.report("n1", nil)
	f.report("n2", nil)
	stats("a1", "n1", 3, now)
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts from stale statistics: %v", got)
	}
}

func TestLeakedConnectionsAndStalledCleanup(t *testing.T) {
	f := newAlertFixture(t)
	node := func(leaked int64, lastRun time.Time) map[string]any {
		return map[string]any{"conn_leaked_total": leaked, "conn_cleanup_last_run": lastRun.Unix()}
	}
	f.report("n1", node(3, f.Clock.Now())) // leaks from before: the baseline
	if got := f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("alerts on the first report: %v", got)
	}
	f.report("n1", node(4, f.Clock.Now()))
	got := f.step(5 * time.Second)
	if l := got["connections_leaked-n1"]; len(got) != 1 || !strings.Contains(l.Message, "1 leaked") {
		t.Fatalf("alerts %v", got)
	}
	lastRun := f.Clock.Now()
	for i := 0; i < 60; i++ { // 5 minutes without new leaks (and no cleanup run)
		f.report("n1", node(4, lastRun))
		got = f.step(5 * time.Second)
	}
	if _, ok := got["connections_leaked-n1"]; ok {
		t.Fatalf("leak alert held 5 minutes after the last leak: %v", got)
	}
	if s, ok := got["cleanup_stalled-n1"]; !ok || len(got) != 1 || s.Severity != "warning" {
		t.Fatalf("cleanup 300 s old: %v", got)
	}
	// the cleanup runs again, the node restarts with its counter at 0: nothing to report
	f.report("n1", node(0, f.Clock.Now()))
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("after the cleanup ran and a restart: %v", got)
	}
	// a cleanup of 119 s ago is fine; a stale node's is not judged (node_stale says it)
	f.report("n1", node(0, f.Clock.Now().Add(5*time.Second-CleanupStalled+time.Second)))
	if got = f.step(5 * time.Second); len(got) != 0 {
		t.Fatalf("cleanup %s old: %v", CleanupStalled-time.Second, got)
	}
	got = f.step(StaleAfter + time.Second)
	if _, ok := got["node_stale-n1"]; !ok || len(got) != 1 {
		t.Fatalf("stale node: %v", got)
	}
}

func TestNodeDegradedSeverities(t *testing.T) {
	f := newAlertFixture(t)
	for _, c := range []struct {
		level int
		want  string
	}{{0, ""}, {1, "warning"}, {2, "warning"}, {3, "critical"}, {0, ""}} {
		f.report("n1", map[string]any{"degradation_level": c.level})
		got := f.step(5 * time.Second)
		if a := got["node_degraded-n1"]; a.Severity != c.want || len(got) > 1 {
			t.Errorf("level %d: %v, want severity %q", c.level, got, c.want)
		}
	}
}

// AlertSettings replace the default cleanup age and spike windows (TOLLGATE_ALERT_*).
func TestAlertSettingsChangeTheThresholds(t *testing.T) {
	f := newAlertFixture(t)
	f.svc = New(Options{Redis: f.RDB, Catalog: f.Store, L1: f.Ledger, Clock: f.Clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Alerts: AlertSettings{CleanupStalled: 10 * time.Second, SpikeWindow: 10 * time.Second,
			SpikeBaseline: time.Minute, SpikeMinHistory: 20 * time.Second}})
	lastRun := f.Clock.Now().Unix()
	var a1 int64
	report := func() {
		doc := counts(a1, 0, 0, 0)
		doc["conn_cleanup_last_run"] = lastRun
		f.report("n1", doc)
	}
	for i := 0; i < 2; i++ { // 10 s: not yet stalled
		report()
		if got := f.step(5 * time.Second); len(got) != 0 {
			t.Fatalf("cleanup %d s old: %v", (i+1)*5, got)
		}
	}
	report()
	got := f.step(5 * time.Second)
	if s, ok := got["cleanup_stalled-n1"]; !ok || len(got) != 1 || !strings.Contains(s.Message, "more than 10s ago") {
		t.Fatalf("cleanup 15 s old, alert after 10 s: %v", got)
	}
	for i := 0; i < 6; i++ { // 30 s at 2 requests/s, the cleanup running again
		lastRun = f.Clock.Now().Unix()
		a1 += 10
		report()
		if got = f.step(5 * time.Second); len(got) != 0 {
			t.Fatalf("steady traffic, step %d: %v", i, got)
		}
	}
	for i := 0; i < 2; i++ { // 10 s at 20 requests/s
		lastRun = f.Clock.Now().Unix()
		a1 += 100
		report()
		got = f.step(5 * time.Second)
	}
	if s, ok := got["traffic_spike-a1"]; !ok || len(got) != 1 || !strings.Contains(s.Message, "over the last 10s") {
		t.Fatalf("10 s at 10× a 30 s baseline, windows 10 s / 20 s: %v", got)
	}
	if keep := (AlertSettings{}).withDefaults().keep(); keep != trafficKeep {
		t.Fatalf("default history %s, want %s", keep, trafficKeep)
	}
}
