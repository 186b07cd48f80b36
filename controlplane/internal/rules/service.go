package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/changes"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/store"
)

// Errors of the rules service (the API maps them to HTTP statuses and reasons).
var (
	ErrRuleNotFound    = errors.New("rule not found")
	ErrRuleExists      = errors.New("a rule with this id exists")
	ErrBreakerNotFound = errors.New("breaker not found")
)

// InvalidError: a rule or breaker failed validation; nothing was written.
type InvalidError struct {
	Kind   string // "rule" or "breaker"
	Result validate.Result
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid %s (%d violations)", e.Kind, len(e.Result.Violations))
}

// Bumper writes config with the version bump and announcement of app writes (*store.Store).
type Bumper interface {
	Bump(ctx context.Context, write func(context.Context) error) (int64, error)
	Serialize(ctx context.Context, fn func(context.Context) error) error
}

// Apps reads configured apps by id (*changes.Catalog, *store.Store).
type Apps interface {
	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
}

// Auditor records changes (*audit.Log).
type Auditor interface {
	Record(ctx context.Context, e audit.Entry) error
}

// Options are the dependencies of the service.
type Options struct {
	Redis  redis.Cmdable
	Store  Bumper
	Apps   Apps
	Audit  Auditor
	Now    func() time.Time // default time.Now
	Logger *slog.Logger
}

// Service reads and writes rules and breakers, and reads events.
type Service struct{ o Options }

// New returns the service.
func New(o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{o: o}
}

// Outcome is the answer to a change (the same shape as app changes).
type Outcome = changes.Outcome

// attempt is one audited change.
type attempt struct {
	actor, action, resource string
	out                     Outcome
	err                     error
}

// record audits a change: a dry run as "<kind>.validate", a write under its action; the
// outcome is ok, rejected (validation, conflict, not found) or failed (Redis).
func (s *Service) record(ctx context.Context, a attempt) {
	outcome := audit.OK
	d := map[string]any{"diff": a.out.Validation.Diff, "dry_run": a.out.Validation.DryRun}
	if a.out.Version > 0 {
		d["config_version"] = a.out.Version
	}
	var inv *InvalidError
	switch {
	case errors.As(a.err, &inv):
		outcome = audit.Rejected
		d["violations"] = inv.Result.Violations
	case errors.Is(a.err, ErrRuleExists):
		outcome, d["error"] = audit.Rejected, "rule_exists"
	case a.err != nil:
		outcome, d["error"] = audit.Failed, "write_failed"
	}
	_ = s.o.Audit.Record(ctx, audit.Entry{Actor: a.actor, Action: a.action, Resource: a.resource,
		Outcome: outcome, Details: audit.Details(d)})
}

// write runs fn (the hash write) through the store's bump, logged as a change of that one rule
// or breaker (kind store.ChangeRule or store.ChangeBreaker), filling the outcome.
func (s *Service) write(ctx context.Context, kind, id string, out *Outcome, fn func(context.Context) error) error {
	v, err := s.o.Store.Bump(store.WithChange(ctx, kind, id), fn)
	if err != nil {
		return err
	}
	out.Version, out.Written = v, true
	return nil
}

// serial runs fn under the config write lock (store.Serialize), so that a change's checks and
// its write see no other writer; a dry run takes no lock.
func (s *Service) serial(ctx context.Context, dryRun bool, fn func(context.Context) error) error {
	if dryRun {
		return fn(ctx)
	}
	return s.o.Store.Serialize(ctx, fn)
}

// knownApps returns a lookup of which of the app ids a rule names are configured: one HMGET of
// those ids, whatever the number of apps.
func (s *Service) knownApps(ctx context.Context, f RuleFields) (AppExists, error) {
	var ids []string
	if f.Match != nil {
		ids = f.Match.AppIDs
	}
	apps, err := s.o.Apps.GetApps(ctx, ids)
	if err != nil {
		return nil, err
	}
	return func(id string) bool { _, ok := apps[id]; return ok }, nil
}

func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("rules: encode: %w", err)
	}
	return string(b), nil
}

func result(dryRun bool, vs []validate.Violation, d []validate.DiffEntry) validate.Result {
	if vs == nil {
		vs = []validate.Violation{}
	}
	return validate.Result{Valid: len(vs) == 0, DryRun: dryRun, Violations: vs, Diff: d}
}
