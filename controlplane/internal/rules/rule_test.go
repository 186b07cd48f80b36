package rules

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"tollgate/controlplane/internal/validate"
)

func validRule() map[string]any {
	return map[string]any{
		"id": "per-user-puts", "description": "at most 100 PUT/s per user", "scope": "user",
		"user_key": "header:X-User-Id",
		"match": map[string]any{"app_ids": []any{"demo-p1"}, "methods": []any{"PUT"}, "bucket": "photos",
			"key_prefix": "thumbs/", "path": "/photos/*/raw/**", "cidrs": []any{"10.0.0.0/8", "::1/128"},
			"headers": map[string]any{"X-Tier": "free"}},
		"algorithm": "token_bucket", "limit": 100, "window_seconds": 1, "burst": 150, "unit": "requests",
		"distribution": "node", "priority": 100, "enabled": true, "effective_from": "2026-11-21T00:00:00Z",
		"effective_to": nil, "action": "throttle", "throttle_max_delay_ms": 500,
	}
}

func fieldsOf(t *testing.T, m map[string]any) RuleFields {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var f RuleFields
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func knownApps(id string) bool { return id == "demo-p1" || id == "demo-p2" }

func has(vs []validate.Violation, field, code string) bool {
	for _, v := range vs {
		if v.Field == field && v.Code == code {
			return true
		}
	}
	return false
}

func TestValidRuleIsStoredWithEveryFieldExplicit(t *testing.T) {
	r, vs := BuildRule(fieldsOf(t, validRule()), "", knownApps, nil)
	if len(vs) != 0 {
		t.Fatalf("valid rule refused: %+v", vs)
	}
	min := map[string]any{"id": "w", "scope": "global", "algorithm": "sliding_window", "limit": 5, "window_seconds": 60}
	r, vs = BuildRule(fieldsOf(t, min), "", knownApps, nil)
	if len(vs) != 0 || r.Unit != "requests" || r.Distribution != "node" || r.Action != "reject" ||
		r.Priority != DefaultPriority || !r.Enabled || r.Burst != nil {
		t.Fatalf("defaults: %+v %+v", r, vs)
	}
	min["algorithm"] = "token_bucket"
	r, vs = BuildRule(fieldsOf(t, min), "", knownApps, nil)
	if len(vs) != 0 || r.Burst == nil || *r.Burst != 5 {
		t.Fatalf("token bucket burst defaults to the limit: %+v %+v", r, vs)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"burst":5`) || strings.Contains(string(b), "null") {
		t.Fatalf("stored JSON %s: burst explicit, no nulls (cjson reads null as a truthy value)", b)
	}
}

// TestRuleValidationTable: every reason the rule validation gives, each with its field.
func TestRuleValidationTable(t *testing.T) {
	set := func(k string, v any) func(m map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(m map[string]any) { return func(m map[string]any) { delete(m, k) } }
	match := func(k string, v any) func(m map[string]any) {
		return func(m map[string]any) { m["match"].(map[string]any)[k] = v }
	}
	both := func(a, b func(map[string]any)) func(map[string]any) {
		return func(m map[string]any) { a(m); b(m) }
	}
	window := both(set("algorithm", "sliding_window"), del("burst"))
	cases := []struct {
		name   string
		mutate func(map[string]any)
		pathID string
		field  string
		code   string
	}{
		{"no id", del("id"), "", "id", "required"},
		{"bad id", set("id", "a b"), "", "id", "invalid_id"},
		{"long id", set("id", strings.Repeat("a", 129)), "", "id", "invalid_id"},
		{"renamed", set("id", "other"), "per-user-puts", "id", "id_mismatch"},
		{"description control char", set("description", "a\x00b"), "", "description", "invalid_description"},
		{"description too long", set("description", strings.Repeat("d", 513)), "", "description", "invalid_description"},
		{"no scope", del("scope"), "", "scope", "required"},
		{"bad scope", set("scope", "tenant"), "", "scope", "invalid_scope"},
		{"no algorithm", del("algorithm"), "", "algorithm", "required"},
		{"bad algorithm", set("algorithm", "leaky_bucket"), "", "algorithm", "invalid_algorithm"},
		{"bad unit", set("unit", "bytes"), "", "unit", "invalid_unit"},
		{"bad distribution", set("distribution", "cluster"), "", "distribution", "invalid_distribution"},
		{"bad action", set("action", "drop"), "", "action", "invalid_action"},
		{"no limit", del("limit"), "", "limit", "required"},
		{"zero limit", set("limit", 0), "", "limit", "invalid_limit"},
		{"negative limit", set("limit", -5), "", "limit", "invalid_limit"},
		{"limit over 1e12", set("limit", 1000000000001), "", "limit", "invalid_limit"},
		{"header name with a dot", set("user_key", "header:X.User"), "", "user_key", "invalid_user_key"},
		{"no window", del("window_seconds"), "", "window_seconds", "required"},
		{"zero window", set("window_seconds", 0), "", "window_seconds", "invalid_window"},
		{"window over a day", set("window_seconds", 86401), "", "window_seconds", "invalid_window"},
		{"negative priority", set("priority", -1), "", "priority", "invalid_priority"},
		{"zero burst", set("burst", 0), "", "burst", "invalid_burst"},
		{"burst with a window", set("algorithm", "fixed_window"), "", "burst", "burst_not_allowed"},
		{"throttle without delay", del("throttle_max_delay_ms"), "", "throttle_max_delay_ms", "required"},
		{"zero delay", set("throttle_max_delay_ms", 0), "", "throttle_max_delay_ms", "invalid_throttle_delay"},
		{"delay over 5 s", set("throttle_max_delay_ms", 5001), "", "throttle_max_delay_ms", "invalid_throttle_delay"},
		{"delay without throttle", set("action", "reject"), "", "throttle_max_delay_ms", "throttle_delay_not_allowed"},
		{"user without user_key", del("user_key"), "", "user_key", "required"},
		{"user_key no header name", set("user_key", "header:"), "", "user_key", "invalid_user_key"},
		{"user_key bad header", set("user_key", "header:X User"), "", "user_key", "invalid_user_key"},
		{"user_key unknown source", set("user_key", "cookie:sid"), "", "user_key", "invalid_user_key"},
		{"user_key on ip scope", set("scope", "ip"), "", "user_key", "user_key_not_allowed"},
		{"bad from", set("effective_from", "2026-11-21"), "", "effective_from", "invalid_time"},
		{"bad to", set("effective_to", "tomorrow"), "", "effective_to", "invalid_time"},
		{"to before from", set("effective_to", "2026-11-20T00:00:00Z"), "", "effective_to", "empty_interval"},
		{"to equals from", set("effective_to", "2026-11-21T00:00:00Z"), "", "effective_to", "empty_interval"},
		{"empty app_ids", match("app_ids", []any{}), "", "match.app_ids", "empty_list"},
		{"bad app id", match("app_ids", []any{"demo-p1", "a/b"}), "", "match.app_ids[1]", "invalid_app_id"},
		{"unknown app", match("app_ids", []any{"nope"}), "", "match.app_ids[0]", "unknown_app"},
		{"app twice", match("app_ids", []any{"demo-p1", "demo-p1"}), "", "match.app_ids", "duplicate"},
		{"too many apps", match("app_ids", manyIDs(101)), "", "match.app_ids", "too_many"},
		{"empty methods", match("methods", []any{}), "", "match.methods", "empty_list"},
		{"bad method", match("methods", []any{"PUT", "FETCH"}), "", "match.methods[1]", "invalid_method"},
		{"lower-case method", match("methods", []any{"get"}), "", "match.methods[0]", "invalid_method"},
		{"method twice", match("methods", []any{"PUT", "PUT"}), "", "match.methods", "duplicate"},
		{"empty bucket", match("bucket", ""), "", "match.bucket", "invalid_bucket"},
		{"bucket with slash", match("bucket", "a/b"), "", "match.bucket", "invalid_bucket"},
		{"empty key prefix", match("key_prefix", ""), "", "match.key_prefix", "invalid_key_prefix"},
		{"key prefix control char", match("key_prefix", "a\nb"), "", "match.key_prefix", "invalid_key_prefix"},
		{"relative path", match("path", "photos/*"), "", "match.path", "invalid_path"},
		{"three asterisks", match("path", "/a/***"), "", "match.path", "invalid_path"},
		{"path with space", match("path", "/a b"), "", "match.path", "invalid_path"},
		{"path with query", match("path", "/a?b"), "", "match.path", "invalid_path"},
		{"path too long", match("path", "/"+strings.Repeat("p", 512)), "", "match.path", "invalid_path"},
		{"empty cidrs", match("cidrs", []any{}), "", "match.cidrs", "empty_list"},
		{"bad cidr", match("cidrs", []any{"10.0.0.0/33"}), "", "match.cidrs[0]", "invalid_cidr"},
		{"bare address", match("cidrs", []any{"10.0.0.1"}), "", "match.cidrs[0]", "invalid_cidr"},
		{"host bits", match("cidrs", []any{"::1/128", "10.0.0.1/8"}), "", "match.cidrs[1]", "invalid_cidr"},
		{"v6 zone", match("cidrs", []any{"fe80::1%eth0/64"}), "", "match.cidrs[0]", "invalid_cidr"},
		{"cidr twice", match("cidrs", []any{"10.0.0.0/8", "10.0.0.0/8"}), "", "match.cidrs", "duplicate"},
		{"empty headers", match("headers", map[string]any{}), "", "match.headers", "empty_list"},
		{"bad header name", match("headers", map[string]any{"X Tier": "a"}), "", "match.headers", "invalid_header"},
		{"bad header value", match("headers", map[string]any{"X-Tier": "a\x01"}), "", "match.headers.X-Tier", "invalid_header"},
		{"header twice", match("headers", map[string]any{"X-Tier": "a", "x-tier": "b"}), "", "match.headers", "duplicate"},
		{"too many headers", match("headers", manyHeaders(21)), "", "match.headers", "too_many"},
		{"endpoint without match", both(set("scope", "endpoint"), both(del("user_key"), del("match"))), "", "match", "endpoint_needs_match"},
		{"window burst removed", both(window, set("burst", 100)), "", "burst", "burst_not_allowed"},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		m := validRule()
		c.mutate(m)
		_, vs := BuildRule(fieldsOf(t, m), c.pathID, knownApps, nil)
		if !has(vs, c.field, c.code) {
			t.Errorf("%s: want %s %s, got %+v", c.name, c.field, c.code, vs)
		}
		seen[c.code] = true
	}
	for _, code := range allRuleCodes {
		if !seen[code] {
			t.Errorf("reason %s has no case in the table", code)
		}
	}
}

// allRuleCodes is every reason BuildRule gives.
var allRuleCodes = []string{"required", "invalid_id", "id_mismatch", "invalid_description", "invalid_scope",
	"invalid_algorithm", "invalid_unit", "invalid_distribution", "invalid_action", "invalid_limit",
	"invalid_window", "invalid_priority", "invalid_burst", "burst_not_allowed",
	"invalid_throttle_delay", "throttle_delay_not_allowed", "invalid_user_key", "user_key_not_allowed",
	"invalid_time", "empty_interval", "empty_list", "too_many", "invalid_app_id", "unknown_app", "duplicate",
	"invalid_method", "invalid_bucket", "invalid_key_prefix", "invalid_path", "invalid_cidr", "invalid_header",
	"endpoint_needs_match"}

func manyIDs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("a%d", i)
	}
	return out
}

func manyHeaders(n int) map[string]any {
	out := map[string]any{}
	for i := 0; i < n; i++ {
		out[fmt.Sprintf("X-H%d", i)] = "v"
	}
	return out
}

func TestRuleValidationAcceptsTheEdges(t *testing.T) {
	cases := []func(m map[string]any){
		func(m map[string]any) { m["user_key"] = "s3_access_key" },
		func(m map[string]any) { m["window_seconds"] = 86400; m["limit"] = 1; m["burst"] = 1 },
		func(m map[string]any) { m["throttle_max_delay_ms"] = 5000 },
		func(m map[string]any) { m["action"] = "shadow"; delete(m, "throttle_max_delay_ms") },
		func(m map[string]any) { m["match"] = map[string]any{"cidrs": []any{"0.0.0.0/0", "2001:db8::/32"}} },
		func(m map[string]any) { m["effective_to"] = "2026-11-21T00:00:01+01:00"; m["effective_from"] = nil },
		func(m map[string]any) { delete(m, "match") },
		func(m map[string]any) { m["scope"] = "endpoint"; delete(m, "user_key") },
		func(m map[string]any) { m["match"].(map[string]any)["path"] = "/**" },
	}
	for i, mut := range cases {
		m := validRule()
		mut(m)
		if _, vs := BuildRule(fieldsOf(t, m), "", knownApps, nil); len(vs) != 0 {
			t.Errorf("case %d refused: %+v", i, vs)
		}
	}
	// an app the rule already names need not exist any more (it may have been deleted)
	m := validRule()
	m["match"].(map[string]any)["app_ids"] = []any{"gone", "demo-p2"}
	if _, vs := BuildRule(fieldsOf(t, m), "per-user-puts", knownApps, []string{"gone"}); len(vs) != 0 {
		t.Errorf("kept app id refused: %+v", vs)
	}
}

func TestBreakerValidation(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	str := func(v string) *string { return &v }
	b, vs := BuildBreaker(BreakerFields{}, "demo")
	if len(vs) != 0 || b.Name != "demo" || b.WindowMS != 10000 || len(b.FailureStatuses) != 4 || !b.Enabled {
		t.Fatalf("defaults: %+v %+v", b, vs)
	}
	cases := []struct {
		f           BreakerFields
		field, code string
	}{
		{BreakerFields{Name: str("other")}, "name", "name_mismatch"},
		{BreakerFields{WindowMS: i64(99)}, "window_ms", "invalid_window_ms"},
		{BreakerFields{WindowMS: i64(3600001)}, "window_ms", "invalid_window_ms"},
		{BreakerFields{MinRequests: i64(0)}, "min_requests", "invalid_min_requests"},
		{BreakerFields{FailureThreshold: i64(-1)}, "failure_threshold", "invalid_failure_threshold"},
		{BreakerFields{FailureRatio: f64(0)}, "failure_ratio", "invalid_failure_ratio"},
		{BreakerFields{FailureRatio: f64(1.01)}, "failure_ratio", "invalid_failure_ratio"},
		{BreakerFields{OpenTimeoutMS: i64(0)}, "open_timeout_ms", "invalid_open_timeout_ms"},
		{BreakerFields{SuccessThreshold: i64(0)}, "success_threshold", "invalid_success_threshold"},
		{BreakerFields{HalfOpenMaxInflight: i64(0)}, "half_open_max_inflight", "invalid_half_open_max_inflight"},
		{BreakerFields{FailureStatuses: []int64{}}, "failure_statuses", "empty_list"},
		{BreakerFields{FailureStatuses: []int64{502, 404}}, "failure_statuses[1]", "invalid_status"},
		{BreakerFields{FailureStatuses: []int64{600}}, "failure_statuses[0]", "invalid_status"},
		{BreakerFields{FailureStatuses: []int64{502, 502}}, "failure_statuses[1]", "duplicate"},
		{BreakerFields{FailureStatuses: make([]int64, 101)}, "failure_statuses", "too_many"},
	}
	for _, c := range cases {
		if _, vs := BuildBreaker(c.f, "demo"); !has(vs, c.field, c.code) {
			t.Errorf("want %s %s, got %+v", c.field, c.code, vs)
		}
	}
	if _, vs := BuildBreaker(BreakerFields{FailureRatio: f64(1), FailureStatuses: []int64{500, 599}}, "demo"); len(vs) != 0 {
		t.Errorf("ratio 1 and statuses 500/599 refused: %+v", vs)
	}
}

func TestDiffListsChangedFieldsOnly(t *testing.T) {
	old, _ := BuildRule(fieldsOf(t, validRule()), "", knownApps, nil)
	m := validRule()
	m["limit"] = 120
	m["match"].(map[string]any)["methods"] = []any{"PUT", "POST"}
	cur, _ := BuildRule(fieldsOf(t, m), "", knownApps, nil)
	cur.UpdatedAt = old.UpdatedAt + 10
	d := diff("rules[per-user-puts]", &old, &cur)
	if len(d) != 2 || d[0].Path != "rules[per-user-puts].limit" || d[1].Path != "rules[per-user-puts].match.methods" {
		t.Fatalf("diff %+v", d)
	}
	if created := diff("rules[x]", (*Rule)(nil), &cur); len(created) < 10 || created[0].Old != nil {
		t.Fatalf("create diff %+v", created)
	}
}

// FuzzBuildRule: any decodable body builds without panicking; a refusal names a field and a
// reason; an accepted rule satisfies the contract's bounds and encodes without nulls.
func FuzzBuildRule(f *testing.F) {
	for _, s := range []string{`{}`, `{"id":"a","scope":"user","user_key":"header:X","algorithm":"token_bucket","limit":1,"window_seconds":1}`,
		`{"id":"a","scope":"ip","algorithm":"fixed_window","limit":3,"window_seconds":86400,"burst":3,"match":{"cidrs":["1.2.3.0/24"]}}`,
		`{"id":"a","scope":"endpoint","match":{"path":"/**/x*"},"algorithm":"sliding_window","limit":1,"window_seconds":2,"action":"throttle","throttle_max_delay_ms":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in RuleFields
		if json.Unmarshal(body, &in) != nil {
			return
		}
		r, vs := BuildRule(in, "", knownApps, nil)
		for _, v := range vs {
			if v.Field == "" || v.Code == "" || v.Message == "" {
				t.Fatalf("violation without field or reason: %+v", v)
			}
		}
		if len(vs) > 0 {
			return
		}
		if r.Limit < 1 || r.WindowSeconds < 1 || r.WindowSeconds > MaxWindowSeconds ||
			(r.Algorithm == "token_bucket") != (r.Burst != nil) || r.Burst != nil && *r.Burst < r.Limit ||
			(r.Action == "throttle") != (r.ThrottleMaxDelayMS != nil) || (r.Scope == "user") != (r.UserKey != "") {
			t.Fatalf("accepted a rule out of bounds: %+v", r)
		}
		if b, err := json.Marshal(r); err != nil || strings.Contains(string(b), "null") {
			t.Fatalf("stored form %s %v", b, err)
		}
	})
}
