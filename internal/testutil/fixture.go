package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// Fixture is one test's real redis-server with the scripts loaded on demand, and the control
// plane's view of it: the config store, the ledger and a fake clock.
type Fixture struct {
	T      testing.TB
	Ctx    context.Context
	Redis  *Redis
	RDB    *redis.Client
	Store  *store.Store
	Ledger *ledger.Ledger
	Clock  *Clock
}

// NewFixture starts Redis and builds the fixture.
func NewFixture(t testing.TB) *Fixture {
	t.Helper()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	r := StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f := &Fixture{T: t, Ctx: ctx, Redis: r, RDB: r.Client(), Clock: NewClock(time.Unix(1_700_000_000, 0))}
	f.Store = store.New(f.RDB, set)
	f.Ledger = ledger.New(f.RDB, set)
	return f
}

// Cluster creates a cluster with reserved ratio 0.1.
func (f *Fixture) Cluster(id string, capacity int64) {
	f.T.Helper()
	if _, err := f.Store.PutCluster(f.Ctx, store.Cluster{ID: id, Capacity: capacity, ReservedRatio: 0.1}); err != nil {
		f.T.Fatal(err)
	}
}

// App creates an enabled app.
func (f *Fixture) App(cluster, id string, g, burst int64, prio int, maxBorrow int64) {
	f.T.Helper()
	if _, err := f.Store.PutApp(f.Ctx, store.App{AppID: id, ClusterID: cluster, GuaranteedQuota: g,
		BurstQuota: burst, Priority: prio, CBw: 1, MaxBorrow: maxBorrow, Enabled: true}); err != nil {
		f.T.Fatal(err)
	}
}

// RedisNowUS is Redis' clock in Unix microseconds.
func (f *Fixture) RedisNowUS() int64 {
	f.T.Helper()
	t, err := f.RDB.Time(f.Ctx).Result()
	if err != nil {
		f.T.Fatal(err)
	}
	return t.UnixMicro()
}

// Consume reports cost consumed by node for app (a fresh sequence number each time).
func (f *Fixture) Consume(cluster, app, node string, cost int64) {
	f.T.Helper()
	seq := time.Now().UnixNano()
	if _, err := f.Ledger.Report(f.Ctx, cluster, app, node, ledger.Report{Seq: seq, Consumed: cost, Requests: 1}, 0); err != nil {
		f.T.Fatal(err)
	}
}
