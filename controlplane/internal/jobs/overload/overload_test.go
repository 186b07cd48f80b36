package overload_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"tollgate/controlplane/internal/jobs/overload"
	"tollgate/controlplane/internal/jobs/usage"
	"tollgate/internal/testutil"
)

// The job records each cluster's measured usage: at 80 % nothing is reduced, at 95 % P1-P3
// fall half way to their emergency ratio (P0 untouched), and the record expires with its ttl.
func TestOverloadFactorsFollowUsage(t *testing.T) {
	f := testutil.NewFixture(t)
	f.Cluster("c", 10_000)
	f.App("c", "a", 1000, 5000, 1, 0)
	j := overload.New(f.Store, f.Ledger, usage.NewMeter(f.Ledger, f.Clock), 15*time.Second,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	step := func(consumed int64) [4]int64 {
		t.Helper()
		f.Consume("c", "a", "n1", consumed)
		f.Clock.Advance(2 * time.Second)
		if err := j.Tick(f.Ctx); err != nil {
			t.Fatal(err)
		}
		return j.Stats().Factors["c"]
	}
	if err := j.Tick(f.Ctx); err != nil { // baseline
		t.Fatal(err)
	}
	if got := step(16_000); got != [4]int64{1000, 1000, 1000, 1000} {
		t.Fatalf("at 80 %%: %v", got)
	}
	if got := step(19_000); got != [4]int64{1000, 750, 550, 500} {
		t.Fatalf("at 95 %%: %v, want P1 0.75 P2 0.55 P3 0.5", got)
	}
	l1, _ := f.Ledger.ReadL1(f.Ctx, "c")
	now := f.RedisNowUS() / 1e6
	if l1.OverloadUsage != 0.95 || l1.OverloadUntil < now+14 || l1.OverloadUntil > now+15 {
		t.Fatalf("L1 %+v at %d", l1, now)
	}
}
