package emergency_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs/emergency"
	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/ledger"
	"tollgate/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newJob(f *testutil.Fixture) *emergency.Job {
	meter := usage.NewMeter(f.Ledger, f.Clock)
	return emergency.NewJob(f.Store, f.Ledger, meter, emergency.NewManager(f.Ledger, quiet()),
		emergency.Options{Threshold: 0.95, Duration: 300 * time.Second})
}

func tick(t *testing.T, j *emergency.Job, f *testutil.Fixture) {
	t.Helper()
	if err := j.Tick(f.Ctx); err != nil {
		t.Fatal(err)
	}
}

// Usage at 94 % of capacity leaves the cluster alone; above 95 % the job activates emergency
// mode (auto, 300 s, with a history entry); while active it does not re-activate.
func TestAutoActivationAboveThreshold(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 10_000)
	f.App("c", "a", 1000, 5000, 1, 0)
	f.App("c", "b", 1000, 5000, 3, 0)
	j := newJob(f)
	tick(t, j, f) // baseline
	f.Consume("c", "a", "n1", 9000)
	f.Consume("c", "b", "n1", 400)
	f.Clock.Advance(time.Second)
	tick(t, j, f)
	if s := j.Stats(); s.Activations != 0 || s.Usage["c"] != 0.94 {
		t.Fatalf("at 94 %%: %+v", s)
	}
	f.Consume("c", "a", "n1", 9000)
	f.Consume("c", "b", "n2", 1000)
	f.Clock.Advance(time.Second)
	tick(t, j, f)
	l1, _ := f.Ledger.ReadL1(f.Ctx, "c")
	now := f.RedisNowUS() / 1e6
	if s := j.Stats(); s.Activations != 1 || !l1.EmergencyActive(now) || !strings.HasPrefix(l1.EmergencyReason, "auto: usage 100.0%") {
		t.Fatalf("at 100 %%: stats %+v, L1 %+v", s, l1)
	}
	if d := l1.EmergencyUntil - now; d < 299 || d > 300 {
		t.Fatalf("auto emergency lasts %d s, want 300", d)
	}
	f.Consume("c", "a", "n1", 20000)
	f.Clock.Advance(time.Second)
	tick(t, j, f)
	h, _ := f.Ledger.EmergencyHistory(f.Ctx, "c", 10)
	if s := j.Stats(); s.Activations != 1 || len(h) != 1 || h[0].Source != "auto" || h[0].Actor != "controlplane" {
		t.Fatalf("while active: stats %+v history %+v", s, h)
	}
}

// An emergency whose end has passed (by Redis' clock) is recorded as expired with a history
// entry; one still running is left alone.
func TestExpiry(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("old", 10_000)
	f.Cluster("new", 10_000)
	now := f.RedisNowUS()
	act := ledger.Activation{Duration: 60 * time.Second, Reason: "test", Source: "manual", Actor: "t"}
	if _, _, err := f.Ledger.ActivateEmergency(f.Ctx, "old", act, now-61_000_000); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Ledger.ActivateEmergency(f.Ctx, "new", act, now); err != nil {
		t.Fatal(err)
	}
	j := newJob(f)
	tick(t, j, f)
	if s := j.Stats(); s.Expiries != 1 {
		t.Fatalf("stats %+v, want one expiry", s)
	}
	old, _ := f.Ledger.ReadL1(f.Ctx, "old")
	cur, _ := f.Ledger.ReadL1(f.Ctx, "new")
	if old.EmergencyMode || !cur.EmergencyMode {
		t.Fatalf("old %+v new %+v", old, cur)
	}
	h, _ := f.Ledger.EmergencyHistory(f.Ctx, "old", 1)
	if len(h) != 1 || h[0].Event != "deactivate" || h[0].Source != "expired" {
		t.Fatalf("history %+v", h)
	}
}

// Manual activation and deactivation through the manager, as the admin API will call them.
func TestManagerManual(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 10_000)
	m := emergency.NewManager(f.Ledger, quiet())
	until, err := m.Activate(f.Ctx, "c", 0, "storage incident", "manual", "alice")
	if err != nil || time.Until(until) < 298*time.Second {
		t.Fatalf("activate: %v %v", until, err)
	}
	if ended, err := m.Deactivate(f.Ctx, "c", "resolved", "manual", "alice"); err != nil || !ended {
		t.Fatalf("deactivate: %v %v", ended, err)
	}
	if _, err := m.Activate(f.Ctx, "c", time.Hour, "bad\x00reason", "manual", "alice"); err == nil {
		t.Fatal("a reason with a control character was accepted")
	}
}
