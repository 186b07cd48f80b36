// Package validate checks a proposed configuration change before the admin API writes it
// (Req 16, Property 11, docs/design.md §8): every rule with a field-level message, the change
// checked against the current Redis state, a diff of what would change, a dry-run mode that
// never writes (the validator never writes at all), and a log entry — plus an audit hook — for
// every attempt.
package validate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"tollgate/internal/keys"
	"tollgate/internal/store"
)

const maxInt = MaxInt

// ConnLimits are an app's connection limits (Req 17, 20).
type ConnLimits struct {
	MaxConnections   int64 `json:"max_connections"`
	BurstConnections int64 `json:"burst_connections"`
}

// App is a proposed app config.
type App struct {
	store.App
	Connections *ConnLimits `json:"connections,omitempty"`
}

// Change is a proposed change: a cluster config and/or app configs (created or replaced).
type Change struct {
	Cluster *store.Cluster `json:"cluster,omitempty"`
	Apps    []App          `json:"apps,omitempty"`
}

// Violation is one broken rule.
type Violation struct {
	Field   string `json:"field"`   // e.g. "apps[demo-p1].burst_quota", "cluster.capacity"
	Code    string `json:"code"`    // e.g. "burst_below_guaranteed"
	Message string `json:"message"` // for people
}

// DiffEntry is one field that the change would set.
type DiffEntry struct {
	Path string `json:"path"`          // e.g. "apps[demo-p1].priority"
	Old  any    `json:"old,omitempty"` // nil for a new cluster or app
	New  any    `json:"new"`
}

// Result of a validation.
type Result struct {
	Valid      bool        `json:"valid"`
	DryRun     bool        `json:"dry_run"`
	Violations []Violation `json:"violations"`
	Diff       []DiffEntry `json:"diff"`
}

// State is the current config (implemented by *store.Store). A validation reads only what the
// change touches: its apps (one HMGET) and, per cluster, its config and the maintained sum of
// its guaranteed quotas — never every app.
type State interface {
	GetCluster(ctx context.Context, id string) (store.Cluster, error)
	GetApps(ctx context.Context, ids []string) (map[string]store.App, error)
	ClusterAllocated(ctx context.Context, cluster string) (int64, error)
}

// Attempt is what the audit hook receives for every validation.
type Attempt struct {
	At     time.Time
	Actor  string
	Change Change
	Result Result
	Err    error // reading the current state failed; Result is empty
}

// Auditor records validation attempts (the admin API's audit stream implements it).
type Auditor interface {
	ValidationAttempt(ctx context.Context, a Attempt)
}

// Validator validates changes against the current state.
type Validator struct {
	state State
	log   *slog.Logger
	audit Auditor
}

// New returns a validator; audit may be nil.
func New(state State, log *slog.Logger, audit Auditor) *Validator {
	if log == nil {
		log = slog.Default()
	}
	return &Validator{state: state, log: log, audit: audit}
}

// Validate checks ch against the current state on behalf of actor. dryRun only marks the
// result and the log entry: nothing is ever written here. The error is for a failure to read
// the current state; rule violations are in the result.
func (v *Validator) Validate(ctx context.Context, actor string, ch Change, dryRun bool) (Result, error) {
	res, err := v.validate(ctx, ch)
	res.DryRun = dryRun
	v.record(ctx, actor, ch, res, err)
	return res, err
}

func (v *Validator) validate(ctx context.Context, ch Change) (Result, error) {
	cur, err := v.current(ctx, ch)
	if err != nil {
		return Result{}, err
	}
	var c checker
	if ch.Cluster != nil {
		c.created = ch.Cluster.ID
	}
	c.cluster(ch.Cluster)
	seen := map[string]bool{}
	for i, a := range ch.Apps {
		c.app(i, a, seen, cur)
	}
	c.capacity(ch, cur)
	res := Result{Valid: len(c.out) == 0, Violations: c.out, Diff: diff(ch, cur)}
	if res.Violations == nil {
		res.Violations = []Violation{}
	}
	return res, nil
}

// current is the part of the state the change touches.
type current struct {
	clusters  map[string]*store.Cluster // nil value: the cluster does not exist
	allocated map[string]int64          // per existing cluster: the sum of its guaranteed quotas
	apps      map[string]store.App      // the apps of the change that exist
}

func (v *Validator) current(ctx context.Context, ch Change) (current, error) {
	cur := current{clusters: map[string]*store.Cluster{}, allocated: map[string]int64{}}
	appIDs := make([]string, 0, len(ch.Apps))
	for _, a := range ch.Apps {
		appIDs = append(appIDs, a.AppID)
	}
	apps, err := v.state.GetApps(ctx, appIDs)
	if err != nil {
		return cur, fmt.Errorf("validate: %w", err)
	}
	cur.apps = apps
	ids := []string{}
	if ch.Cluster != nil {
		ids = append(ids, ch.Cluster.ID)
	}
	for _, a := range ch.Apps {
		ids = append(ids, a.ClusterID)
	}
	for _, id := range ids {
		if _, done := cur.clusters[id]; done || !keys.ValidID(id) {
			continue
		}
		c, err := v.state.GetCluster(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			cur.clusters[id] = nil
			continue
		case err != nil:
			return cur, fmt.Errorf("validate: %w", err)
		default:
			cur.clusters[id] = &c
		}
		if cur.allocated[id], err = v.state.ClusterAllocated(ctx, id); err != nil {
			return cur, fmt.Errorf("validate: %w", err)
		}
	}
	return cur, nil
}

type checker struct {
	out     []Violation
	created string // the id of the cluster the change writes, if any
}

// defines: the change itself writes cluster id.
func (c *checker) defines(id string) bool { return c.created != "" && c.created == id }

func (c *checker) add(field, code, format string, args ...any) {
	c.out = append(c.out, Violation{Field: field, Code: code, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) cluster(cl *store.Cluster) {
	if cl == nil {
		return
	}
	c.out = append(c.out, Prefixed("cluster.", CheckCluster(*cl))...)
}

// appField names a field of the i-th app: by id when the id is valid, else by index.
func appField(i int, id, field string) string {
	if keys.ValidID(id) {
		return fmt.Sprintf("apps[%s].%s", id, field)
	}
	return fmt.Sprintf("apps[%d].%s", i, field)
}

func (c *checker) app(i int, a App, seen map[string]bool, cur current) {
	f := func(field string) string { return appField(i, a.AppID, field) }
	for _, v := range CheckApp(a) {
		v.Field = f(v.Field)
		c.out = append(c.out, v)
	}
	if keys.ValidID(a.AppID) && seen[a.AppID] {
		c.add(f("app_id"), "duplicate_app", "app %s appears more than once in the change", a.AppID)
	}
	seen[a.AppID] = true
	if !keys.ValidID(a.ClusterID) {
		return
	}
	if old, ok := cur.apps[a.AppID]; ok && old.ClusterID != a.ClusterID {
		c.add(f("cluster_id"), "cluster_change", "app %s belongs to cluster %s and cannot move to %s", a.AppID, old.ClusterID, a.ClusterID)
	} else if cl, known := cur.clusters[a.ClusterID]; known && cl == nil && !c.defines(a.ClusterID) {
		c.add(f("cluster_id"), "unknown_cluster", "cluster %s does not exist", a.ClusterID)
	}
}

// capacity checks, for every cluster the change touches, the allocation cap of the contract
// (CheckAllocation): the guaranteed quotas of its apps after the change within
// (1 - reserved_ratio) x capacity, unless the change does not add to an excess stored before.
func (c *checker) capacity(ch Change, cur current) {
	// the sum after the change: the cluster's maintained sum, less the old quota of each app the
	// change rewrites there, plus its new quota (the last one of an id given twice)
	delta := map[string]int64{}
	last := map[string]App{}
	touched := map[string]bool{}
	for _, a := range ch.Apps {
		if keys.ValidID(a.AppID) {
			last[a.AppID] = a
		}
		touched[a.ClusterID] = true
	}
	for id, a := range last {
		if old, ok := cur.apps[id]; ok {
			delta[old.ClusterID] -= old.GuaranteedQuota
		}
		delta[a.ClusterID] += a.GuaranteedQuota
	}
	if ch.Cluster != nil {
		touched[ch.Cluster.ID] = true
	}
	ids := make([]string, 0, len(touched))
	for id := range touched {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !keys.ValidID(id) {
			continue
		}
		cl := cur.clusters[id]
		if ch.Cluster != nil && ch.Cluster.ID == id {
			cl = ch.Cluster
		}
		if cl == nil {
			continue // unknown_cluster, reported with the app that names it
		}
		beforeCap := Allocatable(cl.Capacity, cl.ReservedRatio)
		if old := cur.clusters[id]; old != nil {
			beforeCap = Allocatable(old.Capacity, old.ReservedRatio)
		}
		before := cur.allocated[id]
		if v := CheckAllocation(*cl, before, before+delta[id], beforeCap); v != nil {
			v.Field = fmt.Sprintf("clusters[%s].%s", id, v.Field)
			c.out = append(c.out, *v)
		}
	}
}

func diff(ch Change, cur current) []DiffEntry {
	out := []DiffEntry{}
	if cl := ch.Cluster; cl != nil && keys.ValidID(cl.ID) {
		old := cur.clusters[cl.ID]
		p := "cluster"
		if old == nil {
			out = append(out, DiffEntry{Path: p + ".capacity", New: cl.Capacity},
				DiffEntry{Path: p + ".reserved_ratio", New: cl.ReservedRatio})
		} else {
			out = field(out, p+".capacity", old.Capacity, cl.Capacity)
			out = field(out, p+".reserved_ratio", old.ReservedRatio, cl.ReservedRatio)
		}
	}
	for i, a := range ch.Apps {
		p := func(f string) string { return appField(i, a.AppID, f) }
		old, exists := cur.apps[a.AppID]
		pairs := []struct {
			name     string
			old, new any
		}{
			{"cluster_id", old.ClusterID, a.ClusterID}, {"guaranteed_quota", old.GuaranteedQuota, a.GuaranteedQuota},
			{"burst_quota", old.BurstQuota, a.BurstQuota}, {"priority", old.Priority, a.Priority},
			{"c_bw", old.CBw, a.CBw}, {"max_borrow", old.MaxBorrow, a.MaxBorrow}, {"enabled", old.Enabled, a.Enabled},
		}
		for _, x := range pairs {
			if !exists {
				out = append(out, DiffEntry{Path: p(x.name), New: x.new})
				continue
			}
			out = field(out, p(x.name), x.old, x.new)
		}
		if a.Connections != nil {
			out = append(out, DiffEntry{Path: p("connections.max_connections"), New: a.Connections.MaxConnections},
				DiffEntry{Path: p("connections.burst_connections"), New: a.Connections.BurstConnections})
		}
	}
	return out
}

func field(out []DiffEntry, path string, old, new any) []DiffEntry {
	if old == new {
		return out
	}
	return append(out, DiffEntry{Path: path, Old: old, New: new})
}

// record logs the attempt (ids only when valid, no values) and hands it to the audit hook.
func (v *Validator) record(ctx context.Context, actor string, ch Change, res Result, err error) {
	if !keys.ValidID(actor) {
		actor = "_invalid"
	}
	var apps []string
	for i, a := range ch.Apps {
		if keys.ValidID(a.AppID) {
			apps = append(apps, a.AppID)
		} else {
			apps = append(apps, fmt.Sprintf("#%d", i))
		}
	}
	cluster := ""
	if ch.Cluster != nil {
		cluster = "_invalid"
		if keys.ValidID(ch.Cluster.ID) {
			cluster = ch.Cluster.ID
		}
	}
	codes := make([]string, 0, len(res.Violations))
	for _, x := range res.Violations {
		codes = append(codes, x.Field+":"+x.Code)
	}
	attrs := []any{"actor", actor, "dry_run", res.DryRun, "cluster", cluster, "apps", apps,
		"valid", res.Valid, "violations", codes, "changes", len(res.Diff)}
	switch {
	case err != nil:
		v.log.ErrorContext(ctx, "config validation failed to read the current state", append(attrs, "err", err)...)
	case res.Valid:
		v.log.InfoContext(ctx, "config validation passed", attrs...)
	default:
		v.log.WarnContext(ctx, "config validation rejected", attrs...)
	}
	if v.audit != nil {
		v.audit.ValidationAttempt(ctx, Attempt{At: time.Now(), Actor: actor, Change: ch, Result: res, Err: err})
	}
}
