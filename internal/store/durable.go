package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// ErrStoreLost: the config store is not the one this control plane knew (its epoch vanished or
// changed, or its version went backwards); config writes are refused until it is restored.
var ErrStoreLost = errors.New("config store lost")

// Hooks make the store's writes durable (set by the control plane; all optional).
type Hooks struct {
	// Before runs before every config write; an error (ErrStoreLost) refuses the write.
	Before func(ctx context.Context) error
	// Replicas is how many replicas a config write waits for (WAIT); 0: none.
	Replicas func(ctx context.Context) int
	// WaitTimeout bounds the WAIT (default 1 s).
	WaitTimeout time.Duration
	// After sees the version of every config write (e.g. to take a snapshot).
	After func(version int64)
}

// SetHooks installs the durability hooks (before the store is used).
func (s *Store) SetHooks(h Hooks) {
	if h.WaitTimeout <= 0 {
		h.WaitTimeout = time.Second
	}
	s.hooks = h
}

func (s *Store) before(ctx context.Context) error {
	if s.hooks.Before == nil {
		return nil
	}
	return s.hooks.Before(ctx)
}

// Ack collects what the config writes of one request got from WAIT; the API reports it.
type Ack struct {
	mu      sync.Mutex
	writes  int
	wanted  int
	acked   int
	failure string
}

type ackKey struct{}

// WithAck returns a context whose config writes record their replication in the returned Ack.
func WithAck(ctx context.Context) (context.Context, *Ack) {
	a := &Ack{acked: -1}
	return context.WithValue(ctx, ackKey{}, a), a
}

func ackFrom(ctx context.Context) *Ack {
	a, _ := ctx.Value(ackKey{}).(*Ack)
	return a
}

func (a *Ack) record(wanted, acked int, failure string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes++
	if wanted > a.wanted {
		a.wanted = wanted
	}
	if a.acked < 0 || acked < a.acked {
		a.acked = acked
	}
	if failure != "" {
		a.failure = failure
	}
}

// Result is what the writes got: whether any write happened, the replicas asked for and the
// fewest that acknowledged a write, and why a WAIT failed ("" when it did not).
func (a *Ack) Result() (writes, wanted, acked int, failure string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	acked = a.acked
	if acked < 0 {
		acked = 0
	}
	return a.writes, a.wanted, acked, a.failure
}

// Epoch returns the store's epoch, "" when it has none.
func (s *Store) Epoch(ctx context.Context) (string, error) {
	v, err := s.rdb.Get(ctx, keys.ConfigEpoch()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: epoch: %w", err)
	}
	return v, nil
}

// EnsureEpoch writes a new random epoch unless the store has one (SET NX) and returns the
// store's epoch.
func (s *Store) EnsureEpoch(ctx context.Context) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("store: epoch: %w", err)
	}
	if err := s.rdb.SetNX(ctx, keys.ConfigEpoch(), hex.EncodeToString(b), 0).Err(); err != nil {
		return "", fmt.Errorf("store: write epoch: %w", err)
	}
	return s.Epoch(ctx)
}

// SetEpochVersion puts an epoch and a config version into the store (restore), then announces
// the version.
func (s *Store) SetEpochVersion(ctx context.Context, epoch string, version int64) error {
	if err := s.rdb.Set(ctx, keys.ConfigEpoch(), epoch, 0).Err(); err != nil {
		return fmt.Errorf("store: write epoch: %w", err)
	}
	if err := s.rdb.Set(ctx, keys.ConfigVersion(), version, 0).Err(); err != nil {
		return fmt.Errorf("store: write version: %w", err)
	}
	if err := s.rdb.Publish(ctx, keys.ConfigChannel(), version).Err(); err != nil {
		return fmt.Errorf("store: publish version: %w", err)
	}
	return nil
}

// incr bumps the config version; when replicas are wanted, the INCR and a WAIT go down one
// connection in one pipeline: WAIT waits for the writes of its own connection, and the INCR is
// this change's last write, after every other one in the replication stream.
func (s *Store) incr(ctx context.Context) (int64, error) {
	n := 0
	if s.hooks.Replicas != nil {
		n = s.hooks.Replicas(ctx)
	}
	if n <= 0 {
		v, err := s.rdb.Incr(ctx, keys.ConfigVersion()).Result()
		if err == nil {
			ackFrom(ctx).record(0, 0, "")
		}
		return v, err
	}
	var incr *redis.IntCmd
	var wait *redis.Cmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, keys.ConfigVersion())
		wait = p.Do(ctx, "WAIT", n, s.hooks.WaitTimeout.Milliseconds())
		return nil
	})
	if incr == nil || incr.Err() != nil {
		if err == nil {
			err = errors.New("no reply")
		}
		return 0, err
	}
	acked, werr := wait.Int64()
	failure := ""
	if werr != nil {
		failure = "wait_failed"
	} else if int(acked) < n {
		failure = "replicas_timeout"
	}
	ackFrom(ctx).record(n, int(acked), failure)
	return incr.Val(), nil
}
