package scripts_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"tollgate/internal/keys"
	. "tollgate/internal/scripts" // an external test: testutil's Fixture imports scripts
	"tollgate/internal/testutil"
)

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// l2 is one app's L2 keys on a real Redis.
type l2 struct {
	set               *Set
	rdb               *redis.Client
	bucket, leases    string
	stats, nodes      string
	burst, rate       float64
	reportKeys, gKeys []string
}

func newL2(t *testing.T, rdb *redis.Client, set *Set, app string) *l2 {
	t.Helper()
	b := &l2{set: set, rdb: rdb, bucket: keys.L2("c", app), leases: keys.Leases("c", app),
		stats: keys.Stats("c", app), nodes: keys.Nodes("c", app)}
	b.gKeys = []string{b.bucket, b.leases, b.nodes, keys.L1("c")}
	b.reportKeys = []string{b.bucket, b.leases, b.stats, b.nodes}
	return b
}

func (b *l2) configure(c context.Context, t fataler, rate, burst, tokens float64, lastUS int64) {
	t.Helper()
	b.rate, b.burst = rate, burst
	if err := b.rdb.Del(c, b.bucket, b.leases, b.stats, b.nodes).Err(); err != nil {
		t.Fatal(err)
	}
	err := b.rdb.HSet(c, b.bucket, "guaranteed_quota", rate, "burst_quota", burst,
		"current_tokens", strconv.FormatFloat(tokens, 'f', 6, 64),
		"last_refill_us", lastUS, "enabled", 1).Err()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *l2) state(c context.Context, t fataler) (tokens float64, lastUS int64) {
	t.Helper()
	v, err := b.rdb.HMGet(c, b.bucket, "current_tokens", "last_refill_us").Result()
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ = strconv.ParseFloat(v[0].(string), 64)
	lastUS, _ = strconv.ParseInt(v[1].(string), 10, 64)
	return tokens, lastUS
}

// grant returns {granted, tokens_left, rate_milli, burst, reason, active}.
func (b *l2) grant(c context.Context, t fataler, node string, want, min int64) []any {
	t.Helper()
	res, err := b.set.Run(c, b.rdb, "l2_grant", b.gKeys, node, want, min).Slice()
	if err != nil {
		t.Fatalf("l2_grant: %v", err)
	}
	return res
}

func redisNowUS(c context.Context, t fataler, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(c).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// Property 3: after T seconds at guaranteed rate G, a grant sees min(burst, tokens + T x G)
// and grants min(requested, floor(that)) when it covers min.
func TestProperty3RefillCorrectness(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, set := r.Client(), newSet(t)
	c := ctx(t)
	b := newL2(t, rdb, set, "p3")
	rapid.Check(t, func(rt *rapid.T) {
		g := float64(rapid.Int64Range(1, 1_000_000).Draw(rt, "guaranteed"))
		burst := g * float64(rapid.IntRange(1, 10).Draw(rt, "burst_factor"))
		tokens := math.Floor(rapid.Float64Range(0, burst).Draw(rt, "tokens"))
		elapsed := rapid.Int64Range(0, 100_000_000).Draw(rt, "elapsed_us")
		want := rapid.Int64Range(0, int64(burst)*2).Draw(rt, "requested")
		min := rapid.Int64Range(0, want).Draw(rt, "min")
		b.configure(c, rt, g, burst, tokens, redisNowUS(c, rt, rdb)-elapsed)
		_, before := b.state(c, rt)
		res := b.grant(c, rt, "n1", want, min)
		after, last := b.state(c, rt)
		refilled := math.Min(burst, tokens+float64(last-before)*g/1e6)
		granted := res[0].(int64)
		wantGranted := int64(math.Min(float64(want), math.Floor(refilled)))
		if wantGranted < min || wantGranted <= 0 {
			wantGranted = 0
		}
		if granted != wantGranted {
			rt.Fatalf("granted %d, want %d (refilled %.3f)", granted, wantGranted, refilled)
		}
		if math.Abs(after-(refilled-float64(granted))) > 1e-3 {
			rt.Fatalf("tokens after %.6f, want %.6f", after, refilled-float64(granted))
		}
		if reason := res[4].(string); (granted > 0) != (reason == "ok") {
			rt.Fatalf("reason %q with %d granted", reason, granted)
		}
	})
}

// Property 4: whatever sequence of grants, reports with returned tokens and burst changes,
// current_tokens never exceeds burst_quota.
func TestProperty4BurstInvariant(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, set := r.Client(), newSet(t)
	c := ctx(t)
	if err := set.Run(c, rdb, "cluster_config", []string{keys.L1("c"), keys.L1Apps("c")},
		1_000_000_000, 0.1).Err(); err != nil {
		t.Fatal(err)
	}
	b := newL2(t, rdb, set, "p4")
	seq := int64(0)
	rapid.Check(t, func(rt *rapid.T) {
		g := rapid.Int64Range(1, 100_000).Draw(rt, "guaranteed")
		burst := g * rapid.Int64Range(1, 5).Draw(rt, "burst_factor")
		cfg := []string{keys.L1("c"), keys.L1Apps("c"), b.bucket}
		if err := set.Run(c, rdb, "app_config", cfg, "p4", g, burst, 1, 1, 0, 1).Err(); err != nil {
			rt.Fatal(err)
		}
		for i, n := 0, rapid.IntRange(1, 15).Draw(rt, "ops"); i < n; i++ {
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				b.grant(c, rt, "n1", rapid.Int64Range(0, 3*burst).Draw(rt, "want"), 0)
			case 1:
				seq++
				ret := rapid.Int64Range(0, 3*burst).Draw(rt, "returned")
				if err := set.Run(c, rdb, "l3_report", b.reportKeys, "n1", seq, 0, 0, ret, 0).Err(); err != nil {
					rt.Fatal(err)
				}
			case 2:
				burst = g * rapid.Int64Range(1, 5).Draw(rt, "new_burst_factor")
				if err := set.Run(c, rdb, "app_config", cfg, "p4", g, burst, 1, 1, 0, 1).Err(); err != nil {
					rt.Fatal(err)
				}
			}
			if tokens, _ := b.state(c, rt); tokens > float64(burst)+1e-6 {
				rt.Fatalf("current_tokens %.6f > burst %d", tokens, burst)
			}
		}
	})
}

// A report is applied at most once per (node, seq); replays and older sequence numbers change
// nothing; a bad sequence number is an error reply, not a script crash.
func TestReportIdempotentByNodeAndSeq(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, set := r.Client(), newSet(t)
	c := ctx(t)
	b := newL2(t, rdb, set, "rep")
	b.configure(c, t, 100, 1000, 1000, redisNowUS(c, t, rdb))
	report := func(node string, seq int64, consumed int64) []any {
		res, err := set.Run(c, rdb, "l3_report", b.reportKeys, node, seq, consumed, 1, 0, 0).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := report("n1", 10, 7); res[0].(int64) != 1 {
		t.Fatalf("first report not applied: %v", res)
	}
	for _, seq := range []int64{10, 9, 1} {
		if res := report("n1", seq, 7); res[0].(int64) != 0 || res[1].(int64) != 10 {
			t.Fatalf("replay of seq %d: %v, want {0, 10}", seq, res)
		}
	}
	if res := report("n2", 10, 5); res[0].(int64) != 1 {
		t.Fatalf("same seq from another node not applied: %v", res)
	}
	if res := report("n1", 11, 3); res[0].(int64) != 1 {
		t.Fatalf("next seq not applied: %v", res)
	}
	stats, _ := rdb.HGetAll(c, b.stats).Result()
	leases, _ := rdb.HGetAll(c, b.leases).Result()
	if stats["total_consumed"] != "15" || stats["total_requests"] != "3" ||
		leases["n1:consumed"] != "10" || leases["n2:consumed"] != "5" {
		t.Fatalf("stats %v leases %v, want consumed 15 (n1 10, n2 5) over 3 reports", stats, leases)
	}
	for _, bad := range []string{"x", "nan", "-1", "0", ""} {
		err := set.Run(c, rdb, "l3_report", b.reportKeys, "n1", bad, 1, 1, 0, 0).Err()
		if err == nil || !strings.Contains(err.Error(), "invalid_seq") {
			t.Fatalf("seq %q: err %v, want invalid_seq", bad, err)
		}
	}
	// a report for an app without L2 state leaves no orphan keys
	gone := newL2(t, rdb, set, "gone")
	res, err := set.Run(c, rdb, "l3_report", gone.reportKeys, "n1", 1, 5, 1, 0, 0).Slice()
	if err != nil || res[2].(string) != "unknown_app" {
		t.Fatalf("report of unknown app: %v %v", res, err)
	}
	if n, _ := rdb.Exists(c, gone.leases, gone.stats, gone.nodes).Result(); n != 0 {
		t.Fatalf("report of unknown app created %d keys", n)
	}
}

// A grant whose reply a node never received is recovered once by its next grant, when it was
// applied and is the node's last; an unknown id, another node's id, a second ask or an id after
// a drift correction recover nothing.
func TestLostGrantRecoveredOnce(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, set := r.Client(), newSet(t)
	c := ctx(t)
	b := newL2(t, rdb, set, "lost")
	b.configure(c, t, 1, 1000, 1000, redisNowUS(c, t, rdb))
	grant := func(node string, want int64, gid, lost string) []any {
		t.Helper()
		res, err := set.Run(c, rdb, "l2_grant", b.gKeys, node, want, 1, "", gid, lost).Slice()
		if err != nil {
			t.Fatalf("l2_grant: %v", err)
		}
		if len(res) != 9 {
			t.Fatalf("l2_grant reply %v: want 9 fields", res)
		}
		return res
	}
	grant("n1", 300, "7", "") // its reply is "lost"
	if res := grant("n1", 10, "8", "6"); res[7].(int64) != 0 {
		t.Fatalf("an id that was never the node's last recovered %v", res[7])
	}
	if res := grant("n2", 10, "9", "8"); res[7].(int64) != 0 {
		t.Fatalf("another node's grant recovered %v", res[7])
	}
	grant("n1", 300, "10", "")
	if res := grant("n1", 20, "11", "10"); res[0].(int64) != 20 || res[7].(int64) != 300 {
		t.Fatalf("lost grant 10 of 300: reply %v, want granted 20 and recovered 300", res)
	}
	if res := grant("n1", 20, "12", "10"); res[7].(int64) != 0 {
		t.Fatalf("grant 10 recovered twice: %v", res[7])
	}
	// a correction returns what a node never accounted for (it reports holding nothing): its
	// last grant is no longer recoverable
	if err := set.Run(c, rdb, "l3_report", b.reportKeys, "n1", 1, 0, 0, 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := set.Run(c, rdb, "l2_reconcile", []string{b.bucket, b.leases, b.nodes, b.stats, keys.L1("c")},
		0.0001, 3600).Err(); err != nil {
		t.Fatal(err)
	}
	if res := grant("n1", 20, "13", "12"); res[7].(int64) != 0 {
		t.Fatalf("grant 12 recovered after the reconciler returned it: %v", res[7])
	}
}

// A grant's reserve is cut to the node's share among the app's active nodes, counted at that
// grant: of half the burst, and of what L2 holds beyond the need (mutation: no cut — the fourth
// node got its whole reserve of 100); the need itself (min) is never cut, a grant without a
// reserve argument is granted in full, and the reply's ninth field is what was asked after the
// cut.
func TestGrantReserveCutToTheNodesShare(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb, set := r.Client(), newSet(t)
	c := ctx(t)
	b := newL2(t, rdb, set, "share")
	b.configure(c, t, 1, 400, 400, redisNowUS(c, t, rdb))
	var last []any
	grant := func(node string, want, min, reserve int64) int64 {
		t.Helper()
		res, err := set.Run(c, rdb, "l2_grant", b.gKeys, node, want, min, "", "", "", reserve).Slice()
		if err != nil {
			t.Fatalf("l2_grant: %v", err)
		}
		last = res
		return res[0].(int64)
	}
	// one node: its share is half the burst (200)
	if got := grant("n1", 2+100, 2, 100); got != 102 {
		t.Fatalf("one active node, reserve 100 of a share of 200: granted %d, want 102", got)
	}
	grant("n2", 2, 2, 0)
	grant("n3", 2, 2, 0)
	// four active nodes: a share of 400 / 8 = 50 (L2 holds 294, a quarter of it beyond the need
	// is more)
	if got := grant("n4", 2+100, 2, 100); got != 52 || last[8].(int64) != 52 {
		t.Fatalf("four active nodes, reserve 100: granted %d (asked %v), want 2 + the share of 50", got, last[8])
	}
	if got := grant("n4", 120, 120, 100); got != 120 {
		t.Fatalf("a need of 120 with a reserve of 100: granted %d, want the need (min) at least", got)
	}
	// L2 holds 122: a quarter of what it holds beyond the need of 2 is 30
	if got := grant("n3", 2+100, 2, 100); got != 32 {
		t.Fatalf("L2 holding 122, four nodes, reserve 100: granted %d, want 2 + 120 / 4", got)
	}
	if got := grant("n4", 60, 1, 0); got != 60 {
		t.Fatalf("no reserve argument: granted %d, want all 60", got)
	}
}
