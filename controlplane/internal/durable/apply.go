package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// InvalidError: the document breaks the rules; nothing was written.
type InvalidError struct{ Violations []validate.Violation }

func (e *InvalidError) Error() string {
	return fmt.Sprintf("durable: the document has %d violations; nothing was written", len(e.Violations))
}

// Writer writes a document into Redis through the store (scripts, version bumps, WAIT).
type Writer struct {
	Reader
}

// deleteApp removes an app as the admin API does: out of the index (with the version bump),
// then its allocation leaves L1 and its L2 goes (app_remove: no read of the cluster's other
// apps), then its lease, stats and connection keys.
func (w Writer) deleteApp(ctx context.Context, a App) error {
	c, id := a.ClusterID, a.AppID
	if _, err := w.Store.Bump(store.WithChange(ctx, store.ChangeApp, id), func(ctx context.Context) error {
		if err := w.Store.RemoveApp(ctx, id); err != nil {
			return err
		}
		return w.Store.RemoveAppIdentity(ctx, id) // its access keys and buckets go with it
	}); err != nil {
		return err
	}
	if _, err := w.Store.ReleaseApp(ctx, c, id); err != nil {
		return err
	}
	if err := w.Redis.Del(ctx, keys.Leases(c, id), keys.Nodes(c, id), keys.Stats(c, id)).Err(); err != nil {
		return err
	}
	return store.DelConnLimits(ctx, w.Redis, c, id)
}

// Plan checks doc against the store's current config cur: the violations of the document, and
// of the change from cur (an app may not move to another cluster, a cluster may not go away).
func Plan(cur, doc Document) []validate.Violation {
	vs := check(doc, &cur)
	inDoc := map[string]bool{}
	for _, c := range doc.Clusters {
		inDoc[c.ID] = true
	}
	for _, c := range cur.Clusters {
		if !inDoc[c.ID] {
			vs = append(vs, validate.Violation{Field: "clusters", Code: "cluster_removed",
				Message: fmt.Sprintf("cluster %s is not in the document; clusters cannot be removed", c.ID)})
		}
	}
	old := map[string]App{}
	for _, a := range cur.Apps {
		old[a.AppID] = a
	}
	for i, a := range doc.Apps {
		if o, ok := old[a.AppID]; ok && o.ClusterID != a.ClusterID {
			vs = append(vs, validate.Violation{Field: fmt.Sprintf("apps[%d].cluster_id", i), Code: "cluster_change",
				Message: fmt.Sprintf("app %s is in cluster %s; an app cannot move", a.AppID, o.ClusterID)})
		}
	}
	return vs
}

// Apply makes the store hold doc: under the config write lock (store.Serialize) the store's
// config is read again (cur is what the caller showed: it chose whether the users are part of
// it) and the document checked against it (an InvalidError writes nothing); a write that fails
// puts that config back before returning the error. No other config write interleaves.
func (w Writer) Apply(ctx context.Context, cur, doc Document) error {
	withUsers := cur.Users != nil
	return w.Store.Serialize(ctx, func(ctx context.Context) error {
		now, err := w.Export(ctx, withUsers)
		if err != nil {
			return err
		}
		if !withUsers {
			now.Users, now.JWTSecret = nil, ""
		}
		return w.applyLocked(ctx, now, doc)
	})
}

func (w Writer) applyLocked(ctx context.Context, cur, doc Document) error {
	if vs := Plan(cur, doc); len(vs) > 0 {
		return &InvalidError{Violations: vs}
	}
	err := w.apply(ctx, cur, doc)
	if err == nil {
		return nil
	}
	now, rerr := w.Export(ctx, doc.Users != nil)
	if rerr == nil {
		if cur.Users == nil {
			now.Users, now.JWTSecret = nil, ""
		}
		rerr = w.apply(ctx, now, cur)
	}
	return &ApplyError{Err: err, RolledBack: rerr == nil, Rollback: rerr}
}

// ApplyError: a write of a checked document failed; RolledBack tells whether the config from
// before was written back (else Rollback is why not).
type ApplyError struct {
	Err        error
	RolledBack bool
	Rollback   error
}

func (e *ApplyError) Error() string {
	if e.RolledBack {
		return fmt.Sprintf("durable: apply failed, the config before it was put back: %v", e.Err)
	}
	return fmt.Sprintf("durable: apply failed (%v), and so did putting the config back: %v", e.Err, e.Rollback)
}

func (e *ApplyError) Unwrap() error { return e.Err }

func same(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (w Writer) apply(ctx context.Context, cur, doc Document) error {
	old := map[string]App{}
	for _, a := range cur.Apps {
		old[a.AppID] = a
	}
	want := map[string]App{}
	for _, a := range doc.Apps {
		want[a.AppID] = a
	}
	// 1. apps that go, 2. apps whose guaranteed quota shrinks (room for smaller clusters)
	for _, a := range cur.Apps {
		if _, ok := want[a.AppID]; !ok {
			if err := w.deleteApp(ctx, a); err != nil {
				return fmt.Errorf("delete app %s: %w", a.AppID, err)
			}
		}
	}
	done := map[string]bool{}
	for _, a := range doc.Apps {
		if o, ok := old[a.AppID]; ok && a.GuaranteedQuota < o.GuaranteedQuota {
			if _, err := w.Store.PutApp(ctx, a.App); err != nil {
				return fmt.Errorf("app %s: %w", a.AppID, err)
			}
			done[a.AppID] = !same(o.App, a.App)
		}
	}
	// 3. clusters, 4. the other apps
	oldC := map[string]Cluster{}
	for _, c := range cur.Clusters {
		oldC[c.ID] = c
	}
	for _, c := range doc.Clusters {
		o, ok := oldC[c.ID]
		if ok && o.Capacity == c.Capacity && o.ReservedRatio == c.ReservedRatio {
			continue
		}
		if _, err := w.Store.PutCluster(ctx, store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}); err != nil {
			return fmt.Errorf("cluster %s: %w", c.ID, err)
		}
	}
	for _, a := range doc.Apps {
		if _, ok := done[a.AppID]; ok {
			continue
		}
		if o, ok := old[a.AppID]; ok && same(o.App, a.App) {
			continue
		}
		if _, err := w.Store.PutApp(ctx, a.App); err != nil {
			return fmt.Errorf("app %s: %w", a.AppID, err)
		}
	}
	// 5. access keys and buckets: what goes first (a key or bucket may move to another app);
	// then the sealed secrets the document carries (a document without them leaves them alone)
	if err := w.identity(ctx, cur, doc); err != nil {
		return err
	}
	sealed := map[string]string{}
	for _, a := range doc.Apps {
		for k, v := range a.AccessKeySecrets {
			if old[a.AppID].AccessKeySecrets[k] != v {
				sealed[k] = v
			}
		}
	}
	if len(sealed) > 0 {
		if _, err := w.Store.Bump(ctx, func(ctx context.Context) error {
			return w.Store.PutSealedSecrets(ctx, sealed)
		}); err != nil {
			return fmt.Errorf("access key secrets: %w", err)
		}
	}
	// 6. connection limits, rules, breakers, users and the secret: plain hash writes, announced
	// by one version bump at the end
	_, err := w.Store.Bump(ctx, func(ctx context.Context) error {
		return w.writeRest(ctx, cur, doc, oldC, old)
	})
	return err
}

func (w Writer) writeRest(ctx context.Context, cur, doc Document, oldC map[string]Cluster, old map[string]App) error {
	r := w.Redis
	for _, c := range doc.Clusters {
		o := oldC[c.ID]
		switch {
		case same(o.Connections, c.Connections):
		case c.Connections == nil:
			if err := r.Del(ctx, keys.ConnCluster(c.ID)).Err(); err != nil {
				return err
			}
		default:
			if err := r.HSet(ctx, keys.ConnCluster(c.ID), "max_connections", c.Connections.MaxConnections,
				"reserved_ratio", strconv.FormatFloat(c.Connections.ReservedRatio, 'f', -1, 64)).Err(); err != nil {
				return err
			}
		}
	}
	for _, a := range doc.Apps {
		o := old[a.AppID]
		switch {
		case same(o.Connections, a.Connections):
		case a.Connections == nil:
			if err := store.DelConnLimits(ctx, r, a.ClusterID, a.AppID); err != nil {
				return err
			}
		default:
			if err := store.SetConnLimits(ctx, r, a.ClusterID, a.AppID, a.Connections.MaxConnections,
				a.Connections.BurstConnections); err != nil {
				return err
			}
		}
	}
	type entry struct{ id, doc string }
	sync := func(key string, oldE, newE []entry) error {
		keep := map[string]bool{}
		set := map[string]any{}
		prev := map[string]string{}
		for _, e := range oldE {
			prev[e.id] = e.doc
		}
		for _, e := range newE {
			keep[e.id] = true
			if prev[e.id] != e.doc {
				set[e.id] = e.doc
			}
		}
		var del []string
		for _, e := range oldE {
			if !keep[e.id] {
				del = append(del, e.id)
			}
		}
		if len(set) > 0 {
			if err := r.HSet(ctx, key, set).Err(); err != nil {
				return err
			}
		}
		if len(del) > 0 {
			return r.HDel(ctx, key, del...).Err()
		}
		return nil
	}
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var oldR, newR, oldB, newB []entry
	for _, x := range cur.Rules {
		oldR = append(oldR, entry{x.ID, enc(x)})
	}
	for _, x := range doc.Rules {
		newR = append(newR, entry{x.ID, enc(x)})
	}
	for _, x := range cur.Breakers {
		oldB = append(oldB, entry{x.Name, enc(x)})
	}
	for _, x := range doc.Breakers {
		newB = append(newB, entry{x.Name, enc(x)})
	}
	if err := sync(keys.RulesIndex(), oldR, newR); err != nil {
		return err
	}
	if err := sync(keys.BreakersIndex(), oldB, newB); err != nil {
		return err
	}
	if doc.Users != nil {
		var oldU, newU []entry
		for _, u := range cur.Users {
			oldU = append(oldU, entry{u.Username, enc(u)})
		}
		if cur.Users == nil { // the store's users were not read: replace whatever is there
			if err := readHash(ctx, r, keys.AdminUsers(), func(k, v string) error {
				oldU = append(oldU, entry{k, v})
				return nil
			}); err != nil {
				return err
			}
		}
		for _, u := range doc.Users {
			newU = append(newU, entry{u.Username, enc(u)})
		}
		if err := sync(keys.AdminUsers(), oldU, newU); err != nil {
			return err
		}
	}
	if doc.JWTSecret != "" && doc.JWTSecret != cur.JWTSecret {
		if err := r.Set(ctx, keys.AdminSecret(), doc.JWTSecret, 0).Err(); err != nil {
			return err
		}
	}
	return nil
}

// IsEmpty reports whether a document holds no config at all.
func IsEmpty(d Document) bool {
	return len(d.Clusters) == 0 && len(d.Apps) == 0 && len(d.Rules) == 0 && len(d.Breakers) == 0
}

// identity makes the apps' access keys and buckets those of doc, through the store's own
// writes (owner maps and per-app sets).
func (w Writer) identity(ctx context.Context, cur, doc Document) error {
	wantKey, wantBucket := map[string]string{}, map[string]string{}
	for _, a := range doc.Apps {
		for _, k := range a.AccessKeys {
			wantKey[k] = a.AppID
		}
		for _, b := range a.Buckets {
			wantBucket[b] = a.AppID
		}
	}
	inDoc := map[string]bool{}
	for _, a := range doc.Apps {
		inDoc[a.AppID] = true
	}
	for _, a := range cur.Apps {
		if !inDoc[a.AppID] {
			continue // removed with the app
		}
		for _, k := range a.AccessKeys {
			if wantKey[k] != a.AppID {
				if _, err := w.Store.RemoveAccessKey(ctx, a.AppID, k); err != nil {
					return fmt.Errorf("access key %s: %w", k, err)
				}
			}
		}
		for _, b := range a.Buckets {
			if wantBucket[b] == "" {
				if _, _, err := w.Store.DeleteBucket(ctx, b); err != nil {
					return fmt.Errorf("bucket %s: %w", b, err)
				}
			}
		}
	}
	had := map[string]bool{}
	for _, a := range cur.Apps {
		for _, k := range a.AccessKeys {
			had["k "+a.AppID+" "+k] = true
		}
		for _, b := range a.Buckets {
			had["b "+a.AppID+" "+b] = true
		}
	}
	for _, a := range doc.Apps {
		for _, k := range a.AccessKeys {
			if !had["k "+a.AppID+" "+k] {
				if _, _, err := w.Store.AddAccessKey(ctx, a.AppID, k); err != nil {
					return fmt.Errorf("access key %s: %w", k, err)
				}
			}
		}
		for _, b := range a.Buckets {
			if !had["b "+a.AppID+" "+b] {
				if _, _, err := w.Store.PutBucket(ctx, b, a.AppID); err != nil {
					return fmt.Errorf("bucket %s: %w", b, err)
				}
			}
		}
	}
	return nil
}
