package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
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

	waiting atomic.Int32 // writers of this process queued on local
	// Held by the writer that holds local (and by nobody else): the Redis lock this process
	// still holds, handed from one of its writers to the next while others queue (no release
	// and claim between them); when its TTL was last set; when the hand-offs began.
	token string
	fresh time.Time
	since time.Time
}

// maxHold bounds the hand-offs of one hold of the lock, so that another replica's writers are
// not kept waiting by a steady queue here.
const maxHold = time.Second

func newWriteLock() *writeLock {
	return &writeLock{local: make(chan struct{}, 1), ttl: writeLockTTL, wait: writeLockWait}
}

// SetWriteLockWait sets how long a writer queues for the config write lock before ErrBusy
// (default 10 s); before the store is used.
func (s *Store) SetWriteLockWait(d time.Duration) { s.lock.wait = d }

// Serialize runs fn holding the config write lock; a call within fn (its ctx holds the lock)
// runs at once. fn's context is cancelled if the lock is lost (its renewal failed), so that
// its remaining writes fail rather than interleave with the next holder's. ErrBusy when the
// lock was not free within the wait. While writers of this process queue, the Redis lock is
// handed from one to the next (for at most maxHold) instead of being released and claimed.
func (s *Store) Serialize(ctx context.Context, fn func(ctx context.Context) error) error {
	if ctx.Value(lockKey{}) != nil {
		return fn(ctx)
	}
	l := s.lock
	wait, cancelWait := context.WithTimeout(ctx, l.wait)
	defer cancelWait()
	l.waiting.Add(1)
	select {
	case l.local <- struct{}{}:
		l.waiting.Add(-1)
	case <-wait.Done():
		l.waiting.Add(-1)
		s.abandon()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return ErrBusy
	}
	defer func() { <-l.local }()
	if l.token == "" || time.Since(l.fresh) > l.ttl/3 {
		// a new hold, or one handed over whose TTL is due: take or extend the lock
		token := l.token
		if token == "" {
			var err error
			if token, err = randomToken(); err != nil {
				return err
			}
			l.since = time.Now()
		}
		at := time.Now()
		if err := s.claim(wait, ctx, token); err != nil {
			l.token = ""
			return err
		}
		l.token, l.fresh = token, at
	}
	token := l.token
	held, lost := context.WithCancelCause(context.WithValue(ctx, lockKey{}, token))
	done, renewed := make(chan struct{}), make(chan time.Time, 1)
	go s.renew(held, lost, token, done, renewed)
	err := fn(held)
	close(done)
	if at, ok := <-renewed; ok { // the renewal has stopped: what it last set is ours to read
		l.fresh = at
	}
	cause := context.Cause(held)
	lost(nil)
	switch {
	case cause != nil && errors.Is(cause, errLockLost):
		l.token = "" // not ours any more: nothing to release
	case l.waiting.Load() > 0 && time.Since(l.since) < maxHold:
		// handed to the next writer of this process
	default:
		s.unlock(ctx, token)
	}
	if err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// unlock gives the Redis lock up (even when ctx was cancelled; its TTL covers a failed
// release). Called by the holder of local.
func (s *Store) unlock(ctx context.Context, token string) {
	s.lock.token = ""
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = s.scripts.Run(rctx, s.rdb, "leader_release", []string{keys.ConfigWriteLock()}, token).Err()
}

// abandon: a writer gave up queueing. A lock handed over for it is released when no writer
// holds local (else that writer releases or hands it on when it is done).
func (s *Store) abandon() {
	l := s.lock
	select {
	case l.local <- struct{}{}:
		if l.token != "" && l.waiting.Load() == 0 {
			s.unlock(context.Background(), l.token)
		}
		<-l.local
	default:
	}
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

// renew extends the lock every TTL/3 while fn runs; on a failed renewal it cancels fn's
// context with errLockLost. When done is closed it sends the time its last renewal began (the
// lock's TTL counts from no earlier) on renewed, if it renewed, and closes renewed.
func (s *Store) renew(held context.Context, lost context.CancelCauseFunc, token string, done chan struct{}, renewed chan time.Time) {
	defer close(renewed)
	var last time.Time
	defer func() {
		if !last.IsZero() {
			renewed <- last
		}
	}()
	t := time.NewTicker(s.lock.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		at := time.Now()
		ok, err := s.scripts.Run(held, s.rdb, "leader_claim", []string{keys.ConfigWriteLock()}, token,
			s.lock.ttl.Milliseconds()).Int64()
		if held.Err() != nil {
			return
		}
		if err != nil || ok != 1 {
			lost(errLockLost)
			return
		}
		last = at
	}
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("store: lock token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
