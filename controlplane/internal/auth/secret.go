package auth

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// secretBytes is the size of a generated signing secret (512 bits, the HMAC-SHA256 block).
const secretBytes = 64

// Secret sources, for the start-up log.
const (
	SecretFromEnv       = "environment"
	SecretFromRedis     = "redis"
	SecretGeneratedHere = "generated"
)

// Secret returns the JWT signing secret: fromEnv when it is set, else the secret kept in Redis,
// which the first replica to start generates and stores with SET NX (so every replica signs with
// the same key, across restarts). Redis is where all the rest of the control plane's state lives
// — users, sessions, config — and whoever can read it can already change every limit, so it adds
// no new exposure; the environment variable is there for deployments that keep secrets apart.
func Secret(ctx context.Context, rdb redis.Cmdable, fromEnv []byte) ([]byte, string, error) {
	if len(fromEnv) > 0 {
		return fromEnv, SecretFromEnv, nil
	}
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, "", fmt.Errorf("auth: generate secret: %w", err)
	}
	set, err := rdb.SetNX(ctx, keys.AdminSecret(), hex.EncodeToString(b), 0).Result()
	if err != nil {
		return nil, "", fmt.Errorf("auth: store secret: %w", err)
	}
	if set {
		return b, SecretGeneratedHere, nil
	}
	v, err := rdb.Get(ctx, keys.AdminSecret()).Result()
	if err != nil {
		return nil, "", fmt.Errorf("auth: read secret: %w", err)
	}
	stored, err := hex.DecodeString(v)
	if err != nil || len(stored) < 32 {
		return nil, "", fmt.Errorf("auth: the secret in %s is damaged; delete it to generate a new one", keys.AdminSecret())
	}
	return stored, SecretFromRedis, nil
}
