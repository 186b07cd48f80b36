package auth

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
)

// Password rules: bcrypt reads at most 72 bytes, so longer passwords are refused rather than
// silently cut.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 72
)

// ErrWeakPassword: the password breaks the length rules or is not UTF-8.
var ErrWeakPassword = errors.New("password must be 12 to 72 bytes of UTF-8")

// CheckPasswordPolicy validates a new password.
func CheckPasswordPolicy(pw string) error {
	if len(pw) < MinPasswordLen || len(pw) > MaxPasswordLen || !utf8.ValidString(pw) {
		return ErrWeakPassword
	}
	return nil
}

// Hasher hashes and checks passwords with bcrypt at a fixed cost.
type Hasher struct {
	cost  int
	dummy []byte // compared against for unknown users, so they take as long as known ones
}

// NewHasher returns a hasher; cost 0 means bcrypt.DefaultCost + 2 (12).
func NewHasher(cost int) (*Hasher, error) {
	if cost == 0 {
		cost = bcrypt.DefaultCost + 2
	}
	if cost < bcrypt.MinCost || cost > bcrypt.MaxCost {
		return nil, fmt.Errorf("auth: bcrypt cost %d out of range", cost)
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("tollgate-dummy-password"), cost)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &Hasher{cost: cost, dummy: dummy}, nil
}

// Hash returns the bcrypt hash of pw after checking the policy.
func (h *Hasher) Hash(pw string) (string, error) {
	if err := CheckPasswordPolicy(pw); err != nil {
		return "", err
	}
	b, err := bcrypt.GenerateFromPassword([]byte(pw), h.cost)
	if err != nil {
		return "", fmt.Errorf("auth: hash: %w", err)
	}
	return string(b), nil
}

// Check reports whether pw matches hash. An empty hash (unknown user) and a password longer
// than any that can be set are compared against a dummy hash so that the answer takes the same
// time, and are always false.
func (h *Hasher) Check(hash, pw string) bool {
	if hash == "" || len(pw) > MaxPasswordLen {
		_ = bcrypt.CompareHashAndPassword(h.dummy, []byte(pw[:min(len(pw), MaxPasswordLen)]))
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) == nil
}
