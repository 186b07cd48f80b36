package durable

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// Reasons a store is lost.
const (
	ReasonEpochMissing     = "epoch_missing"     // no epoch: Redis restarted empty, was flushed, or an unsynced replica took over
	ReasonEpochChanged     = "epoch_changed"     // another store (or one set up again) answers
	ReasonVersionBackwards = "version_backwards" // the version went back: writes were lost
)

// WaitAuto: wait for one replica when the master has any (Options.Wait).
const WaitAuto = -1

// Options of the guard.
type Options struct {
	Redis      redis.UniversalClient
	Store      *store.Store
	Cluster    bool   // Redis Cluster: WAIT is not used (it would reach one node only)
	RedisID    string // names the store in snapshots (TOLLGATE_REDIS_URL without password); a snapshot of another store does not judge this one
	Backups    *Backups
	Wait       int // WaitAuto, 0 (off) or the number of replicas
	WaitTime   time.Duration
	Check      time.Duration // how often the epoch and version are read (1 s)
	Logger     *slog.Logger
	OnChange   func(Status) // sees every change of state (lost, back)
	MaxGateway func(ctx context.Context) int64
	// SnapshotGap is the least time between the end of a snapshot and the start of the next
	// (100 ms); the gap grows to 4 times the last snapshot's duration, at most 30 s, so that a
	// whole-config export, O(apps), is not run back to back under a stream of writes. A change
	// made meanwhile is never dropped: it is in the next snapshot, taken when the gap is over.
	SnapshotGap time.Duration
}

// Status is what /health, /metrics and the API report about the config store.
type Status struct {
	State        string      `json:"state"` // ok, lost
	Reason       string      `json:"reason,omitempty"`
	Message      string      `json:"message,omitempty"`
	Since        int64       `json:"since,omitempty"` // lost since, Unix seconds
	Epoch        string      `json:"epoch,omitempty"` // the epoch this control plane knows
	StoreEpoch   string      `json:"store_epoch,omitempty"`
	Version      int64       `json:"version"` // the highest version seen
	StoreVersion int64       `json:"store_version"`
	LostTotal    int64       `json:"lost_total"` // times the store was found lost
	Persistence  Persistence `json:"persistence"`
	LastBackup   string      `json:"last_backup,omitempty"`
	BackupErrors int64       `json:"backup_errors"`
}

// Guard watches the config store (see the package comment).
type Guard struct {
	o       Options
	trigger chan struct{}

	mu        sync.Mutex
	st        Status
	restoring bool
	replicas  int
	repAt     time.Time
	lastSnap  [32]byte  // hash of the last snapshot's epoch, version and config (not written twice)
	nextSnap  time.Time // no snapshot starts before (Run's goroutine only)
}

// New returns a guard; Init decides the state, Run watches.
func New(o Options) *Guard {
	if o.Check <= 0 {
		o.Check = time.Second
	}
	if o.WaitTime <= 0 {
		o.WaitTime = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SnapshotGap <= 0 {
		o.SnapshotGap = 100 * time.Millisecond
	}
	return &Guard{o: o, trigger: make(chan struct{}, 1), st: Status{State: "ok"}}
}

type restoringKey struct{}

// Restoring marks writes that put a snapshot back: they may go into a lost store.
func Restoring(ctx context.Context) context.Context {
	return context.WithValue(ctx, restoringKey{}, true)
}

// Init reads the newest snapshot and the store, and decides: the store is the one the snapshot
// was taken of (ok), a store without any config nor snapshot (new; its epoch comes with the
// first write), or lost. It also reports whether Redis persists.
func (g *Guard) Init(ctx context.Context) error {
	g.st.Persistence = Probe(ctx, g.o.Redis)
	p := g.st.Persistence
	g.o.Logger.Info("config store persistence", "persists", p.Persists, "appendonly", p.AppendOnly,
		"appendfsync", p.AppendFsync, "save", p.Save, "replicas", p.Replicas)
	if p.Persists == "no" || p.Persists == "snapshots_only" {
		g.o.Logger.Warn("redis does not keep every acknowledged config write: turn on appendonly (docs/durability.md)",
			"persists", p.Persists)
	}
	var snap *Snapshot
	if g.o.Backups != nil {
		s, name, err := g.o.Backups.Latest()
		if err != nil {
			return err
		}
		switch {
		case s != nil && s.Redis != "" && g.o.RedisID != "" && s.Redis != g.o.RedisID:
			g.o.Logger.Info("the newest config snapshot is of another Redis: not used to judge this one",
				"snapshot", name, "of", s.Redis)
		case s != nil:
			snap = s
			g.st.LastBackup = name
		}
	}
	epoch, err := g.o.Store.Epoch(ctx)
	if err != nil {
		return err
	}
	version, err := g.o.Store.ConfigVersion(ctx)
	if err != nil {
		return err
	}
	has, err := g.o.Store.HasConfig(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.StoreEpoch, g.st.StoreVersion, g.st.Version = epoch, version, version
	switch {
	case snap != nil && snap.Epoch != "" && epoch == "":
		g.st.Epoch, g.st.Version = snap.Epoch, snap.Version
		g.lose(ReasonEpochMissing)
	case snap != nil && snap.Epoch != "" && epoch != snap.Epoch:
		g.st.Epoch, g.st.Version = snap.Epoch, snap.Version
		g.lose(ReasonEpochChanged)
	case snap != nil && snap.Epoch != "" && version < snap.Version:
		g.st.Epoch, g.st.Version = snap.Epoch, snap.Version
		g.lose(ReasonVersionBackwards)
	case epoch == "" && has: // a store of before the epoch: give it one
		if g.st.Epoch, err = g.o.Store.EnsureEpoch(ctx); err != nil {
			return err
		}
		g.st.StoreEpoch = g.st.Epoch
	default:
		g.st.Epoch = epoch
	}
	if g.st.State == "ok" && has {
		g.kick()
	}
	return nil
}

// Fresh reports whether the store holds no config and was never known (demo seeding may go).
func (g *Guard) Fresh(ctx context.Context) (bool, error) {
	g.mu.Lock()
	lost, epoch := g.st.State == "lost", g.st.Epoch
	g.mu.Unlock()
	if lost || epoch != "" {
		return false, nil
	}
	has, err := g.o.Store.HasConfig(ctx)
	return !has && err == nil, err
}

// Lost reports whether the store is lost.
func (g *Guard) Lost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.State == "lost"
}

// Status returns the current status.
func (g *Guard) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

// lose marks the store lost (g.mu held).
func (g *Guard) lose(reason string) {
	if g.st.State == "lost" {
		return
	}
	g.st.State, g.st.Reason, g.st.Since = "lost", reason, time.Now().Unix()
	g.st.LostTotal++
	g.st.Message = lostMessage(reason, g.st)
	g.o.Logger.Error("config store lost: gateways keep their last good config, config writes are refused; restore a snapshot (docs/durability.md)",
		"reason", reason, "epoch", g.st.Epoch, "store_epoch", g.st.StoreEpoch, "version", g.st.Version,
		"store_version", g.st.StoreVersion)
	if g.o.OnChange != nil {
		go g.o.OnChange(g.st)
	}
}

func lostMessage(reason string, st Status) string {
	switch reason {
	case ReasonEpochMissing:
		return fmt.Sprintf("the config store's epoch %s is gone (Redis restarted empty, was flushed, or a replica that never synced took over); restore a snapshot", short(st.Epoch))
	case ReasonEpochChanged:
		return fmt.Sprintf("the config store's epoch changed from %s to %s (another store answers); restore a snapshot", short(st.Epoch), short(st.StoreEpoch))
	default:
		return fmt.Sprintf("the config version went back from %d to %d (acknowledged writes were lost); restore a snapshot", st.Version, st.StoreVersion)
	}
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	if s == "" {
		return "(none)"
	}
	return s
}

// Hooks are the store hooks: refuse writes into a lost store, give a new store its epoch with
// the first write, wait for replicas, snapshot after the write.
func (g *Guard) Hooks() store.Hooks {
	return store.Hooks{
		Before:      g.before,
		Replicas:    g.replicasWanted,
		WaitTimeout: g.o.WaitTime,
		After:       func(int64) { g.kick() },
	}
}

func (g *Guard) before(ctx context.Context) error {
	if ctx.Value(restoringKey{}) != nil {
		return nil
	}
	g.mu.Lock()
	lost, epoch := g.st.State == "lost", g.st.Epoch
	g.mu.Unlock()
	if lost {
		return store.ErrStoreLost
	}
	if epoch != "" {
		// one GET per config write: a store wiped since the last check takes no write
		cur, err := g.o.Store.Epoch(ctx)
		if err != nil {
			return err
		}
		if cur != epoch {
			g.mu.Lock()
			g.st.StoreEpoch = cur
			if cur == "" {
				g.lose(ReasonEpochMissing)
			} else {
				g.lose(ReasonEpochChanged)
			}
			g.mu.Unlock()
			return store.ErrStoreLost
		}
		return nil
	}
	e, err := g.o.Store.EnsureEpoch(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	if g.st.Epoch == "" {
		g.st.Epoch, g.st.StoreEpoch = e, e
	}
	g.mu.Unlock()
	return nil
}

// replicasWanted is how many replicas a config write waits for; the master's replica count is
// read at most once a second.
func (g *Guard) replicasWanted(ctx context.Context) int {
	if g.o.Wait == 0 || g.o.Cluster {
		return 0
	}
	if g.o.Wait > 0 {
		return g.o.Wait
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.repAt) > time.Second {
		g.replicas, g.repAt = connectedReplicas(ctx, g.o.Redis), time.Now()
	}
	return min(g.replicas, 1)
}

func connectedReplicas(ctx context.Context, rdb redis.UniversalClient) int {
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func (g *Guard) kick() {
	select {
	case g.trigger <- struct{}{}:
	default:
	}
}

// Run checks the store every Check interval and writes snapshots after changes, until ctx ends.
// Changes are coalesced: a change schedules one snapshot (after SnapshotGap, or when the gap
// after the previous snapshot is over); changes until it starts are in it; a change during it
// schedules the next.
func (g *Guard) Run(ctx context.Context, exp Reader) {
	t := time.NewTicker(g.o.Check)
	defer t.Stop()
	var due <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.check(ctx)
		case <-g.trigger:
			if due == nil {
				due = time.After(max(g.o.SnapshotGap, time.Until(g.nextSnap)))
			}
		case <-due:
			due = nil
			start := time.Now()
			g.snapshot(ctx, exp)
			g.nextSnap = time.Now().Add(min(30*time.Second, 4*time.Since(start)))
		}
	}
}

// Check reads the store's epoch and version once and updates the state.
func (g *Guard) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	epoch, err := g.o.Store.Epoch(cctx)
	if err != nil {
		return
	}
	version, err := g.o.Store.ConfigVersion(cctx)
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.StoreEpoch, g.st.StoreVersion = epoch, version
	if g.restoring {
		return
	}
	switch {
	case g.st.Epoch == "":
		if epoch != "" {
			g.st.Epoch = epoch
		}
		g.st.Version = version
	case g.st.State == "lost":
		if epoch == g.st.Epoch && version >= g.st.Version {
			g.back()
		}
	case epoch == "":
		g.lose(ReasonEpochMissing)
	case epoch != g.st.Epoch:
		g.lose(ReasonEpochChanged)
	case version < g.st.Version:
		g.lose(ReasonVersionBackwards)
	case version > g.st.Version:
		g.st.Version = version
		g.kick()
	}
}

// back clears the lost state (g.mu held).
func (g *Guard) back() {
	g.o.Logger.Info("config store back: epoch and version match what this control plane knew",
		"epoch", g.st.Epoch, "version", g.st.StoreVersion)
	g.st.State, g.st.Reason, g.st.Message, g.st.Since = "ok", "", "", 0
	g.st.Version = g.st.StoreVersion
	if g.o.OnChange != nil {
		go g.o.OnChange(g.st)
	}
	g.kick()
}

func (g *Guard) snapshot(ctx context.Context, exp Reader) {
	if g.o.Backups == nil || g.Lost() {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g.check(ctx) // a store that just went away must not be snapshotted as the config
	g.mu.Lock()
	epoch, known := g.st.Epoch, g.st.Version
	g.mu.Unlock()
	version, err := g.o.Store.ConfigVersion(cctx)
	var doc Document
	if err == nil {
		doc, err = exp.Export(cctx, true)
	}
	if err == nil {
		// the store must still be the one we know, with everything we saw, after the export
		var now string
		if now, err = g.o.Store.Epoch(cctx); err == nil && (now != epoch || version < known) {
			return
		}
	}
	var name string
	if err == nil && !g.Lost() {
		j, _ := json.Marshal(doc)
		h := sha256.New()
		fmt.Fprint(h, epoch, " ", version, " ")
		h.Write(j)
		var key [32]byte
		h.Sum(key[:0])
		if key == g.lastSnap {
			return
		}
		name, err = g.o.Backups.Write(Snapshot{Epoch: epoch, Version: version, Redis: g.o.RedisID,
			TakenAt: time.Now().UTC().Format(time.RFC3339Nano), Config: doc})
		if err == nil {
			g.lastSnap = key
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.st.BackupErrors++
		g.o.Logger.Error("config snapshot failed", "err", err)
		return
	}
	if name != "" {
		g.st.LastBackup = name
	}
}

// ErrNotEmpty: restore goes only into an empty or lost store.
var ErrNotEmpty = errors.New("the config store holds config and is not lost: restore needs an empty or lost store (use import to change a live store)")

// Restore puts doc into an empty or lost store: it is applied through the store (the writes of
// a restore may go into a lost store), then the store gets the epoch this control plane knew
// (or epoch, or a new one) and a version above every version seen, which gateways accept as
// the store they knew. Returns the diff against the store's current config.
func (g *Guard) Restore(ctx context.Context, w Writer, doc Document, epoch string, version int64, dryRun bool) (d []validate.DiffEntry, err error) {
	if dryRun {
		return g.restore(ctx, w, doc, epoch, version, dryRun)
	}
	// under the config write lock: no write comes between the check that the store is empty
	// (or lost) and the restore
	err = w.Store.Serialize(ctx, func(ctx context.Context) error {
		d, err = g.restore(ctx, w, doc, epoch, version, dryRun)
		return err
	})
	return d, err
}

func (g *Guard) restore(ctx context.Context, w Writer, doc Document, epoch string, version int64, dryRun bool) ([]validate.DiffEntry, error) {
	cur, err := w.Export(ctx, true)
	if err != nil {
		return nil, err
	}
	if !g.Lost() && !IsEmpty(cur) {
		return nil, ErrNotEmpty
	}
	if vs := Plan(cur, doc); len(vs) > 0 {
		return nil, &InvalidError{Violations: vs}
	}
	d := Diff(cur, doc)
	if dryRun {
		return d, nil
	}
	g.mu.Lock()
	g.restoring = true
	if g.st.Epoch != "" {
		epoch = g.st.Epoch
	}
	version = max(version, g.st.Version)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.restoring = false
		g.mu.Unlock()
	}()
	if err := w.Apply(Restoring(ctx), cur, doc); err != nil {
		return nil, err
	}
	if epoch == "" {
		if epoch, err = newEpoch(); err != nil {
			return nil, err
		}
	}
	sv, err := g.o.Store.ConfigVersion(ctx)
	if err != nil {
		return nil, err
	}
	version = max(version, sv)
	if g.o.MaxGateway != nil {
		version = max(version, g.o.MaxGateway(ctx))
	}
	version++
	if err := g.o.Store.SetEpochVersion(ctx, epoch, version); err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.st.Epoch, g.st.StoreEpoch, g.st.StoreVersion = epoch, epoch, version
	if g.st.State == "lost" {
		g.back()
	} else {
		g.st.Version = version
		g.kick()
	}
	g.mu.Unlock()
	return d, nil
}

func newEpoch() (string, error) {
	return randomHex(16)
}

// MaxGatewayVersion reads the highest config version the gateways reported.
func MaxGatewayVersion(rdb redis.Cmdable) func(ctx context.Context) int64 {
	return func(ctx context.Context) int64 {
		var top int64
		_ = readHash(ctx, rdb, keys.Gateways(), func(_, doc string) error {
			if i := strings.Index(doc, `"config_version":`); i >= 0 {
				rest := doc[i+len(`"config_version":`):]
				end := strings.IndexAny(rest, ",}")
				if end > 0 {
					if v, err := strconv.ParseInt(strings.TrimSpace(rest[:end]), 10, 64); err == nil && v > top {
						top = v
					}
				}
			}
			return nil
		})
		return top
	}
}
