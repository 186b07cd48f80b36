// Package users keeps the admin API's accounts in Redis (hash ratelimit:admin:users, one JSON
// record per user): bcrypt hashes, roles, the first admin created on first run, and the rule
// that the last enabled admin can be neither removed, disabled nor demoted.
package users

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/clock"
	"tollgate/internal/keys"
)

// Errors of the user store.
var (
	ErrNotFound    = errors.New("user not found")
	ErrExists      = errors.New("user already exists")
	ErrInvalidName = errors.New("user name must match ^[A-Za-z0-9_-]{1,128}$")
	ErrLastAdmin   = errors.New("the last enabled admin cannot be removed, disabled or demoted")
)

const (
	scanCount = 200
	txRetries = 5
)

// User is one account. TokensAfter (Unix milliseconds) ends every session started before it,
// with its access and refresh tokens: it moves on a password, role or state change.
type User struct {
	Username     string    `json:"username"`
	Role         auth.Role `json:"role"`
	PasswordHash string    `json:"password_hash"`
	Disabled     bool      `json:"disabled"`
	CreatedAt    int64     `json:"created_at"`
	UpdatedAt    int64     `json:"updated_at"`
	TokensAfter  int64     `json:"tokens_after"`
}

// View is a user as the API shows it (never the hash).
type View struct {
	Username  string    `json:"username"`
	Role      auth.Role `json:"role"`
	Disabled  bool      `json:"disabled"`
	CreatedAt int64     `json:"created_at"`
	UpdatedAt int64     `json:"updated_at"`
}

// View drops the secret fields.
func (u User) View() View {
	return View{Username: u.Username, Role: u.Role, Disabled: u.Disabled, CreatedAt: u.CreatedAt,
		UpdatedAt: u.UpdatedAt}
}

// Valid reports whether a session started at createdMS (Unix ms) may act for u. A session of
// the same millisecond as TokensAfter is valid (a login right after its user was created); the
// API also deletes a changed user's sessions (auth.Sessions.RevokeUser).
func (u User) Valid(createdMS int64) bool { return !u.Disabled && createdMS >= u.TokensAfter }

// Patch changes some fields of a user; nil fields stay.
type Patch struct {
	Role     *auth.Role
	Password *string
	Disabled *bool
}

// Store is the user store.
type Store struct {
	rdb    redis.UniversalClient
	hasher *auth.Hasher
	clock  clock.Clock
	hooks  Hooks
}

// Hooks make user writes durable like config writes: Before may refuse a write (a lost config
// store), After runs after every write (the config version bump with its WAIT and snapshot).
type Hooks struct {
	Before func(ctx context.Context) error
	After  func(ctx context.Context) error
}

// SetHooks installs the hooks (before the store is used).
func (s *Store) SetHooks(h Hooks) { s.hooks = h }

func (s *Store) before(ctx context.Context) error {
	if s.hooks.Before == nil {
		return nil
	}
	return s.hooks.Before(ctx)
}

func (s *Store) after(ctx context.Context, err error) error {
	if err != nil || s.hooks.After == nil {
		return err
	}
	return s.hooks.After(ctx)
}

// New returns the store.
func New(rdb redis.UniversalClient, h *auth.Hasher, clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Store{rdb: rdb, hasher: h, clock: clk}
}

// Decode reads a stored record (for callers that fetched it in their own pipeline).
func Decode(name, doc string) (User, error) {
	var u User
	if err := json.Unmarshal([]byte(doc), &u); err != nil || u.Username != name {
		return User{}, fmt.Errorf("users: damaged record of %q", name)
	}
	if _, err := auth.ParseRole(string(u.Role)); err != nil {
		return User{}, fmt.Errorf("users: record of %q: %w", name, err)
	}
	return u, nil
}

// Get reads one user.
func (s *Store) Get(ctx context.Context, name string) (User, error) {
	if !keys.ValidID(name) {
		return User{}, ErrNotFound
	}
	doc, err := s.rdb.HGet(ctx, keys.AdminUsers(), name).Result()
	if errors.Is(err, redis.Nil) {
		return User{}, ErrNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("users: get: %w", err)
	}
	return Decode(name, doc)
}

// List returns every user sorted by name (HSCAN, never a blocking full read).
func (s *Store) List(ctx context.Context) ([]User, error) {
	return list(ctx, s.rdb)
}

func list(ctx context.Context, rdb redis.Cmdable) ([]User, error) {
	out := []User{}
	seen := map[string]bool{}
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, keys.AdminUsers(), cursor, "", scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("users: list: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			u, err := Decode(kv[i], kv[i+1])
			if err != nil || seen[u.Username] {
				continue // a damaged record is skipped, never fatal to the listing
			}
			seen[u.Username] = true
			out = append(out, u)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Username < out[j].Username })
	return out, nil
}

// Create adds a user; ErrExists if the name is taken.
func (s *Store) Create(ctx context.Context, name, password string, role auth.Role) (User, error) {
	if !keys.ValidID(name) {
		return User{}, ErrInvalidName
	}
	if _, err := auth.ParseRole(string(role)); err != nil {
		return User{}, err
	}
	hash, err := s.hasher.Hash(password)
	if err != nil {
		return User{}, err
	}
	if err := s.before(ctx); err != nil {
		return User{}, err
	}
	now := s.clock.Now()
	// TokensAfter = now: a session left by an earlier user of this name (deleted) stays ended
	u := User{Username: name, Role: role, PasswordHash: hash, CreatedAt: now.Unix(), UpdatedAt: now.Unix(),
		TokensAfter: now.UnixMilli()}
	doc, _ := json.Marshal(u)
	ok, err := s.rdb.HSetNX(ctx, keys.AdminUsers(), name, doc).Result()
	if err != nil {
		return User{}, fmt.Errorf("users: create: %w", err)
	}
	if !ok {
		return User{}, ErrExists
	}
	return u, s.after(ctx, nil)
}

// Update applies p to a user, atomically (WATCH) with the last-admin rule.
func (s *Store) Update(ctx context.Context, name string, p Patch) (User, error) {
	var hash string
	if p.Password != nil {
		h, err := s.hasher.Hash(*p.Password)
		if err != nil {
			return User{}, err
		}
		hash = h
	}
	if p.Role != nil {
		if _, err := auth.ParseRole(string(*p.Role)); err != nil {
			return User{}, err
		}
	}
	if err := s.before(ctx); err != nil {
		return User{}, err
	}
	var out User
	err := s.tx(ctx, func(all []User, tx *redis.Tx) error {
		u, ok := find(all, name)
		if !ok {
			return ErrNotFound
		}
		if p.Role != nil {
			u.Role = *p.Role
		}
		if p.Disabled != nil {
			u.Disabled = *p.Disabled
		}
		if hash != "" {
			u.PasswordHash = hash
		}
		if err := keepAdmin(all, u); err != nil {
			return err
		}
		now := s.clock.Now()
		u.UpdatedAt = now.Unix()
		u.TokensAfter = now.UnixMilli() // sessions of the old role or password end now
		doc, _ := json.Marshal(u)
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HSet(ctx, keys.AdminUsers(), name, doc)
			return nil
		})
		out = u
		return err
	})
	return out, s.after(ctx, err)
}

// Delete removes a user (the last enabled admin stays).
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.before(ctx); err != nil {
		return err
	}
	return s.after(ctx, s.tx(ctx, func(all []User, tx *redis.Tx) error {
		u, ok := find(all, name)
		if !ok {
			return ErrNotFound
		}
		u.Disabled = true
		if err := keepAdmin(all, u); err != nil {
			return err
		}
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.HDel(ctx, keys.AdminUsers(), name)
			return nil
		})
		return err
	}))
}

// tx runs fn over the current users under WATCH of the users hash, retrying on conflicts.
func (s *Store) tx(ctx context.Context, fn func(all []User, tx *redis.Tx) error) error {
	for i := 0; i < txRetries; i++ {
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			all, err := list(ctx, tx)
			if err != nil {
				return err
			}
			return fn(all, tx)
		}, keys.AdminUsers())
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("users: too many concurrent changes: %w", redis.TxFailedErr)
}

func find(all []User, name string) (User, bool) {
	for _, u := range all {
		if u.Username == name {
			return u, true
		}
	}
	return User{}, false
}

// keepAdmin refuses a change to u that leaves no enabled admin.
func keepAdmin(all []User, u User) error {
	for _, o := range all {
		if o.Username != u.Username && o.Role == auth.Admin && !o.Disabled {
			return nil
		}
	}
	if u.Role == auth.Admin && !u.Disabled {
		return nil
	}
	return ErrLastAdmin
}

// Bootstrap creates the first admin when there is no user at all. With an empty password one
// is generated and returned (to be shown once); created is false when users already exist.
func (s *Store) Bootstrap(ctx context.Context, name, password string) (bool, string, error) {
	n, err := s.rdb.HLen(ctx, keys.AdminUsers()).Result()
	if err != nil {
		return false, "", fmt.Errorf("users: bootstrap: %w", err)
	}
	if n > 0 {
		return false, "", nil
	}
	generated := ""
	if password == "" {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return false, "", fmt.Errorf("users: bootstrap: %w", err)
		}
		password = base64.RawURLEncoding.EncodeToString(b)
		generated = password
	}
	_, err = s.Create(ctx, name, password, auth.Admin)
	if errors.Is(err, ErrExists) { // another replica won the race
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return true, generated, nil
}

// Now is the store's clock (for callers stamping tokens against TokensAfter).
func (s *Store) Now() time.Time { return s.clock.Now() }
