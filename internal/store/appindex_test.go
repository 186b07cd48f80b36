package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	. "tollgate/internal/store"
)

func pageIDs(t *testing.T, s *Store, prefix string, offset, limit int64) ([]string, int64) {
	t.Helper()
	p, err := s.PageApps(ctx(t), prefix, offset, limit)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, a := range p.Apps {
		ids = append(ids, a.AppID)
	}
	return ids, p.Total
}

// TestPageAppsPagesTheIDIndex: pages in id order (case ignored) cover every app exactly once, a
// search is an id prefix without regard to case, a removed app leaves the pages, and an index
// that lost or kept stale ids is rebuilt from the apps.
func TestPageAppsPagesTheIDIndex(t *testing.T) {
	s, rdb := newStore(t)
	mustCluster(t, s, 1_000_000)
	var want []string
	for i := 0; i < 57; i++ {
		id := fmt.Sprintf("app-%02d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("App-%02d", i)
		}
		want = append(want, id)
		if _, err := s.PutApp(ctx(t), demoApp(id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutApp(ctx(t), demoApp("zeta", 1)); err != nil {
		t.Fatal(err)
	}
	want = append(want, "zeta")
	var got []string
	for off := int64(0); ; off += 10 {
		ids, total := pageIDs(t, s, "", off, 10)
		if total != 58 {
			t.Fatalf("total %d, want 58", total)
		}
		if len(ids) == 0 {
			break
		}
		got = append(got, ids...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages %v\nwant %v", got, want)
	}
	if ids, total := pageIDs(t, s, "APP-1", 0, 100); total != 10 || len(ids) != 10 || ids[0] != "app-10" || ids[2] != "App-12" {
		t.Fatalf("search APP-1: %v (total %d)", ids, total)
	}
	if ids, total := pageIDs(t, s, "app-1", 5, 3); total != 10 || !slices.Equal(ids, []string{"App-15", "app-16", "app-17"}) {
		t.Fatalf("search app-1 from 5: %v (total %d)", ids, total)
	}
	if ids, total := pageIDs(t, s, "nope", 0, 10); total != 0 || len(ids) != 0 {
		t.Fatalf("search nope: %v %d", ids, total)
	}
	if err := s.RemoveApp(ctx(t), "zeta"); err != nil {
		t.Fatal(err)
	}
	if ids, total := pageIDs(t, s, "z", 0, 10); total != 0 || len(ids) != 0 {
		t.Fatalf("removed app listed: %v %d", ids, total)
	}
	// an index from before the id index, then one with a stale id: rebuilt from the apps
	rdb.Del(ctx(t), keys.AppIDs())
	if ids, total := pageIDs(t, s, "", 50, 10); total != 57 || !slices.Equal(ids, want[50:57]) {
		t.Fatalf("after losing the id index: %v %d", ids, total)
	}
	rdb.ZAdd(ctx(t), keys.AppIDs(), redis.Z{Member: "ghost\x00ghost"})
	// a surplus is a write in flight until it stays StaleRepairAfter: counted, not listed
	if ids, total := pageIDs(t, s, "g", 0, 10); total != 1 || len(ids) != 0 {
		t.Fatalf("surplus id: %v %d", ids, total)
	}
	defer func(d time.Duration) { StaleRepairAfter = d }(StaleRepairAfter)
	StaleRepairAfter = 0
	pageIDs(t, s, "", 0, 1)
	if ids, total := pageIDs(t, s, "g", 0, 10); total != 0 || len(ids) != 0 {
		t.Fatalf("stale id listed: %v %d", ids, total)
	}
	if n, _ := rdb.ZCard(ctx(t), keys.AppIDs()).Result(); n != 57 {
		t.Fatalf("id index has %d members, want 57", n)
	}
}
