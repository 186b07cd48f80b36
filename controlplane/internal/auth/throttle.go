package auth

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// ThrottledError: too many login attempts for the account or from the address.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many login attempts; retry after %s", e.RetryAfter)
}

// Throttle limits login attempts per account and per client address, in Redis so that every
// replica and restarts share the counts. Every attempt counts for the account until a success
// resets it; for the address only failures count (a success takes its attempt back), so one
// valid account cannot unlock guessing others from the same address.
type Throttle struct {
	rdb     redis.Cmdable
	maxUser int64
	maxIP   int64
	window  time.Duration
}

// NewThrottle returns a login throttle.
func NewThrottle(rdb redis.Cmdable, maxUser, maxIP int, window time.Duration) *Throttle {
	return &Throttle{rdb: rdb, maxUser: int64(maxUser), maxIP: int64(maxIP), window: window}
}

// Begin counts an attempt of user from ip; a *ThrottledError when either limit is exceeded.
// A user name that is not a valid id is counted by address only (it can never log in).
func (t *Throttle) Begin(ctx context.Context, user, ip string) error {
	uk, ik := t.keys(user, ip)
	var ucmd, icmd *redis.IntCmd
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if uk != "" {
			ucmd = p.Incr(ctx, uk)
			p.ExpireNX(ctx, uk, t.window)
		}
		icmd = p.Incr(ctx, ik)
		p.ExpireNX(ctx, ik, t.window)
		return nil
	})
	if err != nil {
		return fmt.Errorf("auth: login throttle: %w", err)
	}
	over := ""
	if ucmd != nil && ucmd.Val() > t.maxUser {
		over = uk
	} else if icmd.Val() > t.maxIP {
		over = ik
	}
	if over == "" {
		return nil
	}
	ttl, err := t.rdb.PTTL(ctx, over).Result()
	if err != nil || ttl <= 0 {
		ttl = t.window
	}
	return &ThrottledError{RetryAfter: ttl}
}

// Succeeded resets the account's count and takes this attempt back from the address.
func (t *Throttle) Succeeded(ctx context.Context, user, ip string) error {
	uk, ik := t.keys(user, ip)
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if uk != "" {
			p.Del(ctx, uk)
		}
		p.Decr(ctx, ik)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("auth: login throttle: %w", err)
	}
	return nil
}

func (t *Throttle) keys(user, ip string) (string, string) {
	uk := ""
	if keys.ValidID(user) {
		uk = keys.AdminLoginFailures("user", user)
	}
	id := "unknown"
	if a := net.ParseIP(ip); a != nil {
		id = hex.EncodeToString(a.To16())
	}
	return uk, keys.AdminLoginFailures("ip", id)
}
