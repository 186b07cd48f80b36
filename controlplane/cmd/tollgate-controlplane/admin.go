package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/admin"
	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/durable"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

// startAdmin starts the admin API (controlplane/internal/admin); a first admin password it
// generates is printed on stderr. The returned function stops it and flushes the audit buffer.
func startAdmin(ctx context.Context, log *slog.Logger, cfg config.Config, rdb redis.UniversalClient,
	set *scripts.Set, st *store.Store, g *durable.Guard, b *durable.Backups) (http.Handler, func(), error) {
	a, err := admin.Start(ctx, admin.Options{Config: cfg.Admin, Redis: rdb, Scripts: set, Store: st,
		Logger: log, Banner: os.Stderr, Guard: g, Backups: b})
	if err != nil {
		return nil, nil, err
	}
	return a.Handler, a.Stop, nil
}
