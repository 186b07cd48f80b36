// Package admin assembles the admin API over one Redis: the signing secret, the first admin
// (its password generated and printed once unless configured), sessions, the audit writer, the
// write path, the cluster view with its WebSocket feed, and the metrics. The control plane's
// main and the API benchmark both start it here, so the benchmark measures the real stack.
package admin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/api"
	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/jobs/emergency"
	"tollgate/controlplane/internal/live"
	"tollgate/controlplane/internal/metrics"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/ledger"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// Options of the admin API.
type Options struct {
	Config     config.Admin
	Redis      redis.UniversalClient
	Scripts    *scripts.Set
	Store      *store.Store
	Logger     *slog.Logger
	BcryptCost int       // 0: auth's default (12)
	Banner     io.Writer // where a generated first password is printed (os.Stderr)
	// Guard watches the config store (nil: none, e.g. the API benchmark): a lost store gets no
	// first admin, user writes go through its hooks, and the API reports and restores it.
	Guard   *durable.Guard
	Backups *durable.Backups
}

// Admin is the running admin API.
type Admin struct {
	Handler http.Handler
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start builds the API and starts its background parts (audit writer, cluster view).
func Start(ctx context.Context, o Options) (*Admin, error) {
	a, log := o.Config, o.Logger
	if log == nil {
		log = slog.Default()
	}
	secret, source, err := auth.Secret(ctx, o.Redis, a.JWTSecret)
	if err != nil {
		return nil, err
	}
	log.Info("jwt signing secret ready", "source", source)
	tokens, err := auth.NewTokens(secret, a.AccessTTL, nil)
	if err != nil {
		return nil, err
	}
	hasher, err := auth.NewHasher(o.BcryptCost)
	if err != nil {
		return nil, err
	}
	us := users.New(o.Redis, hasher, nil)
	storeLost := func() (bool, string) { return false, "" }
	if g := o.Guard; g != nil {
		us.SetHooks(users.Hooks{Before: g.Hooks().Before, After: func(ctx context.Context) error {
			_, err := o.Store.Bump(store.WithChange(ctx, store.ChangeUser, "-"), nil) // nothing for gateways
			return err
		}})
		storeLost = func() (bool, string) { st := g.Status(); return st.State == "lost", st.Message }
	}
	if lost, msg := storeLost(); lost {
		log.Error("config store lost: no first admin is created; restore a snapshot with 'tollgate-controlplane restore' (docs/durability.md)",
			"reason", msg)
	} else if err := bootstrap(ctx, log, us, a, o.Banner); err != nil {
		return nil, err
	}
	var m *metrics.Metrics // set below, before anything runs that reports to it
	al := audit.New(o.Redis, audit.Options{MaxLen: a.AuditMaxLen, AnonMaxLen: a.AuditAnonMax, Logger: log,
		OnWrite: func(action, outcome string) { m.AuditWrite(action, outcome) }})
	led := ledger.New(o.Redis, o.Scripts)
	cat := changes.NewCatalog(o.Store)
	ch := changes.New(changes.Options{Store: o.Store, Validator: validate.New(cat, log, al),
		Emergency: emergency.NewManager(led, log), Audit: al, Redis: o.Redis, Catalog: cat, Logger: log, Secrets: a.Secrets})
	lv := live.New(live.Options{Redis: o.Redis, Catalog: o.Store, L1: led, Interval: a.LiveInterval, Logger: log,
		Alerts: a.Alerts, OnCollect: func(s *live.Snapshot, err error) { m.Collected(s, err) }, StoreLost: storeLost})
	var storeStatus func() durable.Status
	if o.Guard != nil {
		storeStatus = o.Guard.Status
	}
	m = metrics.New(metrics.Options{AuditDropped: al.Dropped, WSClients: lv.Subscribers, Snapshot: lv.Current,
		Store: storeStatus})
	h, err := api.New(api.Options{Redis: o.Redis, Scripts: o.Scripts, Config: o.Store, Logger: log, AuthRedis: o.Redis,
		Tokens: tokens, Sessions: auth.NewSessions(o.Redis, a.RefreshTTL, nil),
		Throttle: auth.NewThrottle(o.Redis, a.LoginMaxUser, a.LoginMaxIP, a.LoginWindow),
		Limiter:  auth.NewLimiter(a.APIRate, a.APIBurst, nil), Hasher: hasher, Users: us, Audit: al,
		Changes: ch, Rules: rules.New(rules.Options{Redis: o.Redis, Store: o.Store, Apps: cat, Audit: al, Logger: log}),
		Ledger: led, Live: lv, Metrics: m, CORSOrigins: a.CORSOrigins, MetricsToken: a.MetricsToken,
		PrometheusURL: a.PrometheusURL, ClientLimiter: auth.NewLimiter(a.AnonRate, a.AnonBurst, nil),
		TrustedProxies: a.TrustedProxies, Guard: o.Guard, Backups: o.Backups,
		Writer: durable.Writer{Reader: durable.Reader{Redis: o.Redis, Store: o.Store}}})
	if err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ad := &Admin{Handler: h, cancel: cancel}
	ad.wg.Add(3)
	go func() { defer ad.wg.Done(); al.Run(bg) }()
	go func() { defer ad.wg.Done(); lv.Run(bg) }()
	go func() {
		defer ad.wg.Done()
		if lost, _ := storeLost(); !lost {
			reportViolations(bg, log, durable.Reader{Redis: o.Redis, Store: o.Store}, m)
		}
	}()
	return ad, nil
}

// reportViolations reads the stored config once at start and reports what of it the config
// contract refuses, and any app whose L2 state is not what the API shows
// (durable.StoredViolations): a warning naming up to 20 fields, and the gauge
// tollgate_cp_config_violations. Such config stays editable; GET /api/v1/config/violations
// lists it all.
func reportViolations(ctx context.Context, log *slog.Logger, r durable.Reader, m *metrics.Metrics) {
	vs, doc, err := r.StoredViolations(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Error("stored config not checked against the config contract", "err", err)
		}
		return
	}
	m.ConfigViolations(len(vs))
	if len(vs) == 0 {
		log.Info("stored config meets the config contract", "clusters", len(doc.Clusters), "apps", len(doc.Apps))
		return
	}
	named := make([]string, 0, min(len(vs), 20))
	for _, v := range vs[:min(len(vs), 20)] {
		named = append(named, v.Field+":"+v.Code)
	}
	log.Warn("stored config the config contract refuses: it stays editable, and a change that fixes it is accepted (GET /api/v1/config/violations lists it all)",
		"count", len(vs), "violations", named)
}

// Stop ends the background parts and flushes the audit buffer.
func (a *Admin) Stop() {
	a.cancel()
	a.wg.Wait()
}

// bootstrap creates the first admin on an empty user store; a generated password is printed
// once on the banner writer (never to the structured log).
func bootstrap(ctx context.Context, log *slog.Logger, us *users.Store, a config.Admin, banner io.Writer) error {
	created, generated, err := us.Bootstrap(ctx, a.User, a.Password)
	if err != nil {
		return err
	}
	switch {
	case created && generated != "":
		if banner != nil {
			fmt.Fprintf(banner, "\n"+
				"  tollgate: first run, created the admin user %q with the password\n\n"+
				"      %s\n\n"+
				"  It is shown only this once: sign in and change it (PUT /api/v1/auth/password),\n"+
				"  or set TOLLGATE_ADMIN_PASSWORD on an empty Redis to choose it.\n\n", a.User, generated)
		}
		log.Warn("admin user created with a generated password (printed on stderr)", "user", a.User)
	case created:
		log.Info("admin user created from TOLLGATE_ADMIN_PASSWORD", "user", a.User)
	}
	return nil
}
