package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/controlplane/internal/clock"
	"tollgate/internal/keys"
)

// Claims fixed for every token of this API.
const (
	Issuer      = "tollgate-controlplane"
	Audience    = "tollgate-admin-api"
	MaxTokenLen = 4096 // longer Authorization values are refused before any parsing
	leeway      = 5 * time.Second
)

// Token errors; the API answers both with 401 and the reason.
var (
	ErrTokenInvalid = errors.New("invalid token")
	ErrTokenExpired = errors.New("token expired")
)

// Claims of an access token: the registered claims (iss, aud, sub, exp, iat, nbf, jti are
// all set and iss, aud, exp, iat required) plus the role at issue time and the session id.
type Claims struct {
	Role string `json:"role"`
	SID  string `json:"sid"`
	jwt.RegisteredClaims
}

// Tokens issues and verifies HS256 access tokens.
type Tokens struct {
	secret []byte
	ttl    time.Duration
	clock  clock.Clock
	parser *jwt.Parser
}

// NewTokens returns the token service; the secret must have at least 32 bytes.
func NewTokens(secret []byte, ttl time.Duration, clk clock.Clock) (*Tokens, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("auth: jwt secret of %d bytes, want at least 32", len(secret))
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("auth: access token ttl %s", ttl)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), // never "none", never RS/ES
		jwt.WithIssuer(Issuer), jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(clk.Now), jwt.WithStrictDecoding(),
	)
	return &Tokens{secret: append([]byte(nil), secret...), ttl: ttl, clock: clk, parser: p}, nil
}

// TTL is the lifetime of an access token.
func (t *Tokens) TTL() time.Duration { return t.ttl }

// Issue signs an access token for user in session sid.
func (t *Tokens) Issue(user string, role Role, sid string) (string, time.Time, error) {
	now := t.clock.Now()
	exp := now.Add(t.ttl)
	jti, err := randomHex(16)
	if err != nil {
		return "", time.Time{}, err
	}
	c := Claims{Role: string(role), SID: sid, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: user, Audience: jwt.ClaimStrings{Audience},
		ExpiresAt: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), ID: jti,
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(t.secret)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign: %w", err)
	}
	return s, exp, nil
}

// Verify checks the signature, the algorithm, every required claim and the ids in it.
func (t *Tokens) Verify(raw string) (*Claims, error) {
	if raw == "" || len(raw) > MaxTokenLen {
		return nil, ErrTokenInvalid
	}
	var c Claims
	_, err := t.parser.ParseWithClaims(raw, &c, func(tok *jwt.Token) (any, error) {
		if tok.Method != jwt.SigningMethodHS256 {
			return nil, ErrTokenInvalid
		}
		return t.secret, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, ErrTokenExpired
	case err != nil:
		return nil, ErrTokenInvalid
	}
	if c.IssuedAt == nil || c.ID == "" || !keys.ValidID(c.Subject) || !validSID(c.SID) {
		return nil, ErrTokenInvalid
	}
	if _, err := ParseRole(c.Role); err != nil {
		return nil, ErrTokenInvalid
	}
	return &c, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// validSID: a session id is 32 lower-case hex digits.
func validSID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}
