package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/report"
	"tollgate/bench/internal/wrk"
	"tollgate/internal/keys"
)

// RuleCounts are the rule set sizes of the rules section.
var RuleCounts = []int{0, 10, 100}

// RuleMix describes BenchRules' mix for the table.
const RuleMix = "ten tenants' rules per 100 by app, method, bucket, key prefix, path, header and " +
	"user, 3 of every 10 for any app; the benchmark's GET matches 5 of 10 and 6 of 100 " +
	"(4 sliding, 3 fixed window, 3 token bucket per 10; 1 in 10 global)"

// BenchRules are n rules as a gateway of several tenants holds them (RuleMix): block k of ten
// rules (rules 10k … 10k+9) belongs to tenant k — the benchmark's app for block 0, made-up
// apps for the others — and its bucket, and selects requests by one or more of each
// dimension. The benchmark's request (GET /bucket/obj with X-App-Id) matches five rules of
// block 0 and one of block 5, whatever n; no rule ever rejects it (limits far above what two
// cores can send). BenchRulesAllMatch is the old mix in which every rule matches.
func BenchRules(n int) []map[string]any {
	out := make([]map[string]any, 0, n)
	for i := 0; i < n; i++ {
		k, j := i/10, i%10
		app, bucket := fmt.Sprintf("tenant-%02d", k), fmt.Sprintf("bucket-%02d", k)
		if k == 0 {
			app, bucket = redisenv.AppID, "bucket"
		}
		r := map[string]any{
			"id": fmt.Sprintf("bench-%03d", i), "limit": 1_000_000_000, "window_seconds": 60,
			"unit": "requests", "distribution": "node", "priority": i, "enabled": true,
			"action": "reject",
		}
		rule := func(scope, alg string, match map[string]any) {
			r["scope"], r["algorithm"] = scope, alg
			if len(match) > 0 {
				r["match"] = match
			}
		}
		apps := []string{app}
		switch j {
		case 0: // the tenant's reads, per app: matches in block 0
			rule("app", "sliding_window", map[string]any{"app_ids": apps, "methods": []string{"GET"}})
		case 1: // the tenant's writes, in cost
			rule("app", "token_bucket", map[string]any{"app_ids": apps, "methods": []string{"PUT", "POST"}})
			r["unit"] = "cost"
		case 2: // the tenant's bucket: matches in block 0
			rule("endpoint", "fixed_window", map[string]any{"app_ids": apps, "bucket": bucket})
		case 3: // the tenant's free-tier users (the request has no X-Tier)
			rule("user", "sliding_window", map[string]any{"app_ids": apps,
				"headers": map[string]string{"X-Tier": "free"}})
			r["user_key"] = "header:X-User-Id"
		case 4: // the tenant's log uploads, per client address (the key is obj)
			rule("ip", "fixed_window", map[string]any{"app_ids": apps, "bucket": bucket,
				"key_prefix": "logs/"})
		case 5: // any app's requests to the tenant's bucket, per client address: block 0
			rule("ip", "token_bucket", map[string]any{"path": "/" + bucket + "/**"})
		case 6: // any app's deletes per client address (block 5: its reads)
			methods := []string{"DELETE"}
			if k == 5 {
				methods = []string{"GET", "HEAD"}
			}
			rule("ip", "sliding_window", map[string]any{"methods": methods})
		case 7: // requests that name the tenant by header: block 0
			rule("endpoint", "fixed_window", map[string]any{"headers": map[string]string{"X-App-Id": app}})
		case 8: // per access key (the request has no Authorization)
			rule("user", "token_bucket", map[string]any{"app_ids": apps, "methods": []string{"GET", "HEAD"}})
			r["user_key"] = "s3_access_key"
		case 9: // the tenant's bucket across nodes, per app: block 0
			rule("app", "sliding_window", map[string]any{"app_ids": apps, "bucket": bucket})
			r["distribution"] = "global"
		}
		out = append(out, r)
	}
	return out
}

// BenchRulesAllMatch are n rules that all match every benchmark request and never reject:
// per 10, 4 sliding_window, 3 fixed_window, 2 token_bucket (node), 1 sliding_window global;
// scopes global/app/ip/endpoint. Each request pays every rule's counter (the worst case of
// a rule set; tollgate-callgrind -rule-mix all).
func BenchRulesAllMatch(n int) []map[string]any {
	algs := []string{"sliding_window", "sliding_window", "sliding_window", "sliding_window",
		"fixed_window", "fixed_window", "fixed_window", "token_bucket", "token_bucket",
		"sliding_window"}
	scopes := []string{"global", "app", "ip", "endpoint"}
	out := make([]map[string]any, 0, n)
	for i := 0; i < n; i++ {
		r := map[string]any{
			"id": fmt.Sprintf("bench-%03d", i), "scope": scopes[i%len(scopes)],
			"algorithm": algs[i%10], "limit": 1_000_000_000, "window_seconds": 60,
			"unit": "requests", "distribution": "node", "priority": i, "enabled": true,
			"action": "reject",
			"match":  map[string]any{"app_ids": []string{redisenv.AppID}, "methods": []string{"GET"}},
		}
		if i%10 == 9 {
			r["distribution"] = "global"
		}
		if scopes[i%len(scopes)] == "endpoint" {
			r["match"].(map[string]any)["bucket"] = "bucket"
		}
		out = append(out, r)
	}
	return out
}

// putRules replaces the rule set in Redis as the control plane does (one MULTI/EXEC).
func (e *env) putRules(ctx context.Context, n int) error {
	rdb := e.redis.Client()
	pipe := rdb.TxPipeline()
	pipe.Del(ctx, keys.RulesIndex())
	for _, r := range BenchRules(n) {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		pipe.HSet(ctx, keys.RulesIndex(), r["id"], string(b))
	}
	pipe.Incr(ctx, keys.ConfigVersion())
	pipe.Publish(ctx, keys.ConfigChannel(), "rules")
	_, err := pipe.Exec(ctx)
	return err
}

// rulesSection measures (b) tollgate with 0, 10 and 100 active rules: in each round one run of
// each (at most 5 s after a warm-up), each on a fresh nginx started after its rules were written.
func (e *env) rulesSection(ctx context.Context) ([]report.RulesRow, error) {
	d := e.cfg.Duration / 2
	if d > 5*time.Second {
		d = 5 * time.Second
	}
	if d < time.Second {
		d = time.Second
	}
	runs := make([][]report.Sample, len(RuleCounts))
	for round := 1; round <= e.cfg.Rounds; round++ {
		for i, n := range RuleCounts {
			s, err := e.rulesRun(ctx, n, round, d)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], s)
		}
	}
	return report.SummarizeRules(RuleCounts, RuleMix, runs), e.putRules(ctx, 0)
}

// rulesRun writes n rules, starts a gateway on them and measures one run of d.
func (e *env) rulesRun(ctx context.Context, n, round int, d time.Duration) (report.Sample, error) {
	tag := fmt.Sprintf("round %d/%d rules %d", round, e.cfg.Rounds, n)
	if err := e.putRules(ctx, n); err != nil {
		return report.Sample{}, fmt.Errorf("runner: rules: %w", err)
	}
	v := nginxenv.Variant{Key: "b", Name: "tollgate", Kind: nginxenv.Lease}
	node, err := e.start(ctx, v, "rules-"+strconv.Itoa(n)+"-r"+strconv.Itoa(round), "bench-rules")
	if err != nil {
		return report.Sample{}, err
	}
	defer node.Stop()
	e.progress("%s: nginx pid %d, warm-up %s, measuring %s", tag, node.PID(), e.cfg.Warmup, d)
	if _, err := wrk.Run(ctx, e.wrkOptions(node, e.cfg.Warmup)); err != nil {
		return report.Sample{}, err
	}
	res, err := wrk.Run(ctx, e.wrkOptions(node, d))
	if err != nil {
		return report.Sample{}, err
	}
	if res.Non2xx > 0 {
		e.explain(ctx, node)
	}
	e.progress("%s: %s req/s, p50 %s, p99 %s, %d non-2xx", tag,
		report.Thousands(res.ReqPerSec), report.Latency(res.P50), report.Latency(res.P99),
		res.Non2xx)
	return report.Sample{ReqPerSec: res.ReqPerSec, P50: res.P50, P99: res.P99,
		Requests: res.Requests, Non2xx: res.Non2xx}, nil
}
