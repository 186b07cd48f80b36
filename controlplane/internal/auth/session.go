package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/clock"
	"tollgate/internal/keys"
)

// Refresh-token errors (401 in the API).
var (
	ErrRefreshInvalid = errors.New("invalid refresh token")
	// ErrRefreshReused: a refresh token was presented a second time. The token was stolen or
	// replayed, so its whole session is revoked.
	ErrRefreshReused = errors.New("refresh token reused; session revoked")
	ErrSessionEnded  = errors.New("session ended")
)

// Session is a login: the family of rotating refresh tokens and of the access tokens issued
// from them. It ends at login time + TTL (absolute), at logout, or when a token is reused.
type Session struct {
	ID      string
	User    string
	Created time.Time
	Expires time.Time
}

// Sessions keeps sessions and refresh tokens in Redis. A refresh token is "<sid>.<secret>";
// Redis holds only its SHA-256, with value "live:<sid>" until it is used and "used:<sid>"
// afterwards (until the session's end), which is how a second use is detected.
type Sessions struct {
	rdb   Redis
	ttl   time.Duration
	clock clock.Clock
}

// Redis is what sessions need of a client (every go-redis client implements it).
type Redis interface {
	redis.Cmdable
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// NewSessions returns the session store; ttl is the absolute session lifetime.
func NewSessions(rdb Redis, ttl time.Duration, clk clock.Clock) *Sessions {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Sessions{rdb: rdb, ttl: ttl, clock: clk}
}

// Create starts a session for user and returns it with its first refresh token.
func (s *Sessions) Create(ctx context.Context, user string) (Session, string, error) {
	sid, err := randomHex(16)
	if err != nil {
		return Session{}, "", err
	}
	now := s.clock.Now()
	ses := Session{ID: sid, User: user, Created: now, Expires: now.Add(s.ttl)}
	err = s.rdb.HSet(ctx, keys.AdminSession(sid), "user", user, "created", now.UnixMilli(),
		"expires", ses.Expires.Unix()).Err()
	if err == nil {
		err = s.rdb.ExpireAt(ctx, keys.AdminSession(sid), ses.Expires).Err()
	}
	if err == nil { // the user's index lives as long as its newest session
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, keys.AdminUserSessions(user), sid)
			p.ExpireAt(ctx, keys.AdminUserSessions(user), ses.Expires)
			return nil
		})
	}
	if err != nil {
		return Session{}, "", fmt.Errorf("auth: create session: %w", err)
	}
	refresh, err := s.newRefresh(ctx, ses)
	return ses, refresh, err
}

func (s *Sessions) newRefresh(ctx context.Context, ses Session) (string, error) {
	secret, err := randomHex(32)
	if err != nil {
		return "", err
	}
	tok := ses.ID + "." + secret
	left := ses.Expires.Sub(s.clock.Now())
	if left < time.Second {
		return "", ErrSessionEnded
	}
	if err := s.rdb.Set(ctx, refreshKey(tok), "live:"+ses.ID, left).Err(); err != nil {
		return "", fmt.Errorf("auth: store refresh token: %w", err)
	}
	return tok, nil
}

// Rotate spends a refresh token and returns its session and the next refresh token. A token
// already spent revokes the session (ErrRefreshReused).
func (s *Sessions) Rotate(ctx context.Context, refresh string) (Session, string, error) {
	ses, err := s.spend(ctx, refresh)
	if err != nil {
		return Session{}, "", err
	}
	next, err := s.newRefresh(ctx, ses)
	return ses, next, err
}

// spend marks the token used (SET XX KEEPTTL GET: atomic, the old value tells who was first)
// and loads its live session.
func (s *Sessions) spend(ctx context.Context, refresh string) (Session, error) {
	sid, ok := refreshSID(refresh)
	if !ok {
		return Session{}, ErrRefreshInvalid
	}
	old, err := s.rdb.Do(ctx, "SET", refreshKey(refresh), "used:"+sid, "XX", "KEEPTTL", "GET").Text()
	switch {
	case errors.Is(err, redis.Nil):
		return Session{}, ErrRefreshInvalid
	case err != nil:
		return Session{}, fmt.Errorf("auth: spend refresh token: %w", err)
	case old == "used:"+sid:
		if err := s.Revoke(ctx, sid); err != nil {
			return Session{}, err
		}
		return Session{ID: sid}, ErrRefreshReused
	case old != "live:"+sid:
		return Session{}, ErrRefreshInvalid
	}
	ses, found, err := s.Get(ctx, sid)
	if err != nil {
		return Session{}, err
	}
	if !found {
		return Session{}, ErrSessionEnded
	}
	return ses, nil
}

// Get loads a session; found is false once it ended.
func (s *Sessions) Get(ctx context.Context, sid string) (Session, bool, error) {
	if !validSID(sid) {
		return Session{}, false, nil
	}
	m, err := s.rdb.HGetAll(ctx, keys.AdminSession(sid)).Result()
	if err != nil {
		return Session{}, false, fmt.Errorf("auth: read session: %w", err)
	}
	if m["user"] == "" {
		return Session{}, false, nil
	}
	created, _ := strconv.ParseInt(m["created"], 10, 64)
	expires, _ := strconv.ParseInt(m["expires"], 10, 64)
	return Session{ID: sid, User: m["user"], Created: time.UnixMilli(created),
		Expires: time.Unix(expires, 0)}, true, nil
}

// Logout ends the session of a refresh token (spending it first, so a reused token still
// revokes). It returns the session that ended.
func (s *Sessions) Logout(ctx context.Context, refresh string) (Session, error) {
	ses, err := s.spend(ctx, refresh)
	if err != nil {
		return ses, err
	}
	return ses, s.Revoke(ctx, ses.ID)
}

// Revoke ends a session: its access tokens fail the per-request session check at once and its
// refresh tokens no longer rotate.
func (s *Sessions) Revoke(ctx context.Context, sid string) error {
	if !validSID(sid) {
		return nil
	}
	if err := s.rdb.Del(ctx, keys.AdminSession(sid)).Err(); err != nil {
		return fmt.Errorf("auth: revoke session: %w", err)
	}
	return nil
}

// RevokeUser ends every session of user (delete, disable, role or password change): their
// access tokens fail the per-request check at once and their refresh tokens no longer rotate.
func (s *Sessions) RevokeUser(ctx context.Context, user string) error {
	idx := keys.AdminUserSessions(user)
	sids, err := s.rdb.SMembers(ctx, idx).Result()
	if err != nil {
		return fmt.Errorf("auth: revoke sessions of %q: %w", user, err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sid := range sids { // one key per command: sessions may live in different slots
			if validSID(sid) {
				p.Del(ctx, keys.AdminSession(sid))
			}
		}
		p.Del(ctx, idx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("auth: revoke sessions of %q: %w", user, err)
	}
	return nil
}

// SessionKey is the Redis hash of a live session; its field SessionCreatedField holds the
// login time in Unix milliseconds (for callers that read it in a pipeline with other reads).
func SessionKey(sid string) string { return keys.AdminSession(sid) }

// SessionCreatedField is the field of SessionKey holding the login time (Unix ms).
const SessionCreatedField = "created"

func refreshKey(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return keys.AdminRefresh(hex.EncodeToString(sum[:]))
}

// refreshSID checks the shape "<32 hex>.<64 hex>" and returns the session id.
func refreshSID(tok string) (string, bool) {
	sid, secret, ok := strings.Cut(tok, ".")
	if !ok || !validSID(sid) || len(secret) != 64 || !validSID(secret[:32]) || !validSID(secret[32:]) {
		return "", false
	}
	return sid, true
}
