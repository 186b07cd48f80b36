package store_test

import (
	"context"
	"testing"

	"tollgate/internal/keys"
	. "tollgate/internal/store" //nolint:revive // as store_test.go
)

// Every version bump lands in the change log under its version, as the kind and id of what it
// changed: a cluster, an app, an access key, a bucket; an app's removal with its access keys and
// buckets as one version of several entries; a bump that says nothing as "all".
func TestChangeLogRecordsEveryBump(t *testing.T) {
	s, rdb := newStore(t)
	c := ctx(t)
	mustCluster(t, s, 1000) // version 1
	if _, err := s.PutApp(c, demoApp("a1", 10)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddAccessKey(c, "a1", "AKIATESTKEY0000001"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutBucket(c, "photos", "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bump(WithChange(c, ChangeRule, "r1"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bump(WithChange(c, ChangeApp, "a1"), func(ctx context.Context) error {
		if err := s.RemoveApp(ctx, "a1"); err != nil {
			return err
		}
		return s.RemoveAppIdentity(ctx, "a1")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bump(c, nil); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.ZRange(c, keys.ConfigChanges(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 cluster c1", "2 app a1", "3 key AKIATESTKEY0000001", "4 bucket photos",
		"5 rule r1", "6 app a1", "6 bucket photos", "6 key AKIATESTKEY0000001", "7 all -"}
	if len(got) != len(want) {
		t.Fatalf("change log %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("change log %q, want %q", got, want)
		}
	}
}
