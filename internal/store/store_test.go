package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	. "tollgate/internal/store" // an external test: testutil's Fixture imports store
	"tollgate/internal/testutil"
)

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func newStore(t testing.TB) (*Store, *redis.Client) {
	t.Helper()
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	rdb := testutil.StartRedis(t).Client()
	return New(rdb, set), rdb
}

func demoApp(id string, g int64) App {
	return App{AppID: id, ClusterID: "c1", GuaranteedQuota: g, BurstQuota: 4 * g, Priority: 1,
		CBw: 1, MaxBorrow: g / 2, Enabled: true}
}

// fataler is the part of testing.TB that *rapid.T also has.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func mustCluster(t fataler, s *Store, capacity int64) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.PutCluster(c, Cluster{ID: "c1", Capacity: capacity, ReservedRatio: 0.1}); err != nil {
		t.Fatalf("PutCluster: %v", err)
	}
}

func TestPutClusterWritesL1IndexAndVersion(t *testing.T) {
	s, rdb := newStore(t)
	alloc, err := s.PutCluster(ctx(t), Cluster{ID: "c1", Capacity: 1000, ReservedRatio: 0.1})
	if err != nil || alloc != (Allocation{Allocated: 0, Available: 1000}) {
		t.Fatalf("PutCluster = %+v, %v; want {0 1000}", alloc, err)
	}
	got, err := s.GetCluster(ctx(t), "c1")
	if want := (Cluster{ID: "c1", Capacity: 1000, ReservedRatio: 0.1}); err != nil || got != want {
		t.Fatalf("GetCluster = %+v, %v; want %+v", got, err, want)
	}
	if ok, _ := rdb.SIsMember(ctx(t), keys.ClustersIndex(), "c1").Result(); !ok {
		t.Error("c1 not in ratelimit:clusters")
	}
	if v, _ := s.ConfigVersion(ctx(t)); v != 1 {
		t.Errorf("config version = %d, want 1", v)
	}
	if _, err := s.GetCluster(ctx(t), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetCluster(nope) error = %v, want ErrNotFound", err)
	}
}

func TestPutAppWritesIndexJSONVersionAndPublishes(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 100000)
	sub := rdb.Subscribe(ctx(t), keys.ConfigChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx(t)); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	alloc, err := s.PutApp(ctx(t), demoApp("demo-p0", 20000))
	if err != nil || alloc != (Allocation{Allocated: 20000, Available: 80000}) {
		t.Fatalf("PutApp = %+v, %v; want {20000 80000}", alloc, err)
	}
	doc, err := rdb.HGet(ctx(t), keys.AppsIndex(), "demo-p0").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"app_id": "demo-p0", "cluster_id": "c1", "guaranteed_quota": 20000.0,
		"burst_quota": 80000.0, "priority": 1.0, "c_bw": 1.0, "max_borrow": 10000.0, "enabled": true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("index JSON = %v, want %v", got, want)
	}
	msg, err := sub.ReceiveMessage(ctx(t))
	if err != nil || msg.Payload != "2" {
		t.Fatalf("published %v, %v; want version 2", msg, err)
	}
	l2, _ := rdb.HGetAll(ctx(t), keys.L2("c1", "demo-p0")).Result()
	if l2["guaranteed_quota"] != "20000" || l2["enabled"] != "1" || l2["current_tokens"] != "80000.000000" {
		t.Errorf("L2 hash = %v, want guaranteed 20000, enabled 1, a full bucket", l2)
	}
}

func TestPutAppErrorsAreTyped(t *testing.T) {
	s, rdb := newStore(t)
	if _, err := s.PutApp(ctx(t), demoApp("a1", 10)); !errors.Is(err, ErrUnknownCluster) {
		t.Fatalf("PutApp on missing cluster error = %v, want ErrUnknownCluster", err)
	}
	mustCluster(t, s, 1000)
	bad := []struct {
		field  string
		modify func(*App)
	}{
		{"guaranteed_quota", func(a *App) { a.GuaranteedQuota = 0 }},
		{"burst_quota", func(a *App) { a.BurstQuota = a.GuaranteedQuota - 1 }},
		{"priority", func(a *App) { a.Priority = 4 }},
		{"c_bw", func(a *App) { a.CBw = -1 }},
		{"max_borrow", func(a *App) { a.MaxBorrow = -1 }},
	}
	for _, b := range bad {
		a := demoApp("a1", 10)
		b.modify(&a)
		_, err := s.PutApp(ctx(t), a)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != b.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("PutApp with bad %s: error = %v, want FieldError{%s}", b.field, err, b.field)
		}
	}
	if n, _ := rdb.HLen(ctx(t), keys.AppsIndex()).Result(); n != 0 {
		t.Errorf("rejected apps reached the index: %d entries", n)
	}
}

func TestInvalidIDsNeverReachRedis(t *testing.T) {
	s, rdb := newStore(t)
	for _, id := range []string{"", "a b", "x:y", "a{b}", string(make([]byte, 129))} {
		if _, err := s.PutCluster(ctx(t), Cluster{ID: id, Capacity: 10}); !errors.Is(err, ErrInvalidID) {
			t.Errorf("PutCluster(%q) error = %v, want ErrInvalidID", id, err)
		}
		a := demoApp(id, 10)
		if _, err := s.PutApp(ctx(t), a); !errors.Is(err, ErrInvalidID) {
			t.Errorf("PutApp(app %q) error = %v, want ErrInvalidID", id, err)
		}
		a.AppID, a.ClusterID = "ok", id
		if _, err := s.PutApp(ctx(t), a); !errors.Is(err, ErrInvalidID) {
			t.Errorf("PutApp(cluster %q) error = %v, want ErrInvalidID", id, err)
		}
		if _, err := s.GetApp(ctx(t), id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("GetApp(%q) error = %v, want ErrInvalidID", id, err)
		}
	}
	if n, _ := rdb.DBSize(ctx(t)).Result(); n != 0 {
		t.Errorf("invalid ids wrote %d keys", n)
	}
}

func TestClusterValuesRejected(t *testing.T) {
	s, _ := newStore(t)
	cases := map[string]Cluster{
		"capacity":       {ID: "c1", Capacity: 0, ReservedRatio: 0.1},
		"reserved_ratio": {ID: "c1", Capacity: 10, ReservedRatio: 1},
	}
	nan := Cluster{ID: "c1", Capacity: 10}
	nan.ReservedRatio = nan.ReservedRatio / nan.ReservedRatio // NaN, which the script would accept
	for field, c := range cases {
		var fe *FieldError
		if _, err := s.PutCluster(ctx(t), c); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("PutCluster(%+v) error = %v, want FieldError{%s}", c, err, field)
		}
	}
	if _, err := s.PutCluster(ctx(t), nan); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutCluster(NaN ratio) error = %v, want ErrInvalid", err)
	}
}

func TestAppCannotChangeCluster(t *testing.T) {
	s, _ := newStore(t)
	mustCluster(t, s, 1000)
	if _, err := s.PutCluster(ctx(t), Cluster{ID: "c2", Capacity: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutApp(ctx(t), demoApp("a1", 10)); err != nil {
		t.Fatal(err)
	}
	moved := demoApp("a1", 10)
	moved.ClusterID = "c2"
	if _, err := s.PutApp(ctx(t), moved); !errors.Is(err, ErrClusterChange) {
		t.Fatalf("moving an app error = %v, want ErrClusterChange", err)
	}
}

func TestGetAndListApps(t *testing.T) {
	s, _ := newStore(t)
	mustCluster(t, s, 10_000_000)
	if _, err := s.GetApp(ctx(t), "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetApp(missing) error = %v, want ErrNotFound", err)
	}
	if apps, err := s.ListApps(ctx(t)); err != nil || len(apps) != 0 {
		t.Fatalf("ListApps on empty = %v, %v", apps, err)
	}
	const n = 300 // more than one HSCAN page
	for i := 0; i < n; i++ {
		if _, err := s.PutApp(ctx(t), demoApp(fmt.Sprintf("app-%03d", i), int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	apps, err := s.ListApps(ctx(t))
	if err != nil || len(apps) != n {
		t.Fatalf("ListApps = %d apps, %v; want %d", len(apps), err, n)
	}
	for i, a := range apps {
		if want := demoApp(fmt.Sprintf("app-%03d", i), int64(i+1)); a != want {
			t.Fatalf("ListApps[%d] = %+v, want %+v", i, a, want)
		}
	}
	got, err := s.GetApp(ctx(t), "app-007")
	if want := demoApp("app-007", 8); err != nil || got != want {
		t.Fatalf("GetApp = %+v, %v; want %+v", got, err, want)
	}
	if v, _ := s.ConfigVersion(ctx(t)); v != n+1 {
		t.Errorf("config version = %d, want %d", v, n+1)
	}
}

// zsetSum is Σ scores of the L1 allocation zset, read independently of the scripts.
func zsetSum(ctx context.Context, t fataler, rdb *redis.Client, cluster string) int64 {
	z, err := rdb.ZRangeWithScores(ctx, keys.L1Apps(cluster), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, m := range z {
		sum += int64(m.Score)
	}
	return sum
}

func l1Int(ctx context.Context, t fataler, rdb *redis.Client, cluster, field string) int64 {
	v, err := rdb.HGet(ctx, keys.L1(cluster), field).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	n, perr := strconv.ParseInt(v, 10, 64)
	if err != nil || perr != nil {
		t.Fatalf("L1 %s = %q: %v %v", field, v, err, perr)
	}
	return n
}
