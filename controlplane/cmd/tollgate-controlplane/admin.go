package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/api"
	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/emergency"
	"tollgate/controlplane/internal/live"
	"tollgate/controlplane/internal/metrics"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// startAdmin builds the admin API over rdb: the signing secret, the first admin (its password
// generated and printed once unless TOLLGATE_ADMIN_PASSWORD is set), sessions, the audit
// writer, the write path, the cluster view with its WebSocket feed, and the metrics. The
// returned function stops the background parts and flushes the audit buffer.
func startAdmin(ctx context.Context, log *slog.Logger, cfg config.Config, rdb redis.UniversalClient,
	set *scripts.Set, st *store.Store) (http.Handler, func(), error) {
	a := cfg.Admin
	secret, source, err := auth.Secret(ctx, rdb, a.JWTSecret)
	if err != nil {
		return nil, nil, err
	}
	log.Info("jwt signing secret ready", "source", source)
	tokens, err := auth.NewTokens(secret, a.AccessTTL, nil)
	if err != nil {
		return nil, nil, err
	}
	hasher, err := auth.NewHasher(0)
	if err != nil {
		return nil, nil, err
	}
	us := users.New(rdb, hasher, nil)
	if err := bootstrapAdmin(ctx, log, us, a); err != nil {
		return nil, nil, err
	}
	var m *metrics.Metrics // set below, before anything runs that reports to it
	al := audit.New(rdb, audit.Options{MaxLen: a.AuditMaxLen, Logger: log,
		OnWrite: func(action, outcome string) { m.AuditWrite(action, outcome) }})
	led := ledger.New(rdb, set)
	ch := changes.New(changes.Options{Store: st, Validator: validate.New(st, log, al), Ledger: led,
		Emergency: emergency.NewManager(led, log), Audit: al, Redis: rdb, Logger: log})
	lv := live.New(live.Options{Redis: rdb, Catalog: st, L1: led, Interval: a.LiveInterval, Logger: log,
		OnCollect: func(s *live.Snapshot, err error) { m.Collected(s, err) }})
	m = metrics.New(metrics.Options{AuditDropped: al.Dropped, WSClients: lv.Subscribers, Snapshot: lv.Current})
	h := api.New(api.Options{Redis: rdb, Scripts: set, Config: st, Logger: log, AuthRedis: rdb,
		Tokens: tokens, Sessions: auth.NewSessions(rdb, a.RefreshTTL, nil),
		Throttle: auth.NewThrottle(rdb, a.LoginMaxUser, a.LoginMaxIP, a.LoginWindow),
		Limiter:  auth.NewLimiter(a.APIRate, a.APIBurst, nil), Hasher: hasher, Users: us, Audit: al,
		Changes: ch, Ledger: led, Live: lv, Metrics: m, CORSOrigins: a.CORSOrigins, MetricsToken: a.MetricsToken})
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); al.Run(bg) }()
	go func() { defer wg.Done(); lv.Run(bg) }()
	return h, func() { cancel(); wg.Wait() }, nil
}

// bootstrapAdmin creates the first admin on an empty user store; a generated password is
// printed once on stderr (never to the structured log).
func bootstrapAdmin(ctx context.Context, log *slog.Logger, us *users.Store, a config.Admin) error {
	created, generated, err := us.Bootstrap(ctx, a.User, a.Password)
	if err != nil {
		return err
	}
	switch {
	case created && generated != "":
		fmt.Fprintf(os.Stderr, "\n"+
			"  tollgate: first run, created the admin user %q with the password\n\n"+
			"      %s\n\n"+
			"  It is shown only this once: sign in and change it (PUT /api/v1/auth/password),\n"+
			"  or set TOLLGATE_ADMIN_PASSWORD on an empty Redis to choose it.\n\n", a.User, generated)
		log.Warn("admin user created with a generated password (printed on stderr)", "user", a.User)
	case created:
		log.Info("admin user created from TOLLGATE_ADMIN_PASSWORD", "user", a.User)
	}
	return nil
}
