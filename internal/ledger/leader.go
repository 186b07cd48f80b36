package ledger

import (
	"context"
	"fmt"
	"time"

	"tollgate/internal/keys"
)

// ClaimLeader takes or renews the control plane's leader lock for token; it reports whether
// token holds the lock for ttl from now.
func (l *Ledger) ClaimLeader(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	n, err := l.run.Run(ctx, l.rdb, "leader_claim", []string{keys.LeaderLock()}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, classify("leader_claim", err)
	}
	return n == 1, nil
}

// ReleaseLeader gives the lock up if token holds it.
func (l *Ledger) ReleaseLeader(ctx context.Context, token string) error {
	if err := l.run.Run(ctx, l.rdb, "leader_release", []string{keys.LeaderLock()}, token).Err(); err != nil {
		return fmt.Errorf("ledger: leader_release: %w", err)
	}
	return nil
}
