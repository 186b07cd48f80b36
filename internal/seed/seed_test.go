package seed

import (
	"context"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

func setup(t *testing.T) (context.Context, *store.Store, *testutil.Redis) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	r := testutil.StartRedis(t)
	return ctx, store.New(r.Client(), set), r
}

func TestDemoSeedsEmptyRedisOnce(t *testing.T) {
	ctx, s, r := setup(t)
	seeded, err := Demo(ctx, s)
	if err != nil || !seeded {
		t.Fatalf("first Demo = %v, %v; want seeded", seeded, err)
	}
	apps, err := s.ListApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := DemoApps()
	if len(apps) != len(want) {
		t.Fatalf("ListApps = %d apps, want %d", len(apps), len(want))
	}
	for i := range want {
		if apps[i] != want[i] {
			t.Errorf("app %d = %+v, want %+v", i, apps[i], want[i])
		}
	}
	if want[3].MaxBorrow != 500 || want[0].MaxBorrow != 10000 {
		t.Errorf("max_borrow must be guaranteed/2: %+v", want)
	}
	c, err := s.GetCluster(ctx, "default")
	if err != nil || c != DemoCluster() {
		t.Fatalf("GetCluster(default) = %+v, %v; want %+v", c, err, DemoCluster())
	}
	v1, _ := s.ConfigVersion(ctx)

	seeded, err = Demo(ctx, s)
	if err != nil || seeded {
		t.Fatalf("second Demo = %v, %v; want not seeded", seeded, err)
	}
	if v2, _ := s.ConfigVersion(ctx); v2 != v1 {
		t.Errorf("second Demo changed config version %d -> %d", v1, v2)
	}
	alloc, _ := r.Client().HGet(ctx, keys.L1("default"), "allocated").Int64()
	if alloc != 36000 {
		t.Errorf("L1 allocated = %d, want 36000", alloc)
	}
}

func TestDemoLeavesExistingConfigAlone(t *testing.T) {
	for _, existing := range []string{keys.ClustersIndex(), keys.AppsIndex()} {
		t.Run(existing, func(t *testing.T) {
			ctx, s, r := setup(t)
			rdb := r.Client()
			var err error
			if existing == keys.ClustersIndex() {
				err = rdb.SAdd(ctx, existing, "other").Err()
			} else {
				err = rdb.HSet(ctx, existing, "other", `{"app_id":"other"}`).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			seeded, err := Demo(ctx, s)
			if err != nil || seeded {
				t.Fatalf("Demo with existing %s = %v, %v; want not seeded", existing, seeded, err)
			}
			if n, _ := rdb.Exists(ctx, keys.L1("default")).Result(); n != 0 {
				t.Errorf("Demo wrote the default cluster although %s existed", existing)
			}
		})
	}
}
