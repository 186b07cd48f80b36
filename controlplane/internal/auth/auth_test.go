package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/internal/testutil"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestTokensRoundTripAndExpiry(t *testing.T) {
	clk := testutil.NewClock(time.Unix(1_800_000_000, 0))
	tk, err := NewTokens(secret, 15*time.Minute, clk)
	if err != nil {
		t.Fatal(err)
	}
	tok, exp, err := tk.Issue("alice", Operator, strings.Repeat("ab", 16))
	if err != nil || exp != clk.Now().Add(15*time.Minute) {
		t.Fatalf("issue: %v %v", exp, err)
	}
	c, err := tk.Verify(tok)
	if err != nil || c.Subject != "alice" || c.Role != "operator" || c.Issuer != Issuer {
		t.Fatalf("verify = %+v %v", c, err)
	}
	clk.Advance(15*time.Minute + leeway + time.Second)
	if _, err := tk.Verify(tok); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("after expiry: %v, want ErrTokenExpired", err)
	}
}

func TestNewTokensRefusesShortSecrets(t *testing.T) {
	if _, err := NewTokens([]byte("short"), time.Minute, nil); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}

func TestRoles(t *testing.T) {
	cases := []struct {
		have, need Role
		ok         bool
	}{
		{Viewer, Viewer, true}, {Viewer, Operator, false}, {Operator, Viewer, true},
		{Operator, Admin, false}, {Admin, Operator, true}, {Role("root"), Viewer, false},
	}
	for _, c := range cases {
		if got := c.have.Allows(c.need); got != c.ok {
			t.Errorf("%s allows %s = %v", c.have, c.need, got)
		}
	}
}

func TestLimiter(t *testing.T) {
	clk := testutil.NewClock(time.Unix(0, 0))
	l := NewLimiter(2, 2, clk)
	for i := 0; i < 2; i++ {
		if ok, _ := l.Allow("u"); !ok {
			t.Fatalf("request %d refused", i)
		}
	}
	if ok, wait := l.Allow("u"); ok || wait != 500*time.Millisecond {
		t.Fatalf("3rd = %v %s, want refused for 500ms", ok, wait)
	}
	clk.Advance(500 * time.Millisecond)
	if ok, _ := l.Allow("u"); !ok {
		t.Fatal("refused after the wait")
	}
}

// The failure budget: Check does not spend, Spend does; memory stays bounded whatever the keys.
func TestLimiterBudgetAndBound(t *testing.T) {
	clk := testutil.NewClock(time.Unix(0, 0))
	l := NewLimiter(1, 2, clk)
	for i := 0; i < 5; i++ {
		if ok, _ := l.Check("c"); !ok {
			t.Fatal("Check spent a token")
		}
	}
	l.Spend("c")
	l.Spend("c")
	if ok, wait := l.Check("c"); ok || wait != time.Second {
		t.Fatalf("after two failures: %v %s, want refused for 1s", ok, wait)
	}
	for i := 0; i < 3*maxBuckets; i++ {
		l.Spend(fmt.Sprint("k", i)) // none of these buckets is full, so none is idle
	}
	if n := l.Len(); n > maxBuckets {
		t.Fatalf("%d buckets, bound %d", n, maxBuckets)
	}
}

func TestSessionsRotateAndDetectReuse(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	ctx := context.Background()
	s := NewSessions(rdb, time.Hour, nil)
	ses, r1, err := s.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if k, _, _ := rdb.Scan(ctx, 0, "*refresh*", 1000).Result(); len(k) != 1 || strings.Contains(k[0], r1) {
		t.Fatalf("refresh keys %v: the token itself must never be stored", k)
	}
	got, r2, err := s.Rotate(ctx, r1)
	if err != nil || got.ID != ses.ID || r2 == r1 {
		t.Fatalf("rotate = %+v %q %v", got, r2, err)
	}
	if _, _, err := s.Rotate(ctx, r1); !errors.Is(err, ErrRefreshReused) {
		t.Fatalf("reuse = %v, want ErrRefreshReused", err)
	}
	if _, found, _ := s.Get(ctx, ses.ID); found {
		t.Fatal("the session survived a reuse")
	}
	if _, _, err := s.Rotate(ctx, r2); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("the newest token after the reuse = %v, want ErrSessionEnded", err)
	}
	for _, bad := range []string{"", "x", ses.ID + ".zz", strings.Repeat("a", 32) + "." + strings.Repeat("b", 64)} {
		if _, _, err := s.Rotate(ctx, bad); !errors.Is(err, ErrRefreshInvalid) {
			t.Errorf("Rotate(%q) = %v, want ErrRefreshInvalid", bad, err)
		}
	}
}

func TestSecretIsSharedThroughRedis(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	ctx := context.Background()
	a, srcA, err := Secret(ctx, rdb, nil)
	if err != nil || srcA != SecretGeneratedHere || len(a) != secretBytes {
		t.Fatalf("first = %d bytes %s %v", len(a), srcA, err)
	}
	b, srcB, err := Secret(ctx, rdb, nil)
	if err != nil || srcB != SecretFromRedis || string(a) != string(b) {
		t.Fatalf("second replica = %s %v, want the same secret from redis", srcB, err)
	}
	env := []byte(strings.Repeat("e", 32))
	if c, src, _ := Secret(ctx, rdb, env); src != SecretFromEnv || string(c) != string(env) {
		t.Fatalf("environment secret not used: %s", src)
	}
}

func TestHasherRefusesLongAndWeakPasswords(t *testing.T) {
	h, err := NewHasher(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"short", strings.Repeat("x", 73), "bad-utf8-\xff\xfe-pass"} {
		if _, err := h.Hash(pw); !errors.Is(err, ErrWeakPassword) {
			t.Errorf("Hash(%q) = %v", pw, err)
		}
	}
	hash, _ := h.Hash(strings.Repeat("p", 72))
	if !h.Check(hash, strings.Repeat("p", 72)) || h.Check(hash, strings.Repeat("p", 73)) || h.Check("", "") {
		t.Fatal("Check: a 73-byte password matched a 72-byte one, or an empty hash matched")
	}
}

// FuzzVerify: no input makes Verify accept a token it did not sign, or panic. (Each fuzz worker
// issues its own good token, so an accepted input must carry exactly the claims issued here.)
func FuzzVerify(f *testing.F) {
	tk, err := NewTokens(secret, time.Minute, nil)
	if err != nil {
		f.Fatal(err)
	}
	sid := strings.Repeat("cd", 16)
	good, _, _ := tk.Issue("alice", Viewer, sid)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "alice"}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, s := range []string{good, none, "", "a.b.c", good + "x", strings.Repeat("e", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := tk.Verify(s)
		if err == nil && (c.Subject != "alice" || c.SID != sid || c.Role != string(Viewer)) {
			t.Fatalf("Verify accepted %q as %+v", s, c)
		}
	})
}

// The wait after a failed login runs from the failure, not from the start of the attempt (the
// password check takes time: bcrypt at cost 12 on a busy host can take a second).
func TestLoginWaitRunsFromTheFailure(t *testing.T) {
	rdb := testutil.StartRedis(t).Client()
	ctx := context.Background()
	th := NewThrottle(rdb, 1, 100, time.Minute)
	if err := th.Begin(ctx, "alice", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	pk, _ := th.keys("alice", "192.0.2.1")
	begun, _ := rdb.HGet(ctx, pk, "until").Int64()
	start, _ := rdb.Time(ctx).Result()
	testutil.Eventually(t, 5*time.Second, func() bool { // the password check takes 300 ms
		now, _ := rdb.Time(ctx).Result()
		return now.Sub(start) >= 300*time.Millisecond
	}, "300 ms of Redis time")
	if err := th.Failed(ctx, "alice", "192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	failed, _ := rdb.HGet(ctx, pk, "until").Int64()
	if failed-begun < 300 {
		t.Fatalf("wait ends %d ms after the attempt began, %d after it failed: want it to run from the failure",
			begun-start.UnixMilli(), failed-start.UnixMilli())
	}
	var te *ThrottledError
	if err := th.Begin(ctx, "alice", "192.0.2.1"); !errors.As(err, &te) || te.RetryAfter < 600*time.Millisecond {
		t.Fatalf("next attempt: %v, want a wait of about 1 s", err)
	}
}
