package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"tollgate/controlplane/internal/changes"
	"tollgate/internal/store"
)

// accessKey is one access key id of an app.
type accessKey struct {
	AccessKeyID string `json:"access_key_id"`
	HasSecret   bool   `json:"has_secret"` // the gateways verify its signatures (the secret is never answered)
}

type accessKeyChange struct {
	AppID       string `json:"app_id"`
	AccessKeyID string `json:"access_key_id"`
	HasSecret   bool   `json:"has_secret"`
	changes.IdentityChange
}

type bucketChange struct {
	Bucket string `json:"bucket"`
	AppID  string `json:"app_id"`
	changes.IdentityChange
}

// listAccessKeys: GET /apps/:id/access-keys, sorted.
func (s *server) listAccessKeys(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	ids, err := s.opts.Changes.AccessKeys(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	has, err := s.opts.Changes.HasSecret(c.Request.Context(), ids)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]accessKey, 0, len(ids))
	for _, k := range ids {
		out = append(out, accessKey{AccessKeyID: k, HasSecret: has[k]})
	}
	okMeta(c, out, gin.H{"total": len(out)})
}

// addAccessKey: POST /apps/:id/access-keys {"access_key_id": "…", "secret_access_key": "…"}: 201
// when added, 200 when the app already holds the key, 409 access_key_in_use when another app
// does. The optional secret is sealed and stored with the key (see putAccessKeySecret).
func (s *server) addAccessKey(c *gin.Context) {
	var in struct {
		AccessKeyID     *string `json:"access_key_id"`
		SecretAccessKey *string `json:"secret_access_key"`
	}
	w, read := s.readLiveWrite(c, &in)
	if !read {
		return
	}
	if in.AccessKeyID == nil {
		s.fail(c, errMissing("access_key_id"))
		return
	}
	if in.SecretAccessKey != nil { // checked before anything is written
		if err := s.checkSecret(*in.SecretAccessKey); err != nil {
			s.fail(c, err)
			return
		}
	}
	created, out, err := s.opts.Changes.AddAccessKey(c.Request.Context(), w.actor, w.id, *in.AccessKeyID)
	if err != nil {
		s.fail(c, err)
		return
	}
	if in.SecretAccessKey != nil {
		sout, err := s.opts.Changes.SetAccessKeySecret(c.Request.Context(), w.actor, w.id, *in.AccessKeyID, *in.SecretAccessKey)
		if err != nil {
			if created { // no key without the secret it was added with
				_, _ = s.opts.Changes.RemoveAccessKey(c.Request.Context(), w.actor, w.id, *in.AccessKeyID)
			}
			s.fail(c, err)
			return
		}
		out.Written, out.Version = true, sout.Version
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	has, err := s.opts.Changes.HasSecret(c.Request.Context(), []string{*in.AccessKeyID})
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, status, accessKeyChange{AppID: w.id, AccessKeyID: *in.AccessKeyID, HasSecret: has[*in.AccessKeyID], IdentityChange: out})
}

// removeAccessKey: DELETE /apps/:id/access-keys/:key, 204.
func (s *server) removeAccessKey(c *gin.Context) {
	w, read := s.readLiveWrite(c, nil)
	if !read {
		return
	}
	if _, err := s.opts.Changes.RemoveAccessKey(c.Request.Context(), w.actor, w.id, c.Param("key")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// listAppBuckets: GET /apps/:id/buckets, sorted.
func (s *server) listAppBuckets(c *gin.Context) {
	id, err := pathID(c, "id")
	if err != nil {
		s.fail(c, err)
		return
	}
	names, err := s.opts.Changes.AppBuckets(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]store.Bucket, 0, len(names))
	for _, b := range names {
		out = append(out, store.Bucket{Bucket: b, AppID: id})
	}
	okMeta(c, out, gin.H{"total": len(out)})
}

// listBuckets: GET /buckets: the whole bucket map, sorted by bucket.
func (s *server) listBuckets(c *gin.Context) {
	all, err := s.opts.Changes.ListBuckets(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	okMeta(c, all, gin.H{"total": len(all)})
}

func (s *server) getBucket(c *gin.Context) {
	b := c.Param("bucket")
	app, err := s.opts.Changes.BucketOwner(c.Request.Context(), b)
	if err != nil {
		s.fail(c, err)
		return
	}
	ok(c, http.StatusOK, store.Bucket{Bucket: b, AppID: app})
}

// putBucket: PUT /buckets/:bucket {"app_id": "…"}: 201 when the bucket was not mapped, else 200
// (moved to the app, or already its).
func (s *server) putBucket(c *gin.Context) {
	var in struct {
		AppID *string `json:"app_id"`
	}
	dry, err := dryRun(c)
	if err == nil && dry {
		err = errNoDryRun()
	}
	if err == nil {
		err = s.decodeJSON(c, &in)
	}
	if err == nil && in.AppID == nil {
		err = errMissing("app_id")
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	b := c.Param("bucket")
	created, out, err := s.opts.Changes.PutBucket(c.Request.Context(), p.User, b, *in.AppID)
	if err != nil {
		s.fail(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	ok(c, status, bucketChange{Bucket: b, AppID: *in.AppID, IdentityChange: out})
}

// deleteBucket: DELETE /buckets/:bucket, 204.
func (s *server) deleteBucket(c *gin.Context) {
	if dry, err := dryRun(c); err != nil || dry {
		if err == nil {
			err = errNoDryRun()
		}
		s.fail(c, err)
		return
	}
	p, _ := principalOf(c)
	if _, err := s.opts.Changes.DeleteBucket(c.Request.Context(), p.User, c.Param("bucket")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func errNoDryRun() *Error {
	return errBadRequest("invalid_query", "dry_run is not supported by this route")
}
