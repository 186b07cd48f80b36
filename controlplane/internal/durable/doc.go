// Package durable keeps tollgate's config store honest: the store's epoch and version are
// watched (a store that vanished, changed or went back is reported, never obeyed or seeded),
// config writes wait for replicas, every change is snapshotted to disk, and the whole config
// is exported, diffed, imported and restored as one document (docs/durability.md).
package durable

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/users"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// Kind names the document format.
const Kind = "tollgate-config/v1"

// Document is the whole config (no counters, no runtime state): what export writes and import,
// restore and the snapshots read. Users and the JWT secret are present only when exported with
// secrets; an import without them leaves the store's users and secret alone.
type Document struct {
	Kind      string          `json:"kind"`
	Clusters  []Cluster       `json:"clusters"`
	Apps      []App           `json:"apps"`
	Rules     []rules.Rule    `json:"rules"`
	Breakers  []rules.Breaker `json:"breakers"`
	Users     []users.User    `json:"users,omitempty"`
	JWTSecret string          `json:"jwt_secret,omitempty"`
}

// Cluster is a storage cluster (L1) with its connection limits (nil: the gateway defaults).
type Cluster struct {
	ID            string       `json:"id"`
	Capacity      int64        `json:"capacity"`
	ReservedRatio float64      `json:"reserved_ratio"`
	Connections   *ClusterConn `json:"connections,omitempty"`
}

// ClusterConn are a cluster's connection limits.
type ClusterConn = validate.ClusterConnLimits

// App is an app (L2) with its connection limits (nil: the gateway defaults), its S3 access key
// ids and the buckets mapped to it (ratelimit:access_keys, ratelimit:buckets).
type App struct {
	store.App
	Connections *validate.ConnLimits `json:"connections,omitempty"`
	AccessKeys  []string             `json:"access_keys,omitempty"`
	Buckets     []string             `json:"buckets,omitempty"`
}

// Reader reads the config out of Redis.
type Reader struct {
	Redis redis.UniversalClient
	Store *store.Store
}

// exportBatch is how many apps Export reads per pipelined round trip.
const exportBatch = 500

// Export reads the whole config; withSecrets adds the users (with their password hashes) and
// the JWT signing secret.
func (r Reader) Export(ctx context.Context, withSecrets bool) (Document, error) {
	d := Document{Kind: Kind, Clusters: []Cluster{}, Apps: []App{}, Rules: []rules.Rule{}, Breakers: []rules.Breaker{}}
	ids, err := r.Store.ListClusters(ctx)
	if err != nil {
		return d, err
	}
	for _, id := range ids {
		c, err := r.Store.GetCluster(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return d, err
		}
		cl := Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}
		v, err := r.Redis.HMGet(ctx, keys.ConnCluster(id), "max_connections", "reserved_ratio").Result()
		if err != nil {
			return d, fmt.Errorf("durable: cluster %s connections: %w", id, err)
		}
		if m, err := strconv.ParseInt(str(v[0]), 10, 64); err == nil {
			ratio, err := strconv.ParseFloat(str(v[1]), 64)
			if err != nil {
				ratio = 0.1
			}
			cl.Connections = &ClusterConn{MaxConnections: m, ReservedRatio: ratio}
		}
		d.Clusters = append(d.Clusters, cl)
	}
	sort.Slice(d.Clusters, func(i, j int) bool { return d.Clusters[i].ID < d.Clusters[j].ID })
	apps, err := r.Store.ListApps(ctx)
	if err != nil {
		return d, err
	}
	// per batch of apps three pipelined round trips (connection limits, access key and bucket
	// sets, their owners), not five round trips per app: 100,000 apps export in seconds
	d.Apps = make([]App, 0, len(apps))
	for from := 0; from < len(apps); from += exportBatch {
		batch := apps[from:min(from+exportBatch, len(apps))]
		conns := make([]*redis.SliceCmd, len(batch))
		if _, err := r.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, a := range batch {
				conns[i] = p.HMGet(ctx, keys.ConnConfig(a.ClusterID, a.AppID), "max_connections", "burst_connections")
			}
			return nil
		}); err != nil {
			return d, fmt.Errorf("durable: app connections: %w", err)
		}
		ids := make([]string, len(batch))
		for i, a := range batch {
			ids[i] = a.AppID
		}
		akeys, buckets, err := r.Store.AppsIdentity(ctx, ids)
		if err != nil {
			return d, err
		}
		for i, a := range batch {
			app := App{App: a, AccessKeys: akeys[a.AppID], Buckets: buckets[a.AppID]}
			v := conns[i].Val()
			if m, err := strconv.ParseInt(str(v[0]), 10, 64); err == nil {
				b, err := strconv.ParseInt(str(v[1]), 10, 64)
				if err != nil {
					b = m
				}
				app.Connections = &validate.ConnLimits{MaxConnections: m, BurstConnections: b}
			}
			d.Apps = append(d.Apps, app)
		}
	}
	if err := readHash(ctx, r.Redis, keys.RulesIndex(), func(id, doc string) error {
		var x rules.Rule
		if err := json.Unmarshal([]byte(doc), &x); err != nil || x.ID != id {
			return fmt.Errorf("durable: rule %q is damaged", id)
		}
		d.Rules = append(d.Rules, x)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Rules, func(i, j int) bool { return d.Rules[i].ID < d.Rules[j].ID })
	if err := readHash(ctx, r.Redis, keys.BreakersIndex(), func(name, doc string) error {
		var x rules.Breaker
		if err := json.Unmarshal([]byte(doc), &x); err != nil || x.Name != name {
			return fmt.Errorf("durable: breaker %q is damaged", name)
		}
		d.Breakers = append(d.Breakers, x)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Breakers, func(i, j int) bool { return d.Breakers[i].Name < d.Breakers[j].Name })
	if !withSecrets {
		return d, nil
	}
	d.Users = []users.User{}
	if err := readHash(ctx, r.Redis, keys.AdminUsers(), func(name, doc string) error {
		u, err := users.Decode(name, doc)
		if err != nil {
			return err
		}
		d.Users = append(d.Users, u)
		return nil
	}); err != nil {
		return d, err
	}
	sort.Slice(d.Users, func(i, j int) bool { return d.Users[i].Username < d.Users[j].Username })
	s, err := r.Redis.Get(ctx, keys.AdminSecret()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return d, fmt.Errorf("durable: jwt secret: %w", err)
	}
	d.JWTSecret = s
	return d, nil
}

func str(v any) string { s, _ := v.(string); return s }

// readHash calls fn for every field of hash key (HSCAN; a field seen twice is passed once).
func readHash(ctx context.Context, rdb redis.Cmdable, key string, fn func(k, v string) error) error {
	seen := map[string]bool{}
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "", 200).Result()
		if err != nil {
			return fmt.Errorf("durable: read %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if seen[kv[i]] {
				continue
			}
			seen[kv[i]] = true
			if err := fn(kv[i], kv[i+1]); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// Encode writes the document as "json" (indented) or "yaml".
func Encode(d Document, format string) ([]byte, error) {
	j, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	if format != "yaml" {
		return append(j, '\n'), nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return yaml.Marshal(numbers(v))
}

// numbers turns json.Number into int64 or float64 for the YAML encoder.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// DecodeError is a document that does not parse; nothing was changed.
type DecodeError struct{ Msg string }

func (e *DecodeError) Error() string { return "durable: bad document: " + e.Msg }

// Decode reads a document in JSON or YAML (told apart by its first character), strictly: an
// unknown field, a wrong type or trailing data is an error.
func Decode(b []byte) (Document, error) {
	var d Document
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return d, &DecodeError{"empty document"}
	}
	if t[0] != '{' {
		var v any
		if err := yaml.Unmarshal(t, &v); err != nil {
			return d, &DecodeError{"yaml: " + err.Error()}
		}
		j, err := json.Marshal(v)
		if err != nil {
			return d, &DecodeError{"yaml: " + err.Error()}
		}
		t = j
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, &DecodeError{err.Error()}
	}
	if dec.More() {
		return d, &DecodeError{"trailing data after the document"}
	}
	if d.Kind != Kind {
		return d, &DecodeError{fmt.Sprintf("kind %q: want %q", d.Kind, Kind)}
	}
	return d, nil
}

// Check returns every violation of the document as a whole; empty when it can be applied to
// an empty store. The clusters, apps and connection limits are checked by the config contract
// (validate.CheckCluster, CheckApp, CheckClusterConnLimits, CheckAllocation), as the admin
// API checks them.
func Check(d Document) []validate.Violation { return check(d, nil) }

// check is Check against the store's current config cur (nil: an empty store): a cluster over
// its allocation cap in cur may stay so as long as the document does not add to the excess.
func check(d Document, cur *Document) []validate.Violation {
	vs := []validate.Violation{}
	add := func(field, code, format string, a ...any) {
		vs = append(vs, validate.Violation{Field: field, Code: code, Message: fmt.Sprintf(format, a...)})
	}
	clusters := map[string]Cluster{}
	for i, c := range d.Clusters {
		f := fmt.Sprintf("clusters[%d].", i)
		cvs := validate.CheckCluster(store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio})
		if !keys.ValidID(c.ID) {
			vs = append(vs, validate.Prefixed(f, cvs)...)
			continue
		}
		if clusters[c.ID].ID != "" {
			add(f+"id", "duplicate", "cluster %s listed twice", c.ID)
		}
		clusters[c.ID] = c
		vs = append(vs, validate.Prefixed(f, cvs)...)
		if cc := c.Connections; cc != nil {
			vs = append(vs, validate.Prefixed(f+"connections.", validate.CheckClusterConnLimits(*cc))...)
		}
	}
	apps := map[string]bool{}
	guaranteed := map[string]int64{}
	keyOwner, bucketOwner := map[string]string{}, map[string]string{}
	for i, a := range d.Apps {
		f := fmt.Sprintf("apps[%d]", i)
		vs = append(vs, validate.Prefixed(f+".", validate.CheckApp(validate.App{App: a.App, Connections: a.Connections}))...)
		if !keys.ValidID(a.AppID) {
			continue
		}
		if apps[a.AppID] {
			add(f+".app_id", "duplicate", "app %s listed twice", a.AppID)
		}
		apps[a.AppID] = true
		if _, ok := clusters[a.ClusterID]; !ok && keys.ValidID(a.ClusterID) {
			add(f+".cluster_id", "unknown_cluster", "app %s: cluster %q is not in the document", a.AppID, a.ClusterID)
		}
		guaranteed[a.ClusterID] += a.GuaranteedQuota
		for j, k := range a.AccessKeys {
			switch {
			case !store.ValidAccessKey(k):
				add(fmt.Sprintf("%s.access_keys[%d]", f, j), "invalid_access_key_id", "not an access key id")
			case keyOwner[k] != "":
				add(fmt.Sprintf("%s.access_keys[%d]", f, j), "duplicate", "access key %s listed for %s and %s", k, keyOwner[k], a.AppID)
			}
			keyOwner[k] = a.AppID
		}
		for j, b := range a.Buckets {
			switch {
			case !store.ValidBucket(b):
				add(fmt.Sprintf("%s.buckets[%d]", f, j), "invalid_bucket", "not a valid S3 bucket name")
			case bucketOwner[b] != "":
				add(fmt.Sprintf("%s.buckets[%d]", f, j), "duplicate", "bucket %s listed for %s and %s", b, bucketOwner[b], a.AppID)
			}
			bucketOwner[b] = a.AppID
		}
	}
	before, beforeCap := map[string]int64{}, map[string]int64{}
	if cur != nil {
		for _, c := range cur.Clusters {
			beforeCap[c.ID] = validate.Allocatable(c.Capacity, c.ReservedRatio)
		}
		for _, a := range cur.Apps {
			before[a.ClusterID] += a.GuaranteedQuota
		}
	}
	ids := make([]string, 0, len(guaranteed))
	for id := range guaranteed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c, ok := clusters[id]
		if !ok {
			continue
		}
		sc := store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}
		bc, had := beforeCap[id]
		if !had {
			bc = validate.Allocatable(c.Capacity, c.ReservedRatio)
		}
		if v := validate.CheckAllocation(sc, before[id], guaranteed[id], bc); v != nil {
			v.Field = "clusters[" + id + "]." + v.Field
			vs = append(vs, *v)
		}
	}
	known := func(id string) bool { return apps[id] }
	seen := map[string]bool{}
	for i, r := range d.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		fields, err := ruleFields(r)
		if err != nil {
			add(f, "invalid_rule", "%v", err)
			continue
		}
		built, rvs := rules.BuildRule(fields, r.ID, known, nil)
		for _, v := range rvs {
			add(f+"."+v.Field, v.Code, "%s", v.Message)
		}
		if len(rvs) == 0 && seen[built.ID] {
			add(f+".id", "duplicate", "rule %s listed twice", built.ID)
		}
		seen[built.ID] = true
	}
	seen = map[string]bool{}
	for i, b := range d.Breakers {
		f := fmt.Sprintf("breakers[%d]", i)
		if !keys.ValidID(b.Name) {
			add(f+".name", "invalid_id", "breaker name must match ^[A-Za-z0-9_-]{1,128}$")
			continue
		}
		_, bvs := rules.BuildBreaker(breakerFields(b), b.Name)
		for _, v := range bvs {
			add(f+"."+v.Field, v.Code, "%s", v.Message)
		}
		if seen[b.Name] {
			add(f+".name", "duplicate", "breaker %s listed twice", b.Name)
		}
		seen[b.Name] = true
	}
	if d.Users != nil {
		admins := 0
		seen = map[string]bool{}
		for i, u := range d.Users {
			f := fmt.Sprintf("users[%d]", i)
			if !keys.ValidID(u.Username) || seen[u.Username] {
				add(f+".username", "invalid_username", "user name invalid or listed twice")
			}
			seen[u.Username] = true
			if _, err := auth.ParseRole(string(u.Role)); err != nil {
				add(f+".role", "invalid_role", "role must be viewer, operator or admin")
			}
			if !strings.HasPrefix(u.PasswordHash, "$2") {
				add(f+".password_hash", "invalid_password_hash", "password_hash must be a bcrypt hash")
			}
			if u.Role == auth.Admin && !u.Disabled {
				admins++
			}
		}
		if admins == 0 {
			add("users", "no_admin", "the users must include an enabled admin")
		}
	}
	if d.JWTSecret != "" {
		if b, err := hex.DecodeString(d.JWTSecret); err != nil || len(b) < 32 {
			add("jwt_secret", "invalid_jwt_secret", "jwt_secret must be hex of at least 32 bytes")
		}
	}
	return vs
}

// ruleFields turns a stored rule back into the fields BuildRule checks.
func ruleFields(r rules.Rule) (rules.RuleFields, error) {
	var f rules.RuleFields
	b, err := json.Marshal(r)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	return f, err
}

func breakerFields(b rules.Breaker) rules.BreakerFields {
	var f rules.BreakerFields
	j, _ := json.Marshal(b)
	_ = json.Unmarshal(j, &f)
	return f
}

// Diff lists the fields that differ from old to cur, by path ("apps[demo-p1].burst_quota");
// users' password hashes and the secret show as "(secret)".
func Diff(old, cur Document) []validate.DiffEntry {
	a, b := flatten(old), flatten(cur)
	paths := map[string]bool{}
	for k := range a {
		paths[k] = true
	}
	for k := range b {
		paths[k] = true
	}
	out := []validate.DiffEntry{}
	for p := range paths {
		x, okx := a[p]
		y, oky := b[p]
		if okx && oky && x == y {
			continue
		}
		e := validate.DiffEntry{Path: p}
		if okx {
			e.Old = x
		}
		if oky {
			e.New = y
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func flatten(d Document) map[string]any {
	out := map[string]any{}
	put := func(prefix string, v any) {
		j, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(j, &m)
		walk(prefix, m, out)
	}
	for _, c := range d.Clusters {
		put("clusters["+c.ID+"]", c)
	}
	for _, a := range d.Apps {
		put("apps["+a.AppID+"]", a)
	}
	for _, r := range d.Rules {
		put("rules["+r.ID+"]", r)
	}
	for _, b := range d.Breakers {
		put("breakers["+b.Name+"]", b)
	}
	for _, u := range d.Users {
		u.PasswordHash = "(secret " + shortHash(u.PasswordHash) + ")"
		put("users["+u.Username+"]", u)
	}
	if d.JWTSecret != "" {
		out["jwt_secret"] = "(secret " + shortHash(d.JWTSecret) + ")"
	}
	return out
}

// shortHash tells two secrets apart in a diff without showing them.
func shortHash(s string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return strconv.FormatUint(uint64(h), 16)
}

func walk(prefix string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walk(prefix+"."+k, e, out)
		}
	case []any:
		j, _ := json.Marshal(x)
		out[prefix] = string(j)
	default:
		out[prefix] = x
	}
}
