// Package auth is the admin API's security core: roles, bcrypt passwords, HS256 access tokens
// with a pinned algorithm and required claims, login sessions with rotating refresh tokens and
// reuse detection, the JWT signing secret, login throttling and the per-user API rate limit.
package auth

import "errors"

// Role is what a user may do: a viewer reads, an operator also changes the limiter's config
// and emergency mode, an admin also manages users and reads everything.
type Role string

// The roles, from least to most privileged.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
	Admin    Role = "admin"
)

// ErrUnknownRole is returned by ParseRole.
var ErrUnknownRole = errors.New("unknown role")

func (r Role) rank() int {
	switch r {
	case Viewer:
		return 1
	case Operator:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// ParseRole accepts "viewer", "operator" and "admin".
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if r.rank() == 0 {
		return "", ErrUnknownRole
	}
	return r, nil
}

// Allows reports whether r may do what needs at least role min.
func (r Role) Allows(min Role) bool { return r.rank() > 0 && r.rank() >= min.rank() }
