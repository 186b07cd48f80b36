package changes

import (
	"context"
	"errors"

	"tollgate/controlplane/internal/audit"
	"tollgate/internal/store"
)

// IdentityChange is the outcome of an access-key or bucket-map change.
type IdentityChange struct {
	Written bool  `json:"written"`
	Version int64 `json:"config_version,omitempty"`
}

// AccessKeys lists an app's access key ids.
func (s *Service) AccessKeys(ctx context.Context, app string) ([]string, error) {
	keys, err := s.o.Store.AccessKeys(ctx, app)
	return keys, notFound(err)
}

// AddAccessKey gives an access key id to an app (audited as app.access_key.add); created is
// false when the app already held it.
func (s *Service) AddAccessKey(ctx context.Context, actor, app, key string) (bool, IdentityChange, error) {
	if !store.ValidAccessKey(key) {
		return false, IdentityChange{}, store.ErrInvalidAccessKey // not audited: never a key
	}
	var created bool
	var v int64
	err := s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		created, v, err = s.o.Store.AddAccessKey(ctx, app, key)
		return err
	})
	err = notFound(err)
	out := IdentityChange{Written: created, Version: v}
	if created || err != nil {
		s.recordIdentity(ctx, actor, "app.access_key.add", "app/"+app+"/access-keys/"+key,
			map[string]any{"app_id": app, "access_key_id": key}, v, err)
	}
	return created, out, err
}

// RemoveAccessKey takes an access key id from an app (audited as app.access_key.remove).
func (s *Service) RemoveAccessKey(ctx context.Context, actor, app, key string) (IdentityChange, error) {
	if !store.ValidAccessKey(key) {
		return IdentityChange{}, store.ErrInvalidAccessKey
	}
	var v int64
	err := s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		v, err = s.o.Store.RemoveAccessKey(ctx, app, key)
		return err
	})
	err = notFound(err)
	s.recordIdentity(ctx, actor, "app.access_key.remove", "app/"+app+"/access-keys/"+key,
		map[string]any{"app_id": app, "access_key_id": key}, v, err)
	return IdentityChange{Written: err == nil, Version: v}, err
}

// BucketOwner returns the app a bucket is mapped to.
func (s *Service) BucketOwner(ctx context.Context, bucket string) (string, error) {
	app, err := s.o.Store.BucketOwner(ctx, bucket)
	return app, notFound(err)
}

// AppBuckets lists the buckets mapped to an app.
func (s *Service) AppBuckets(ctx context.Context, app string) ([]string, error) {
	b, err := s.o.Store.AppBuckets(ctx, app)
	return b, notFound(err)
}

// ListBuckets returns the bucket map.
func (s *Service) ListBuckets(ctx context.Context) ([]store.Bucket, error) {
	return s.o.Store.ListBuckets(ctx)
}

// PutBucket maps a bucket to an app (audited as bucket.put with the old and new app); created
// is true when the bucket was not mapped before.
func (s *Service) PutBucket(ctx context.Context, actor, bucket, app string) (bool, IdentityChange, error) {
	if !store.ValidBucket(bucket) {
		return false, IdentityChange{}, store.ErrInvalidBucket
	}
	var old string
	var v int64
	err := s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		old, v, err = s.o.Store.PutBucket(ctx, bucket, app)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		err = ErrUnknownApp
	}
	changed := err == nil && old != app
	if changed || err != nil {
		s.recordIdentity(ctx, actor, "bucket.put", "bucket/"+bucket,
			map[string]any{"bucket": bucket, "old_app_id": old, "app_id": app}, v, err)
	}
	return err == nil && old == "", IdentityChange{Written: changed, Version: v}, err
}

// DeleteBucket removes a bucket from the map (audited as bucket.delete).
func (s *Service) DeleteBucket(ctx context.Context, actor, bucket string) (IdentityChange, error) {
	if !store.ValidBucket(bucket) {
		return IdentityChange{}, store.ErrInvalidBucket
	}
	var old string
	var v int64
	err := s.o.Store.Serialize(ctx, func(ctx context.Context) (err error) {
		old, v, err = s.o.Store.DeleteBucket(ctx, bucket)
		return err
	})
	err = notFound(err)
	s.recordIdentity(ctx, actor, "bucket.delete", "bucket/"+bucket,
		map[string]any{"bucket": bucket, "old_app_id": old}, v, err)
	return IdentityChange{Written: err == nil, Version: v}, err
}

func (s *Service) recordIdentity(ctx context.Context, actor, action, resource string, d map[string]any, v int64, err error) {
	outcome := audit.OK
	if err != nil {
		outcome = audit.Failed
		d["error"] = errorCode(err)
	}
	d["config_version"] = v
	_ = s.o.Audit.Record(ctx, audit.Entry{Actor: actor, Action: action, Resource: resource,
		Outcome: outcome, Details: audit.Details(d)})
}

// notFound maps the store's missing app, key or bucket to the service's ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	return err
}
