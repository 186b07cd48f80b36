package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"time"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/config"
	"tollgate/controlplane/internal/durable"
	"tollgate/controlplane/internal/redisconn"
	"tollgate/internal/scripts"
	"tollgate/internal/store"
)

const cliUsage = `usage: tollgate-controlplane                 run the control plane
       tollgate-controlplane --version
       tollgate-controlplane export [-format json|yaml] [-secrets] [-o FILE]
       tollgate-controlplane diff FILE            what import FILE would change
       tollgate-controlplane import [-apply] FILE  dry run (the diff) unless -apply
       tollgate-controlplane restore [-apply] [-snapshot NAME | FILE]
                                                  put a snapshot (default: the newest of
                                                  TOLLGATE_CONFIG_BACKUP_DIR) back into an
                                                  empty or lost store; dry run unless -apply
       tollgate-controlplane backups              list the snapshots, newest first
       tollgate-controlplane --version            print the version
Settings are TOLLGATE_* environment variables (docs/settings.md): the Redis and the backup
directory come from the same environment as the server (TOLLGATE_REDIS_URL,
TOLLGATE_CONFIG_BACKUP_DIR, ...). Exit status: 0 done, 1 error,
2 bad usage, 3 a dry run or diff that found changes or violations.
`

// command runs a subcommand and returns the exit status.
func command(log *slog.Logger, name string, args []string) int {
	// the subcommands print to stdout; the store's start-up lines stay quiet
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	format := fs.String("format", "json", "export format: json or yaml")
	secrets := fs.Bool("secrets", false, "export the users (password hashes) and the JWT secret too")
	out := fs.String("o", "", "write the export to FILE (mode 0600) instead of stdout")
	apply := fs.Bool("apply", false, "apply (import, restore); without it a dry run")
	snapshot := fs.String("snapshot", "", "restore this snapshot of the backup directory")
	switch name {
	case "export", "diff", "import", "restore", "backups":
	case "-h", "--help", "help":
		fmt.Print(cliUsage)
		return 0
	default:
		fmt.Fprint(os.Stderr, cliUsage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	backups := &durable.Backups{Dir: cfg.Durable.BackupDir, Keep: cfg.Durable.BackupKeep}
	if name == "backups" {
		names, err := backups.List()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, n := range names {
			fmt.Println(n)
		}
		return 0
	}
	rdb := cfg.Redis().NewClient()
	defer rdb.Close()
	if err := redisconn.Wait(ctx, rdb, quiet, redisconn.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 1
	}
	set, err := scripts.New()
	if err == nil {
		err = set.LoadAll(ctx, rdb)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis scripts:", err)
		return 1
	}
	st := store.New(rdb, set)
	g := durable.New(durable.Options{Redis: rdb, Store: st, Cluster: cfg.Redis().Kind == redisconn.Cluster, RedisID: cfg.Redis().String(),
		Backups: backups, Wait: cfg.Durable.Wait, WaitTime: cfg.Durable.WaitTimeout, Logger: quiet,
		MaxGateway: durable.MaxGatewayVersion(rdb)})
	if err := g.Init(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st.SetHooks(g.Hooks())
	w := durable.Writer{Reader: durable.Reader{Redis: rdb, Store: st}}
	al := audit.New(rdb, audit.Options{MaxLen: cfg.Admin.AuditMaxLen, Logger: quiet})
	actor := "cli"
	if u, err := user.Current(); err == nil {
		actor = "cli:" + u.Username
	}
	record := func(action, outcome string, d map[string]any) {
		_ = al.Record(ctx, audit.Entry{Actor: actor, Action: action, Resource: "config", Outcome: outcome,
			Details: audit.Details(d)})
	}
	c := cli{ctx: ctx, w: w, g: g, record: record, apply: *apply}
	switch name {
	case "export":
		return c.export(*format, *secrets, *out)
	case "restore":
		return c.restore(backups, *snapshot, fs.Args())
	}
	if fs.NArg() != 1 {
		fmt.Fprint(os.Stderr, cliUsage)
		return 2
	}
	return c.importFile(fs.Arg(0), name == "import" && *apply)
}

type cli struct {
	ctx    context.Context
	w      durable.Writer
	g      *durable.Guard
	record func(action, outcome string, d map[string]any)
	apply  bool
}

func (c cli) export(format string, secrets bool, out string) int {
	if format != "json" && format != "yaml" {
		fmt.Fprintln(os.Stderr, "-format must be json or yaml")
		return 2
	}
	doc, err := c.w.Export(c.ctx, secrets)
	if err == nil && !secrets {
		doc.Users, doc.JWTSecret = nil, ""
	}
	var body []byte
	if err == nil {
		body, err = durable.Encode(doc, format)
	}
	if err == nil && out != "" {
		err = os.WriteFile(out, body, 0o600)
	} else if err == nil {
		_, err = os.Stdout.Write(body)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "export:", err)
		return 1
	}
	if secrets {
		c.record("config.export_secrets", audit.OK, nil)
	}
	return 0
}

func readDoc(path string) (durable.Document, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return durable.Document{}, err
	}
	return durable.Decode(data)
}

// importFile prints the diff and violations of FILE against the store and applies it when
// asked (diff and dry-run import exit 3 when there is anything to change or refuse).
func (c cli) importFile(path string, apply bool) int {
	doc, err := readDoc(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		c.record(dryAction("config.import", !apply), audit.Rejected, map[string]any{"error": "invalid_document"})
		return 1
	}
	if c.g.Lost() {
		fmt.Fprintln(os.Stderr, "the config store is lost:", c.g.Status().Message)
		return 1
	}
	cur, err := c.w.Export(c.ctx, doc.Users != nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	vs := durable.Plan(cur, doc)
	diff := durable.Diff(cur, doc)
	printJSON(map[string]any{"diff": diff, "violations": vs, "dry_run": !apply})
	if len(vs) > 0 {
		if apply {
			c.record("config.import", audit.Rejected, map[string]any{"violations": len(vs)})
		}
		return 1
	}
	if !apply {
		if len(diff) > 0 {
			return 3
		}
		return 0
	}
	if err := c.w.Apply(c.ctx, cur, doc); err != nil {
		c.record("config.import", audit.Failed, map[string]any{"changes": len(diff)})
		fmt.Fprintln(os.Stderr, "import:", err)
		return 1
	}
	v, _ := c.w.Store.ConfigVersion(c.ctx)
	c.record("config.import", audit.OK, map[string]any{"changes": len(diff), "config_version": v})
	fmt.Fprintf(os.Stderr, "imported: %d changes, config version %d\n", len(diff), v)
	return 0
}

func (c cli) restore(backups *durable.Backups, name string, args []string) int {
	var snap *durable.Snapshot
	var err error
	switch {
	case len(args) > 1 || (len(args) == 1 && name != ""):
		fmt.Fprint(os.Stderr, cliUsage)
		return 2
	case len(args) == 1:
		name = args[0]
		var data []byte
		if data, err = os.ReadFile(args[0]); err == nil {
			snap, err = durable.ParseSnapshot(data)
			var de *durable.DecodeError
			if errors.As(err, &de) { // a plain export (with secrets) restores too
				var doc durable.Document
				if doc, err = durable.Decode(data); err == nil {
					snap = &durable.Snapshot{Config: doc}
				}
			}
		}
	case name != "":
		snap, err = backups.Load(name)
	default:
		snap, name, err = backups.Latest()
		if err == nil && snap == nil {
			err = fmt.Errorf("no snapshot in %s", backups.Dir)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "restore:", err)
		return 1
	}
	diff, err := c.g.Restore(c.ctx, c.w, snap.Config, snap.Epoch, snap.Version, !c.apply)
	if err != nil {
		c.record(dryAction("config.restore", !c.apply), audit.Failed, map[string]any{"snapshot": name})
		var inv *durable.InvalidError
		if errors.As(err, &inv) {
			printJSON(map[string]any{"violations": inv.Violations})
		}
		fmt.Fprintln(os.Stderr, "restore:", err)
		return 1
	}
	c.record(dryAction("config.restore", !c.apply), audit.OK, map[string]any{"snapshot": name, "changes": len(diff)})
	printJSON(map[string]any{"snapshot": name, "diff": diff, "dry_run": !c.apply, "store": c.g.Status()})
	if !c.apply {
		fmt.Fprintln(os.Stderr, "dry run: run again with -apply to restore")
		return 3
	}
	fmt.Fprintf(os.Stderr, "restored %s: %d changes\n", name, len(diff))
	return 0
}

func dryAction(a string, dry bool) string {
	if dry {
		return a + ".dry_run"
	}
	return a
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
}
