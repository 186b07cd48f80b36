package store

// S3 identity: the access keys of an app and the buckets an app owns. The gateways read two
// owner maps, ratelimit:access_keys (key id -> app) and ratelimit:buckets (bucket -> app); each
// app has a set of its own entries (ratelimit:app_access_keys:<app>, ratelimit:app_buckets:<app>)
// so that listing and removing one app's entries never scans the maps. The maps are the truth:
// a claim is one HSETNX, a release one owner_release script (a field is removed only while the
// app holds it); the per-app sets follow, and a listing keeps only what the map confirms. None
// of these keys has a hash tag (they may live in different Redis Cluster slots), so a change is a
// sequence of single-key atomic steps ending with the config version bump, like every change.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// Errors of the S3 identity maps.
var (
	// ErrInvalidAccessKey: not an access key id of an accepted form (see ValidAccessKey).
	ErrInvalidAccessKey = errors.New("invalid access key id")
	// ErrAccessKeyInUse: another app holds the access key id.
	ErrAccessKeyInUse = errors.New("access key id belongs to another app")
	// ErrInvalidBucket: not a valid S3 bucket name (see ValidBucket).
	ErrInvalidBucket = errors.New("invalid bucket name")
)

// ValidAccessKey reports whether s is an accepted access key id: AWS-style (AKIA…, 16–128
// letters and digits) or MinIO/Ceph-style (3–128 printable ASCII characters without '/', ',' or
// whitespace). The first form is a case of the second; '/' and ',' would break the Credential
// field of SigV4 and the V2 Authorization header.
func ValidAccessKey(s string) bool {
	if len(s) < 3 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '/' || c == ',' {
			return false
		}
	}
	return true
}

// ValidBucket reports whether s follows S3's bucket naming rules: 3–63 characters of lowercase
// letters, digits, '.' and '-', starting and ending with a letter or digit, no "..", not an IPv4
// address, not the reserved prefixes xn--, sthree-, amzn-s3-demo- nor the suffixes -s3alias,
// --ol-s3, .mrap, --x-s3.
func ValidBucket(s string) bool {
	if len(s) < 3 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) || strings.Contains(s, "..") {
		return false
	}
	if ip := net.ParseIP(s); ip != nil {
		return false
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(s, p) {
			return false
		}
	}
	for _, x := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3"} {
		if strings.HasSuffix(s, x) {
			return false
		}
	}
	return true
}

// appExists reports whether the apps index holds app.
func (s *Store) appExists(ctx context.Context, app string) (bool, error) {
	n, err := s.rdb.HExists(ctx, keys.AppsIndex(), app).Result()
	if err != nil {
		return false, fmt.Errorf("store: app %s: %w", app, err)
	}
	return n, nil
}

func (s *Store) checkApp(ctx context.Context, app string) error {
	if !keys.ValidID(app) {
		return invalidID("app", app)
	}
	ok, err := s.appExists(ctx, app)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("store: app %s: %w", app, ErrNotFound)
	}
	return nil
}

// owned returns, sorted, the members of an app's set that the owner map confirms as the app's.
func (s *Store) owned(ctx context.Context, set, owners, app string) ([]string, error) {
	members, err := s.rdb.SMembers(ctx, set).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", set, err)
	}
	out := []string{}
	if len(members) == 0 {
		return out, nil
	}
	vals, err := s.rdb.HMGet(ctx, owners, members...).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", owners, err)
	}
	for i, m := range members {
		if v, _ := vals[i].(string); v == app {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *Store) release(ctx context.Context, owners, field, app string) (bool, error) {
	n, err := s.scripts.Run(ctx, s.rdb, "owner_release", []string{owners}, field, app).Int64()
	if err != nil {
		return false, fmt.Errorf("store: release %s: %w", owners, err)
	}
	return n == 1, nil
}

// AccessKeys returns the access key ids of an app, sorted.
func (s *Store) AccessKeys(ctx context.Context, app string) ([]string, error) {
	if err := s.checkApp(ctx, app); err != nil {
		return nil, err
	}
	return s.owned(ctx, keys.AppAccessKeys(app), keys.AccessKeys(), app)
}

// AddAccessKey gives an access key id to an app. created is false when the app already held it
// (nothing changes); ErrAccessKeyInUse when another app holds it.
func (s *Store) AddAccessKey(ctx context.Context, app, key string) (created bool, version int64, err error) {
	if !ValidAccessKey(key) {
		return false, 0, ErrInvalidAccessKey
	}
	if err := s.checkApp(ctx, app); err != nil {
		return false, 0, err
	}
	if err := s.before(ctx); err != nil { // a lost store takes no write at all
		return false, 0, err
	}
	claimed, err := s.rdb.HSetNX(ctx, keys.AccessKeys(), key, app).Result()
	if err != nil {
		return false, 0, fmt.Errorf("store: claim access key: %w", err)
	}
	if !claimed {
		owner, err := s.rdb.HGet(ctx, keys.AccessKeys(), key).Result()
		switch {
		case errors.Is(err, redis.Nil): // released in between: try once more
			return s.AddAccessKey(ctx, app, key)
		case err != nil:
			return false, 0, fmt.Errorf("store: read access key: %w", err)
		case owner != app:
			return false, 0, ErrAccessKeyInUse
		}
	}
	if err := s.rdb.SAdd(ctx, keys.AppAccessKeys(app), key).Err(); err != nil {
		return false, 0, fmt.Errorf("store: index access key: %w", err)
	}
	if !claimed {
		return false, 0, nil
	}
	// an app removed meanwhile read its set before this key was in it: give the key back
	if ok, err := s.appExists(ctx, app); err != nil || !ok {
		_, _ = s.release(ctx, keys.AccessKeys(), key, app)
		_ = s.rdb.SRem(ctx, keys.AppAccessKeys(app), key).Err()
		if err == nil {
			err = fmt.Errorf("store: app %s: %w", app, ErrNotFound)
		}
		return false, 0, err
	}
	v, err := s.bumpVersion(WithChange(ctx, ChangeKey, key), nil)
	return true, v, err
}

// RemoveAccessKey takes an access key id from an app; ErrNotFound when the app does not hold it.
func (s *Store) RemoveAccessKey(ctx context.Context, app, key string) (int64, error) {
	if !ValidAccessKey(key) {
		return 0, ErrInvalidAccessKey
	}
	if !keys.ValidID(app) {
		return 0, invalidID("app", app)
	}
	if err := s.before(ctx); err != nil {
		return 0, err
	}
	removed, err := s.release(ctx, keys.AccessKeys(), key, app)
	if err != nil {
		return 0, err
	}
	if err := s.rdb.SRem(ctx, keys.AppAccessKeys(app), key).Err(); err != nil {
		return 0, fmt.Errorf("store: unindex access key: %w", err)
	}
	if !removed {
		return 0, fmt.Errorf("store: access key of app %s: %w", app, ErrNotFound)
	}
	if err := s.dropSecret(ctx, key); err != nil {
		return 0, err
	}
	return s.bumpVersion(WithChange(ctx, ChangeKey, key), nil)
}

// BucketOwner returns the app a bucket is mapped to.
func (s *Store) BucketOwner(ctx context.Context, bucket string) (string, error) {
	if !ValidBucket(bucket) {
		return "", ErrInvalidBucket
	}
	app, err := s.rdb.HGet(ctx, keys.Buckets(), bucket).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("store: bucket: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: read bucket: %w", err)
	}
	return app, nil
}

// AppBuckets returns the buckets mapped to an app, sorted.
func (s *Store) AppBuckets(ctx context.Context, app string) ([]string, error) {
	if err := s.checkApp(ctx, app); err != nil {
		return nil, err
	}
	return s.owned(ctx, keys.AppBuckets(app), keys.Buckets(), app)
}

// Bucket is one entry of the bucket map.
type Bucket struct {
	Bucket string `json:"bucket"`
	AppID  string `json:"app_id"`
}

// ListBuckets returns the whole bucket map sorted by bucket (HSCAN).
func (s *Store) ListBuckets(ctx context.Context) ([]Bucket, error) {
	seen := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, keys.Buckets(), cursor, "", scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("store: list buckets: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			seen[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	out := make([]Bucket, 0, len(seen))
	for b, a := range seen {
		out = append(out, Bucket{Bucket: b, AppID: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bucket < out[j].Bucket })
	return out, nil
}

// PutBucket maps a bucket to an app (moving it from the app it had). previous is the app it was
// mapped to ("" when new).
func (s *Store) PutBucket(ctx context.Context, bucket, app string) (previous string, version int64, err error) {
	if !ValidBucket(bucket) {
		return "", 0, ErrInvalidBucket
	}
	if err := s.checkApp(ctx, app); err != nil {
		return "", 0, err
	}
	if err := s.before(ctx); err != nil {
		return "", 0, err
	}
	old, err := s.scripts.Run(ctx, s.rdb, "owner_set", []string{keys.Buckets()}, bucket, app).Text()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("store: map bucket: %w", err)
	}
	if old != "" && old != app && keys.ValidID(old) {
		if err := s.rdb.SRem(ctx, keys.AppBuckets(old), bucket).Err(); err != nil {
			return "", 0, fmt.Errorf("store: unindex bucket: %w", err)
		}
	}
	if err := s.rdb.SAdd(ctx, keys.AppBuckets(app), bucket).Err(); err != nil {
		return "", 0, fmt.Errorf("store: index bucket: %w", err)
	}
	if ok, err := s.appExists(ctx, app); err != nil || !ok {
		_, _ = s.release(ctx, keys.Buckets(), bucket, app)
		_ = s.rdb.SRem(ctx, keys.AppBuckets(app), bucket).Err()
		if err == nil {
			err = fmt.Errorf("store: app %s: %w", app, ErrNotFound)
		}
		return "", 0, err
	}
	if old == app {
		return old, 0, nil
	}
	v, err := s.bumpVersion(WithChange(ctx, ChangeBucket, bucket), nil)
	return old, v, err
}

// DeleteBucket removes a bucket from the map; it returns the app it was mapped to.
func (s *Store) DeleteBucket(ctx context.Context, bucket string) (string, int64, error) {
	owner, err := s.BucketOwner(ctx, bucket)
	if err != nil {
		return "", 0, err
	}
	if err := s.before(ctx); err != nil {
		return "", 0, err
	}
	removed, err := s.release(ctx, keys.Buckets(), bucket, owner)
	if err != nil {
		return "", 0, err
	}
	if keys.ValidID(owner) {
		if err := s.rdb.SRem(ctx, keys.AppBuckets(owner), bucket).Err(); err != nil {
			return "", 0, fmt.Errorf("store: unindex bucket: %w", err)
		}
	}
	if !removed { // moved or removed in between
		return "", 0, fmt.Errorf("store: bucket: %w", ErrNotFound)
	}
	v, err := s.bumpVersion(WithChange(ctx, ChangeBucket, bucket), nil)
	return owner, v, err
}

// RemoveAppIdentity releases every access key and bucket of an app and deletes its two sets:
// O(the app's entries). Meant to run inside the version bump that removes the app, so that
// gateways see the app and its keys go in one config version: each released entry is added to
// that version's change (AlsoChange).
func (s *Store) RemoveAppIdentity(ctx context.Context, app string) error {
	if !keys.ValidID(app) {
		return invalidID("app", app)
	}
	for _, m := range []struct{ set, owners, kind string }{
		{keys.AppAccessKeys(app), keys.AccessKeys(), ChangeKey},
		{keys.AppBuckets(app), keys.Buckets(), ChangeBucket},
	} {
		members, err := s.rdb.SMembers(ctx, m.set).Result()
		if err != nil {
			return fmt.Errorf("store: read %s: %w", m.set, err)
		}
		for _, f := range members {
			released, err := s.release(ctx, m.owners, f, app)
			if err != nil {
				return err
			}
			if released {
				AlsoChange(ctx, m.kind, f)
				if m.kind == ChangeKey {
					if err := s.dropSecret(ctx, f); err != nil {
						return err
					}
				}
			}
		}
		if err := s.rdb.Del(ctx, m.set).Err(); err != nil {
			return fmt.Errorf("store: delete %s: %w", m.set, err)
		}
	}
	return nil
}

// AppsIdentity returns, for each app of ids, its access key ids and buckets (sorted, confirmed by
// the owner maps as AccessKeys and AppBuckets do) in two pipelined round trips for all of them:
// what an export of every app reads. Apps without any are absent from the maps.
func (s *Store) AppsIdentity(ctx context.Context, ids []string) (akeys, buckets map[string][]string, err error) {
	sets := make([][2]*redis.StringSliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			sets[i] = [2]*redis.StringSliceCmd{p.SMembers(ctx, keys.AppAccessKeys(id)), p.SMembers(ctx, keys.AppBuckets(id))}
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("store: read identities: %w", err)
	}
	owners := [2]string{keys.AccessKeys(), keys.Buckets()}
	type ask struct {
		app, owner int
		members    []string
		cmd        *redis.SliceCmd
	}
	var asks []*ask
	for i := range ids {
		for o := 0; o < 2; o++ {
			if m := sets[i][o].Val(); len(m) > 0 {
				asks = append(asks, &ask{app: i, owner: o, members: m})
			}
		}
	}
	akeys, buckets = map[string][]string{}, map[string][]string{}
	if len(asks) == 0 {
		return akeys, buckets, nil
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range asks {
			a.cmd = p.HMGet(ctx, owners[a.owner], a.members...)
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("store: read identity owners: %w", err)
	}
	for _, a := range asks {
		var out []string
		for j, v := range a.cmd.Val() {
			if s, _ := v.(string); s == ids[a.app] {
				out = append(out, a.members[j])
			}
		}
		if len(out) == 0 {
			continue
		}
		sort.Strings(out)
		if a.owner == 0 {
			akeys[ids[a.app]] = out
		} else {
			buckets[ids[a.app]] = out
		}
	}
	return akeys, buckets, nil
}
