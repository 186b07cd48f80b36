package s3

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// object is an immutable stored object; data is never modified after creation, so copies share it.
type object struct {
	data        []byte
	etag        string // quoted, as sent in the ETag header
	modified    time.Time
	contentType string
	meta        http.Header // x-amz-meta-* headers
}

type part struct {
	data []byte
	md5  [md5.Size]byte
}

func (p part) etag() string { return `"` + hex.EncodeToString(p.md5[:]) + `"` }

type upload struct {
	bucket, key string
	contentType string
	initiated   time.Time
	parts       map[int]part
}

// storage is the in-memory state with its size limits. Sizes count logical bytes: objects plus
// the parts of unfinished multipart uploads.
type storage struct {
	mu        sync.RWMutex
	maxObject int64
	maxTotal  int64
	used      int64
	buckets   map[string]map[string]*object
	uploads   map[string]*upload
}

func newStorage(maxObject, maxTotal int64) *storage {
	return &storage{maxObject: maxObject, maxTotal: maxTotal,
		buckets: map[string]map[string]*object{}, uploads: map[string]*upload{}}
}

func newObject(data []byte, contentType string, meta http.Header) *object {
	sum := md5.Sum(data)
	return &object{data: data, etag: `"` + hex.EncodeToString(sum[:]) + `"`,
		modified: time.Now().UTC(), contentType: contentType, meta: meta}
}

// reserve accounts delta bytes; the caller holds the write lock.
func (s *storage) reserve(delta int64) error {
	if delta > 0 && s.used+delta > s.maxTotal {
		return errStorageFull(s.maxTotal)
	}
	s.used += delta
	return nil
}

func (s *storage) stats() (objects int, used int64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.buckets {
		objects += len(b)
	}
	return objects, s.used
}

func (s *storage) createBucket(bucket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = map[string]*object{}
	}
}

func (s *storage) bucketExists(bucket string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.buckets[bucket] != nil
}

func (s *storage) bucketNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.buckets))
	for b := range s.buckets {
		names = append(names, b)
	}
	sort.Strings(names)
	return names
}

func (s *storage) deleteBucket(bucket string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	objs, ok := s.buckets[bucket]
	switch {
	case !ok:
		return errNoSuchBucket(bucket)
	case len(objs) > 0:
		return newError(http.StatusConflict, "BucketNotEmpty", "The bucket %q is not empty.", bucket)
	}
	delete(s.buckets, bucket)
	return nil
}

// put stores obj, creating the bucket if needed (a demo convenience).
func (s *storage) put(bucket, key string, obj *object) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(bucket, key, obj)
}

func (s *storage) putLocked(bucket, key string, obj *object) error {
	b := s.buckets[bucket]
	var old int64
	if b != nil && b[key] != nil {
		old = int64(len(b[key].data))
	}
	if err := s.reserve(int64(len(obj.data)) - old); err != nil {
		return err
	}
	if b == nil {
		b = map[string]*object{}
		s.buckets[bucket] = b
	}
	b[key] = obj
	return nil
}

func (s *storage) get(bucket, key string) (*object, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := s.buckets[bucket]
	if b == nil {
		return nil, errNoSuchBucket(bucket)
	}
	obj := b[key]
	if obj == nil {
		return nil, errNoSuchKey(key)
	}
	return obj, nil
}

// del removes an object; a missing key is not an error (as in S3).
func (s *storage) del(bucket, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[bucket]
	if b == nil {
		return errNoSuchBucket(bucket)
	}
	if obj := b[key]; obj != nil {
		s.used -= int64(len(obj.data))
		delete(b, key)
	}
	return nil
}

// copyObject copies src to dst; the data slice is shared (objects are immutable) but counted.
func (s *storage) copyObject(srcBucket, srcKey, dstBucket, dstKey string) (*object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[srcBucket]
	if b == nil {
		return nil, errNoSuchBucket(srcBucket)
	}
	src := b[srcKey]
	if src == nil {
		return nil, errNoSuchKey(srcKey)
	}
	dst := *src
	dst.modified = time.Now().UTC()
	if err := s.putLocked(dstBucket, dstKey, &dst); err != nil {
		return nil, err
	}
	return &dst, nil
}

// listEntry is one key of a bucket listing, with its object.
type listEntry struct {
	key string
	obj *object
}

// sortedEntries returns the objects of bucket whose key starts with prefix and sorts after
// after, in key order.
func (s *storage) sortedEntries(bucket, prefix, after string) ([]listEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b := s.buckets[bucket]
	if b == nil {
		return nil, errNoSuchBucket(bucket)
	}
	var out []listEntry
	for k, obj := range b {
		if strings.HasPrefix(k, prefix) && k > after {
			out = append(out, listEntry{k, obj})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

func newUploadID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("upload id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
