package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tollgate/controlplane/internal/audit"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

type step struct {
	name, method, path string
	body               any
	code               int
	errCode            string
	check              func(t *testing.T, res result)
}

func runSteps(t *testing.T, f *fixture, token string, steps []step) {
	t.Helper()
	for _, s := range steps {
		res := f.call(t, s.method, s.path, token, s.body)
		if res.code != s.code || res.errCode() != s.errCode {
			t.Fatalf("%s: %s %s = %d %s, want %d %q", s.name, s.method, s.path, res.code, res.raw, s.code, s.errCode)
		}
		if s.check != nil {
			s.check(t, res)
		}
	}
}

func (f *fixture) version(t *testing.T) int64 {
	t.Helper()
	v, err := f.store.ConfigVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// violation reports whether the error details of res name field with code.
func violation(res result, field, code string) bool {
	vs, _ := res.get("error", "details", "violations").([]any)
	if vs == nil {
		vs, _ = res.get("data", "validation", "violations").([]any)
	}
	for _, v := range vs {
		m, _ := v.(map[string]any)
		if m["field"] == field && m["code"] == code {
			return true
		}
	}
	return false
}

func wantViolation(field, code string) func(t *testing.T, res result) {
	return func(t *testing.T, res result) {
		t.Helper()
		if !violation(res, field, code) {
			t.Fatalf("no violation %s %s in %s", field, code, res.raw)
		}
	}
}

func TestAppChangesAreValidatedVersionedPublishedAndAudited(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	sub := f.rdb.Subscribe(ctx, keys.ConfigChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	v0 := f.version(t)
	app := map[string]any{"app_id": "x1", "cluster_id": "default", "guaranteed_quota": 100, "burst_quota": 500,
		"priority": 1, "max_connections": 10}
	bad := map[string]any{"app_id": "x2", "cluster_id": "default", "guaranteed_quota": 100, "burst_quota": 50, "priority": 1}
	steps := []step{
		{"dry run of a valid app", "POST", "/api/v1/apps?dry_run=true", app, 200, "", func(t *testing.T, res result) {
			if res.get("data", "validation", "valid") != true || res.get("data", "written") != false || f.version(t) != v0 {
				t.Fatalf("dry run wrote or failed: %s", res.raw)
			}
			if d, _ := res.get("data", "validation", "diff").([]any); len(d) < 7 {
				t.Fatalf("diff %v", d)
			}
		}},
		{"dry run of an invalid app", "POST", "/api/v1/apps?dry_run=true", bad, 200, "",
			wantViolation("apps[x2].burst_quota", "burst_below_guaranteed")},
		{"invalid app", "POST", "/api/v1/apps", bad, 400, "config_validation_failed",
			wantViolation("apps[x2].burst_quota", "burst_below_guaranteed")},
		{"required fields", "POST", "/api/v1/apps", map[string]any{"app_id": "x3"}, 400, "config_validation_failed",
			wantViolation("guaranteed_quota", "required")},
		{"over allocation", "POST", "/api/v1/apps", map[string]any{"app_id": "x4", "cluster_id": "default",
			"guaranteed_quota": 60000, "burst_quota": 60000, "priority": 2}, 400, "config_validation_failed",
			wantViolation("clusters[default].guaranteed_quota", "over_allocation")},
		{"unknown cluster", "POST", "/api/v1/apps", map[string]any{"app_id": "x5", "cluster_id": "nope",
			"guaranteed_quota": 1, "burst_quota": 1, "priority": 2}, 400, "config_validation_failed",
			wantViolation("apps[x5].cluster_id", "unknown_cluster")},
		{"create", "POST", "/api/v1/apps", app, 201, "", func(t *testing.T, res result) {
			if res.get("data", "config_version") != float64(v0+1) || res.get("data", "resource", "max_connections") != 10.0 {
				t.Fatalf("create: %s", res.raw)
			}
			if msg, err := sub.ReceiveTimeout(ctx, time.Second); err != nil || !strings.Contains(fmt.Sprint(msg), fmt.Sprint(v0+1)) {
				t.Fatalf("no notice of version %d: %v %v", v0+1, msg, err)
			}
			if m, _ := f.rdb.HGetAll(ctx, keys.ConnConfig("default", "x1")).Result(); m["max_connections"] != "10" || m["burst_connections"] != "10" {
				t.Fatalf("connection limits %v", m)
			}
		}},
		{"duplicate", "POST", "/api/v1/apps", app, 409, "already_exists", nil},
		{"update merges", "PUT", "/api/v1/apps/x1", map[string]any{"priority": 2}, 200, "", func(t *testing.T, res result) {
			if res.get("data", "resource", "burst_quota") != 500.0 || res.get("data", "resource", "priority") != 2.0 {
				t.Fatalf("update: %s", res.raw)
			}
			d, _ := res.get("data", "validation", "diff").([]any)
			if len(d) == 0 || !strings.Contains(fmt.Sprint(d), "apps[x1].priority") {
				t.Fatalf("diff %v", d)
			}
		}},
		{"rename", "PUT", "/api/v1/apps/x1", map[string]any{"app_id": "x9"}, 400, "config_validation_failed",
			wantViolation("app_id", "app_id_mismatch")},
		{"move to another cluster", "PUT", "/api/v1/apps/x1", map[string]any{"cluster_id": "other"}, 400,
			"config_validation_failed", wantViolation("apps[x1].cluster_id", "cluster_change")},
		{"update unknown", "PUT", "/api/v1/apps/nope", map[string]any{"priority": 2}, 404, "not_found", nil},
		{"get", "GET", "/api/v1/apps/x1", nil, 200, "", nil},
		{"delete dry run", "DELETE", "/api/v1/apps/x1?dry_run=true", nil, 200, "", nil},
		{"delete", "DELETE", "/api/v1/apps/x1", nil, 200, "", func(t *testing.T, res result) {
			l1, _ := f.rdb.HGet(ctx, keys.L1("default"), "allocated").Result()
			n, _ := f.rdb.Exists(ctx, keys.L2("default", "x1"), keys.ConnConfig("default", "x1")).Result()
			if l1 != "36000" || n != 0 {
				t.Fatalf("after delete: allocated %s, %d keys left", l1, n)
			}
		}},
		{"gone", "GET", "/api/v1/apps/x1", nil, 404, "not_found", nil},
	}
	runSteps(t, f, tok, steps)
	checkAppAudit(t, f)
}

// checkAppAudit: the three writes and every validation attempt are in the audit stream.
func checkAppAudit(t *testing.T, f *fixture) {
	t.Helper()
	ctx := context.Background()
	page, err := f.audit.Query(ctx, audit.Filter{Actor: "admin", Action: "app.*"})
	if err != nil || len(page.Entries) != 3 {
		t.Fatalf("audit of app changes: %+v %v, want create, update, delete", page.Entries, err)
	}
	val, _ := f.audit.Query(ctx, audit.Filter{Action: "config.validate", Limit: 100})
	if len(val.Entries) < 9 {
		t.Fatalf("%d validation attempts audited, want every one", len(val.Entries))
	}
}

func TestListAppsPaginatesAndSearches(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	ctx := context.Background()
	for i := 0; i < 45; i++ {
		a := store.App{AppID: fmt.Sprintf("app-%02d", i), ClusterID: "default", GuaranteedQuota: 10,
			BurstQuota: 10, Priority: i % 4, CBw: 1, Enabled: i%5 != 0}
		if _, err := f.store.PutApp(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	tok := f.user(t, "vic", "viewer")
	cases := []struct {
		query        string
		total, count int
		first        string
	}{
		{"", 49, 20, "app-00"},
		{"?page=3&limit=20", 49, 9, "app-40"},
		{"?page=9", 49, 0, ""},
		{"?search=APP-1", 10, 10, "app-10"},
		{"?search=demo&priority=3", 1, 1, "demo-p3"},
		{"?enabled=false", 9, 9, "app-00"},
		{"?cluster_id=other", 0, 0, ""},
		{"?limit=1000", 49, 49, "app-00"},
	}
	for _, c := range cases {
		res := f.call(t, "GET", "/api/v1/apps"+c.query, tok, nil)
		data, _ := res.get("data").([]any)
		if res.code != 200 || res.get("meta", "total") != float64(c.total) || len(data) != c.count {
			t.Errorf("%q: %d total %v, %d items, want %d, %d", c.query, res.code, res.get("meta", "total"), len(data), c.total, c.count)
			continue
		}
		if c.count > 0 && data[0].(map[string]any)["app_id"] != c.first {
			t.Errorf("%q: first %v, want %s", c.query, data[0], c.first)
		}
	}
}

func TestClusterAndConnectionChanges(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.user(t, "ops", "operator")
	ctx := context.Background()
	steps := []step{
		{"list", "GET", "/api/v1/clusters", nil, 200, "", func(t *testing.T, res result) {
			if !strings.Contains(res.raw, `"capacity":100000`) {
				t.Fatalf("clusters %s", res.raw)
			}
		}},
		{"shrink below the allocation", "PUT", "/api/v1/clusters/default", map[string]any{"capacity": 30000}, 400,
			"config_validation_failed", wantViolation("clusters[default].guaranteed_quota", "over_allocation")},
		{"new cluster without capacity", "PUT", "/api/v1/clusters/c2", map[string]any{}, 400, "config_validation_failed",
			wantViolation("capacity", "required")},
		{"bad ratio", "PUT", "/api/v1/clusters/c2", map[string]any{"capacity": 10, "reserved_ratio": 1.5}, 400,
			"config_validation_failed", wantViolation("cluster.reserved_ratio", "invalid_reserved_ratio")},
		{"new cluster", "PUT", "/api/v1/clusters/c2", map[string]any{"capacity": 5000}, 200, "", func(t *testing.T, res result) {
			if res.get("data", "resource", "reserved_ratio") != 0.1 || res.get("data", "written") != true {
				t.Fatalf("c2: %s", res.raw)
			}
		}},
		{"cluster connections", "PUT", "/api/v1/clusters/c2/connections", map[string]any{"max_connections": 100, "reserved_ratio": 0.2}, 200, "",
			func(t *testing.T, res result) {
				if m, _ := f.rdb.HGetAll(ctx, keys.ConnCluster("c2")).Result(); m["max_connections"] != "100" || m["reserved_ratio"] != "0.2" {
					t.Fatalf("connlimit cluster hash %v", m)
				}
			}},
		{"cluster connections zero", "PUT", "/api/v1/clusters/c2/connections", map[string]any{"max_connections": 0}, 400,
			"config_validation_failed", wantViolation("max_connections", "invalid_max_connections")},
		{"unknown cluster connections", "PUT", "/api/v1/clusters/nope/connections", map[string]any{"max_connections": 1}, 404, "not_found", nil},
		{"app burst below max", "PUT", "/api/v1/connections/demo-p1", map[string]any{"max_connections": 5, "burst_connections": 3}, 400,
			"config_validation_failed", wantViolation("apps[demo-p1].connections.burst_connections", "burst_below_max_connections")},
		{"app connections", "PUT", "/api/v1/connections/demo-p1", map[string]any{"max_connections": 5, "burst_connections": 8}, 200, "", nil},
		{"app connections read back", "GET", "/api/v1/connections/demo-p1", nil, 200, "", func(t *testing.T, res result) {
			if res.get("data", "limits", "burst_connections") != 8.0 {
				t.Fatalf("limits %s", res.raw)
			}
		}},
		{"unknown app connections", "PUT", "/api/v1/connections/nope", map[string]any{"max_connections": 5}, 404, "not_found", nil},
		{"all connections", "GET", "/api/v1/connections", nil, 200, "", nil},
	}
	runSteps(t, f, tok, steps)
}

func TestEmergencyRoutes(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.user(t, "ops", "operator")
	ctx := context.Background()
	sub := f.rdb.Subscribe(ctx, keys.EmergencyChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	steps := []step{
		{"too long", "POST", "/api/v1/emergency/activate", map[string]any{"cluster_id": "default", "duration": 100000}, 400, "invalid_duration", nil},
		{"control characters", "POST", "/api/v1/emergency/activate", map[string]any{"reason": "a\u0007b"}, 400,
			"config_validation_failed", wantViolation("reason", "invalid_reason")},
		{"unknown cluster", "POST", "/api/v1/emergency/activate", map[string]any{"cluster_id": "nope"}, 404, "not_found", nil},
		{"activate", "POST", "/api/v1/emergency/activate", map[string]any{"cluster_id": "default", "reason": "storage incident", "duration": 60}, 200, "",
			func(t *testing.T, res result) {
				if msg, err := sub.ReceiveTimeout(ctx, time.Second); err != nil || !strings.Contains(fmt.Sprint(msg), "storage incident") {
					t.Fatalf("no emergency notice: %v %v", msg, err)
				}
			}},
		{"status", "GET", "/api/v1/emergency", nil, 200, "", func(t *testing.T, res result) {
			if res.get("data", "emergency_mode") != true {
				t.Fatalf("status %s", res.raw)
			}
		}},
		{"deactivate all", "POST", "/api/v1/emergency/deactivate", map[string]any{}, 200, "", nil},
		{"history", "GET", "/api/v1/emergency/history?cluster_id=default", nil, 200, "", func(t *testing.T, res result) {
			h, _ := res.get("data").([]any)
			if len(h) != 2 || h[0].(map[string]any)["event"] != "deactivate" || h[1].(map[string]any)["actor"] != "ops" {
				t.Fatalf("history %s", res.raw)
			}
		}},
	}
	runSteps(t, f, tok, steps)
}
