package admin

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/metrics"
	"tollgate/internal/keys"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
)

// TestStartReportsStoredViolations: at start, config stored before the contract (or by hand)
// that the contract refuses (and an app whose L2 state is not what the API shows) is named in a
// warning and counted by tollgate_cp_config_violations; a store that meets the contract is said
// to.
func TestStartReportsStoredViolations(t *testing.T) {
	f := testutil.NewFixture(t)
	if _, err := f.Store.PutCluster(f.Ctx, store.Cluster{ID: "c1", Capacity: 1000, ReservedRatio: 0.1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Store.PutApp(f.Ctx, store.App{AppID: "a1", ClusterID: "c1", GuaranteedQuota: 10, BurstQuota: 10, Priority: 1, CBw: 1, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	report := func() (string, float64) {
		var buf bytes.Buffer
		m := metrics.New(metrics.Options{})
		reportViolations(f.Ctx, slog.New(slog.NewTextHandler(&buf, nil)), durable.Reader{Redis: f.RDB, Store: f.Store}, m)
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "tollgate_cp_config_violations" {
				return buf.String(), mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no tollgate_cp_config_violations")
		return "", 0
	}
	if out, n := report(); n != 0 || !strings.Contains(out, "meets the config contract") {
		t.Fatalf("a valid store: %v %s", n, out)
	}
	if err := f.RDB.HSet(f.Ctx, keys.AppsIndex(), "a1", `{"app_id":"a1","cluster_id":"c1","guaranteed_quota":10,"burst_quota":10,"priority":7,"c_bw":1,"max_borrow":0,"enabled":true}`).Err(); err != nil {
		t.Fatal(err)
	}
	// the index edited alone: refused by the contract, and not what the gateway enforces
	if out, n := report(); n != 2 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "apps[a1].priority:invalid_priority") ||
		!strings.Contains(out, "apps[a1].priority:l2_differs") {
		t.Fatalf("a stored priority 7: %v %s", n, out)
	}
}
