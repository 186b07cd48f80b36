package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"tollgate/internal/keys"
)

// ErrBusy: the config write lock was not free within the wait (another writer holds it, e.g.
// an import); nothing was written. Retry later.
var ErrBusy = errors.New("another config write is in progress")

// Why a lock and not one script: a change touches keys of several Redis Cluster slots (the
// app's L1/L2 hashes carry the tag {<cluster>}; the apps index, its value indexes, the access
// key and bucket maps and the config version have none), and neither a script nor
// WATCH/MULTI may span slots there. Every config write of the control plane therefore runs
// under one lock (Serialize): its checks read a state no other writer changes until its
// indexes and version bump are written. The scripts still make each slot's part atomic for
// the gateways.
const (
	writeLockTTL  = 10 * time.Second // renewed every TTL/3 while the write runs
	writeLockWait = 10 * time.Second // how long a writer queues before ErrBusy
)

type lockKey struct{}

type writeLock struct {
	local chan struct{} // this process' writers queue here, so that one at a time polls Redis
	ttl   time.Duration
	wait  time.Duration
}

func newWriteLock() *writeLock {
	return &writeLock{local: make(chan struct{}, 1), ttl: writeLockTTL, wait: writeLockWait}
}

// SetWriteLockWait sets how long a writer queues for the config write lock before ErrBusy
// (default 10 s); before the store is used.
func (s *Store) SetWriteLockWait(d time.Duration) { s.lock.wait = d }

// Serialize runs fn holding the config write lock; a call within fn (its ctx holds the lock)
// runs at once. fn's context is cancelled if the lock is lost (its renewal failed), so that
// its remaining writes fail rather than interleave with the next holder's. ErrBusy when the
// lock was not free within the wait.
func (s *Store) Serialize(ctx context.Context, fn func(ctx context.Context) error) error {
	if ctx.Value(lockKey{}) != nil {
		return fn(ctx)
	}
	l := s.lock
	wait, cancelWait := context.WithTimeout(ctx, l.wait)
	defer cancelWait()
	select {
	case l.local <- struct{}{}:
	case <-wait.Done():
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrBusy
	}
	defer func() { <-l.local }()
	token, err := randomToken()
	if err != nil {
		return err
	}
	if err := s.claim(wait, ctx, token); err != nil {
		return err
	}
	held, lost := context.WithCancelCause(context.WithValue(ctx, lockKey{}, token))
	done := make(chan struct{})
	go s.renew(held, lost, token, done)
	defer func() {
		close(done)
		lost(nil)
		// released even when ctx was cancelled; the TTL covers a failed release
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.scripts.Run(rctx, s.rdb, "leader_release", []string{keys.ConfigWriteLock()}, token).Err()
	}()
	err = fn(held)
	if cause := context.Cause(held); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// claim polls the lock (1 ms doubling to 25 ms, jittered) until it is this token's.
func (s *Store) claim(wait, ctx context.Context, token string) error {
	ms := s.lock.ttl.Milliseconds()
	backoff := time.Millisecond
	for {
		ok, err := s.scripts.Run(wait, s.rdb, "leader_claim", []string{keys.ConfigWriteLock()}, token, ms).Int64()
		if err == nil && ok == 1 {
			return nil
		}
		if err != nil && wait.Err() == nil {
			return fmt.Errorf("store: config write lock: %w", err)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff))
		select {
		case <-t.C:
		case <-wait.Done():
			t.Stop()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return ErrBusy
		}
		if backoff < 25*time.Millisecond {
			backoff *= 2
		}
	}
}

var errLockLost = errors.New("store: config write lock lost")

func (s *Store) renew(held context.Context, lost context.CancelCauseFunc, token string, done chan struct{}) {
	t := time.NewTicker(s.lock.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ok, err := s.scripts.Run(held, s.rdb, "leader_claim", []string{keys.ConfigWriteLock()}, token,
			s.lock.ttl.Milliseconds()).Int64()
		if held.Err() != nil {
			return
		}
		if err != nil || ok != 1 {
			lost(errLockLost)
			return
		}
	}
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("store: lock token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
