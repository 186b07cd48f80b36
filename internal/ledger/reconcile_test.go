package ledger_test

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"tollgate/internal/keys"
	. "tollgate/internal/ledger" // an external test: testutil's Fixture imports ledger
	"tollgate/internal/store"
)

// Property 7: whatever mix of grants (with loans), reports with returned tokens, refills with
// repayment, reconciliations and config changes, allocated + borrowed = capacity - available
// holds after every step, with allocated = sum of guaranteed and borrowed = sum of the apps'
// borrowed. After L1 is corrupted, l1_reconcile restores it and counts one correction; on a
// consistent L1 it changes nothing.
func TestProperty7GlobalInvariant(t *testing.T) {
	f := newFx(t)
	apps := []string{"a0", "a1", "a2"}
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		capacity := rapid.Int64Range(1000, 1_000_000).Draw(rt, "capacity")
		f.cluster(rt, "c", capacity)
		for _, a := range apps {
			g := rapid.Int64Range(1, capacity*3/10).Draw(rt, "guaranteed")
			f.app(rt, "c", a, g, g*rapid.Int64Range(1, 3).Draw(rt, "bf"), rapid.IntRange(0, 3).Draw(rt, "prio"),
				rapid.Int64Range(0, 2*g).Draw(rt, "max_borrow"))
		}
		seq := int64(0)
		for i, n := 0, rapid.IntRange(1, 25).Draw(rt, "steps"); i < n; i++ {
			a := rapid.SampledFrom(apps).Draw(rt, "app")
			now += rapid.Int64Range(0, 500_000).Draw(rt, "elapsed_us")
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 0, 1:
				req := rapid.Int64Range(1, 3*f.l2(rt, "c", a).Burst).Draw(rt, "req")
				f.grant(rt, "c", a, "n1", req, rapid.Int64Range(1, req).Draw(rt, "min"), now)
			case 2:
				seq++
				ret := rapid.Int64Range(0, f.l2(rt, "c", a).Burst).Draw(rt, "returned")
				if _, err := f.l.Report(f.ctx, "c", a, "n1", Report{Seq: seq, Returned: ret}, now); err != nil {
					rt.Fatal(err)
				}
			case 3:
				if _, err := f.l.Refill(f.ctx, "c", a, now); err != nil {
					rt.Fatal(err)
				}
			case 4:
				if _, err := f.l.ReconcileApp(f.ctx, "c", a, 0.1, time.Hour, now); err != nil {
					rt.Fatal(err)
				}
			case 5:
				g := rapid.Int64Range(1, capacity*3/10).Draw(rt, "new_guaranteed")
				_, err := f.st.PutApp(f.ctx, store.App{AppID: a, ClusterID: "c", GuaranteedQuota: g,
					BurstQuota: 2 * g, Priority: 1, CBw: 1, MaxBorrow: rapid.Int64Range(0, 2*g).Draw(rt, "mb"), Enabled: true})
				if err != nil && !errors.Is(err, store.ErrOverAllocation) {
					rt.Fatal(err)
				}
			case 6:
				if _, _, err := f.l.ActivateEmergency(f.ctx, "c", Activation{Duration: time.Second, Source: "auto"}, now); err != nil {
					rt.Fatal(err)
				}
			}
			f.checkL1(rt, "c", apps...)
		}
		clean, err := f.l.ReconcileCluster(f.ctx, "c", apps)
		if err != nil || clean.Corrected {
			rt.Fatalf("reconciling a consistent L1: %+v %v", clean, err)
		}
		// corrupt L1 and the allocation set, then reconcile
		field := rapid.SampledFrom([]string{"allocated", "borrowed", "available"}).Draw(rt, "field")
		if err := f.rdb.HIncrBy(f.ctx, keys.L1("c"), field, rapid.Int64Range(1, 1000).Draw(rt, "off")).Err(); err != nil {
			rt.Fatal(err)
		}
		if rapid.Bool().Draw(rt, "zset") {
			f.rdb.ZAdd(f.ctx, keys.L1Apps("c"), zmember(7, apps[0]))
		}
		before := f.l1(rt, "c").Corrections
		fixed, err := f.l.ReconcileCluster(f.ctx, "c", apps)
		if err != nil || !fixed.Corrected || f.l1(rt, "c").Corrections != before+1 {
			rt.Fatalf("reconciling a corrupted L1 (%s): %+v %v", field, fixed, err)
		}
		f.checkL1(rt, "c", apps...)
		if zs, _ := f.rdb.ZScore(f.ctx, keys.L1Apps("c"), apps[0]).Result(); int64(zs) != f.l2(rt, "c", apps[0]).Guaranteed {
			rt.Fatalf("allocation of %s is %v after reconciliation", apps[0], zs)
		}
	})
}

// An allocated app left out of the list is refused, not guessed; a listed app without L2 state
// leaves the allocation set.
func TestReconcileClusterAppList(t *testing.T) {
	f := newFx(t)
	f.reset(t)
	f.cluster(t, "c", 1000)
	f.app(t, "c", "a", 100, 100, 0, 0)
	f.app(t, "c", "b", 200, 200, 0, 0)
	if _, err := f.l.ReconcileCluster(f.ctx, "c", []string{"a"}); !errors.Is(err, ErrStaleAppList) {
		t.Fatalf("list without b: %v, want ErrStaleAppList", err)
	}
	f.rdb.Del(f.ctx, keys.L2("c", "b"))
	r, err := f.l.ReconcileCluster(f.ctx, "c", []string{"a", "b"})
	if err != nil || !r.Corrected || r.Allocated != 100 || r.Available != 900 {
		t.Fatalf("after b's L2 vanished: %+v %v", r, err)
	}
	if n, _ := f.rdb.ZCard(f.ctx, keys.L1Apps("c")).Result(); n != 1 {
		t.Fatalf("allocation set has %d members, want 1", n)
	}
	if _, err := f.l.ReconcileCluster(f.ctx, "none", nil); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("unknown cluster: %v", err)
	}
}

// gwNode models what a gateway node knows of its lease: tokens held and the next seq.
type gwNode struct {
	id     string
	tokens int64
	seq    int64
}

// Property 14: drift = |sum(granted - consumed - returned - held - unreported)| / sum(granted);
// above the tolerance every node's ledger is corrected to balance — unaccounted tokens go back
// to L2, over-accounted ones are taken from it — and the correction is counted; at or below it
// nothing is corrected. Either way the window restarts with the identity intact, and grants not
// yet covered by a report are never mistaken for drift.
func TestProperty14DriftCorrection(t *testing.T) {
	f := newFx(t)
	rapid.Check(t, func(rt *rapid.T) {
		now := f.reset(rt)
		f.cluster(rt, "c", 10_000_000)
		g := rapid.Int64Range(10, 100_000).Draw(rt, "guaranteed")
		burst := 10 * g
		f.app(rt, "c", "a", g, burst, 0, 0)
		if _, err := f.l.Refill(f.ctx, "c", "a", now); err != nil { // settle at the explicit clock
			rt.Fatal(err)
		}
		nodes := []*gwNode{{id: "n1"}, {id: "n2"}, {id: "n3"}}
		for i, n := 0, rapid.IntRange(1, 20).Draw(rt, "steps"); i < n; i++ {
			nd := rapid.SampledFrom(nodes).Draw(rt, "node")
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0, 1: // lease more
				nd.tokens += f.grant(rt, "c", "a", nd.id, rapid.Int64Range(1, burst/3).Draw(rt, "want"), 1, now).Granted
			case 2, 3: // serve requests and report, returning part of the lease
				used := rapid.Int64Range(0, nd.tokens).Draw(rt, "used")
				ret := rapid.Int64Range(0, nd.tokens-used).Draw(rt, "ret")
				nd.tokens -= used + ret
				nd.seq++
				if _, err := f.l.Report(f.ctx, "c", "a", nd.id,
					Report{Seq: nd.seq, Consumed: used, Requests: used, Returned: ret, Held: nd.tokens}, now); err != nil {
					rt.Fatal(err)
				}
			case 4: // fault: the node loses (restart) or over-reports what it holds
				delta := rapid.Int64Range(-nd.tokens, burst/5).Draw(rt, "fault")
				nd.seq++
				if _, err := f.l.Report(f.ctx, "c", "a", nd.id,
					Report{Seq: nd.seq, Held: nd.tokens + delta}, now); err != nil {
					rt.Fatal(err)
				}
				nd.tokens += delta
			}
		}
		tol := rapid.SampledFrom([]float64{0, 0.01, 0.1, 0.5}).Draw(rt, "tolerance")
		before := ledgerOf(rt, f)
		b0 := f.l2(rt, "c", "a")
		stats0, _ := f.rdb.HGetAll(f.ctx, keys.Stats("c", "a")).Result()
		res, err := f.l.ReconcileApp(f.ctx, "c", "a", tol, time.Hour, now)
		if err != nil {
			rt.Fatal(err)
		}
		var granted, sum, pos, neg int64
		for _, l := range before {
			granted += l["granted"]
			d := l.d()
			sum += d
			if d > 0 {
				pos += d
			} else {
				neg += d
			}
		}
		drift := 0.0
		if granted > 0 {
			drift = math.Abs(float64(sum)) / float64(granted)
		} else if sum != 0 {
			drift = 1
		}
		if res.Granted != granted || res.Imbalance != sum || math.Abs(float64(res.DriftPPM)-math.Floor(drift*1e6)) > 1 {
			rt.Fatalf("reconcile %+v, want granted %d imbalance %d drift %.6f", res, granted, sum, drift)
		}
		after := ledgerOf(rt, f)
		b1 := f.l2(rt, "c", "a")
		stats1, _ := f.rdb.HGetAll(f.ctx, keys.Stats("c", "a")).Result()
		corrections := func(m map[string]string) string { return m["correction_count"] }
		if res.Corrected != (drift > tol) {
			rt.Fatalf("drift %.4f tolerance %.2f: corrected %v", drift, tol, res.Corrected)
		}
		wantTokens := b0.Tokens + float64(b0.ReturnedPending)
		if res.Corrected {
			wantTokens += float64(pos + neg)
			for id, l := range after {
				if l.d() != 0 {
					rt.Fatalf("node %s still off by %d after correction", id, l.d())
				}
			}
			if n0, _ := strconv.Atoi(corrections(stats0)); corrections(stats1) != strconv.Itoa(n0+1) {
				rt.Fatalf("correction_count %q -> %q", corrections(stats0), corrections(stats1))
			}
		} else {
			for id, l := range after {
				if l.d() != before[id].d() {
					rt.Fatalf("node %s: uncorrected imbalance changed %d -> %d", id, before[id].d(), l.d())
				}
			}
			if corrections(stats1) != corrections(stats0) {
				rt.Fatal("correction counted without a correction")
			}
		}
		var outstanding int64
		for _, l := range after {
			outstanding += l["held"] + l["unreported"]
		}
		if b1.Outstanding != outstanding {
			rt.Fatalf("outstanding %d, ledger says %d", b1.Outstanding, outstanding)
		}
		wantTokens = math.Max(0, math.Min(capOf(b1), wantTokens))
		if math.Abs(b1.Tokens-wantTokens) > 1e-3 {
			rt.Fatalf("L2 tokens %.3f -> %.3f, want %.3f (corrected %v, +%d %d)", b0.Tokens, b1.Tokens, wantTokens,
				res.Corrected, pos, neg)
		}
		for id, l := range after {
			if l["consumed"] != 0 || l["returned"] != 0 || l["granted"] != l["held"]+l["unreported"]+l.d() {
				rt.Fatalf("node %s: window not restarted: %v", id, l)
			}
		}
		if stats1["period_consumed"] != "0" || stats1["last_period_consumed"] != orZero(stats0["period_consumed"]) {
			rt.Fatalf("period counters %v -> %v", stats0, stats1)
		}
	})
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

type nodeLedger map[string]int64

func (l nodeLedger) d() int64 {
	return l["granted"] - l["consumed"] - l["returned"] - l["held"] - l["unreported"]
}

func ledgerOf(t fataler, f *fx) map[string]nodeLedger {
	t.Helper()
	m, err := f.rdb.HGetAll(f.ctx, keys.Leases("c", "a")).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]nodeLedger{}
	for k, v := range m {
		var node, field string
		for i := len(k) - 1; i >= 0; i-- {
			if k[i] == ':' {
				node, field = k[:i], k[i+1:]
				break
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("leases field %s = %q", k, v)
		}
		if out[node] == nil {
			out[node] = nodeLedger{}
		}
		out[node][field] = n
	}
	return out
}

// A node that stopped reporting is reaped: its held tokens return to L2, its ledger fields and
// its contact go; a node still reporting is kept.
func TestReconcileReapsSilentNodes(t *testing.T) {
	f := newFx(t)
	now := f.reset(t)
	f.cluster(t, "c", 1_000_000)
	f.app(t, "c", "a", 100, 1000, 0, 0)
	got := f.grant(t, "c", "a", "old", 600, 1, now).Granted
	if _, err := f.l.Report(f.ctx, "c", "a", "old", Report{Seq: 1, Consumed: 100, Held: got - 100}, now); err != nil {
		t.Fatal(err)
	}
	later := now + 31_000_000
	f.grant(t, "c", "a", "live", 1, 1, later)
	b0 := f.l2(t, "c", "a")
	res, err := f.l.ReconcileApp(f.ctx, "c", "a", 0.1, 30*time.Second, later)
	if err != nil || res.ReapedNodes != 1 || res.ReapedTokens != got-100 {
		t.Fatalf("reconcile %+v %v, want 1 node with %d tokens reaped", res, err, got-100)
	}
	l := ledgerOf(t, f)
	if _, ok := l["old"]; ok {
		t.Fatalf("reaped node's ledger still there: %v", l)
	}
	if _, ok := l["live"]; !ok {
		t.Fatalf("live node's ledger gone: %v", l)
	}
	if s, _ := f.rdb.ZScore(f.ctx, keys.Nodes("c", "a"), "old").Result(); s != 0 {
		t.Fatalf("reaped node still in nodes: %v", s)
	}
	b1 := f.l2(t, "c", "a")
	want := math.Min(1000, b0.Tokens+float64(got-100))
	if math.Abs(b1.Tokens-want) > 1e-6 {
		t.Fatalf("tokens %.3f -> %.3f, want %.3f", b0.Tokens, b1.Tokens, want)
	}
}

func zmember(score float64, m string) redis.Z { return redis.Z{Score: score, Member: m} }
