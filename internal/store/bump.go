package store

import "context"

// Bump runs write (if any), then bumps the config version and announces it, exactly as the
// store's own writes do; for config the store does not model itself (the connection limits the
// admin API writes, an app's removal). It returns the new version.
func (s *Store) Bump(ctx context.Context, write func(context.Context) error) (int64, error) {
	return s.bumpVersion(ctx, write)
}
