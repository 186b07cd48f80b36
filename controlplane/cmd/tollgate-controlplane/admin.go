package main

import (
	"context"
	"fmt"
	"io"
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

// EnvAdminPasswordFile names a file that receives the first admin's generated password instead
// of stderr (which a supervisor usually appends to a log): created 0600 before the user is, so
// that a file that cannot be written stops the start before a password nobody sees exists.
// scripts/stack.sh prints it on the terminal and deletes it.
const EnvAdminPasswordFile = "TOLLGATE_ADMIN_PASSWORD_FILE" // file for the first admin's generated password, created 0600 (none: stderr; a writable path)

// startAdmin starts the admin API (controlplane/internal/admin); a first admin password it
// generates is printed on stderr or written to $TOLLGATE_ADMIN_PASSWORD_FILE. The returned
// function stops it and flushes the audit buffer.
func startAdmin(ctx context.Context, log *slog.Logger, cfg config.Config, rdb redis.UniversalClient,
	set *scripts.Set, st *store.Store, g *durable.Guard, b *durable.Backups) (http.Handler, func(), error) {
	banner := io.Writer(os.Stderr)
	if path := os.Getenv(EnvAdminPasswordFile); path != "" {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return nil, nil, fmt.Errorf("%s: %w", EnvAdminPasswordFile, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", EnvAdminPasswordFile, err)
		}
		defer func() {
			info, _ := f.Stat()
			f.Close()
			if info != nil && info.Size() == 0 {
				os.Remove(path) // no password generated: no file
			}
		}()
		banner = f
	}
	a, err := admin.Start(ctx, admin.Options{Config: cfg.Admin, Redis: rdb, Scripts: set, Store: st,
		Logger: log, Banner: banner, Guard: g, Backups: b})
	if err != nil {
		return nil, nil, err
	}
	return a.Handler, a.Stop, nil
}
