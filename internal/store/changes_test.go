package store_test

import (
	"testing"

	"tollgate/internal/keys"
	. "tollgate/internal/store" //nolint:revive // as store_test.go
)

// Every version bump lands in the change log under its version: an app write as "app <id>",
// any other write as "all".
func TestChangeLogRecordsEveryBump(t *testing.T) {
	s, rdb := newStore(t)
	c := ctx(t)
	mustCluster(t, s, 1000) // version 1: all
	if _, err := s.PutApp(c, demoApp("a1", 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bump(c, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bump(WithChange(c, ChangeAll, "-"), nil); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.ZRange(c, keys.ConfigChanges(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 all -", "2 app a1", "3 all -", "4 all -"}
	if len(got) != len(want) {
		t.Fatalf("change log %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("change log %q, want %q", got, want)
		}
	}
}
