package users

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"tollgate/controlplane/internal/auth"
	"tollgate/internal/testutil"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	h, err := auth.NewHasher(4)
	if err != nil {
		t.Fatal(err)
	}
	return New(testutil.StartRedis(t).Client(), h, nil)
}

func TestBootstrapOnlyOnAnEmptyStore(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	created, pw, err := s.Bootstrap(ctx, "admin", "")
	if err != nil || !created || len(pw) < 20 {
		t.Fatalf("first bootstrap = %v %q %v, want a generated password", created, pw, err)
	}
	u, err := s.Get(ctx, "admin")
	if err != nil || u.Role != auth.Admin || u.PasswordHash == pw {
		t.Fatalf("admin = %+v %v", u, err)
	}
	if created, pw2, err := s.Bootstrap(ctx, "admin", ""); created || pw2 != "" || err != nil {
		t.Fatalf("second bootstrap = %v %q %v, want nothing done", created, pw2, err)
	}
}

func TestTheLastEnabledAdminStays(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, _, err := s.Bootstrap(ctx, "root", "root-password-123"); err != nil {
		t.Fatal(err)
	}
	op, yes := auth.Operator, true
	for name, err := range map[string]error{
		"demote":  func() error { _, err := s.Update(ctx, "root", Patch{Role: &op}); return err }(),
		"disable": func() error { _, err := s.Update(ctx, "root", Patch{Disabled: &yes}); return err }(),
		"delete":  s.Delete(ctx, "root"),
	} {
		if !errors.Is(err, ErrLastAdmin) {
			t.Errorf("%s the last admin: %v, want ErrLastAdmin", name, err)
		}
	}
	if _, err := s.Create(ctx, "second", "second-password-1", auth.Admin); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "root"); err != nil {
		t.Fatalf("delete one of two admins: %v", err)
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 1 || all[0].Username != "second" {
		t.Fatalf("list = %+v %v", all, err)
	}
}

// Item 6 of issue 19: a user deleted and created again under the same name does not accept the
// sessions of the deleted one, even where nothing deleted them.
func TestRecreatedUserRefusesTheOldSessions(t *testing.T) {
	h, err := auth.NewHasher(bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	clk := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s := New(testutil.StartRedis(t).Client(), h, clk)
	ctx := context.Background()
	if _, err := s.Create(ctx, "admin", "admin-password-123", auth.Admin); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "dora", "dora-password-123", auth.Operator); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	session := clk.Now().UnixMilli() // dora logs in
	u, _ := s.Get(ctx, "dora")
	if !u.Valid(session) {
		t.Fatal("the session of a live user is refused")
	}
	if err := s.Delete(ctx, "dora"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	u, err = s.Create(ctx, "dora", "other-password-123", auth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if u.Valid(session) {
		t.Fatal("the re-created user accepts the deleted user's session")
	}
	if !u.Valid(clk.Now().UnixMilli()) {
		t.Fatal("the re-created user refuses a session of the same millisecond")
	}
}
