package api

import (
	"context"
	"testing"

	"tollgate/internal/keys"
)

// TestOneAllocationCap: an import and the API apply the same cap, (1 - reserved_ratio) x
// capacity: an app an import stores at 95 % of a cluster without reserve is taken back by the
// API unchanged (its update is accepted), and the cap holds one token above.
func TestOneAllocationCap(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	doc := map[string]any{"kind": "tollgate-config/v1",
		"clusters": []any{map[string]any{"id": "c0", "capacity": 1000, "reserved_ratio": 0}},
		"apps": []any{map[string]any{"app_id": "big", "cluster_id": "c0", "guaranteed_quota": 950,
			"burst_quota": 950, "priority": 1, "c_bw": 1, "max_borrow": 0, "enabled": true}},
		"rules": []any{}, "breakers": []any{}}
	if r := f.call(t, "POST", "/api/v1/config/import?apply=true", tok, doc); r.code != 200 || r.get("data", "applied") != true {
		t.Fatalf("import: %d %s", r.code, r.raw)
	}
	if r := f.call(t, "PUT", "/api/v1/apps/big", tok, map[string]any{"guaranteed_quota": 950, "burst_quota": 950, "priority": 1}); r.code != 200 {
		t.Fatalf("the imported app re-submitted unchanged: %d %s", r.code, r.raw)
	}
	if r := f.call(t, "PUT", "/api/v1/apps/big", tok, map[string]any{"guaranteed_quota": 1000, "burst_quota": 1000}); r.code != 200 {
		t.Fatalf("the app at exactly the cap: %d %s", r.code, r.raw)
	}
	r := f.call(t, "PUT", "/api/v1/apps/big", tok, map[string]any{"guaranteed_quota": 1001, "burst_quota": 1001})
	if r.code != 400 || !violation(r, "clusters[c0].guaranteed_quota", "over_allocation") {
		t.Fatalf("one token above the cap: %d %s", r.code, r.raw)
	}
}

// TestStoredViolationsReportedAndEditable: config stored by hand that the contract refuses (an
// app whose burst is below its guarantee, a cluster whose capacity was lowered under its apps'
// guarantees) is listed by GET /config/violations and counted by tollgate_cp_config_violations;
// it stays editable — a change that adds nothing to the excess is accepted (by the API and by
// app_config), one that adds to it is refused, and one that fixes a defect clears it. An app
// whose L2 state is not what the API shows is listed too, until it is written again.
func TestStoredViolationsReportedAndEditable(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	ctx := context.Background()
	must := func(r result) {
		t.Helper()
		if r.code != 200 && r.code != 201 {
			t.Fatalf("%d %s", r.code, r.raw)
		}
	}
	must(f.call(t, "PUT", "/api/v1/clusters/c1", tok, map[string]any{"capacity": 1000, "reserved_ratio": 0.1}))
	for _, id := range []string{"a1", "a2"} {
		must(f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": id, "cluster_id": "c1",
			"guaranteed_quota": 400, "burst_quota": 400, "priority": 1}))
	}
	if r := f.call(t, "GET", "/api/v1/config/violations", tok, nil); r.code != 200 || r.get("data", "count") != 0.0 {
		t.Fatalf("a valid store: %d %s", r.code, r.raw)
	}
	// by hand: the capacity lowered under the guarantees (800 > 450), a1's burst below its guarantee
	if err := f.rdb.HSet(ctx, keys.L1("c1"), "capacity", 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(ctx, keys.AppsIndex(), "a1", `{"app_id":"a1","cluster_id":"c1","guaranteed_quota":400,"burst_quota":300,"priority":1,"c_bw":1,"max_borrow":0,"enabled":true}`).Err(); err != nil {
		t.Fatal(err)
	}
	r := f.call(t, "GET", "/api/v1/config/violations", tok, nil)
	// (the index edited alone: the gateway still enforces a1's burst 400 — listed as drift)
	if r.code != 200 || r.get("data", "count") != 3.0 ||
		!listed(r, "clusters[c1].guaranteed_quota", "over_allocation") || !listed(r, "apps[a1].burst_quota", "burst_below_guaranteed") ||
		!listed(r, "apps[a1].burst_quota", "l2_differs") {
		t.Fatalf("violations: %d %s", r.code, r.raw)
	}
	if g := gauge(t, f, "tollgate_cp_config_violations"); g != 3 {
		t.Fatalf("tollgate_cp_config_violations = %v, want 3", g)
	}
	// a2 lowered, still over the cap: accepted (nothing added to the excess)
	must(f.call(t, "PUT", "/api/v1/apps/a2", tok, map[string]any{"guaranteed_quota": 300, "burst_quota": 300}))
	// a2 raised: refused
	if r := f.call(t, "PUT", "/api/v1/apps/a2", tok, map[string]any{"guaranteed_quota": 301, "burst_quota": 301}); r.code != 400 ||
		!violation(r, "clusters[c1].guaranteed_quota", "over_allocation") {
		t.Fatalf("raising a quota over the cap: %d %s", r.code, r.raw)
	}
	// a1 fixed (burst back above its guarantee): accepted, and no longer listed
	must(f.call(t, "PUT", "/api/v1/apps/a1", tok, map[string]any{"burst_quota": 500}))
	r = f.call(t, "GET", "/api/v1/config/violations", tok, nil)
	if r.get("data", "count") != 1.0 || listed(r, "apps[a1].burst_quota", "burst_below_guaranteed") ||
		listed(r, "apps[a1].burst_quota", "l2_differs") {
		t.Fatalf("after the fix: %s", r.raw)
	}
	// the capacity raised (still under the guarantees, 700 > 540): accepted; back to 1000: clean
	must(f.call(t, "PUT", "/api/v1/clusters/c1", tok, map[string]any{"capacity": 600}))
	must(f.call(t, "PUT", "/api/v1/clusters/c1", tok, map[string]any{"capacity": 1000}))
	if r := f.call(t, "GET", "/api/v1/config/violations", tok, nil); r.get("data", "count") != 0.0 {
		t.Fatalf("after the capacity is back: %s", r.raw)
	}
	if g := gauge(t, f, "tollgate_cp_config_violations"); g != 0 {
		t.Fatalf("tollgate_cp_config_violations = %v, want 0", g)
	}
	// what the gateway enforces changed by hand (or left by a control plane stopped between an
	// app's script and its index write): listed, and repaired by writing the app again
	if err := f.rdb.HSet(ctx, keys.L2("c1", "a2"), "priority", 3).Err(); err != nil {
		t.Fatal(err)
	}
	r = f.call(t, "GET", "/api/v1/config/violations", tok, nil)
	if r.get("data", "count") != 1.0 || !listed(r, "apps[a2].priority", "l2_differs") {
		t.Fatalf("an L2 changed by hand: %s", r.raw)
	}
	must(f.call(t, "PUT", "/api/v1/apps/a2", tok, map[string]any{}))
	if r := f.call(t, "GET", "/api/v1/config/violations", tok, nil); r.get("data", "count") != 0.0 {
		t.Fatalf("after the app is written again: %s", r.raw)
	}
}

func listed(r result, field, code string) bool {
	vs, _ := r.get("data", "violations").([]any)
	for _, v := range vs {
		if m, _ := v.(map[string]any); m["field"] == field && m["code"] == code {
			return true
		}
	}
	return false
}

func gauge(t *testing.T, f *fixture, name string) float64 {
	t.Helper()
	mfs, err := f.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
