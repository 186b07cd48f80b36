package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// TestSerializeHoldsTheConfigWriteLock: a write runs only while it holds
// ratelimit:config:write_lock (another holder — another replica — keeps it waiting, and it gives
// up with its context without running), a write inside a write runs at once, and the lock is
// released when the write returns.
func TestSerializeHoldsTheConfigWriteLock(t *testing.T) {
	f := testutil.NewFixture(t)
	if err := f.RDB.Set(f.Ctx, keys.ConfigWriteLock(), "another-replica", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.Ctx, 300*time.Millisecond)
	ran := false
	err := f.Store.Serialize(ctx, func(context.Context) error { ran = true; return nil })
	cancel()
	if ran || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the lock held elsewhere: ran %v, err %v", ran, err)
	}
	if err := f.RDB.Del(f.Ctx, keys.ConfigWriteLock()).Err(); err != nil {
		t.Fatal(err)
	}
	inner := false
	err = f.Store.Serialize(f.Ctx, func(ctx context.Context) error {
		held, err := f.RDB.Get(ctx, keys.ConfigWriteLock()).Result()
		if err != nil || held == "" || held == "another-replica" {
			t.Errorf("inside the write the lock holds %q (%v)", held, err)
		}
		return f.Store.Serialize(ctx, func(context.Context) error { inner = true; return nil })
	})
	if err != nil || !inner {
		t.Fatalf("a write inside a write: ran %v, err %v", inner, err)
	}
	if n, err := f.RDB.Exists(f.Ctx, keys.ConfigWriteLock()).Result(); err != nil || n != 0 {
		t.Fatalf("the lock after the write: exists %d (%v)", n, err)
	}
}

// TestSerializeAcrossReplicas: two stores over one Redis (two control-plane replicas) never run
// writes at once: 50 writers, half through each, each reading a counter and writing it back
// one higher inside Serialize, leave it at 50 (a lost update would leave less); the lock,
// handed between the writers of one replica, is released once they are done.
func TestSerializeAcrossReplicas(t *testing.T) {
	f := testutil.NewFixture(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	replicas := []*store.Store{f.Store, store.New(f.Redis.Client(), set)}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := replicas[i%2].Serialize(f.Ctx, func(ctx context.Context) error {
				n, _ := f.RDB.Get(ctx, "race:counter").Int()
				time.Sleep(time.Millisecond) // widen the window a lost update needs
				return f.RDB.Set(ctx, "race:counter", n+1, 0).Err()
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n, err := f.RDB.Get(f.Ctx, "race:counter").Int(); err != nil || n != 50 {
		t.Fatalf("counter %d (%v), want 50", n, err)
	}
	// handed from writer to writer while they queued, released by the last
	if n, err := f.RDB.Exists(f.Ctx, keys.ConfigWriteLock()).Result(); err != nil || n != 0 {
		t.Fatalf("the lock after the writers: exists %d (%v)", n, err)
	}
}
