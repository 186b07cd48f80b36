package store

// Secrets of S3 access keys: ratelimit:access_key_secrets maps an access key id to its secret
// sealed by internal/secrets (the store never sees a plain secret). A key holds a secret only
// while an app holds the key; a change is announced as the key's change (ChangeKey), which
// makes the gateways re-read the key's owner and its secret.

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// ownsKey reports whether app holds access key id key.
func (s *Store) ownsKey(ctx context.Context, app, key string) error {
	if !ValidAccessKey(key) {
		return ErrInvalidAccessKey
	}
	if err := s.checkApp(ctx, app); err != nil {
		return err
	}
	owner, err := s.rdb.HGet(ctx, keys.AccessKeys(), key).Result()
	if errors.Is(err, redis.Nil) || (err == nil && owner != app) {
		return fmt.Errorf("store: access key of app %s: %w", app, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("store: read access key: %w", err)
	}
	return nil
}

// SetAccessKeySecret stores the sealed secret of an access key id the app holds (ErrNotFound
// when it does not) and announces the key's change.
func (s *Store) SetAccessKeySecret(ctx context.Context, app, key, sealed string) (int64, error) {
	if err := s.ownsKey(ctx, app, key); err != nil {
		return 0, err
	}
	if err := s.before(ctx); err != nil {
		return 0, err
	}
	if err := s.rdb.HSet(ctx, keys.AccessKeySecrets(), key, sealed).Err(); err != nil {
		return 0, fmt.Errorf("store: write access key secret: %w", err)
	}
	// the key released in between: take the secret back with it
	if err := s.ownsKey(ctx, app, key); err != nil {
		_ = s.rdb.HDel(ctx, keys.AccessKeySecrets(), key).Err()
		return 0, err
	}
	return s.bumpVersion(WithChange(ctx, ChangeKey, key), nil)
}

// DeleteAccessKeySecret removes the secret of an access key id the app holds; ErrNotFound when
// the app does not hold the key or the key has no secret.
func (s *Store) DeleteAccessKeySecret(ctx context.Context, app, key string) (int64, error) {
	if err := s.ownsKey(ctx, app, key); err != nil {
		return 0, err
	}
	if err := s.before(ctx); err != nil {
		return 0, err
	}
	n, err := s.rdb.HDel(ctx, keys.AccessKeySecrets(), key).Result()
	if err != nil {
		return 0, fmt.Errorf("store: delete access key secret: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("store: secret of access key: %w", ErrNotFound)
	}
	return s.bumpVersion(WithChange(ctx, ChangeKey, key), nil)
}

// dropSecret removes the secret of a released access key id (part of the release's change).
func (s *Store) dropSecret(ctx context.Context, key string) error {
	if err := s.rdb.HDel(ctx, keys.AccessKeySecrets(), key).Err(); err != nil {
		return fmt.Errorf("store: delete access key secret: %w", err)
	}
	return nil
}

// SealedSecrets returns the sealed secrets of access key ids ks (those that have one), in one
// HMGET per 1,000 ids.
func (s *Store) SealedSecrets(ctx context.Context, ks []string) (map[string]string, error) {
	out := map[string]string{}
	for from := 0; from < len(ks); from += 1000 {
		batch := ks[from:min(from+1000, len(ks))]
		vals, err := s.rdb.HMGet(ctx, keys.AccessKeySecrets(), batch...).Result()
		if err != nil {
			return nil, fmt.Errorf("store: read access key secrets: %w", err)
		}
		for i, v := range vals {
			if str, ok := v.(string); ok && str != "" {
				out[batch[i]] = str
			}
		}
	}
	return out, nil
}

// PutSealedSecrets writes sealed secrets (access key id -> sealed) inside a version bump that
// announces them (an import): no check of the owners, which the import wrote before.
func (s *Store) PutSealedSecrets(ctx context.Context, sealed map[string]string) error {
	if len(sealed) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(sealed))
	for k, v := range sealed {
		args = append(args, k, v)
		AlsoChange(ctx, ChangeKey, k)
	}
	if err := s.rdb.HSet(ctx, keys.AccessKeySecrets(), args...).Err(); err != nil {
		return fmt.Errorf("store: write access key secrets: %w", err)
	}
	return nil
}
