// Command tollgate-controlplane is the control plane of tollgate: it loads the Redis scripts,
// seeds the demo config into an empty Redis, runs the periodic jobs while it is the elected
// leader among the replicas, and serves the HTTP API.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/redisconn"
	"tollgate/controlplane/internal/webui"
	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/version"
)

const shutdownTimeout = 10 * time.Second

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(version.String("tollgate-controlplane"))
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) > 1 { // settings come from the environment; arguments name a subcommand
		os.Exit(command(log, os.Args[1], os.Args[2:])) // export, import, diff, restore, backups (cli.go)
	}
	if err := run(log); err != nil {
		log.Error("tollgate-controlplane stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger) error {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	log.Info("starting tollgate-controlplane", "version", version.Version, "config", cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	redis.SetLogger(redisLogger{log: log})
	rdb := cfg.Redis().NewClient() // one server, Sentinel failover client or cluster client
	defer rdb.Close()
	if err := redisconn.Wait(ctx, rdb, log, redisconn.Options{}); err != nil {
		if ctx.Err() != nil {
			log.Info("interrupted while waiting for redis")
			return nil
		}
		return err
	}
	set, err := scripts.New()
	if err != nil {
		return err
	}
	if err := set.LoadAll(ctx, rdb); err != nil {
		return err
	}
	log.Info("redis scripts loaded", "count", set.Len(), "names", set.Names())
	st := store.New(rdb, set)
	guard, backups, err := startGuard(ctx, log, cfg, rdb, st)
	if err != nil {
		return err
	}
	if err := seedDemo(ctx, log, cfg, st, guard); err != nil {
		return err
	}
	// once per store: the debtors sets' placeholders and the sets of apps with connection limits
	// that gateways' full loads read (not into a lost store: nothing is written there before a
	// restore)
	if !guard.Lost() {
		if err := st.KeepDebtorsSets(ctx); err != nil {
			return err
		}
		if n, err := store.IndexConnLimits(ctx, rdb); err != nil {
			return err
		} else if n > 0 {
			log.Info("apps with connection limits indexed", "apps", n)
		}
	}
	stopJobs, err := startJobs(ctx, log, cfg.Jobs, rdb, set, st)
	if err != nil {
		return err
	}
	defer stopJobs()
	handler, stopAdmin, err := startAdmin(ctx, log, cfg, rdb, set, st, guard, backups) // admin API (admin.go)
	if err != nil {
		return err
	}
	defer stopAdmin()
	// the admin console (web/, embedded) at / and every path the API does not own
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	return serve(ctx, log, ln, cfg.TLSCert, cfg.TLSKey, webui.Mount(handler, webui.Handler()))
}

// startGuard starts the config store's watch: epoch, version, persistence, snapshots.
func startGuard(ctx context.Context, log *slog.Logger, cfg config.Config, rdb redis.UniversalClient,
	st *store.Store) (*durable.Guard, *durable.Backups, error) {
	backups := &durable.Backups{Dir: cfg.Durable.BackupDir, Keep: cfg.Durable.BackupKeep}
	g := durable.New(durable.Options{Redis: rdb, Store: st, Cluster: cfg.Redis().Kind == redisconn.Cluster, RedisID: cfg.Redis().String(),
		Backups: backups, Wait: cfg.Durable.Wait, WaitTime: cfg.Durable.WaitTimeout, Check: cfg.Durable.StoreCheck,
		Logger: log, MaxGateway: durable.MaxGatewayVersion(rdb)})
	if err := g.Init(ctx); err != nil {
		return nil, nil, fmt.Errorf("config store: %w", err)
	}
	st.SetHooks(g.Hooks())
	go g.Run(ctx, durable.Reader{Redis: rdb, Store: st})
	return g, backups, nil
}

func seedDemo(ctx context.Context, log *slog.Logger, cfg config.Config, st *store.Store, g *durable.Guard) error {
	if !cfg.SeedDemo {
		log.Info("demo seed disabled (TOLLGATE_SEED_DEMO=true seeds an empty new store)")
		return nil
	}
	if fresh, err := g.Fresh(ctx); err != nil {
		return err
	} else if !fresh {
		log.Info("demo seed skipped: the config store holds config, or is a store this control plane knew")
		return nil
	}
	seeded, err := seed.Demo(ctx, st)
	if err != nil {
		return err
	}
	if seeded {
		log.Info("demo config seeded", "cluster", seed.DemoCluster().ID, "apps", len(seed.DemoApps()))
	} else {
		log.Info("demo seed skipped: redis already holds tollgate config")
	}
	return nil
}

// maxHeaderBytes caps a request's line and headers (Go's default is 1 MiB): a larger request
// gets 431 from net/http before any handler, metric or audit entry sees it.
const maxHeaderBytes = 16 << 10

// serve runs the HTTP server on ln until ctx is done, then shuts it down gracefully; HTTPS
// when certFile and keyFile are set, else plain HTTP with a warning when ln is off loopback.
func serve(ctx context.Context, log *slog.Logger, ln net.Listener, certFile, keyFile string, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	tlsOn := certFile != "" && keyFile != ""
	errc := make(chan error, 1)
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(ln, certFile, keyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !tlsOn && !a.IP.IsLoopback() {
		log.Warn("the control plane listens off loopback without TLS: passwords and tokens cross "+
			"the network in clear; set TOLLGATE_TLS_CERT and TOLLGATE_TLS_KEY, or put it behind a "+
			"TLS proxy and listen on loopback", "addr", ln.Addr().String())
	}
	log.Info("http server listening", "addr", ln.Addr().String(), "tls", tlsOn)
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped")
	return nil
}

// redisLogger sends go-redis' internal log lines to slog.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
