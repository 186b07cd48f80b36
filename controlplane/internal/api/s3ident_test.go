package api

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"tollgate/controlplane/internal/audit"
	"tollgate/internal/keys"
)

// Access keys: added, listed, refused in every bad form, held by one app only, removed; each
// write bumps the version, is announced and audited; the gateways' map says the same.
func TestAccessKeysAreExclusiveVersionedPublishedAndAudited(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	sub := f.rdb.Subscribe(ctx, keys.ConfigChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	v0 := f.version(t)
	notice := func(t *testing.T, v int64) {
		t.Helper()
		if msg, err := sub.ReceiveTimeout(ctx, time.Second); err != nil || !strings.Contains(fmt.Sprint(msg), fmt.Sprint(v)) {
			t.Fatalf("no notice of version %d: %v %v", v, msg, err)
		}
	}
	owner := func(key string) string { return f.rdb.HGet(ctx, keys.AccessKeys(), key).Val() }
	aws := "AKIAIOSFODNN7EXAMPLE"
	minio := "minio-user_01.x~!"
	base := "/api/v1/apps/demo-p1/access-keys"
	steps := []step{
		{"empty list", "GET", base, nil, 200, "", func(t *testing.T, res result) {
			if d, _ := res.get("data").([]any); d == nil || len(d) != 0 {
				t.Fatalf("list: %s", res.raw)
			}
		}},
		{"add AWS-style", "POST", base, map[string]any{"access_key_id": aws}, 201, "", func(t *testing.T, res result) {
			if res.get("data", "config_version") != float64(v0+1) || owner(aws) != "demo-p1" {
				t.Fatalf("add: %s, owner %q", res.raw, owner(aws))
			}
			notice(t, v0+1)
		}},
		{"add MinIO-style", "POST", base, map[string]any{"access_key_id": minio}, 201, "", nil},
		{"again: no change", "POST", base, map[string]any{"access_key_id": aws}, 200, "", func(t *testing.T, res result) {
			if f.version(t) != v0+2 || res.get("data", "written") != false {
				t.Fatalf("re-add wrote: %s, version %d", res.raw, f.version(t))
			}
		}},
		{"held by another app", "POST", "/api/v1/apps/demo-p3/access-keys", map[string]any{"access_key_id": aws}, 409,
			"access_key_in_use", func(t *testing.T, res result) {
				if owner(aws) != "demo-p1" || f.version(t) != v0+2 {
					t.Fatalf("a refused claim changed the owner to %q", owner(aws))
				}
			}},
		{"too short", "POST", base, map[string]any{"access_key_id": "ab"}, 400, "invalid_access_key_id", nil},
		{"too long", "POST", base, map[string]any{"access_key_id": strings.Repeat("A", 129)}, 400, "invalid_access_key_id", nil},
		{"slash", "POST", base, map[string]any{"access_key_id": "abc/def"}, 400, "invalid_access_key_id", nil},
		{"comma", "POST", base, map[string]any{"access_key_id": "abc,def"}, 400, "invalid_access_key_id", nil},
		{"space", "POST", base, map[string]any{"access_key_id": "abc def"}, 400, "invalid_access_key_id", nil},
		{"non-ASCII", "POST", base, map[string]any{"access_key_id": "abcé"}, 400, "invalid_access_key_id", nil},
		{"missing", "POST", base, map[string]any{}, 400, "missing_field", nil},
		{"wrong type", "POST", base, map[string]any{"access_key_id": 7}, 400, "invalid_type", nil},
		{"unknown field", "POST", base, map[string]any{"access_key_id": "abcd", "x": 1}, 400, "unknown_field", nil},
		{"dry run refused", "POST", base + "?dry_run=true", map[string]any{"access_key_id": "abcd"}, 400, "invalid_query", nil},
		{"unknown app", "POST", "/api/v1/apps/nope/access-keys", map[string]any{"access_key_id": "abcd"}, 404, "not_found", nil},
		{"bad app id", "GET", "/api/v1/apps/a%20b/access-keys", nil, 400, "invalid_id", nil},
		{"list", "GET", base, nil, 200, "", func(t *testing.T, res result) {
			if fmt.Sprint(res.get("data")) != fmt.Sprintf("[map[access_key_id:%s has_secret:false] map[access_key_id:%s has_secret:false]]", aws, minio) {
				t.Fatalf("list: %s", res.raw)
			}
		}},
		// secrets: this control plane has no secrets key file
		{"secret without a key file", "PUT", base + "/" + aws + "/secret", map[string]any{"secret_access_key": "0123456789abcdefghij"}, 409, "secrets_key_not_configured", nil},
		{"secret too short", "PUT", base + "/" + aws + "/secret", map[string]any{"secret_access_key": "short"}, 400, "invalid_secret", nil},
		{"secret missing", "PUT", base + "/" + aws + "/secret", map[string]any{}, 400, "missing_field", nil},
		{"key with a secret, no key file", "POST", base, map[string]any{"access_key_id": "withsecret1", "secret_access_key": "0123456789abcdefghij"}, 409, "secrets_key_not_configured", func(t *testing.T, res result) {
			if owner("withsecret1") != "" {
				t.Fatal("the refused change added the key")
			}
		}},
		{"no secret to delete", "DELETE", base + "/" + aws + "/secret", nil, 404, "not_found", nil},
		{"remove from the wrong app", "DELETE", "/api/v1/apps/demo-p3/access-keys/" + aws, nil, 404, "not_found", func(t *testing.T, res result) {
			if owner(aws) != "demo-p1" {
				t.Fatal("another app removed the key")
			}
		}},
		{"remove", "DELETE", base + "/" + url.PathEscape(minio), nil, 204, "", func(t *testing.T, res result) {
			if owner(minio) != "" || f.rdb.SIsMember(ctx, keys.AppAccessKeys("demo-p1"), minio).Val() {
				t.Fatalf("removed key still mapped")
			}
		}},
		{"remove again", "DELETE", base + "/" + url.PathEscape(minio), nil, 404, "not_found", nil},
		{"now free for another app", "POST", "/api/v1/apps/demo-p3/access-keys", map[string]any{"access_key_id": minio}, 201, "", nil},
	}
	runSteps(t, f, tok, steps)

	// viewers read, only operators write
	vic := f.user(t, "vic", "viewer")
	if res := f.call(t, "GET", base, vic, nil); res.code != 200 {
		t.Fatalf("viewer list: %d", res.code)
	}
	if res := f.call(t, "POST", base, vic, map[string]any{"access_key_id": "viewer-key"}); res.code != 403 {
		t.Fatalf("viewer add: %d %s", res.code, res.raw)
	}
	if res := f.call(t, "DELETE", base+"/"+aws, vic, nil); res.code != 403 || owner(aws) != "demo-p1" {
		t.Fatalf("viewer remove: %d", res.code)
	}

	page, err := f.audit.Query(ctx, audit.Filter{Actor: "admin", Action: "app.access_key.*", Limit: 100})
	var acts []string
	for _, e := range page.Entries {
		acts = append(acts, e.Action+" "+e.Resource+" "+e.Outcome)
	}
	// every write and refused write, newest first; malformed keys never reach the audit
	want := []string{
		"app.access_key.add app/demo-p3/access-keys/" + minio + " ok",
		"app.access_key.remove app/demo-p1/access-keys/" + minio + " failed",
		"app.access_key.remove app/demo-p1/access-keys/" + minio + " ok",
		"app.access_key.remove app/demo-p3/access-keys/" + aws + " failed",
		"app.access_key.secret_delete app/demo-p1/access-keys/" + aws + " failed",
		"app.access_key.add app/nope/access-keys/abcd failed",
		"app.access_key.add app/demo-p3/access-keys/" + aws + " failed",
		"app.access_key.add app/demo-p1/access-keys/" + minio + " ok",
		"app.access_key.add app/demo-p1/access-keys/" + aws + " ok",
	}
	if err != nil || strings.Join(acts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("audit:\n%s\nwant\n%s (%v)", strings.Join(acts, "\n"), strings.Join(want, "\n"), err)
	}
}

// An app's access keys and buckets go with it, and nothing else's.
func TestDeleteAppRemovesItsAccessKeysAndBuckets(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	for _, c := range []struct{ app, key, bucket string }{
		{"demo-p2", "AKIAP2P2P2P2P2P2P2P2", "p2-bucket"}, {"demo-p2", "p2-second", "p2-other"},
		{"demo-p1", "AKIAP1P1P1P1P1P1P1P1", "p1-bucket"},
	} {
		if res := f.call(t, "POST", "/api/v1/apps/"+c.app+"/access-keys", tok, map[string]any{"access_key_id": c.key}); res.code != 201 {
			t.Fatalf("add key: %d %s", res.code, res.raw)
		}
		if res := f.call(t, "PUT", "/api/v1/buckets/"+c.bucket, tok, map[string]any{"app_id": c.app}); res.code != 201 {
			t.Fatalf("map bucket: %d %s", res.code, res.raw)
		}
	}
	v := f.version(t)
	if res := f.call(t, "DELETE", "/api/v1/apps/demo-p2", tok, nil); res.code != 200 {
		t.Fatalf("delete app: %d %s", res.code, res.raw)
	}
	if f.version(t) != v+1 {
		t.Fatalf("app removal took %d versions, want 1", f.version(t)-v)
	}
	ak := f.rdb.HGetAll(ctx, keys.AccessKeys()).Val()
	bk := f.rdb.HGetAll(ctx, keys.Buckets()).Val()
	if fmt.Sprint(ak) != "map[AKIAP1P1P1P1P1P1P1P1:demo-p1]" || fmt.Sprint(bk) != "map[p1-bucket:demo-p1]" {
		t.Fatalf("after removal: keys %v, buckets %v", ak, bk)
	}
	if n := f.rdb.Exists(ctx, keys.AppAccessKeys("demo-p2"), keys.AppBuckets("demo-p2")).Val(); n != 0 {
		t.Fatalf("%d sets of the removed app left", n)
	}
	// a new app of the same name starts with nothing
	if res := f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": "demo-p2", "cluster_id": "default",
		"guaranteed_quota": 10, "burst_quota": 10, "priority": 2}); res.code != 201 {
		t.Fatalf("recreate: %d %s", res.code, res.raw)
	}
	if res := f.call(t, "GET", "/api/v1/apps/demo-p2/access-keys", tok, nil); fmt.Sprint(res.get("data")) != "[]" {
		t.Fatalf("recreated app inherits keys: %s", res.raw)
	}
}

// The bucket map: validated names, existing apps only, moves between apps, removal.
func TestBucketMap(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	ctx := context.Background()
	v0 := f.version(t)
	steps := []step{
		{"unmapped", "GET", "/api/v1/buckets/photos", nil, 404, "not_found", nil},
		{"map", "PUT", "/api/v1/buckets/photos", map[string]any{"app_id": "demo-p1"}, 201, "", func(t *testing.T, res result) {
			if f.rdb.HGet(ctx, keys.Buckets(), "photos").Val() != "demo-p1" || f.version(t) != v0+1 {
				t.Fatalf("map: %s", res.raw)
			}
		}},
		{"same again", "PUT", "/api/v1/buckets/photos", map[string]any{"app_id": "demo-p1"}, 200, "", func(t *testing.T, res result) {
			if f.version(t) != v0+1 {
				t.Fatal("an unchanged mapping bumped the version")
			}
		}},
		{"move", "PUT", "/api/v1/buckets/photos", map[string]any{"app_id": "demo-p2"}, 200, "", func(t *testing.T, res result) {
			if f.rdb.SIsMember(ctx, keys.AppBuckets("demo-p1"), "photos").Val() || f.version(t) != v0+2 {
				t.Fatalf("move left the bucket in the old app's set")
			}
		}},
		{"get", "GET", "/api/v1/buckets/photos", nil, 200, "", func(t *testing.T, res result) {
			if res.str("data", "app_id") != "demo-p2" {
				t.Fatalf("get: %s", res.raw)
			}
		}},
		{"per app", "GET", "/api/v1/apps/demo-p2/buckets", nil, 200, "", func(t *testing.T, res result) {
			if fmt.Sprint(res.get("data")) != "[map[app_id:demo-p2 bucket:photos]]" {
				t.Fatalf("app buckets: %s", res.raw)
			}
		}},
		{"old app has none", "GET", "/api/v1/apps/demo-p1/buckets", nil, 200, "", func(t *testing.T, res result) {
			if fmt.Sprint(res.get("data")) != "[]" {
				t.Fatalf("app buckets: %s", res.raw)
			}
		}},
		{"all", "GET", "/api/v1/buckets", nil, 200, "", func(t *testing.T, res result) {
			if res.get("meta", "total") != 1.0 {
				t.Fatalf("list: %s", res.raw)
			}
		}},
		{"upper case", "PUT", "/api/v1/buckets/Photos", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"too short", "PUT", "/api/v1/buckets/ab", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"too long", "PUT", "/api/v1/buckets/" + strings.Repeat("a", 64), map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"IP address", "PUT", "/api/v1/buckets/192.168.1.1", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"double dot", "PUT", "/api/v1/buckets/a..b", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"dash end", "PUT", "/api/v1/buckets/abc-", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"reserved prefix", "PUT", "/api/v1/buckets/xn--abc", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"underscore", "PUT", "/api/v1/buckets/a_b_c", map[string]any{"app_id": "demo-p1"}, 400, "invalid_bucket", nil},
		{"unknown app", "PUT", "/api/v1/buckets/other", map[string]any{"app_id": "nope"}, 400, "unknown_app", func(t *testing.T, res result) {
			if f.rdb.HExists(ctx, keys.Buckets(), "other").Val() {
				t.Fatal("a bucket of an unknown app was written")
			}
		}},
		{"bad app id", "PUT", "/api/v1/buckets/other", map[string]any{"app_id": "a b"}, 400, "invalid_id", nil},
		{"no app", "PUT", "/api/v1/buckets/other", map[string]any{}, 400, "missing_field", nil},
		{"delete", "DELETE", "/api/v1/buckets/photos", nil, 204, "", func(t *testing.T, res result) {
			if f.rdb.HExists(ctx, keys.Buckets(), "photos").Val() || f.rdb.SIsMember(ctx, keys.AppBuckets("demo-p2"), "photos").Val() {
				t.Fatal("bucket left after delete")
			}
		}},
		{"delete again", "DELETE", "/api/v1/buckets/photos", nil, 404, "not_found", nil},
	}
	runSteps(t, f, tok, steps)
	page, err := f.audit.Query(ctx, audit.Filter{Actor: "admin", Action: "bucket.*"})
	if err != nil || len(page.Entries) < 3 {
		t.Fatalf("audit of bucket changes: %d %v", len(page.Entries), err)
	}
}
