package api

import (
	"net/http"
	"strings"
	"testing"
)

// bodyRoutes are the routes that take a JSON body, with one field of a known type each.
var bodyRoutes = []struct {
	method, path, field string
	isString            bool
}{
	{"POST", "/api/v1/apps", "guaranteed_quota", false},
	{"PUT", "/api/v1/apps/demo-p1", "burst_quota", false},
	{"PUT", "/api/v1/clusters/default", "capacity", false},
	{"PUT", "/api/v1/clusters/default/connections", "max_connections", false},
	{"PUT", "/api/v1/connections/demo-p1", "max_connections", false},
	{"POST", "/api/v1/rules", "limit", false},
	{"POST", "/api/v1/rules?dry_run=true", "scope", true},
	{"PUT", "/api/v1/rules/r1", "window_seconds", false},
	{"PUT", "/api/v1/breakers/demo", "window_ms", false},
	{"POST", "/api/v1/emergency/activate", "duration", false},
	{"POST", "/api/v1/emergency/deactivate", "reason", true},
	{"POST", "/api/v1/users", "username", true},
	{"PUT", "/api/v1/users/admin", "disabled", false},
	{"PUT", "/api/v1/auth/password", "new_password", true},
	{"POST", "/api/v1/auth/login", "username", true},
	{"POST", "/api/v1/auth/refresh", "refresh_token", true},
	{"POST", "/api/v1/auth/logout", "refresh_token", true},
}

type bodyCase struct {
	name, body, ctype string
	code              int
	errCode           string
}

func TestBadBodiesAre4xxWithAReason(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	for _, rt := range bodyRoutes {
		wrongType := `{"` + rt.field + `":"text"}`
		if rt.isString {
			wrongType = `{"` + rt.field + `":12}`
		}
		cases := []bodyCase{
			{"malformed", `{"a":`, "", 400, "invalid_json"},
			{"not an object", `[1,2]`, "", 400, "invalid_json"},
			{"null", `null`, "", 400, "invalid_json"},
			{"empty", ``, "", 400, "empty_body"},
			{"trailing object", `{}{}`, "", 400, "trailing_data"},
			{"trailing garbage", `{} x`, "", 400, "invalid_json"},
			{"unknown field", `{"zzz":1}`, "", 400, "unknown_field"},
			{"duplicate field", `{"` + rt.field + `":1,"` + rt.field + `":2}`, "", 400, "duplicate_field"},
			{"too deep", deep, "", 400, "invalid_json"},
			{"wrong type", wrongType, "", 400, "invalid_type"},
			{"huge", `{"reason":"` + strings.Repeat("x", 70000) + `"}`, "", 413, "body_too_large"},
			{"wrong content type", `{}`, "text/plain", 415, "unsupported_media_type"},
			{"form", `a=b`, "application/x-www-form-urlencoded", 415, "unsupported_media_type"},
		}
		if !rt.isString {
			cases = append(cases,
				bodyCase{"overflowing integer", `{"` + rt.field + `":99999999999999999999}`, "", 400, "invalid_type"},
				bodyCase{"huge exponent", `{"` + rt.field + `":1e400}`, "", 400, "invalid_type"})
		}
		for _, c := range cases {
			hdr := map[string]string{"Authorization": "Bearer " + tok}
			if c.ctype != "" {
				hdr["Content-Type"] = c.ctype
			}
			res := f.send(t, rt.method, rt.path, c.body, hdr)
			if res.code != c.code || res.errCode() != c.errCode {
				t.Errorf("%s %s %s: %d %.200s, want %d %s", rt.method, rt.path, c.name, res.code, res.raw, c.code, c.errCode)
			}
		}
	}
}

func TestOddIDsAndQueriesAre4xx(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ids := []string{"a%20b", "..", "%2e%2e", strings.Repeat("a", 129), "a.b", "%00", "%C3%BC", "a%2Fb", "%27%3B--", "%7B%7D"}
	for _, id := range ids {
		for _, p := range []string{"/api/v1/apps/", "/api/v1/clusters/", "/api/v1/connections/", "/api/v1/users/", "/api/v1/metrics/apps/",
			"/api/v1/rules/", "/api/v1/breakers/"} {
			for _, m := range []string{"GET", "PUT", "DELETE"} {
				res := f.call(t, m, p+id, tok, map[string]any{})
				if res.code < 400 || res.code >= 500 || res.errCode() == "" {
					t.Errorf("%s %s%s = %d %.200s, want a 4xx with a reason", m, p, id, res.code, res.raw)
				}
			}
		}
	}
	queries := []string{"/api/v1/apps?page=abc", "/api/v1/apps?limit=0", "/api/v1/apps?limit=1001", "/api/v1/apps?page=-1",
		"/api/v1/apps?priority=9", "/api/v1/apps?enabled=yes", "/api/v1/apps?cluster_id=a%20b",
		"/api/v1/apps?search=" + strings.Repeat("s", 200), "/api/v1/apps?page=99999999999999999999",
		"/api/v1/metrics?range=2h", "/api/v1/metrics/apps/demo-p1?range=1y", "/api/v1/emergency/history?limit=0",
		"/api/v1/emergency/history?cluster_id=..", "/api/v1/alerts?active=maybe",
		"/api/v1/events?event_type=nope", "/api/v1/events?limit=0", "/api/v1/events?limit=1001",
		"/api/v1/events?app_id=a%20b", "/api/v1/events?rule_id=" + strings.Repeat("r", 129),
		"/api/v1/events?since=-1", "/api/v1/events?until=x", "/api/v1/events?since=5&until=4",
		"/api/v1/events?cursor=abc", "/api/v1/events?cursor=99999999999999999999-0", "/api/v1/events?cursor=1-2-3",
		"/api/v1/events?cursor=" + strings.Repeat("1", 70)}
	for _, q := range queries {
		if res := f.call(t, "GET", q, tok, nil); res.code != 400 || res.errCode() != "invalid_query" {
			t.Errorf("GET %s = %d %.200s, want 400 invalid_query", q, res.code, res.raw)
		}
	}
	if res := f.call(t, "POST", "/api/v1/apps?dry_run=maybe", tok, map[string]any{}); res.code != 400 || res.errCode() != "invalid_query" {
		t.Errorf("dry_run=maybe = %d %s", res.code, res.raw)
	}
	if res := f.call(t, "PATCH", "/api/v1/apps/demo-p1", tok, map[string]any{}); res.code != http.StatusMethodNotAllowed {
		t.Errorf("PATCH = %d %s", res.code, res.raw)
	}
}
