package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/report"
	"tollgate/bench/internal/wrk"
)

// measure starts a fresh nginx for v (so that no other gateway talks to Redis meanwhile),
// warms it up, and measures one wrk run with the L3 counters and Redis commands around it.
func (e *env) measure(ctx context.Context, v nginxenv.Variant, round int) (report.Sample, error) {
	tag := fmt.Sprintf("round %d/%d %s", round, e.cfg.Rounds, v.Label())
	node, err := e.start(ctx, v, v.Key+"-"+v.Name+"-r"+strconv.Itoa(round), "bench-"+v.Name)
	if err != nil {
		return report.Sample{}, err
	}
	defer node.Stop()
	e.progress("%s: nginx pid %d on %s, warm-up %s", tag, node.PID(), node.BaseURL,
		e.cfg.Warmup)
	warm, err := wrk.Run(ctx, e.wrkOptions(node, e.cfg.Warmup))
	if err != nil {
		return report.Sample{}, err
	}
	if warm.Non2xx > 0 || warm.SocketErrors > 0 {
		e.progress("!!! %s: warm-up had %d non-2xx responses and %d socket errors", tag,
			warm.Non2xx, warm.SocketErrors)
		e.explain(ctx, node)
	}
	s, err := e.run(ctx, node, tag)
	if err != nil {
		return report.Sample{}, fmt.Errorf("%w\nerror.log:\n%s", err, lastLines(node.ErrorLog(), 30))
	}
	e.progress("%s: %s", tag, describe(s))
	if s.Non2xx > 0 || s.SocketErrors > 0 {
		e.progress("!!! %s: %d NON-2XX RESPONSES, %d socket errors of %d requests", tag,
			s.Non2xx, s.SocketErrors, s.Requests)
		e.explain(ctx, node)
	}
	return s, nil
}

// start starts variant v's gateway in the run's directory dir/<prefix>, as node nodeID of the
// benchmark's Redis.
func (e *env) start(ctx context.Context, v nginxenv.Variant, prefix, nodeID string) (*nginxenv.Node, error) {
	return nginxenv.Start(ctx, nginxenv.Options{
		Variant: v, Repo: e.cfg.Repo, Workers: e.cfg.Workers, AppID: redisenv.AppID,
		Prefix: filepath.Join(e.dir, prefix), RedisURL: e.redis.URL(), NodeID: nodeID,
	})
}

// explain prints what a request gets now, the gateway's rejection counters and the end of the
// node's error.log.
func (e *env) explain(ctx context.Context, node *nginxenv.Node) {
	e.progress("!!! %s", node.Probe(ctx))
	if node.Variant.Tollgate() {
		lines, err := node.Series(ctx, "ratelimit_rejected_total", "ratelimit_fail_open_total",
			"ratelimit_redis_errors_total")
		if err != nil {
			lines = []string{err.Error()}
		}
		e.progress("!!! gateway counters since start:\n%s", strings.Join(lines, "\n"))
	}
	if log := lastLines(node.ErrorLog(), 10); log != "" {
		e.progress("!!! error.log ends with:\n%s", log)
	}
}

// run is the measured wrk run; tollgate variants also get the settled L3 counters before and
// after it and the Redis commands executed during it.
func (e *env) run(ctx context.Context, node *nginxenv.Node, tag string) (report.Sample, error) {
	tg := node.Variant.Tollgate()
	var l3Before nginxenv.L3
	var err error
	if tg {
		if l3Before, err = node.SettledL3(ctx); err != nil {
			return report.Sample{}, err
		}
	}
	before, err := e.counters(ctx, node)
	if err != nil {
		return report.Sample{}, err
	}
	e.progress("%s: measuring %s", tag, e.cfg.Duration)
	res, err := wrk.Run(ctx, e.wrkOptions(node, e.cfg.Duration))
	if err != nil {
		return report.Sample{}, err
	}
	after, err := e.counters(ctx, node)
	if err != nil {
		return report.Sample{}, err
	}
	s := report.Sample{ReqPerSec: res.ReqPerSec, P50: res.P50, P99: res.P99,
		Requests: res.Requests, Non2xx: res.Non2xx, SocketErrors: res.SocketErrors,
		NginxCPU: after.nginxCPU - before.nginxCPU}
	if !tg {
		return s, nil
	}
	calls := after.calls.Sub(before.calls)
	s.HasRedis, s.RedisCalls, s.ScriptCalls = true, calls.All, calls.Scripts
	s.RedisCPU = after.redisCPU - before.redisCPU
	l3After, err := node.SettledL3(ctx)
	if err != nil {
		return report.Sample{}, err
	}
	d := l3After.Sub(l3Before)
	s.HasL3, s.L3Hits, s.L3Misses = true, d.Hits, d.Misses
	return s, nil
}

// counters are the cumulative numbers read right before and after a measured run.
type counters struct {
	calls              redisenv.Calls
	nginxCPU, redisCPU time.Duration
}

func (e *env) counters(ctx context.Context, node *nginxenv.Node) (counters, error) {
	var c counters
	var err error
	if c.calls, err = redisenv.CommandCalls(ctx, e.redis.Client()); err != nil {
		return counters{}, err
	}
	if c.nginxCPU, err = node.CPU(); err != nil {
		return counters{}, err
	}
	if c.redisCPU, err = e.redis.CPU(); err != nil {
		return counters{}, err
	}
	return c, nil
}

func (e *env) wrkOptions(node *nginxenv.Node, d time.Duration) wrk.Options {
	return wrk.Options{Threads: e.cfg.Threads, Connections: e.cfg.Connections, Duration: d,
		Headers: []string{nginxenv.AppHeader + ": " + redisenv.AppID}, URL: node.URL()}
}

// lastLines is the end of a log, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func describe(s report.Sample) string {
	out := fmt.Sprintf("%s req/s, p50 %s, p99 %s, %d requests, %d non-2xx, nginx CPU %.1f µs/req",
		report.Thousands(s.ReqPerSec), report.Latency(s.P50), report.Latency(s.P99), s.Requests,
		s.Non2xx, s.NginxMicrosPerReq())
	if s.HasL3 {
		out += fmt.Sprintf(", L3 hits %.0f misses %.0f (%s)", s.L3Hits, s.L3Misses,
			report.Percent(s.HitRatio()))
	}
	if s.HasRedis {
		out += fmt.Sprintf(", Redis %d commands (%.2f / 1000 req), %d scripts (%.2f / 1000 req), "+
			"redis CPU %.1f µs/req", s.RedisCalls, s.CallsPer1000(), s.ScriptCalls,
			s.ScriptsPer1000(), s.RedisMicrosPerReq())
	}
	return out
}
