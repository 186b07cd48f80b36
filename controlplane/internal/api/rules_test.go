package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/internal/keys"
)

func ruleBody() map[string]any {
	return map[string]any{
		"id": "per-user-puts", "description": "at most 100 PUT/s per user of demo-p1", "scope": "user",
		"user_key": "header:X-User-Id", "match": map[string]any{"app_ids": []string{"demo-p1"}, "methods": []string{"PUT"}},
		"algorithm": "sliding_window", "limit": 100, "window_seconds": 1, "priority": 50,
		"effective_from": "2026-11-21T00:00:00Z", "effective_to": nil, "action": "reject",
	}
}

// configState is everything a rule or breaker write may touch: the two hashes, the rule
// counters and the config version.
func (f *fixture) configState(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	for _, k := range []string{keys.RulesIndex(), keys.RuleStats(), keys.BreakersIndex()} {
		m, err := f.rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(m)
		fmt.Fprintf(&b, "%s=%s\n", k, j)
	}
	fmt.Fprintf(&b, "version=%d", f.version(t))
	return b.String()
}

func subscribeConfig(t *testing.T, f *fixture) *redis.PubSub {
	t.Helper()
	sub := f.rdb.Subscribe(context.Background(), keys.ConfigChannel())
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sub
}

// wantNotice: the subscriber sees the announcement of version v.
func wantNotice(t *testing.T, sub *redis.PubSub, v int64) {
	t.Helper()
	msg, err := sub.ReceiveMessage(context.Background())
	if err != nil || msg.Payload != fmt.Sprint(v) {
		t.Fatalf("notice of version %d: %v %v", v, msg, err)
	}
}

func wantUnchanged(t *testing.T, f *fixture, before string) {
	t.Helper()
	if after := f.configState(t); after != before {
		t.Fatalf("a dry run wrote:\nbefore %s\nafter  %s", before, after)
	}
}

func wantInvalid(field, reason string) func(t *testing.T, res result) {
	return func(t *testing.T, res result) {
		t.Helper()
		if res.str("error", "details", "field") != field || res.str("error", "details", "reason") != reason ||
			!violation(res, field, reason) {
			t.Fatalf("want field %s reason %s: %s", field, reason, res.raw)
		}
	}
}

func TestRuleLifecycleIsValidatedVersionedPublishedAndAudited(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	sub := subscribeConfig(t, f)
	v0 := f.version(t)
	before := f.configState(t)
	bad := ruleBody()
	bad["match"] = map[string]any{"cidrs": []string{"10.0.0.1/8"}}
	updated := ruleBody()
	updated["limit"], updated["algorithm"], updated["burst"] = 200, "token_bucket", 300
	delete(updated, "id")
	renamed := ruleBody()
	renamed["id"] = "other"
	steps := []step{
		{"dry run", "POST", "/api/v1/rules?dry_run=true", ruleBody(), 200, "", func(t *testing.T, res result) {
			if res.get("data", "validation", "valid") != true || res.get("data", "written") != false {
				t.Fatalf("dry run: %s", res.raw)
			}
			if d, _ := res.get("data", "validation", "diff").([]any); len(d) < 10 || !strings.Contains(fmt.Sprint(d), "rules[per-user-puts].match.app_ids") {
				t.Fatalf("dry-run diff %v", d)
			}
			wantUnchanged(t, f, before)
		}},
		{"dry run of an invalid rule", "POST", "/api/v1/rules?dry_run=true", bad, 200, "", func(t *testing.T, res result) {
			if res.get("data", "validation", "valid") != false || !violation(res, "match.cidrs[0]", "invalid_cidr") {
				t.Fatalf("invalid dry run: %s", res.raw)
			}
			wantUnchanged(t, f, before)
		}},
		{"invalid rule", "POST", "/api/v1/rules", bad, 400, "invalid_rule", func(t *testing.T, res result) {
			wantInvalid("match.cidrs[0]", "invalid_cidr")(t, res)
			wantUnchanged(t, f, before)
		}},
		{"unknown app", "POST", "/api/v1/rules", map[string]any{"id": "r2", "scope": "app", "algorithm": "fixed_window",
			"limit": 1, "window_seconds": 1, "match": map[string]any{"app_ids": []string{"nope"}}}, 400, "invalid_rule",
			wantInvalid("match.app_ids[0]", "unknown_app")},
		{"create", "POST", "/api/v1/rules", ruleBody(), 201, "", func(t *testing.T, res result) {
			if res.get("data", "config_version") != float64(v0+1) || res.str("data", "resource", "updated_by") != "admin" ||
				res.get("data", "resource", "stats", "hits") != 0.0 {
				t.Fatalf("create: %s", res.raw)
			}
			wantNotice(t, sub, v0+1)
			doc, _ := f.rdb.HGet(ctx, keys.RulesIndex(), "per-user-puts").Result()
			var stored map[string]any
			if json.Unmarshal([]byte(doc), &stored) != nil || stored["unit"] != "requests" || stored["distribution"] != "node" ||
				stored["window_seconds"] != 1.0 || strings.Contains(doc, "null") || strings.Contains(doc, "stats") {
				t.Fatalf("stored rule %s", doc)
			}
		}},
		{"duplicate", "POST", "/api/v1/rules", ruleBody(), 409, "rule_exists", nil},
		{"duplicate dry run", "POST", "/api/v1/rules?dry_run=true", ruleBody(), 409, "rule_exists", nil},
		{"update dry run", "PUT", "/api/v1/rules/per-user-puts?dry_run=1", updated, 200, "", func(t *testing.T, res result) {
			d := fmt.Sprint(res.get("data", "validation", "diff"))
			if !strings.Contains(d, "rules[per-user-puts].limit") || !strings.Contains(d, "rules[per-user-puts].burst") ||
				strings.Contains(d, "description") || f.version(t) != v0+1 {
				t.Fatalf("update dry run: %s", res.raw)
			}
		}},
		{"update", "PUT", "/api/v1/rules/per-user-puts", updated, 200, "", func(t *testing.T, res result) {
			if res.get("data", "resource", "limit") != 200.0 || res.get("data", "config_version") != float64(v0+2) {
				t.Fatalf("update: %s", res.raw)
			}
			wantNotice(t, sub, v0+2)
		}},
		{"rename", "PUT", "/api/v1/rules/per-user-puts", renamed, 400, "invalid_rule", wantInvalid("id", "id_mismatch")},
		{"update unknown", "PUT", "/api/v1/rules/nope", ruleBody(), 404, "rule_not_found", nil},
		{"get unknown", "GET", "/api/v1/rules/nope", nil, 404, "rule_not_found", nil},
		{"delete unknown", "DELETE", "/api/v1/rules/nope", nil, 404, "rule_not_found", nil},
	}
	runSteps(t, f, tok, steps)
	checkStatsAndDelete(t, f, tok, sub)
	checkRuleAudit(t, f)
}

// checkStatsAndDelete: the counters the gateways add show in the list and the rule; delete
// (dry run first) removes the rule and its counters and announces it.
func checkStatsAndDelete(t *testing.T, f *fixture, tok string, sub *redis.PubSub) {
	t.Helper()
	ctx := context.Background()
	other := map[string]any{"id": "a-first", "scope": "global", "algorithm": "fixed_window", "limit": 5,
		"window_seconds": 60, "priority": 1}
	if res := f.call(t, "POST", "/api/v1/rules", tok, other); res.code != 201 {
		t.Fatalf("second rule: %s", res.raw)
	}
	wantNotice(t, sub, f.version(t))
	f.rdb.HIncrBy(ctx, keys.RuleStats(), "per-user-puts:hits", 40)
	f.rdb.HIncrBy(ctx, keys.RuleStats(), "per-user-puts:blocked", 7)
	f.rdb.HIncrBy(ctx, keys.RuleStats(), "per-user-puts:fail_open", 2)
	f.rdb.HIncrBy(ctx, keys.RuleStats(), "a-first:shadowed", 3)
	res := f.call(t, "GET", "/api/v1/rules", tok, nil)
	list, _ := res.get("data").([]any)
	if res.code != 200 || len(list) != 2 || res.get("meta", "total") != 2.0 {
		t.Fatalf("list: %s", res.raw)
	}
	first, _ := list[0].(map[string]any)
	second, _ := list[1].(map[string]any)
	if first["id"] != "a-first" || second["id"] != "per-user-puts" {
		t.Fatalf("list not in priority order: %s", res.raw)
	}
	if s := fmt.Sprint(second["stats"]); s != "map[blocked:7 fail_open:2 hits:40 shadowed:0 throttled:0]" {
		t.Fatalf("stats of per-user-puts: %s", s)
	}
	if s := fmt.Sprint(first["stats"]); !strings.Contains(s, "shadowed:3") {
		t.Fatalf("stats of a-first: %s", s)
	}
	if g := f.call(t, "GET", "/api/v1/rules/per-user-puts", tok, nil); g.get("data", "stats", "blocked") != 7.0 {
		t.Fatalf("get with stats: %s", g.raw)
	}
	before := f.configState(t)
	if d := f.call(t, "DELETE", "/api/v1/rules/per-user-puts?dry_run=true", tok, nil); d.code != 200 ||
		d.get("data", "written") != false || !strings.Contains(d.raw, `"path":"rules[per-user-puts].limit"`) {
		t.Fatalf("delete dry run: %s", d.raw)
	}
	wantUnchanged(t, f, before)
	v := f.version(t)
	if d := f.call(t, "DELETE", "/api/v1/rules/per-user-puts", tok, nil); d.code != 200 || d.get("data", "config_version") != float64(v+1) {
		t.Fatalf("delete: %s", d.raw)
	}
	wantNotice(t, sub, v+1)
	stats, _ := f.rdb.HGetAll(ctx, keys.RuleStats()).Result()
	if len(stats) != 1 || stats["a-first:shadowed"] != "3" {
		t.Fatalf("stats after delete: %v (want only a-first's)", stats)
	}
	if n, _ := f.rdb.HExists(ctx, keys.RulesIndex(), "per-user-puts").Result(); n {
		t.Fatal("rule still in the index")
	}
	if d := f.call(t, "DELETE", "/api/v1/rules/per-user-puts", tok, nil); d.code != 404 || d.errCode() != "rule_not_found" {
		t.Fatalf("second delete: %s", d.raw)
	}
}

// checkRuleAudit: every write is audited with its outcome, dry runs as rule.validate.
func checkRuleAudit(t *testing.T, f *fixture) {
	t.Helper()
	page, err := f.audit.Query(context.Background(), audit.Filter{Action: "rule.*", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range page.Entries {
		got[e.Action+"/"+e.Outcome]++
		if e.Actor != "admin" || !strings.HasPrefix(e.Resource, "rule/") {
			t.Errorf("audit entry %+v", e)
		}
	}
	want := map[string]int{"rule.create/ok": 2, "rule.create/rejected": 3, "rule.update/ok": 1,
		"rule.update/rejected": 1, "rule.delete/ok": 1, "rule.validate/ok": 3, "rule.validate/rejected": 2}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("audit %s: %d entries, want %d (all: %v)", k, got[k], n, got)
		}
	}
}

func TestRuleAndBreakerWritesPushConfigChange(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.live.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(f.handler)
	defer srv.Close()
	tok := f.admin(t)
	c, _, err := dialWS(t, srv, nil, "tollgate.v1", "tollgate.bearer."+tok)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readType(t, c, "metrics")
	v := f.version(t)
	f.call(t, "POST", "/api/v1/rules", tok, ruleBody())
	if m := readType(t, c, "config_change"); fmt.Sprint(m["data"]) != fmt.Sprintf("map[config_version:%d]", v+1) {
		t.Fatalf("config_change of the rule write: %v", m)
	}
	f.call(t, "PUT", "/api/v1/breakers/demo", tok, map[string]any{})
	if m := readType(t, c, "config_change"); fmt.Sprint(m["data"]) != fmt.Sprintf("map[config_version:%d]", v+2) {
		t.Fatalf("config_change of the breaker write: %v", m)
	}
}

func TestBreakersWithNodeStates(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	sub := subscribeConfig(t, f)
	before := f.configState(t)
	v0 := f.version(t)
	steps := []step{
		{"dry run", "PUT", "/api/v1/breakers/demo?dry_run=true", map[string]any{"failure_ratio": 0.25}, 200, "",
			func(t *testing.T, res result) { wantUnchanged(t, f, before) }},
		{"invalid", "PUT", "/api/v1/breakers/demo", map[string]any{"failure_statuses": []int{500, 404}}, 400,
			"invalid_breaker", func(t *testing.T, res result) {
				wantInvalid("failure_statuses[1]", "invalid_status")(t, res)
				wantUnchanged(t, f, before)
			}},
		{"ratio above 1", "PUT", "/api/v1/breakers/demo", map[string]any{"failure_ratio": 1.5}, 400, "invalid_breaker",
			wantInvalid("failure_ratio", "invalid_failure_ratio")},
		{"name mismatch", "PUT", "/api/v1/breakers/demo", map[string]any{"name": "other"}, 400, "invalid_breaker",
			wantInvalid("name", "name_mismatch")},
		{"create", "PUT", "/api/v1/breakers/demo", map[string]any{"name": "demo", "failure_ratio": 0.25, "per_app": true}, 201, "",
			func(t *testing.T, res result) {
				if res.get("data", "resource", "window_ms") != 10000.0 || res.get("data", "config_version") != float64(v0+1) {
					t.Fatalf("create: %s", res.raw)
				}
				wantNotice(t, sub, v0+1)
			}},
		{"replace", "PUT", "/api/v1/breakers/demo", map[string]any{"failure_ratio": 0.5, "per_app": true}, 200, "",
			func(t *testing.T, res result) {
				if d := fmt.Sprint(res.get("data", "validation", "diff")); !strings.Contains(d, "breakers[demo].failure_ratio") ||
					strings.Contains(d, "window_ms") {
					t.Fatalf("replace diff: %s", res.raw)
				}
				wantNotice(t, sub, v0+2)
			}},
		{"second", "PUT", "/api/v1/breakers/aws", map[string]any{}, 201, "", func(t *testing.T, res result) { wantNotice(t, sub, v0+3) }},
	}
	runSteps(t, f, tok, steps)
	now := time.Now().Unix()
	report := func(last int64, breakers string) string {
		return fmt.Sprintf(`{"node_id":"x","last_seen":%d,"config_version":1,"breakers":%s}`, last, breakers)
	}
	f.rdb.HSet(ctx, keys.Gateways(),
		"gw-1", report(now, `{"demo":{"state":"open","failures":7,"requests":9,"opened_at":1763700000,"retry_at":1763700030},
			"demo/demo-p1":{"state":"half_open","failures":1,"requests":2},"aws":{"state":"closed","failures":0,"requests":40}}`),
		"gw-2", report(now, `{"demo":{"state":"closed","failures":0,"requests":3},"demo/a b":{"state":"open"},
			"demo/demo-p2":{"state":"melting"},"ghost":{"state":"open"}}`),
		"gw-stale", report(now-600, `{"demo":{"state":"open","failures":1,"requests":1}}`),
		"gw-damaged", `{"breakers":`,
		"gw-odd", report(now, `["demo"]`),
		"a b", report(now, `{"demo":{"state":"open"}}`))
	res := f.call(t, "GET", "/api/v1/breakers", tok, nil)
	list, _ := res.get("data").([]any)
	if res.code != 200 || len(list) != 2 {
		t.Fatalf("list: %s", res.raw)
	}
	demo, _ := list[1].(map[string]any)
	nodes, _ := json.Marshal(demo["nodes"])
	want := `[{"failures":7,"key":"demo","node_id":"gw-1","opened_at":1763700000,"requests":9,"retry_at":1763700030,"state":"open"},` +
		`{"failures":1,"key":"demo/demo-p1","node_id":"gw-1","requests":2,"state":"half_open"},` +
		`{"failures":0,"key":"demo","node_id":"gw-2","requests":3,"state":"closed"}]`
	if demo["name"] != "demo" || demo["per_app"] != true || string(nodes) != want {
		t.Fatalf("demo breaker: %v\nnodes %s\nwant  %s", demo, nodes, want)
	}
	if aws, _ := list[0].(map[string]any); fmt.Sprint(aws["nodes"]) != "[map[failures:0 key:aws node_id:gw-1 requests:40 state:closed]]" {
		t.Fatalf("aws breaker: %v", aws)
	}
	v := f.version(t)
	for _, s := range []step{
		{"delete dry run", "DELETE", "/api/v1/breakers/aws?dry_run=true", nil, 200, "", nil},
		{"delete", "DELETE", "/api/v1/breakers/aws", nil, 200, "", func(t *testing.T, res result) { wantNotice(t, sub, v+1) }},
		{"gone", "DELETE", "/api/v1/breakers/aws", nil, 404, "breaker_not_found", nil},
	} {
		runSteps(t, f, tok, []step{s})
	}
	if n, _ := f.rdb.HLen(ctx, keys.BreakersIndex()).Result(); n != 1 {
		t.Fatalf("%d breakers left, want 1", n)
	}
	page, _ := f.audit.Query(ctx, audit.Filter{Action: "breaker.*", Limit: 100})
	got := map[string]int{}
	for _, e := range page.Entries {
		got[e.Action+"/"+e.Outcome]++
	}
	if got["breaker.put/ok"] != 3 || got["breaker.put/rejected"] != 3 || got["breaker.delete/ok"] != 1 || got["breaker.validate/ok"] != 2 {
		t.Fatalf("breaker audit %v", got)
	}
}

func TestEventsNewestFirstWithFiltersAndCursor(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	ctx := context.Background()
	const base = int64(1763700000000)
	types := []string{"request_blocked", "rule_triggered", "circuit_opened"}
	for i := 0; i < 30; i++ {
		v := map[string]any{"event_type": types[i%3], "severity": "warning", "app_id": fmt.Sprintf("demo-p%d", i%2),
			"rule_id": "r1", "rule_type": "sliding_window", "limit_value": "100", "current_usage": "101",
			"action_taken": "blocked", "response_code": "429", "node_id": "gw-1", "sampled": fmt.Sprint(i + 1),
			"created_at": fmt.Sprint(base + int64(i)*1000), "endpoint": "/photos/a"}
		if i%5 == 0 {
			v["rule_id"] = "r2"
			v["bogus"] = "dropped"
		}
		if err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.EventsStream(), ID: fmt.Sprintf("%d-0", base+int64(i)*1000),
			MaxLen: 100000, Approx: true, Values: v}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(res result) []string {
		var out []string
		l, _ := res.get("data").([]any)
		for _, e := range l {
			m, _ := e.(map[string]any)
			out = append(out, fmt.Sprint(m["sampled"]))
		}
		return out
	}
	res := f.call(t, "GET", "/api/v1/events?limit=3", tok, nil)
	first, _ := res.get("data").([]any)
	if res.code != 200 || strings.Join(ids(res), ",") != "30,29,28" {
		t.Fatalf("newest first: %s", res.raw)
	}
	if e, _ := first[0].(map[string]any); e["limit_value"] != 100.0 || e["response_code"] != 429.0 || e["id"] != fmt.Sprintf("%d-0", base+29000) ||
		e["endpoint"] != "/photos/a" {
		t.Fatalf("event fields: %v", e)
	}
	// page through everything with the cursor
	var all []string
	cursor := ""
	for pages := 0; pages < 20; pages++ {
		q := "/api/v1/events?limit=7"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := f.call(t, "GET", q, tok, nil)
		all = append(all, ids(r)...)
		if cursor = r.str("meta", "next_cursor"); cursor == "" {
			break
		}
	}
	if len(all) != 30 || all[0] != "30" || all[29] != "1" {
		t.Fatalf("pages gave %v", all)
	}
	for q, want := range map[string]string{
		"event_type=circuit_opened&limit=3":                        "30,27,24",
		"app_id=demo-p0&limit=4":                                   "29,27,25,23",
		"rule_id=r2":                                               "26,21,16,11,6,1",
		"rule_id=r2&event_type=request_blocked":                    "16,1",
		fmt.Sprintf("since=%d&until=%d", base+10000, base+12000):   "13,12,11",
		fmt.Sprintf("until=%d&limit=2", base+1000):                 "2,1",
		fmt.Sprintf("since=%d&app_id=demo-p1", base+25000):         "30,28,26",
		fmt.Sprintf("cursor=%d-0&limit=2", base+5000):              "5,4",
		"app_id=nobody":                                            "",
		fmt.Sprintf("since=%d", base+100000):                       "",
		"rule_id=r2&event_type=request_blocked&limit=1&cursor=0-1": "",
	} {
		r := f.call(t, "GET", "/api/v1/events?"+q, tok, nil)
		if r.code != 200 || strings.Join(ids(r), ",") != want {
			t.Errorf("events?%s = %d %v, want %s", q, r.code, ids(r), want)
		}
	}
	if r := f.call(t, "GET", "/api/v1/events?rule_id=r2&limit=1", tok, nil); strings.Contains(r.raw, "bogus") {
		t.Errorf("unknown field passed through: %s", r.raw)
	}
}
