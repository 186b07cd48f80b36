// Package s3 is an in-memory S3-like storage backend for tollgate's demo and tests: objects,
// copies, listings, multipart uploads and a blob generator for download tests, with S3-style XML
// errors and hard size limits.
package s3

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
)

// Default limits.
const (
	DefaultMaxObjectSize int64 = 64 << 20
	DefaultMaxTotalSize  int64 = 1 << 30
	maxKeyLen                  = 1024
)

// Options set the limits; zero fields take the defaults.
type Options struct {
	MaxObjectSize int64 // per object and per part
	MaxTotalSize  int64 // objects plus unfinished upload parts
}

// Server is the HTTP handler of the backend.
type Server struct {
	store  *storage
	nextID atomic.Uint64
	fail   failure
}

// New returns an empty backend.
func New(o Options) *Server {
	if o.MaxObjectSize <= 0 {
		o.MaxObjectSize = DefaultMaxObjectSize
	}
	if o.MaxTotalSize <= 0 {
		o.MaxTotalSize = DefaultMaxTotalSize
	}
	s := &Server{store: newStorage(o.MaxObjectSize, o.MaxTotalSize)}
	s.fail.left = -1
	return s
}

// ServeHTTP routes a request by path shape and query, as S3 does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-amz-request-id", strconv.FormatUint(s.nextID.Add(1), 16))
	w.Header().Set("Server", "tollgate-demo-s3")
	switch r.URL.Path {
	case "/health":
		s.health(w, r)
		return
	case "/_demo/fail", "/_demo/heal":
		s.fail.admin(w, r, r.URL.Path == "/_demo/heal")
		return
	}
	if status := s.fail.next(); status != 0 {
		writeError(w, r, newError(status, failCode(status), "Failing on command (/_demo/fail)."))
		return
	}
	if r.URL.Path == "/_demo/blob" {
		s.blob(w, r)
		return
	}
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	var err error
	switch {
	case bucket == "":
		err = s.service(w, r)
	case !validBucket(bucket):
		err = newError(http.StatusBadRequest, "InvalidBucketName", "The bucket name %q is not valid.", bucket)
	case key == "":
		err = s.bucketOp(w, r, bucket)
	case len(key) > maxKeyLen:
		err = newError(http.StatusBadRequest, "KeyTooLongError", "Your key is too long.")
	default:
		err = s.objectOp(w, r, bucket, key)
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (s *Server) service(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return errMethodNotAllowed(r.Method)
	}
	return s.listBuckets(w)
}

func (s *Server) bucketOp(w http.ResponseWriter, r *http.Request, bucket string) error {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		if q.Has("uploads") {
			return s.listUploads(w, r, bucket)
		}
		return s.listObjects(w, r, bucket)
	case http.MethodHead:
		if !s.store.bucketExists(bucket) {
			return errNoSuchBucket(bucket)
		}
		return nil
	case http.MethodPut:
		s.store.createBucket(bucket)
		return nil
	case http.MethodDelete:
		if err := s.store.deleteBucket(bucket); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errMethodNotAllowed(r.Method)
}

func (s *Server) objectOp(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return s.getObject(w, r, bucket, key)
	case http.MethodPut:
		switch {
		case q.Has("uploadId") || q.Has("partNumber"):
			return s.uploadPart(w, r, bucket, key)
		case r.Header.Get("x-amz-copy-source") != "":
			return s.copyObject(w, r, bucket, key)
		}
		return s.putObject(w, r, bucket, key)
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return s.initiateUpload(w, r, bucket, key)
		case q.Has("uploadId"):
			return s.completeUpload(w, r, bucket, key)
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			return s.abortUpload(w, r, bucket, key)
		}
		return s.deleteObject(w, bucket, key)
	}
	return errMethodNotAllowed(r.Method)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, r, errMethodNotAllowed(r.Method))
		return
	}
	objects, used := s.store.stats()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "objects": objects, "bytes": used})
}

// validBucket accepts 1-63 characters of letters, digits, '.', '-' and '_' (laxer than S3, and
// never the reserved "_demo").
func validBucket(b string) bool {
	if len(b) == 0 || len(b) > 63 || b == "_demo" {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}
