package t

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/t/harness"
)

// Rules (docs/rules-contract.md §2) through real nginx (2 workers) and Redis. Rules are written the
// way the control plane writes them: HSET ratelimit:rules + INCR ratelimit:config:version +
// PUBLISH, in one MULTI/EXEC; each test polls /health until every node enforces the new version.

type rule map[string]any

// putRules stores rules (and deletes ids listed in del), bumps the version, publishes, and
// waits until every gateway runs the new version.
func (s *stack) putRules(del []string, rs ...rule) {
	s.t.Helper()
	ctx := context.Background()
	pipe := s.rdb.TxPipeline()
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			s.t.Fatal(err)
		}
		pipe.HSet(ctx, keys.RulesIndex(), r["id"], string(b))
	}
	if len(del) > 0 {
		pipe.HDel(ctx, keys.RulesIndex(), del...)
	}
	ver := pipe.Incr(ctx, keys.ConfigVersion())
	pipe.Publish(ctx, keys.ConfigChannel(), "rules")
	if _, err := pipe.Exec(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.waitVersion(ver.Val())
}

func (s *stack) waitVersion(v int64) {
	s.t.Helper()
	for _, g := range s.gws {
		eventually(s.t, "gateway "+g.NodeID+" on config version "+strconv.FormatInt(v, 10),
			func() bool { return healthOf(s.t, g).ConfigVersion >= v })
	}
}

// base is a node fixed-window reject rule; fields override.
func base(id string, limit, window int, fields rule) rule {
	r := rule{"id": id, "scope": "global", "algorithm": "fixed_window", "limit": limit,
		"window_seconds": window, "unit": "requests", "distribution": "node", "priority": 100,
		"enabled": true, "action": "reject"}
	for k, v := range fields {
		r[k] = v
	}
	return r
}

type ruleReject struct {
	Error      string `json:"error"`
	Reason     string `json:"reason"`
	RuleID     string `json:"rule_id"`
	RetryAfter int    `json:"retry_after"`
}

// admitted counts the 200s of n requests; every other answer must be a rule rejection by
// rule id `by` (empty: any rule).
// metricIs waits until the gateway's series has the value want: each worker adds its counts
// to the shared metrics once a second, so a read right after the requests may miss some.
func metricIs(t *testing.T, g *harness.Gateway, series string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s = %v", series, want), func() bool { return g.Metric(series) == want },
		func() { t.Logf("%s = %v", series, g.Metric(series)) })
}

func admitted(t *testing.T, g *harness.Gateway, n int, method, path, app, by string,
	hdr map[string]string) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		r := g.Do(method, path, app, nil, hdr)
		switch r.Status {
		case 200:
			ok++
		case 429, 503:
			var b ruleReject
			if r.Status == 503 { // S3's SlowDown for credential-identified requests
				b.Reason, b.RuleID = r.Header.Get("X-Tollgate-Reason"), r.Header.Get("X-Tollgate-Rule")
				if !strings.Contains(string(r.Body), "<Code>SlowDown</Code>") {
					t.Fatalf("503 without SlowDown: %s", r.Body)
				}
			} else {
				r.JSON(t, &b)
			}
			if b.Reason != "rule_limited" || (by != "" && b.RuleID != by) {
				t.Fatalf("%d %s, want rule_limited by %q", r.Status, r.Body, by)
			}
			if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 1 {
				t.Fatalf("rule rejection without Retry-After: %v", r.Header)
			}
		default:
			t.Fatalf("%s %s: status %d %s", method, path, r.Status, r.Body)
		}
	}
	return ok
}

func TestRuleGlobalAndAppScopes(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("only-p0", 3, 60, rule{"match": rule{"app_ids": []string{"demo-p0"}}}),
		base("per-app", 2, 60, rule{"scope": "app", "match": rule{"app_ids": []string{"demo-p1", "demo-p2"}}}))
	r := g.Do("GET", "/b/k", "demo-p0", nil, nil)
	if r.Status != 200 {
		t.Fatalf("first request: %d", r.Status)
	}
	if got := admitted(t, g, 5, "GET", "/b/k", "demo-p0", "only-p0", nil); got != 2 {
		t.Fatalf("global rule of 3 admitted %d more after the first, want 2", got)
	}
	r = g.Do("GET", "/b/k", "demo-p0", nil, nil)
	var b ruleReject
	r.JSON(t, &b)
	if r.Status != 429 || b.Error != "rate_limit_exceeded" || b.RuleID != "only-p0" || b.RetryAfter < 1 {
		t.Fatalf("rejection body %s", r.Body)
	}
	// app scope: one counter per app
	for _, a := range []string{"demo-p1", "demo-p2"} {
		if got := admitted(t, g, 4, "GET", "/b/k", a, "per-app", nil); got != 2 {
			t.Fatalf("app %s admitted %d, want 2 (its own counter)", a, got)
		}
	}
	if got := admitted(t, g, 4, "GET", "/b/k", "demo-p3", "", nil); got != 4 {
		t.Fatalf("an app no rule names was limited: %d of 4", got)
	}
	metricIs(t, g, `ratelimit_rejected_total{app_id="demo-p0",reason="rule_limited"}`, 4)
	metricIs(t, g, `ratelimit_rule_actions_total{rule_id="only-p0",action="blocked"}`, 4)
	metricIs(t, g, `ratelimit_rule_hits_total{rule_id="per-app"}`, 8)
}

func TestRuleUserScope(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("by-header", 2, 60, rule{"scope": "user", "user_key": "header:X-User-Id",
			"match": rule{"app_ids": []string{"demo-p0"}}}),
		base("by-akid", 3, 60, rule{"scope": "user", "user_key": "s3_access_key",
			"match": rule{"app_ids": []string{"demo-p1"}}}))
	for _, u := range []string{"alice", "bob"} {
		if got := admitted(t, g, 4, "GET", "/b/k", "demo-p0", "by-header", map[string]string{"X-User-Id": u}); got != 2 {
			t.Fatalf("user %s admitted %d, want 2", u, got)
		}
	}
	if got := admitted(t, g, 5, "GET", "/b/k", "demo-p0", "", nil); got != 5 {
		t.Fatalf("requests without the user header are not matched, yet %d of 5 admitted", got)
	}
	v4 := map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=abc"}
	v2 := map[string]string{"Authorization": "AWS AKIDEXAMPLE:c2lnbmF0dXJl"}
	other := map[string]string{"Authorization": "AWS OTHERKEY:c2ln"}
	// credentials identify the app (issue 17): both keys belong to demo-p1
	s.putAccessKey("AKIDEXAMPLE", "demo-p1")
	s.putAccessKey("OTHERKEY", "demo-p1")
	s.putAccessKey("PROBEKEY", "demo-p1") // probed: the two above count their own requests
	waitKnown(t, g, "PROBEKEY")
	got := admitted(t, g, 2, "GET", "/b/k", "demo-p1", "by-akid", v4) +
		admitted(t, g, 3, "GET", "/b/k", "demo-p1", "by-akid", v2)
	if got != 3 {
		t.Fatalf("one access key via SigV4 and V2 admitted %d, want 3 (one counter)", got)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p1", "by-akid", other); got != 3 {
		t.Fatalf("another access key admitted %d, want 3", got)
	}
}

func TestRuleIPScopeTrustedProxiesAndCIDRs(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_TRUSTED_PROXIES": "127.0.0.0/8, ::1/128"}})
	g := s.gw()
	s.putRules(nil, base("per-ip", 2, 60, rule{"scope": "ip",
		"match": rule{"cidrs": []string{"203.0.113.0/24", "2001:db8::/32"}}}))
	xff := func(v string) map[string]string { return map[string]string{"X-Forwarded-For": v} }
	// the right-most untrusted hop is the client; trusted hops (127.0.0.2) are skipped
	if got := admitted(t, g, 4, "GET", "/b/k", "demo-p0", "per-ip", xff("198.51.100.9, 203.0.113.7, 127.0.0.2")); got != 2 {
		t.Fatalf("203.0.113.7 admitted %d, want 2", got)
	}
	if got := admitted(t, g, 1, "GET", "/b/k", "demo-p0", "per-ip", xff("203.0.113.7")); got != 0 {
		t.Fatal("the same client through another path was not counted together")
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "per-ip", xff("203.0.113.8")); got != 2 {
		t.Fatalf("203.0.113.8 admitted %d, want 2 (its own counter)", got)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "per-ip", xff("2001:db8:0:0::1")); got != 2 {
		t.Fatalf("2001:db8::1 admitted %d, want 2", got)
	}
	// outside the CIDRs (the spoofed left-most hop does not count: 198.51.100.9 is the client)
	if got := admitted(t, g, 4, "GET", "/b/k", "demo-p0", "", xff("203.0.113.7, 198.51.100.9")); got != 4 {
		t.Fatalf("client outside the rule's CIDRs limited: %d of 4", got)
	}
	// without trusted proxies the header is ignored: 127.0.0.1 is outside the CIDRs
	s2 := newStack(t, stackOptions{})
	s2.putRules(nil, base("per-ip", 1, 60, rule{"scope": "ip", "match": rule{"cidrs": []string{"203.0.113.0/24"}}}))
	if got := admitted(t, s2.gw(), 3, "GET", "/b/k", "demo-p0", "", xff("203.0.113.7")); got != 3 {
		t.Fatalf("X-Forwarded-For from an untrusted peer was believed: %d of 3 admitted", got)
	}
}

func TestRuleEndpointMatching(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("thumb-puts", 1, 60, rule{"scope": "endpoint",
			"match": rule{"methods": []string{"PUT"}, "bucket": "photos", "key_prefix": "thumbs/"}}),
		base("raw-glob", 1, 60, rule{"scope": "endpoint", "match": rule{"path": "/logs/*/raw/**"}}),
		base("tier-free", 1, 60, rule{"scope": "endpoint", "match": rule{"headers": map[string]string{"X-Tier": "free"}}}))
	if got := admitted(t, g, 3, "PUT", "/photos/thumbs/a.jpg", "demo-p0", "thumb-puts", nil); got != 1 {
		t.Fatalf("PUT photos/thumbs admitted %d, want 1", got)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/photos/thumbs/a.jpg"}, {"PUT", "/photos/raw/a.jpg"}, {"PUT", "/photosx/thumbs/a"},
		{"GET", "/logs/x/y/raw/z"}, {"GET", "/logs/raw/z"},
	} {
		if got := admitted(t, g, 2, c.method, c.path, "demo-p0", "", nil); got != 2 {
			t.Fatalf("%s %s matched a rule it should not: %d of 2", c.method, c.path, got)
		}
	}
	if got := admitted(t, g, 1, "GET", "/logs/app1/raw/2026/01/x.gz", "demo-p0", "raw-glob", nil) +
		admitted(t, g, 2, "GET", "/logs/app2/raw/y", "demo-p0", "raw-glob", nil); got != 1 {
		t.Fatalf("glob endpoint admitted %d, want 1 (one counter)", got)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "tier-free", map[string]string{"X-Tier": "free"}); got != 1 {
		t.Fatalf("header match admitted %d, want 1", got)
	}
	if got := admitted(t, g, 2, "GET", "/b/k", "demo-p0", "", map[string]string{"X-Tier": "paid"}); got != 2 {
		t.Fatal("another header value matched")
	}
}

// Issue 19 item 1: path globs that a backtracking matcher takes minutes over (four '**' and a
// suffix the URI lacks; '**' and '*' runs around a literal the URI lacks) answer long URIs at
// once (the harness client gives up after 10 s), and still count what they match.
func TestRulePathGlobsDoNotBacktrack(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("dashes-gz", 1, 60, rule{"scope": "endpoint", "match": rule{"path": "/**-**-**-**.gz",
			"app_ids": []string{"demo-p1"}}}),
		base("dashes-x", 1, 60, rule{"scope": "endpoint", "match": rule{"path": "/**-**x**-**.gz",
			"app_ids": []string{"demo-p2"}}}),
		base("seg-x", 1, 60, rule{"scope": "endpoint", "match": rule{"path": "/*-*-*-*-*x",
			"app_ids": []string{"demo-p3"}}}))
	dashes := strings.Repeat("-", 3000)
	for _, c := range []struct{ app, path, match, rule string }{
		{"demo-p1", "/" + dashes + "z", "/" + dashes + ".gz", "dashes-gz"},
		{"demo-p2", "/" + dashes + ".gz", "/a-b-x-c.gz", "dashes-x"},
		{"demo-p3", "/" + dashes + "/x", "/" + dashes + "x", "seg-x"},
	} {
		// a long URI the glob does not match: answered, never counted
		if got := admitted(t, g, 2, "GET", c.path, c.app, "", nil); got != 2 {
			t.Fatalf("%s: %d bytes it does not match admitted %d of 2", c.rule, len(c.path), got)
		}
		// what it matches is counted: one request a minute
		if got := admitted(t, g, 2, "GET", c.match, c.app, c.rule, nil); got != 1 {
			t.Fatalf("%s: %d bytes it matches admitted %d of 2, want 1", c.rule, len(c.match), got)
		}
	}
}

// Window boundary: requests one after another from 70 % into a window for 2.5 windows. A fixed
// window admits its limit at the end of one window and again at the start of the next (2 x
// limit in far less than a window); a sliding window never admits more than its limit in any
// interval of window length. Client times bound nginx's: the server span of admissions i..j
// is at most recv(j) - send(i).
func TestRuleWindowBoundary(t *testing.T) {
	const limit, window = 5, 2
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("fw", limit, window, rule{"match": rule{"app_ids": []string{"demo-p0"}}}),
		base("sw", limit, window, rule{"algorithm": "sliding_window", "match": rule{"app_ids": []string{"demo-p1"}}}))
	type adm struct{ send, recv time.Time }
	run := func(app string) []adm {
		w := time.Duration(window) * time.Second
		for time.Now().UnixNano()%int64(w) < int64(w)*7/10 || time.Now().UnixNano()%int64(w) > int64(w)*8/10 {
			time.Sleep(5 * time.Millisecond)
		}
		var out []adm
		end := time.Now().Add(w * 5 / 2)
		for time.Now().Before(end) {
			t0 := time.Now()
			r := g.Do("GET", "/b/k", app, nil, nil)
			if r.Status == 200 {
				out = append(out, adm{t0, time.Now()})
			} else if r.Status != 429 {
				t.Fatalf("status %d", r.Status)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return out
	}
	fw := run("demo-p0")
	burst := false
	for i := 0; i+2*limit-1 < len(fw); i++ {
		if fw[i+2*limit-1].recv.Sub(fw[i].send) < time.Duration(window)*time.Second {
			burst = true
		}
	}
	if !burst {
		t.Fatalf("fixed window: no 2 x %d admissions within one window (%d admitted): the boundary burst did not show", limit, len(fw))
	}
	sw := run("demo-p1")
	if len(sw) < 2*limit {
		t.Fatalf("sliding window admitted only %d in 2.5 windows", len(sw))
	}
	for i := 0; i+limit < len(sw); i++ {
		if span := sw[i+limit].recv.Sub(sw[i].send); span < time.Duration(window)*time.Second {
			t.Fatalf("sliding window admitted %d requests within %v < %ds", limit+1, span, window)
		}
	}
}

func TestRuleTokenBucketAndThrottle(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil,
		base("tb", 1, 10, rule{"algorithm": "token_bucket", "burst": 4, "match": rule{"app_ids": []string{"demo-p0"}}}),
		base("thr", 5, 1, rule{"algorithm": "token_bucket", "burst": 1, "action": "throttle",
			"throttle_max_delay_ms": 1000, "match": rule{"app_ids": []string{"demo-p1"}}}),
		base("thr-short", 1, 60, rule{"algorithm": "token_bucket", "burst": 1, "action": "throttle",
			"throttle_max_delay_ms": 50, "match": rule{"app_ids": []string{"demo-p2"}}}))
	if got := admitted(t, g, 6, "GET", "/b/k", "demo-p0", "tb", nil); got != 4 {
		t.Fatalf("token bucket of burst 4 admitted %d of 6 at once", got)
	}
	r := g.Do("GET", "/b/k", "demo-p0", nil, nil)
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); r.Status != 429 || ra < 5 || ra > 11 {
		t.Fatalf("Retry-After %q (status %d), want about 10 s (one token per 10 s)", r.Header.Get("Retry-After"), r.Status)
	}
	// throttle within the bound: 4 requests at once against a burst of 1 at 5/s; the bucket
	// releases its tokens on a fixed 200 ms grid, so at most one more than the burst can land
	// on a fresh token: at least 2 wait, and none is refused
	statuses := make(chan int, 4)
	for i := 0; i < 4; i++ {
		go func() { statuses <- g.Do("GET", "/b/k", "demo-p1", nil, nil).Status }()
	}
	for i := 0; i < 4; i++ {
		if st := <-statuses; st != 200 {
			t.Fatalf("a throttled request was answered %d, want 200 after its wait", st)
		}
	}
	series := `ratelimit_rule_actions_total{rule_id="thr",action="throttled"}`
	eventually(t, "at least 2 of 4 requests throttled", func() bool { return g.Metric(series) >= 2 },
		func() { t.Logf("%s = %v", series, g.Metric(series)) })
	// beyond the bound (next token in 60 s > 50 ms): refused
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p2", "thr-short", nil); got != 1 {
		t.Fatalf("throttle beyond its bound admitted %d of 3, want 1", got)
	}
}

func TestRulePriorityEffectiveTimesShadow(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	p0 := rule{"app_ids": []string{"demo-p0"}}
	s.putRules(nil,
		base("b-wide", 2, 60, rule{"priority": 1, "match": p0}),
		base("a-tight", 1, 60, rule{"priority": 1, "match": p0}), // same priority: id order
		base("later", 1, 60, rule{"effective_from": future, "match": rule{"app_ids": []string{"demo-p1"}}}),
		base("over", 1, 60, rule{"effective_to": past, "match": rule{"app_ids": []string{"demo-p1"}}}),
		base("now", 2, 60, rule{"effective_from": past, "effective_to": future, "match": rule{"app_ids": []string{"demo-p2"}}}),
		base("shadow", 1, 60, rule{"action": "shadow", "match": rule{"app_ids": []string{"demo-p3"}}}))
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "a-tight", nil); got != 1 {
		t.Fatalf("a-tight (first by id) admitted %d, want 1", got)
	}
	s.putRules(nil, base("a-tight", 100, 60, rule{"priority": 2, "match": p0}))
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "b-wide", nil); got != 1 {
		t.Fatalf("b-wide, now first, admitted %d more, want 1 (2 minus the one before)", got)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p1", "", nil); got != 3 {
		t.Fatalf("rules outside their effective time limited: %d of 3", got)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p2", "now", nil); got != 2 {
		t.Fatalf("rule within its effective time admitted %d, want 2", got)
	}
	if got := admitted(t, g, 5, "GET", "/b/k", "demo-p3", "", nil); got != 5 {
		t.Fatalf("shadow rule blocked: %d of 5", got)
	}
	metricIs(t, g, `ratelimit_rule_actions_total{rule_id="shadow",action="shadowed"}`, 4)
	// rule stats reach Redis
	eventually(t, "rule stats in Redis", func() bool {
		m, _ := s.rdb.HGetAll(context.Background(), keys.RuleStats()).Result()
		return m["shadow:hits"] == "5" && m["shadow:shadowed"] == "4" && m["a-tight:blocked"] == "2"
	})
	// and rule_triggered events reach the stream
	eventually(t, "rule_triggered events", func() bool {
		es, _ := s.rdb.XRange(context.Background(), keys.EventsStream(), "-", "+").Result()
		var shadowed, blocked bool
		for _, e := range es {
			if e.Values["event_type"] != "rule_triggered" {
				continue
			}
			shadowed = shadowed || (e.Values["rule_id"] == "shadow" && e.Values["action_taken"] == "shadowed")
			blocked = blocked || (e.Values["rule_id"] == "a-tight" && e.Values["action_taken"] == "blocked" &&
				e.Values["response_code"] == "429" && e.Values["app_id"] == "demo-p0" &&
				e.Values["user_agent"] != nil && e.Values["user_agent"] != "") // read for the event only
		}
		return shadowed && blocked
	})
}

func TestRuleUnitCostChargesNoTierTokens(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil, base("cost", 12, 60, rule{"unit": "cost", "match": rule{"app_ids": []string{"demo-p0"}}}))
	body := strings.Repeat("x", 10)
	first := g.Do("PUT", "/b/k", "demo-p0", strings.NewReader(body), nil)
	c := first.Cost()
	if first.Status != 200 || c < 2 {
		t.Fatalf("first PUT: %d cost %d", first.Status, c)
	}
	n := 1
	for ; n < 20; n++ {
		r := g.Do("PUT", "/b/k", "demo-p0", strings.NewReader(body), nil)
		if r.Status == 429 {
			break
		}
	}
	if n != 12/c {
		t.Fatalf("cost rule of 12 admitted %d PUTs of cost %d, want %d", n, c, 12/c)
	}
	// a rule rejection charges no tier tokens and gives the connection slot back
	before := g.State("demo-p0").PendingCount
	for i := 0; i < 5; i++ {
		if r := g.Do("PUT", "/b/k", "demo-p0", strings.NewReader(body), nil); r.Status != 429 {
			t.Fatalf("status %d", r.Status)
		}
	}
	if after := g.State("demo-p0").PendingCount; after != before {
		t.Fatalf("rule rejections charged the tier: pending count %d -> %d", before, after)
	}
	eventually(t, "connection slots released", func() bool { return connStateOf(g, "demo-p0").AppCurrent == 0 })
}

func TestRuleNodeVersusGlobalAcrossTwoNodes(t *testing.T) {
	s := newStack(t, stackOptions{nodes: 2})
	s.putRules(nil,
		base("node-10", 10, 60, rule{"match": rule{"app_ids": []string{"demo-p0"}}}),
		base("global-25", 25, 60, rule{"distribution": "global", "match": rule{"app_ids": []string{"demo-p1"}}}),
		base("global-sw", 12, 60, rule{"distribution": "global", "algorithm": "sliding_window", "match": rule{"app_ids": []string{"demo-p2"}}}),
		base("global-tb", 1, 60, rule{"distribution": "global", "algorithm": "token_bucket", "burst": 9, "match": rule{"app_ids": []string{"demo-p3"}}}))
	total := func(app string, n int) int {
		got := 0
		for i := 0; i < n; i++ {
			for _, g := range s.gws {
				got += admitted(t, g, 1, "GET", "/b/k", app, "", nil)
			}
		}
		return got
	}
	if got := total("demo-p0", 15); got != 20 {
		t.Fatalf("node rule of 10 on 2 nodes admitted %d, want 20 (10 per node)", got)
	}
	// the fixed window of 60 s starts on the minute (the Redis clock): a count that straddles a
	// window's end admits the next window's 25 too, so start it with time to spare
	if sec := time.Now().Second(); sec > 45 {
		time.Sleep(time.Duration(61-sec) * time.Second)
	}
	if got := total("demo-p1", 20); got != 25 {
		t.Fatalf("global rule of 25 on 2 nodes admitted %d, want exactly 25", got)
	}
	if got := total("demo-p2", 12); got > 12 || got < 6 {
		t.Fatalf("global sliding window of 12 on 2 nodes admitted %d, want 6..12", got)
	}
	if got := total("demo-p3", 10); got > 9+1 || got < 5 {
		t.Fatalf("global token bucket of burst 9 on 2 nodes admitted %d, want 5..10", got)
	}
	for _, g := range s.gws {
		g.SettleMetrics()
		if v := g.Metric(`ratelimit_rule_actions_total{rule_id="global-25",action="fail_open"}`); v != 0 {
			t.Fatalf("fail_open %v with Redis up", v)
		}
	}
}

func TestRuleGlobalFailsOpenWithoutRedis(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil, base("global-2", 2, 60, rule{"distribution": "global", "match": rule{"app_ids": []string{"demo-p0"}}}))
	if got := admitted(t, g, 4, "GET", "/b/k", "demo-p0", "global-2", nil); got != 2 {
		t.Fatalf("global rule of 2 admitted %d", got)
	}
	s.redis.Stop()
	// the rule's 2 are used up for the next 60 s; without Redis it must admit (the tiers fail
	// open too, on their fail-open budget). A refusal of before may be remembered for up to a
	// second (the negative cache): wait for the first admission, then every request is admitted.
	series := `ratelimit_rule_actions_total{rule_id="global-2",action="fail_open"}`
	eventually(t, "a request admitted with Redis down", func() bool {
		return g.Do("GET", "/b/k", "demo-p0", nil, nil).Status == 200
	})
	g.SettleMetrics()
	before := g.Metric(series)
	var statuses []int
	for i := 0; i < 5; i++ {
		statuses = append(statuses, g.Do("GET", "/b/k", "demo-p0", nil, nil).Status)
	}
	for _, st := range statuses {
		if st != 200 {
			t.Fatalf("global rule with Redis down answered %v, want five 200 (fail open)", statuses)
		}
	}
	eventually(t, "each of the 5 counted fail_open", func() bool { return g.Metric(series) >= before+5 })
}

func TestRuleDamagedEntryKeepsLastGoodCopy(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putRules(nil, base("keep", 1, 60, rule{"match": rule{"app_ids": []string{"demo-p0"}}}))
	errs := g.Metric("ratelimit_config_errors_total")
	s.putRules(nil, rule{"id": "keep", "scope": "nowhere"}, rule{"id": "junk", "limit": -1})
	if v := g.Metric("ratelimit_config_errors_total"); v < errs+2 {
		t.Fatalf("config errors %v -> %v, want +2", errs, v)
	}
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "keep", nil); got != 1 {
		t.Fatalf("last good copy of the damaged rule not enforced: %d of 3 admitted", got)
	}
	s.putRules([]string{"keep", "junk"})
	if got := admitted(t, g, 3, "GET", "/b/k", "demo-p0", "", nil); got != 3 {
		t.Fatalf("deleted rule still enforced: %d of 3", got)
	}
}

// Issue 19 item 7: a header a rule depends on cannot be used to slip past the rule. Sent twice,
// a header of match.headers matches when one of its values does; a repeated user key
// (header:<Name>, or the Authorization of s3_access_key) is refused with 400 duplicate_header;
// behind 120 other headers, each still counts.
func TestRuleHeadersCannotBeDodged(t *testing.T) {
	s := newStack(t, stackOptions{})
	g := s.gw()
	s.putAccessKey("AKID1", "demo-p2") // loaded by the time putRules' version is
	s.putAccessKey("AKIDNEW", "demo-p2")
	s.putRules(nil,
		base("free-tier", 2, 60, rule{"match": rule{"app_ids": []string{"demo-p0"}, "headers": rule{"X-Tier": "free"}}}),
		base("per-user", 2, 60, rule{"scope": "user", "user_key": "header:X-User-Id",
			"match": rule{"app_ids": []string{"demo-p1"}}}),
		base("per-key", 2, 60, rule{"scope": "user", "user_key": "s3_access_key",
			"match": rule{"app_ids": []string{"demo-p2"}}}))
	padded := func(h http.Header) http.Header {
		for i := 0; i < 120; i++ {
			h.Set(fmt.Sprintf("X-Pad-%03d", i), "x") // sorted before X-Tier, X-User-Id
		}
		return h
	}
	statuses := func(n int, h func() http.Header) []int {
		var out []int
		for i := 0; i < n; i++ {
			out = append(out, g.DoHeader("GET", "/b/k", h()).Status)
		}
		return out
	}
	want := func(what string, got []int, want ...int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: statuses %v, want %v", what, got, want)
		}
	}
	// match.headers: a second value, or 120 headers in front, and the rule still counts
	want("X-Tier free twice, then behind 120 headers", append(
		statuses(1, func() http.Header { return http.Header{"X-App-Id": {"demo-p0"}, "X-Tier": {"paid", "free"}} }),
		statuses(2, func() http.Header { return padded(http.Header{"X-App-Id": {"demo-p0"}, "X-Tier": {"free"}}) })...),
		200, 200, 429)
	want("X-Tier paid only", statuses(2, func() http.Header {
		return http.Header{"X-App-Id": {"demo-p0"}, "X-Tier": {"paid", "gold"}}
	}), 200, 200)
	// user keys: counted behind 120 headers; refused when repeated
	want("X-User-Id u1 behind 120 headers", statuses(3, func() http.Header {
		return padded(http.Header{"X-App-Id": {"demo-p1"}, "X-User-Id": {"u1"}})
	}), 200, 200, 429)
	r := g.DoHeader("GET", "/b/k", http.Header{"X-App-Id": {"demo-p1"}, "X-User-Id": {"u1", "fresh"}})
	var b struct {
		Reason string `json:"reason"`
	}
	if r.Status == 400 {
		r.JSON(t, &b)
	}
	if r.Status != 400 || b.Reason != "duplicate_header" {
		t.Fatalf("X-User-Id twice: %d %s, want 400 duplicate_header", r.Status, r.Body)
	}
	auth := func(k string) string { return "AWS " + k + ":c2ln" }
	// (requests with S3 credentials are refused in S3's dialect: 503 SlowDown)
	want("one access key behind 120 headers", statuses(3, func() http.Header {
		return padded(http.Header{"Authorization": {auth("AKID1")}})
	}), 200, 200, 503)
	// (nginx itself refuses a second Authorization line; the rule would refuse it too)
	if r := g.DoHeader("GET", "/b/k", http.Header{
		"Authorization": {auth("AKIDNEW"), auth("AKID1")}}); r.Status != 400 {
		t.Fatalf("Authorization twice for an s3_access_key rule: %d %s, want 400", r.Status, r.Body)
	}
	// a request no rule depends on the repeated header of is not refused
	if r := g.DoHeader("GET", "/b/k", http.Header{"X-App-Id": {"demo-p3"}, "X-User-Id": {"a", "b"}}); r.Status != 200 {
		t.Fatalf("demo-p3 with X-User-Id twice (no rule of its): %d %s", r.Status, r.Body)
	}
}
