package live

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"tollgate/internal/testutil"
)

// redisCommands is the number of commands Redis executed, without the measurement's own and a
// new connection's handshake, and their list.
func redisCommands(t *testing.T, f *testutil.Fixture) (int64, string) {
	return testutil.WorkCalls(testutil.CommandCalls(t, f.RDB), testutil.Housekeeping...)
}

// One collection costs the same number of Redis commands with 100 or 5,000 apps configured
// when the same 10 apps are active, its snapshot holds those 10 apps, and the cluster's totals
// (rates, dashboard) still count every app's consumption.
func TestCollectorIsBoundedByActivity(t *testing.T) {
	run := func(n int) (int64, string) {
		f := testutil.NewFixture(t)
		f.Cluster("c", 1_000_000_000)
		for i := 0; i < n; i++ {
			f.App("c", fmt.Sprintf("app-%05d", i), 10, 100, 1, 0)
		}
		for i := 0; i < 10; i++ {
			id := fmt.Sprintf("app-%05d", i*7)
			if _, err := f.Ledger.Grant(f.Ctx, "c", id, "n1", 50, 1, 0); err != nil {
				t.Fatal(err)
			}
			f.Consume("c", id, "n1", 10)
		}
		svc := New(Options{Redis: f.RDB, Catalog: f.Store, L1: f.Ledger, Clock: f.Clock,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := svc.Refresh(f.Ctx); err != nil { // the first, out of the count
			t.Fatal(err)
		}
		if err := f.RDB.ConfigResetStat(f.Ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := svc.Refresh(f.Ctx); err != nil {
			t.Fatal(err)
		}
		cmds, per := redisCommands(t, f)
		snap, err := svc.Latest(f.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Apps) != 10 || snap.TotalApps != int64(n) || len(snap.Clusters) != 1 ||
			snap.Clusters[0].Cost != 100 || snap.Clusters[0].Requests != 10 {
			t.Fatalf("%d apps: snapshot of %d apps (of %d), clusters %+v", n, len(snap.Apps), snap.TotalApps, snap.Clusters)
		}
		return cmds, per
	}
	small, smallPer := run(100)
	large, largePer := run(5000)
	t.Logf("commands of one collection: %d with 100 apps, %d with 5,000", small, large)
	if small == 0 || large != small {
		t.Fatalf("one collection: %d commands with 100 apps (%s), %d with 5,000 (%s)", small, smallPer, large, largePer)
	}
}
