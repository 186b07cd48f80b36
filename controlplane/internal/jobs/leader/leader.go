// Package leader elects one control-plane replica to run the periodic jobs: a Redis lock with an
// expiry (leader_claim / leader_release), renewed well within its ttl. A replica counts as
// leader only while its last successful claim, measured from when the claim was sent, is younger
// than the ttl — so after a partition it stops acting before another replica can take over.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"tollgate/controlplane/internal/clock"
)

// Lock is the Redis lock (implemented by *ledger.Ledger).
type Lock interface {
	ClaimLeader(ctx context.Context, token string, ttl time.Duration) (bool, error)
	ReleaseLeader(ctx context.Context, token string) error
}

// Options tune the elector; zero fields take the defaults.
type Options struct {
	TTL    time.Duration // lock expiry, default 10 s
	Renew  time.Duration // claim interval, default TTL / 3
	Name   string        // readable part of the token (e.g. the host name), default "cp"
	Clock  clock.Clock   // default the real clock
	Logger *slog.Logger
}

// Elector takes part in the election until its Run returns.
type Elector struct {
	lock  Lock
	opts  Options
	token string

	mu         sync.Mutex
	validUntil time.Time
	leading    bool
}

// New returns an elector with a random token.
func New(lock Lock, o Options) (*Elector, error) {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Second
	}
	if o.Renew <= 0 || o.Renew >= o.TTL {
		o.Renew = o.TTL / 3
	}
	if o.Name == "" {
		o.Name = "cp"
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("leader: token: %w", err)
	}
	return &Elector{lock: lock, opts: o, token: o.Name + "-" + hex.EncodeToString(b[:])}, nil
}

// Token identifies this replica in the lock.
func (e *Elector) Token() string { return e.token }

// IsLeader reports whether this replica holds the lock now.
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading && e.opts.Clock.Now().Before(e.validUntil)
}

// Run claims the lock every Renew until ctx is done, then releases it if held.
func (e *Elector) Run(ctx context.Context) {
	t := time.NewTicker(e.opts.Renew)
	defer t.Stop()
	for {
		e.claim(ctx)
		select {
		case <-ctx.Done():
			e.release()
			return
		case <-t.C:
		}
	}
}

func (e *Elector) claim(ctx context.Context) {
	sent := e.opts.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, e.opts.Renew)
	ok, err := e.lock.ClaimLeader(cctx, e.token, e.opts.TTL)
	cancel()
	e.mu.Lock()
	was := e.leading
	switch {
	case err != nil:
		// keep what we had until it expires: Redis may be slow, the lock may still be ours
	case ok:
		e.leading, e.validUntil = true, sent.Add(e.opts.TTL)
	default:
		e.leading = false
	}
	now := e.leading
	e.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		e.opts.Logger.Warn("leader lock claim failed", "token", e.token, "err", err)
	}
	if now != was {
		e.opts.Logger.Info("leadership changed", "token", e.token, "leader", now)
	}
}

func (e *Elector) release() {
	e.mu.Lock()
	held := e.leading
	e.leading = false
	e.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.lock.ReleaseLeader(ctx, e.token); err != nil {
		e.opts.Logger.Warn("leader lock release failed", "token", e.token, "err", err)
		return
	}
	e.opts.Logger.Info("leadership released", "token", e.token)
}
