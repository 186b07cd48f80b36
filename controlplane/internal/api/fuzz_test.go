package api

import (
	"strings"
	"testing"

	"tollgate/controlplane/internal/changes"
)

// checkAnswer: a fuzzed request is answered 2xx, or 4xx with a machine-readable code; never 5xx.
func checkAnswer(t *testing.T, route string, res result) {
	t.Helper()
	if res.code >= 500 || res.code >= 400 && res.errCode() == "" {
		t.Fatalf("%s: %d %.300s", route, res.code, res.raw)
	}
}

// fuzzRoutes fuzzes the bodies of routes against the whole API over a real Redis (one per fuzz
// worker); the first byte picks the route.
func fuzzRoutes(f *testing.F, routes []string, seeds ...string) {
	fx := newFixture(f)
	fx.seed(f)
	tok := fx.admin(f)
	for i := range routes {
		for _, s := range seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, pick uint8, body []byte) {
		route := routes[int(pick)%len(routes)]
		method, path, _ := strings.Cut(route, " ")
		res := fx.send(t, method, path, body, map[string]string{"Authorization": "Bearer " + tok})
		checkAnswer(t, route, res)
	})
}

func FuzzAppBodies(f *testing.F) {
	fuzzRoutes(f, []string{"POST /api/v1/apps?dry_run=true", "POST /api/v1/apps", "PUT /api/v1/apps/demo-p2?dry_run=true",
		"PUT /api/v1/apps/demo-p3"},
		`{"app_id":"f1","cluster_id":"default","guaranteed_quota":10,"burst_quota":20,"priority":2}`,
		`{"priority":3,"max_connections":5,"burst_connections":9}`, `{"guaranteed_quota":-1}`,
		`{"app_id":"a b","burst_quota":9007199254740993}`, `{"enabled":null}`)
}

func FuzzClusterAndConnectionBodies(f *testing.F) {
	fuzzRoutes(f, []string{"PUT /api/v1/clusters/fz?dry_run=true", "PUT /api/v1/clusters/default",
		"PUT /api/v1/clusters/default/connections", "PUT /api/v1/connections/demo-p1?dry_run=1"},
		`{"capacity":100000,"reserved_ratio":0.1}`, `{"reserved_ratio":1e-320}`, `{"max_connections":3}`,
		`{"max_connections":5,"burst_connections":4}`, `{"max_connections":1,"reserved_ratio":-0}`)
}

func FuzzEmergencyBodies(f *testing.F) {
	fuzzRoutes(f, []string{"POST /api/v1/emergency/activate", "POST /api/v1/emergency/deactivate"},
		`{"cluster_id":"default","reason":"x","duration":1}`, `{"reason":"\u0000"}`, `{"duration":86401}`,
		`{"cluster_id":""}`, `{"reason":"`+strings.Repeat("é", 200)+`"}`)
}

func FuzzUserBodies(f *testing.F) {
	fuzzRoutes(f, []string{"POST /api/v1/users", "PUT /api/v1/users/admin", "PUT /api/v1/auth/password"},
		`{"username":"u1","password":"long-enough-pass","role":"viewer"}`, `{"role":"admin","disabled":false}`,
		`{"current_password":"x","new_password":"y"}`, `{"password":"`+strings.Repeat("p", 80)+`"}`)
}

func FuzzAuthBodies(f *testing.F) {
	fuzzRoutes(f, []string{"POST /api/v1/auth/login", "POST /api/v1/auth/refresh", "POST /api/v1/auth/logout"},
		`{"username":"admin","password":"admin-password-123"}`, `{"username":"admin","password":""}`,
		`{"refresh_token":"`+strings.Repeat("a", 32)+"."+strings.Repeat("b", 64)+`"}`, `{"refresh_token":null}`)
}

// FuzzStrictUnmarshal: the decoder alone, fast; every refusal is a 4xx *Error.
func FuzzStrictUnmarshal(f *testing.F) {
	for _, s := range []string{`{}`, `{"app_id":"a"}`, `{"a":1,"a":2}`, `[`, `{"priority":1e3}`, `{}{}`, "\xef\xbb\xbf{}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var dst changes.AppFields
		err := strictUnmarshal(body, &dst)
		if err == nil {
			return
		}
		e, ok := err.(*Error)
		if !ok || e.Status < 400 || e.Status >= 500 || e.Code == "" {
			t.Fatalf("strictUnmarshal(%q) = %v", body, err)
		}
	})
}

func FuzzRuleAndBreakerBodies(f *testing.F) {
	fuzzRoutes(f, []string{"POST /api/v1/rules?dry_run=true", "POST /api/v1/rules", "PUT /api/v1/rules/fz?dry_run=true",
		"PUT /api/v1/breakers/demo?dry_run=true", "PUT /api/v1/breakers/fz"},
		`{"id":"fz","scope":"user","user_key":"header:X-User","algorithm":"token_bucket","limit":5,"window_seconds":1,"burst":9}`,
		`{"id":"fz","scope":"ip","algorithm":"sliding_window","limit":1,"window_seconds":86400,"match":{"cidrs":["::/0"],"path":"/a/**"}}`,
		`{"id":"fz","scope":"endpoint","algorithm":"fixed_window","limit":1,"window_seconds":1,"action":"throttle","throttle_max_delay_ms":5}`,
		`{"match":{"headers":{"X-A":"b"},"app_ids":["demo-p1"]},"effective_from":"2026-01-01T00:00:00Z","effective_to":"2025-01-01T00:00:00Z"}`,
		`{"failure_ratio":1e-320,"failure_statuses":[599,500],"window_ms":100}`, `{"half_open_max_inflight":null}`)
}
