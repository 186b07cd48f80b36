// Command tollgate-apibench measures the admin API: the latency of GET /api/v1/apps with many
// apps and of POST /api/v1/apps under concurrent load, against the real stack (the admin package
// as the control plane runs it, a real redis-server, HTTP over loopback). It prints a table; it
// is a benchmark program, not a test.
//
//	go run ./controlplane/cmd/tollgate-apibench [-apps 1000] [-c 16] [-d 10s] [-redis redis://…]
//	    [-live=false] [-url http://… -password … [-pid N]] [-cpuprofile f] [-blockprofile f] [-mutexprofile f]
//
// -live=false leaves out the live collector (the cluster view refreshed every 5 s) to separate
// its cost from the API's; -url measures a control plane already running over the same Redis
// (its admin password in -password, or TOLLGATE_ADMIN_PASSWORD) instead of one in process.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/admin"
	"tollgate/controlplane/internal/config"
	"tollgate/internal/apiload"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

const password = "apibench-password-1"

type options struct {
	apps        int
	concurrency int
	duration    time.Duration
	redisURL    string
	live        bool
	url         string
	password    string
	cpuProfile  string
	blockProf   string
	mutexProf   string
	pid         int
}

func main() {
	var o options
	flag.IntVar(&o.apps, "apps", 1000, "apps in Redis before the GET phases")
	flag.IntVar(&o.concurrency, "c", 16, "concurrent clients")
	flag.DurationVar(&o.duration, "d", 10*time.Second, "duration of each phase")
	flag.StringVar(&o.redisURL, "redis", "", "an empty Redis to use (default: start a redis-server)")
	flag.BoolVar(&o.live, "live", true, "run the live collector in process, as the control plane does")
	flag.StringVar(&o.url, "url", "", "measure the control plane at this URL (over the -redis Redis) instead of one in process")
	flag.StringVar(&o.password, "password", os.Getenv("TOLLGATE_ADMIN_PASSWORD"), "the admin password of -url")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured phases to this file")
	flag.StringVar(&o.blockProf, "blockprofile", "", "write a block profile of the measured phases to this file")
	flag.StringVar(&o.mutexProf, "mutexprofile", "", "write a mutex profile of the measured phases to this file")
	flag.IntVar(&o.pid, "pid", 0, "with -url: the control plane's process id, whose RSS and peak RSS are printed after each phase")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "tollgate-apibench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	url := o.redisURL
	if url == "" {
		r, err := startRedis()
		if err != nil {
			return err
		}
		defer r.stop()
		url = r.url
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opts.PoolSize = 4 * o.concurrency
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	set, err := scripts.New()
	if err != nil {
		return err
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		return err
	}
	st := store.New(rdb, set)
	if err := seedApps(ctx, st, o.apps); err != nil {
		return err
	}
	base, pw := o.url, o.password
	if base == "" {
		var stop func()
		if base, stop, err = serve(ctx, rdb, set, st, o.live); err != nil {
			return err
		}
		defer stop()
		pw = password
	}
	stopProf, err := startProfiles(o)
	if err != nil {
		return err
	}
	err = measure(ctx, o, base, pw, rdb)
	if perr := stopProf(); err == nil {
		err = perr
	}
	return err
}

// seedApps writes one cluster big enough for every app the run creates, and n apps.
func seedApps(ctx context.Context, st *store.Store, n int) error {
	if _, err := st.PutCluster(ctx, store.Cluster{ID: "bench", Capacity: 1 << 40, ReservedRatio: 0.1}); err != nil {
		return err
	}
	const writers = 8
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := w; i < n; i += writers {
				a := store.App{AppID: fmt.Sprintf("app-%05d", i), ClusterID: "bench", GuaranteedQuota: 1000,
					BurstQuota: 5000, Priority: i % 4, CBw: 1, Enabled: i%10 != 0}
				if _, err := st.PutApp(ctx, a); err != nil {
					errs <- fmt.Errorf("seed app %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// serve starts the admin API as the control plane does, without the per-user rate limit
// (which would otherwise be what is measured), on a loopback port.
func serve(ctx context.Context, rdb *redis.Client, set *scripts.Set, st *store.Store, live bool) (string, func(), error) {
	cfg := config.DefaultAdmin()
	cfg.Password, cfg.APIRate, cfg.APIBurst = password, 1e9, 1e9
	if !live {
		cfg.LiveInterval = 24 * time.Hour // one collection at the start, none during the phases
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ad, err := admin.Start(ctx, admin.Options{Config: cfg, Redis: rdb, Scripts: set, Store: st, Logger: log,
		Banner: io.Discard})
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: ad.Handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close(); ad.Stop() }, nil
}

func measure(ctx context.Context, o options, base, pw string, rdb *redis.Client) error {
	c := apiload.New(base, o.concurrency)
	if err := c.Login("admin", pw); err != nil {
		return err
	}
	var seq atomic.Int64
	info, _ := rdb.Info(ctx, "server").Result()
	fmt.Printf("tollgate-apibench: %d apps, %d concurrent clients, %s per phase, GOMAXPROCS %d, Redis %s\n\n",
		o.apps, o.concurrency, o.duration, runtime.GOMAXPROCS(0), redisVersion(info))
	phases := []phase{
		{name: "GET /api/v1/apps (page of 20)", req: c.Get("/api/v1/apps?page=3&limit=20")},
		{name: "GET /api/v1/apps?search=app-009 (filter)", req: c.Get("/api/v1/apps?search=app-009&limit=20")},
		{name: fmt.Sprintf("GET /api/v1/apps?limit=1000 (of %d)", o.apps), req: c.Get("/api/v1/apps?limit=1000")},
		{name: "GET /api/v1/apps?priority=2 (1 filter)", req: c.Get("/api/v1/apps?priority=2&page=50&limit=20")},
		{name: "GET ?cluster_id=&priority=&enabled= (3)", req: c.Get("/api/v1/apps?cluster_id=bench&priority=2&enabled=false&limit=20")},
		{name: "POST /api/v1/apps?dry_run=true", req: create(c, &seq, true)},
		{name: "POST /api/v1/apps (create)", req: create(c, &seq, false)},
		{name: "PUT /api/v1/apps/{id} (update)", req: update(c, &seq, o.apps)},
		{name: "GET ?cluster_id=&priority=&enabled= after writes", req: c.Get("/api/v1/apps?cluster_id=bench&priority=2&enabled=false&limit=20")},
	}
	fmt.Printf("%-50s %9s %9s %9s %9s %9s %9s %7s\n", "phase", "requests", "req/s", "p50", "p90", "p99", "max", "errors")
	for _, p := range phases {
		r := p.run(o.concurrency, o.duration)
		fmt.Printf("%-50s %9d %9.0f %9s %9s %9s %9s %7d%s\n", p.name, r.N, r.Rate, apiload.Ms(r.P50), apiload.Ms(r.P90),
			apiload.Ms(r.P99), apiload.Ms(r.Max), r.Errors, rss(o.pid))
	}
	n, _ := rdb.HLen(ctx, "ratelimit:apps").Result()
	fmt.Printf("\napps after the run: %d\n", n)
	return nil
}
