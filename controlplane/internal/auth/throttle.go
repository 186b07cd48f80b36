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

// ThrottledError: too many login attempts for the account from this client, or too many
// failures from the client.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many login attempts; retry after %s", e.RetryAfter)
}

// FirstBackoff is the wait after the last free failure of an account from a client; each
// further failure doubles it, up to the window.
const FirstBackoff = time.Second

// Throttle limits login attempts, in Redis so that every replica and restarts share the counts.
//
// Failures count per (account, client): after maxUser of them the client must wait before its
// next attempt at that account, a wait that doubles with each further failure (FirstBackoff,
// 2 s, 4 s, ... up to the window). There is no lock of the account itself: during an attack the
// right password from another client still works. A client (IPv4 address or IPv6 /64, see
// ClientID) also gets at most maxIP failed attempts per window whatever the accounts, so one
// valid account cannot unlock guessing others from the same client. A success clears the
// (account, client) count and takes its attempt back from the client's.
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

// pairScript counts an attempt of one (account, client) unless it must still wait; past the
// free attempts it sets when the next may come. One key (a hash: n attempts, until ms), so it
// is atomic and works on a Redis Cluster. Returns the wait left in ms, 0 when counted.
var pairScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = tonumber(redis.call('HGET', KEYS[1], 'until') or '0') - now
if wait > 0 then return wait end
local free, base, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local ttl = window
if n >= free then
  local delay = math.floor(math.min(base * 2 ^ math.min(n - free, 40), window))
  redis.call('HSET', KEYS[1], 'until', now + delay)
  ttl = math.max(window, delay)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
`)

// Begin counts an attempt of user from the client at ip; a *ThrottledError when the client
// must wait for this account or has failed too often. A user name that is not a valid id is
// counted by client only (it can never log in).
func (t *Throttle) Begin(ctx context.Context, user, ip string) error {
	pk, ik := t.keys(user, ip)
	var icmd *redis.IntCmd
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		icmd = p.Incr(ctx, ik)
		p.ExpireNX(ctx, ik, t.window)
		return nil
	})
	if err != nil {
		return fmt.Errorf("auth: login throttle: %w", err)
	}
	if icmd.Val() > t.maxIP {
		ttl, err := t.rdb.PTTL(ctx, ik).Result()
		if err != nil || ttl <= 0 {
			ttl = t.window
		}
		return &ThrottledError{RetryAfter: ttl}
	}
	if pk == "" {
		return nil
	}
	wait, err := pairScript.Run(ctx, t.rdb, []string{pk}, t.maxUser, FirstBackoff.Milliseconds(),
		t.window.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("auth: login throttle: %w", err)
	}
	if wait > 0 {
		return &ThrottledError{RetryAfter: time.Duration(wait) * time.Millisecond}
	}
	return nil
}

// Succeeded clears the (account, client) count and takes this attempt back from the client.
func (t *Throttle) Succeeded(ctx context.Context, user, ip string) error {
	pk, ik := t.keys(user, ip)
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if pk != "" {
			p.Del(ctx, pk)
		}
		p.Decr(ctx, ik)
		p.ExpireNX(ctx, ik, t.window) // never a count without an expiry
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("auth: login throttle: %w", err)
	}
	return nil
}

func (t *Throttle) keys(user, ip string) (string, string) {
	client := ClientID(ip)
	pk := ""
	if keys.ValidID(user) {
		pk = keys.AdminLoginFailures("user", user+":"+client)
	}
	return pk, keys.AdminLoginFailures("ip", client)
}

// ClientID is the client a login attempt or an anonymous refusal is counted for: an IPv4
// address (also when written IPv4-mapped), or the /64 of an IPv6 address (one site or host
// usually holds a whole /64, so counting its addresses one by one would count nothing);
// "unknown" for anything else.
func ClientID(ip string) string {
	a := net.ParseIP(ip)
	if a == nil {
		return "unknown"
	}
	if v4 := a.To4(); v4 != nil {
		return hex.EncodeToString(v4)
	}
	return hex.EncodeToString(a.To16()[:8]) + "/64"
}
