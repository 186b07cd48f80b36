package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/nginxenv"
	"tollgate/bench/internal/proc"
	"tollgate/bench/internal/redisenv"
	"tollgate/bench/internal/wrk"
	"tollgate/internal/apiload"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// row is what one N measured.
type row struct {
	apps         int
	createRate   float64       // apps per second created through the store
	loadTime     time.Duration // fresh node: start → config loaded and proxying
	known        int           // apps of the random sample the node knows
	sample       int
	reqPerSec    float64 // wrk on one app
	p99          time.Duration
	refused      int64 // non-2xx answers during the wrk run
	failOpen     float64
	propP50      time.Duration // API 2xx → enforced on the node
	propMax      time.Duration
	propLost     int // changes not enforced within propTimeout
	workerMem    int64
	cpRSS        int64
	redisMem     int64
	idleNginx    float64 // % of one core
	idleRedis    float64
	idleCP       float64
	putP50       time.Duration
	putP99       time.Duration
	putErrors    int64
	listP50      time.Duration
	listP99      time.Duration
	listErrors   int64
	zoneFullWarn bool // the node's error.log says a shared dict was full
	zones        zoneUse
	configDict   string
	reloadTime   time.Duration // a full load (change logged as all) → the node on its version
	reloadRPS    float64       // wrk on one app while the node loads everything
	reloadP99    time.Duration
	reloadBad    int64
}

const (
	clusterID   = "scale"
	benchApp    = "bench"
	propTimeout = 30 * time.Second
	adminPass   = "scale-bench-password-1"
	idleWindow  = 5 * time.Second
	warmup      = 2 * time.Second
)

// median of xs (the lower middle one of an even count); xs is sorted in place.
func median[T int64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[(len(xs)-1)/2]
}

func appID(i int) string { return fmt.Sprintf("app-%06d", i) }

func measure(ctx context.Context, o options, n int) (row, error) {
	r := row{apps: n, sample: o.sample}
	dir, err := os.MkdirTemp("", "tollgate-scale-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // nginx workers (nobody under root) read the prefix
		return r, err
	}
	for _, d := range []string{"redis", "gateway", "backups"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return r, err
		}
	}
	o.logf("%d apps: redis-server", n)
	rs, err := redisenv.Start(ctx, filepath.Join(dir, "redis"))
	if err != nil {
		return r, err
	}
	defer rs.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), PoolSize: 2 * o.writers})
	defer rdb.Close()

	o.logf("%d apps: creating them through the store (%d writers)", n, o.writers)
	if r.createRate, err = seed(ctx, rdb, n, o.writers); err != nil {
		return r, err
	}

	o.logf("%d apps: control plane", n)
	cp, err := startControlPlane(ctx, o, dir, rs.URL())
	if err != nil {
		return r, err
	}
	defer cp.stop()

	r.configDict = o.configDict
	if r.configDict == "auto" {
		r.configDict = fmt.Sprintf("%dm", configDictSize(n))
	}
	o.logf("%d apps: a fresh gateway node loads them (config_dict %s)", n, r.configDict)
	start := time.Now()
	node, err := nginxenv.Start(ctx, nginxenv.Options{
		Variant: nginxenv.Variant{Key: "b", Name: "tollgate", Kind: nginxenv.Lease},
		Repo:    o.repo, Prefix: filepath.Join(dir, "gateway"), Workers: o.workers,
		RedisURL: rs.URL(), NodeID: "scale-1", AppID: benchApp, ReadyTimeout: o.ready,
		Zones: map[string]string{"config_dict": r.configDict},
	})
	if err != nil {
		return r, err
	}
	defer node.Stop()
	r.loadTime = time.Since(start)
	// the bench app answers from the first config read; wait until the node holds all it can
	// (the count of known sample apps stops growing) before probing
	r.known = probeKnown(ctx, node, n, o.sample)

	o.logf("%d apps: idle CPU over %s", n, idleWindow)
	r.idleNginx, r.idleRedis, r.idleCP = idleCPU(node.PID(), rs.PID(), cp.pid())

	o.logf("%d apps: wrk on one app: warm-up %s, then %d runs of %s", n, warmup, o.rounds, o.duration)
	fo0 := scrape(ctx, node.MetricsURL, "ratelimit_fail_open_total")
	wopts := wrk.Options{Threads: 1, Connections: o.connections, Duration: warmup,
		Headers: []string{nginxenv.AppHeader + ": " + benchApp}, URL: node.URL()}
	if _, err := wrk.Run(ctx, wopts); err != nil {
		return r, err
	}
	wopts.Duration = o.duration
	var rates []float64
	var p99s []time.Duration
	for i := 0; i < o.rounds; i++ {
		res, err := wrk.Run(ctx, wopts)
		if err != nil {
			return r, err
		}
		rates, p99s = append(rates, res.ReqPerSec), append(p99s, res.P99)
		r.refused += res.Non2xx
		o.logf("%d apps: run %d: %.0f req/s, p99 %s, %d non-2xx", n, i+1, res.ReqPerSec, dur(res.P99), res.Non2xx)
	}
	r.reqPerSec, r.p99 = median(rates), median(p99s)
	r.failOpen = scrape(ctx, node.MetricsURL, "ratelimit_fail_open_total") - fo0

	o.logf("%d apps: wrk on one app for %s while the node loads every app again", n, o.duration)
	if err := fullLoadUnderTraffic(ctx, o, &r, rdb, node); err != nil {
		return r, err
	}

	o.logf("%d apps: %d changes through the API, timed until the node enforces them", n, o.changes)
	api := apiload.New(cp.base, o.writers)
	if err := api.Login("admin", adminPass); err != nil {
		return r, err
	}
	r.propP50, r.propMax, r.propLost = propagation(ctx, api, node, o.changes)

	if o.apiPhase > 0 {
		o.logf("%d apps: API phases (%d clients, %s each)", n, o.writers, o.apiPhase)
		var seq atomic.Int64
		put := func() bool {
			i := 1 + int(seq.Add(1))%(n-1)
			body := fmt.Sprintf(`{"burst_quota":%d}`, 5000+seq.Load()%50)
			return api.Do("PUT", "/api/v1/apps/"+appID(i), []byte(body), 200)
		}
		pr := apiload.Run(o.writers, o.apiPhase, 0, put)
		r.putP50, r.putP99, r.putErrors = pr.P50, pr.P99, int64(pr.Errors)
		lr := apiload.Run(o.writers, o.apiPhase, 0, api.Get("/api/v1/apps?page=1&limit=20"))
		r.listP50, r.listP99, r.listErrors = lr.P50, lr.P99, int64(lr.Errors)
	}

	o.logf("%d apps: shared-dict use against the documented budgets", n)
	r.zones = measureZones(ctx, o, node, n, min(n-1, o.active))

	r.workerMem = maxWorkerPrivate(node.PID())
	r.cpRSS = rss(cp.pid())
	r.redisMem = redisUsedMemory(ctx, rdb)
	r.zoneFullWarn = zoneFull(node.ErrorLog())
	o.logf("%d apps: done", n)
	if o.hold {
		o.logf("holding (Ctrl-C ends): redis %s pid %d, control plane %s pid %d (admin / %s), gateway %s metrics %s nginx pid %d, prefix %s",
			rs.Addr(), rs.PID(), cp.base, cp.pid(), adminPass, node.BaseURL, node.MetricsURL, node.PID(), dir)
		<-ctx.Done()
	}
	return r, nil
}

// seed creates the cluster, the bench app (far more quota than the machine can spend) and n-1
// small apps through the store, with `writers` concurrent writers; it returns apps per second.
func seed(ctx context.Context, rdb *redis.Client, n, writers int) (float64, error) {
	set, err := scripts.New()
	if err != nil {
		return 0, err
	}
	st := store.New(rdb, set)
	if _, err := st.PutCluster(ctx, store.Cluster{ID: clusterID, Capacity: 1 << 40, ReservedRatio: 0.1}); err != nil {
		return 0, err
	}
	if _, err := st.PutApp(ctx, store.App{AppID: benchApp, ClusterID: clusterID, GuaranteedQuota: 5_000_000,
		BurstQuota: 20_000_000, Priority: 0, CBw: 1, Enabled: true}); err != nil {
		return 0, err
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i >= n {
					return
				}
				a := store.App{AppID: appID(i), ClusterID: clusterID, GuaranteedQuota: 1000,
					BurstQuota: 5000, Priority: i % 4, CBw: 1, Enabled: true}
				if _, err := st.PutApp(ctx, a); err != nil {
					errs <- fmt.Errorf("create %s: %w", a.AppID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n-1) / time.Since(start).Seconds(), nil
}

// probeKnown asks the node for `sample` random apps (after the load settled: two rounds in a
// row that know as many) and returns how many it knows (any answer but 403 unknown_app).
func probeKnown(ctx context.Context, node *nginxenv.Node, n, sample int) int {
	rng := rand.New(rand.NewSource(1))
	ids := make([]string, sample)
	for i := range ids {
		ids[i] = appID(1 + rng.Intn(n-1))
	}
	prev := -1
	deadline := time.Now().Add(2 * time.Minute)
	for {
		known := 0
		for _, id := range ids {
			status, body := get(ctx, node.URL(), id)
			if !(status == 403 && containsReason(body, "unknown_app")) {
				known++
			}
		}
		if known == prev || known == sample || time.Now().After(deadline) {
			return known
		}
		prev = known
		time.Sleep(time.Second)
	}
}

// idleCPU is the CPU the three processes (nginx with its workers) use over idleWindow with no
// traffic, in % of one core.
func idleCPU(nginx, redisPID, cp int) (float64, float64, float64) {
	pids := []int{nginx, redisPID, cp}
	before := make([]time.Duration, 3)
	for i, p := range pids {
		before[i], _ = proc.TreeCPUTime(p)
	}
	time.Sleep(idleWindow)
	pct := make([]float64, 3)
	for i, p := range pids {
		after, _ := proc.TreeCPUTime(p)
		pct[i] = 100 * (after - before[i]).Seconds() / idleWindow.Seconds()
	}
	return pct[0], pct[1], pct[2]
}

// propagation disables and enables app-000001 `changes` times through the API and times, from
// each 2xx, until the node answers as the change says (403 app_disabled, or not).
func propagation(ctx context.Context, api *apiload.Client, node *nginxenv.Node, changes int) (p50, max time.Duration, lost int) {
	id := appID(1)
	var took []time.Duration
	for i := 0; i < changes; i++ {
		disable := i%2 == 0
		body := fmt.Sprintf(`{"enabled":%t}`, !disable)
		if !api.Do("PUT", "/api/v1/apps/"+id, []byte(body), 200) {
			lost++
			continue
		}
		acked := time.Now()
		enforced := false
		for time.Since(acked) < propTimeout {
			status, resp := get(ctx, node.URL(), id)
			isDisabled := status == 403 && containsReason(resp, "app_disabled")
			if isDisabled == disable {
				enforced = true
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if !enforced {
			lost++
			continue
		}
		took = append(took, time.Since(acked))
	}
	if len(took) == 0 {
		return 0, 0, lost
	}
	q := apiload.Quantiles(took)
	return q(0.5), q(1), lost
}

// fullLoadUnderTraffic runs wrk on the bench app for o.duration and, one second in, announces a
// change logged as "all" (every node loads everything again); it records wrk's figures and the
// time from the announcement to the node on the new version.
func fullLoadUnderTraffic(ctx context.Context, o options, r *row, rdb *redis.Client, node *nginxenv.Node) error {
	set, err := scripts.New()
	if err != nil {
		return err
	}
	st := store.New(rdb, set)
	type result struct {
		res wrk.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := wrk.Run(ctx, wrk.Options{Threads: 1, Connections: o.connections, Duration: o.duration,
			Headers: []string{nginxenv.AppHeader + ": " + benchApp}, URL: node.URL()})
		done <- result{res, err}
	}()
	time.Sleep(time.Second)
	loads := scrape(ctx, node.MetricsURL, "ratelimit_config_full_loads_total")
	t0 := time.Now()
	if _, err := st.Bump(ctx, nil); err != nil { // logged as "all"
		return err
	}
	for time.Since(t0) < propTimeout {
		if scrape(ctx, node.MetricsURL, "ratelimit_config_full_loads_total") > loads {
			r.reloadTime = time.Since(t0)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	res := <-done
	if res.err != nil {
		return res.err
	}
	r.reloadRPS, r.reloadP99, r.reloadBad = res.res.ReqPerSec, res.res.P99, res.res.Non2xx
	return nil
}
