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

// throttleLua is what both scripts share: Redis' clock in ms and the wait after the n-th
// attempt (none up to free-1, then base, 2*base, 4*base, ... up to the window).
const throttleLua = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local free, base, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function wait_after(n)
  return math.floor(math.min(base * 2 ^ math.min(n - free, 40), window))
end
`

// pairScript counts an attempt of one (account, client) unless it must still wait; past the
// free attempts it sets when the next may come. One key (a hash: n attempts, until ms), so it
// is atomic and works on a Redis Cluster. Returns the wait left in ms, 0 when counted.
var pairScript = redis.NewScript(throttleLua + `
local now = now_ms()
local wait = tonumber(redis.call('HGET', KEYS[1], 'until') or '0') - now
if wait > 0 then return wait end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local ttl = window
if n >= free then
  local d = wait_after(n)
  redis.call('HSET', KEYS[1], 'until', now + d)
  ttl = math.max(window, d)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
`)

// failScript stamps the wait after a failed attempt from the moment it failed (the password
// check takes time), the same wait pairScript set when the attempt began.
var failScript = redis.NewScript(throttleLua + `
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
if n < free then return 0 end
local d = wait_after(n)
redis.call('HSET', KEYS[1], 'until', now_ms() + d)
redis.call('PEXPIRE', KEYS[1], math.max(window, d))
return d
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
	if wait > 0 { // refused without a password check: not a failure of the client
		_ = t.rdb.Decr(ctx, ik).Err()
		return &ThrottledError{RetryAfter: time.Duration(wait) * time.Millisecond}
	}
	return nil
}

// Failed says that the attempt Begin let through had the wrong password: the client's wait
// for this account runs from now.
func (t *Throttle) Failed(ctx context.Context, user, ip string) error {
	pk, _ := t.keys(user, ip)
	if pk == "" {
		return nil
	}
	err := failScript.Run(ctx, t.rdb, []string{pk}, t.maxUser, FirstBackoff.Milliseconds(),
		t.window.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("auth: login throttle: %w", err)
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
