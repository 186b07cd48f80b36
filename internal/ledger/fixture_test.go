package ledger_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	. "tollgate/internal/ledger" // an external test: testutil's Fixture imports ledger
	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// fx is a ledger over the real scripts on a real redis-server, with explicit script times
// starting an hour after Redis' clock (so buckets created by app_config start full).
type fx struct {
	rdb   *redis.Client
	l     *Ledger
	st    *store.Store
	ctx   context.Context
	start int64 // Unix microseconds
	seq   int64 // of grantUsed's reports
}

func newFx(t *testing.T) *fx {
	t.Helper()
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	f := &fx{rdb: r.Client(), ctx: ctx}
	f.l = New(f.rdb, set)
	f.st = store.New(f.rdb, set)
	return f
}

// reset empties Redis and moves the explicit clock an hour past Redis' own.
func (f *fx) reset(t fataler) int64 {
	t.Helper()
	if err := f.rdb.FlushDB(f.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	now, err := f.rdb.Time(f.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	f.start = now.UnixMicro() + int64(time.Hour/time.Microsecond)
	return f.start
}

func (f *fx) cluster(t fataler, id string, capacity int64) {
	t.Helper()
	if _, err := f.st.PutCluster(f.ctx, store.Cluster{ID: id, Capacity: capacity, ReservedRatio: 0.1}); err != nil {
		t.Fatalf("put cluster %s: %v", id, err)
	}
}

func (f *fx) app(t fataler, cluster, id string, g, burst int64, prio int, maxBorrow int64) {
	t.Helper()
	a := store.App{AppID: id, ClusterID: cluster, GuaranteedQuota: g, BurstQuota: burst,
		Priority: prio, CBw: 1, MaxBorrow: maxBorrow, Enabled: true}
	if _, err := f.st.PutApp(f.ctx, a); err != nil {
		t.Fatalf("put app %s: %v", id, err)
	}
}

func (f *fx) l1(t fataler, c string) L1 {
	t.Helper()
	s, err := f.l.ReadL1(f.ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fx) l2(t fataler, c, a string) L2 {
	t.Helper()
	s, err := f.l.ReadL2(f.ctx, c, a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fx) grant(t fataler, c, a, node string, req, min, now int64) Grant {
	t.Helper()
	g, err := f.l.Grant(f.ctx, c, a, node, req, min, now)
	if err != nil {
		t.Fatalf("grant %s %d/%d: %v", a, req, min, err)
	}
	return g
}

// grantUsed is a grant whose tokens the node spends at once and reports (held 0), so nothing
// stays outstanding against the burst.
func (f *fx) grantUsed(t fataler, c, a, node string, req, min, now int64) Grant {
	t.Helper()
	g := f.grant(t, c, a, node, req, min, now)
	f.seq++
	if _, err := f.l.Report(f.ctx, c, a, node, Report{Seq: f.seq, Consumed: g.Granted, Requests: 1}, now); err != nil {
		t.Fatalf("report: %v", err)
	}
	return g
}

// checkL1 asserts Property 7: allocated + borrowed = capacity - available, allocated is the sum
// of the guaranteed quotas and borrowed the sum of the apps' borrowed.
func (f *fx) checkL1(t fataler, c string, apps ...string) {
	t.Helper()
	s := f.l1(t, c)
	var g, b int64
	for _, a := range apps {
		l := f.l2(t, c, a)
		g += l.Guaranteed
		b += l.Borrowed
		if l.Borrowed > l.Debt || (l.Debt == 0 && l.Borrowed != 0) || l.Borrowed < 0 {
			t.Fatalf("app %s: borrowed %d, debt %d", a, l.Borrowed, l.Debt)
		}
		if l.Tokens > float64(l.Burst)+1e-6 || l.Tokens < 0 {
			t.Fatalf("app %s: tokens %.6f outside [0, burst %d]", a, l.Tokens, l.Burst)
		}
	}
	if s.Allocated != g || s.Borrowed != b || s.Allocated+s.Borrowed != s.Capacity-s.Available {
		t.Fatalf("L1 %+v; apps guaranteed %d borrowed %d", s, g, b)
	}
}

// ceil12 is ceil(1.2 a) in exact integer arithmetic.
func ceil12(a int64) int64 { return (6*a + 4) / 5 }

// pool is what L1 can lend: floor(available - reserved_ratio x capacity).
func pool(s L1) int64 {
	return int64(math.Floor(float64(s.Available) - s.ReservedRatio*float64(s.Capacity) + 1e-6))
}
