package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	. "tollgate/internal/store" // an external test: testutil's Fixture imports store
)

// Property 7 on config changes: after any sequence of app and cluster updates, L1 allocated is
// the sum of the guaranteed quotas of the index, and allocated + borrowed = capacity - available.
// Property 11 in the scripts: an update that would allocate more than 90 % of the capacity is
// refused with ErrOverAllocation and changes nothing.
func TestPropertyL1AllocationInvariant(t *testing.T) {
	s, rdb := newStore(t)
	c := ctx(t)
	rapid.Check(t, func(rt *rapid.T) {
		if err := rdb.FlushDB(c).Err(); err != nil {
			rt.Fatal(err)
		}
		capacity := rapid.Int64Range(1, 1_000_000).Draw(rt, "capacity")
		mustCluster(rt, s, capacity)
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			if rapid.IntRange(0, 5).Draw(rt, "resize") == 0 {
				next := rapid.Int64Range(1, 1_000_000).Draw(rt, "capacity")
				_, err := s.PutCluster(c, Cluster{ID: "c1", Capacity: next, ReservedRatio: 0.1})
				fits := float64(zsetSum(c, rt, rdb, "c1")) <= float64(next)*0.9+1e-6
				if fits != (err == nil) || (err != nil && !errors.Is(err, ErrOverAllocation)) {
					rt.Fatalf("PutCluster(%d) with %d allocated: %v", next, zsetSum(c, rt, rdb, "c1"), err)
				}
				if err == nil {
					capacity = next
				}
				continue
			}
			id := fmt.Sprintf("a%d", rapid.IntRange(0, 4).Draw(rt, "app"))
			g := rapid.Int64Range(1, 50_000).Draw(rt, "g")
			before := zsetSum(c, rt, rdb, "c1")
			old, _ := rdb.ZScore(c, "ratelimit:{c1}:l1:apps", id).Result()
			_, err := s.PutApp(c, demoApp(id, g))
			fits := float64(before-int64(old)+g) <= float64(capacity)*0.9+1e-6
			if fits != (err == nil) || (err != nil && !errors.Is(err, ErrOverAllocation)) {
				rt.Fatalf("PutApp(%s, %d) with %d allocated of %d: %v", id, g, before, capacity, err)
			}
			if err != nil && zsetSum(c, rt, rdb, "c1") != before {
				rt.Fatalf("a refused PutApp changed the allocation")
			}
		}
		checkL1(c, rt, s, rdb, capacity)
	})
}

func checkL1(c context.Context, rt *rapid.T, s *Store, rdb *redis.Client, capacity int64) {
	apps, err := s.ListApps(c)
	if err != nil {
		rt.Fatal(err)
	}
	var sum int64
	for _, a := range apps {
		sum += a.GuaranteedQuota
	}
	allocated := l1Int(c, rt, rdb, "c1", "allocated")
	available := l1Int(c, rt, rdb, "c1", "available")
	borrowed := l1Int(c, rt, rdb, "c1", "borrowed")
	if zs := zsetSum(c, rt, rdb, "c1"); allocated != sum || zs != sum {
		rt.Fatalf("allocated = %d, zset sum = %d, index sum = %d", allocated, zs, sum)
	}
	if allocated+borrowed != capacity-available {
		rt.Fatalf("allocated %d + borrowed %d != capacity %d - available %d",
			allocated, borrowed, capacity, available)
	}
}
