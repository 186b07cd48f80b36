// Package changes is the write path of the admin API (docs/design.md §8): every config change is
// validated by the token-economy validator (or, for cluster connection limits, by the same kind
// of field rules), answered with the validation result and a field-level diff when it is a dry
// run, else written atomically per key with a config version bump announced on
// ratelimit:config:update, and audited.
package changes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/audit"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/secrets"
	"tollgate/internal/store"
)

// Errors of the write path (the API maps them to HTTP statuses).
var (
	ErrExists   = errors.New("already exists")
	ErrNotFound = errors.New("not found")
	// ErrUnknownApp: a change names an app (in its body) that does not exist.
	ErrUnknownApp = errors.New("no such app")
)

// InvalidError: the change failed validation; nothing was written.
type InvalidError struct{ Result validate.Result }

func (e *InvalidError) Error() string {
	return fmt.Sprintf("config validation failed (%d violations)", len(e.Result.Violations))
}

// Store is the config store (implemented by *store.Store).
type Store interface {
	GetApp(ctx context.Context, id string) (store.App, error)
	PutApp(ctx context.Context, a store.App) (store.Allocation, error)
	GetCluster(ctx context.Context, id string) (store.Cluster, error)
	PutCluster(ctx context.Context, c store.Cluster) (store.Allocation, error)
	ListClusters(ctx context.Context) ([]string, error)
	ClusterApps(ctx context.Context, cluster string) ([]string, error)
	ConfigVersion(ctx context.Context) (int64, error)
	Bump(ctx context.Context, write func(context.Context) error) (int64, error)
	Serialize(ctx context.Context, fn func(context.Context) error) error

	AccessKeys(ctx context.Context, app string) ([]string, error)
	AddAccessKey(ctx context.Context, app, key string) (bool, int64, error)
	RemoveAccessKey(ctx context.Context, app, key string) (int64, error)
	BucketOwner(ctx context.Context, bucket string) (string, error)
	AppBuckets(ctx context.Context, app string) ([]string, error)
	ListBuckets(ctx context.Context) ([]store.Bucket, error)
	PutBucket(ctx context.Context, bucket, app string) (string, int64, error)
	DeleteBucket(ctx context.Context, bucket string) (string, int64, error)
	RemoveAppIdentity(ctx context.Context, app string) error

	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
	ClusterAllocated(ctx context.Context, cluster string) (int64, error)
	RemoveApp(ctx context.Context, id string) error
	ReleaseApp(ctx context.Context, cluster, id string) (store.Allocation, error)
	PageApps(ctx context.Context, prefix string, offset, limit int64) (store.AppPage, error)
	PageAppsWhere(ctx context.Context, f store.AppFilter, offset, limit int64) (store.AppPage, error)
	ScanAppsWhere(ctx context.Context, f store.AppFilter, after string, limit, maxExamined int64) (store.AppScan, error)
}

// Validator validates changes (implemented by *validate.Validator).
type Validator interface {
	Validate(ctx context.Context, actor string, ch validate.Change, dryRun bool) (validate.Result, error)
}

// Emergency switches a cluster's emergency mode (*emergency.Manager).
type Emergency interface {
	Activate(ctx context.Context, cluster string, d time.Duration, reason, source, actor string) (time.Time, error)
	Deactivate(ctx context.Context, cluster, reason, source, actor string) (bool, error)
}

// Auditor records changes and validation attempts (*audit.Log).
type Auditor interface {
	Record(ctx context.Context, e audit.Entry) error
	ValidationAttempt(ctx context.Context, a validate.Attempt)
}

// Options are the dependencies of the service.
type Options struct {
	Store     Store
	Validator Validator
	Emergency Emergency
	Audit     Auditor
	Redis     redis.Cmdable // connection-limit hashes
	Catalog   *Catalog      // what the validator reads (default: NewCatalog(Store)); give the validator the same
	Logger    *slog.Logger
	Secrets   *secrets.Keyring // seals access key secrets (nil: no key file, no secrets stored)
}

// Service is the write path.
type Service struct{ o Options }

// New returns the service.
func New(o Options) *Service {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Catalog == nil {
		o.Catalog = NewCatalog(o.Store)
	}
	return &Service{o: o}
}

// Outcome of a change: the validation result (with the diff), and for a written change the new
// config version.
type Outcome struct {
	Validation validate.Result `json:"validation"`
	Version    int64           `json:"config_version,omitempty"`
	Written    bool            `json:"written"`
}

// record audits a write (or its failure) with the diff and the version.
func (s *Service) record(ctx context.Context, actor, action, resource string, out Outcome, err error) {
	outcome := audit.OK
	if err != nil {
		outcome = audit.Failed
	}
	d := map[string]any{"diff": out.Validation.Diff, "config_version": out.Version}
	if err != nil {
		d["error"] = errorCode(err)
	}
	_ = s.o.Audit.Record(ctx, audit.Entry{Actor: actor, Action: action, Resource: resource,
		Outcome: outcome, Details: audit.Details(d)})
}

// ErrorCode is the fixed word for an error of the write path: the code the admin API answers
// with (api.classify) and the audit log records (never the raw message) — one vocabulary,
// listed in docs/config-contract.md.
func ErrorCode(err error) string { return errorCode(err) }

func errorCode(err error) string {
	var fe *store.FieldError
	switch {
	case errors.As(err, &fe):
		return fe.Code
	case errors.Is(err, store.ErrOverAllocation):
		return "over_allocation"
	case errors.Is(err, store.ErrUnknownCluster):
		return "unknown_cluster"
	case errors.Is(err, store.ErrClusterChange):
		return "cluster_change"
	case errors.Is(err, ErrExists):
		return "already_exists"
	case errors.Is(err, ErrNotFound), errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrUnknownApp):
		return "unknown_app"
	case errors.Is(err, store.ErrAccessKeyInUse):
		return "access_key_in_use"
	case errors.Is(err, store.ErrInvalidAccessKey):
		return "invalid_access_key_id"
	case errors.Is(err, store.ErrInvalidBucket):
		return "invalid_bucket"
	case errors.Is(err, ErrSecretsDisabled):
		return "secrets_key_not_configured"
	case errors.Is(err, ErrInvalidSecret):
		return "invalid_secret"
	case errors.Is(err, store.ErrInvalidID):
		return "invalid_id"
	case errors.Is(err, store.ErrBusy):
		return "config_busy"
	case errors.Is(err, store.ErrStoreLost):
		return "config_store_lost"
	}
	return "write_failed"
}

// serial runs fn under the config write lock (store.Serialize): the checks of a change, its
// writes, its indexes and its version bump see no other writer. A dry run writes nothing and
// takes no lock.
func (s *Service) serial(ctx context.Context, dryRun bool, fn func(context.Context) error) error {
	if dryRun {
		return fn(ctx)
	}
	return s.o.Store.Serialize(ctx, fn)
}

// validated runs the validator and turns a rejection into *InvalidError.
func (s *Service) validated(ctx context.Context, actor string, ch validate.Change, dryRun bool) (validate.Result, error) {
	res, err := s.o.Validator.Validate(ctx, actor, ch, dryRun)
	if err != nil {
		return res, err
	}
	if !res.Valid {
		return res, &InvalidError{Result: res}
	}
	return res, nil
}
