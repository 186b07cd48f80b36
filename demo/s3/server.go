// Package s3 is the demo storage backend of tollgate: gofakes3 (an in-memory S3 implementation
// used as a library) behind a front that adds what the demo needs and gofakes3 lacks:
//
//   - signature checks: a request signed with SigV4 or SigV2 (Authorization header or presigned
//     URL) is served only when its access key is one of Options.Credentials and its signature is
//     right (403 InvalidAccessKeyId / SignatureDoesNotMatch as S3 answers); a request without
//     credentials is served as anonymous (as a public bucket would be);
//   - aws-chunked bodies (SigV4 streaming, with or without trailers) on every upload, not only
//     on PutObject;
//   - UploadPartCopy (PUT ?partNumber&uploadId with x-amz-copy-source[-range]);
//   - a size limit per object and part, and buckets created on first use;
//   - the failure switch of the breaker demos, on its own loopback-only handler (Admin), never
//     on the storage port a gateway proxies to.
package s3

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// DefaultMaxObjectSize is the largest object or part accepted (bytes).
const DefaultMaxObjectSize int64 = 64 << 20

// Options of the backend; zero fields take the defaults.
type Options struct {
	MaxObjectSize int64             // per object and per part
	Credentials   map[string]string // access key id -> secret key
	Domains       []string          // virtual-hosted style: <bucket>.<domain>
}

// Server is the storage backend (ServeHTTP) and its failure switch (Admin).
type Server struct {
	o       Options
	mem     *s3mem.Backend
	fake    http.Handler
	nextID  atomic.Uint64
	fail    failure
	served  atomic.Int64 // storage requests answered (for /health)
	refused atomic.Int64 // requests refused for their credentials
}

// New returns an empty backend.
func New(o Options) *Server {
	if o.MaxObjectSize <= 0 {
		o.MaxObjectSize = DefaultMaxObjectSize
	}
	s := &Server{o: o, mem: s3mem.New()}
	opts := []gofakes3.Option{gofakes3.WithAutoBucket(true), gofakes3.WithLogger(gofakes3.DiscardLog())}
	if len(o.Domains) > 0 {
		opts = append(opts, gofakes3.WithHostBucketBase(o.Domains...))
	}
	s.fake = gofakes3.New(s.mem, opts...).Server()
	s.fail.left = -1
	return s
}

// ServeHTTP serves the storage API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-amz-request-id", strconv.FormatUint(s.nextID.Add(1), 16))
	if r.URL.Path == "/health" && r.URL.RawQuery == "" && s.pathStyle(r) {
		s.health(w, r)
		return
	}
	if status := s.fail.next(); status != 0 {
		writeError(w, r, newError(status, failCode(status), "Failing on command (the demo's failure switch)."))
		return
	}
	if err := s.authenticate(r); err != nil {
		s.refused.Add(1)
		writeError(w, r, err)
		return
	}
	s.served.Add(1)
	// gofakes3 reads x-amz-date in the ISO form only; SigV2 clients send RFC 1123 dates
	if d := r.Header.Get("X-Amz-Date"); d != "" {
		for _, layout := range []string{time.RFC1123, time.RFC1123Z, time.RFC850, time.ANSIC} {
			if t, err := time.Parse(layout, d); err == nil {
				r.Header.Set("X-Amz-Date", t.UTC().Format(v4Time))
				break
			}
		}
	}
	if err := s.prepareBody(r); err != nil {
		writeError(w, r, err)
		return
	}
	if s.subresource(w, r) {
		return
	}
	if r.Method == http.MethodPut && r.URL.Query().Has("uploadId") && r.Header.Get("x-amz-copy-source") != "" {
		if err := s.uploadPartCopy(w, r); err != nil {
			writeError(w, r, err)
		}
		return
	}
	s.fake.ServeHTTP(w, r)
}

// pathStyle reports whether the Host names no bucket (so that /health is the backend's own).
func (s *Server) pathStyle(r *http.Request) bool {
	_, ok := s.hostBucket(r)
	return !ok
}

// hostBucket returns the bucket of a virtual-hosted request (<bucket>.<domain>).
func (s *Server) hostBucket(r *http.Request) (string, bool) {
	host := r.Host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	for _, d := range s.o.Domains {
		d = "." + strings.Trim(d, ".")
		if strings.HasSuffix(host, d) && len(host) > len(d) {
			return host[:len(host)-len(d)], true
		}
	}
	return "", false
}

// prepareBody refuses bodies over the size limit and decodes aws-chunked ones, so that gofakes3
// sees a plain body of the decoded length.
func (s *Server) prepareBody(r *http.Request) error {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return nil
	}
	size := r.ContentLength
	sha := r.Header.Get("x-amz-content-sha256")
	if strings.HasPrefix(sha, "STREAMING-") {
		n, err := strconv.ParseInt(r.Header.Get("x-amz-decoded-content-length"), 10, 64)
		if err != nil || n < 0 {
			return newError(http.StatusLengthRequired, "MissingContentLength",
				"An aws-chunked body needs x-amz-decoded-content-length.")
		}
		if n > s.o.MaxObjectSize {
			return errTooLarge(s.o.MaxObjectSize)
		}
		// decoded up front (at most MaxObjectSize), so that a malformed body is a 400 and
		// never half an object
		data, err := io.ReadAll(newChunkedReader(r.Body, n))
		if err != nil {
			return errBadChunk
		}
		size = n
		r.Body = io.NopCloser(bytes.NewReader(data))
		r.ContentLength = n
		r.Header.Set("Content-Length", strconv.FormatInt(n, 10))
		r.Header.Set("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
		r.Header.Del("x-amz-decoded-content-length")
		r.Header.Del("x-amz-trailer")
		var enc []string
		for _, e := range strings.Split(r.Header.Get("Content-Encoding"), ",") {
			if e = strings.TrimSpace(e); e != "" && e != "aws-chunked" {
				enc = append(enc, e)
			}
		}
		if len(enc) == 0 {
			r.Header.Del("Content-Encoding")
		} else {
			r.Header.Set("Content-Encoding", strings.Join(enc, ","))
		}
	}
	if size > s.o.MaxObjectSize {
		return errTooLarge(s.o.MaxObjectSize)
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, r, newError(http.StatusMethodNotAllowed, "MethodNotAllowed", "GET or HEAD"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "served": s.served.Load(),
		"refused_credentials": s.refused.Load(), "access_keys": len(s.o.Credentials)})
}

// Admin is the failure switch's handler, for a listener of its own on loopback:
//
//	POST /_demo/fail?status=503[&count=N | &ratio=R]   answer `status` to the next N storage
//	                                                   requests, or to a share R of them, or
//	                                                   (neither) to all of them
//	POST /_demo/heal                                   answer normally again
//	GET  /_demo/fail                                   the mode in force, as JSON
//	GET  /health
//
// The storage handler never answers these paths, so nothing a gateway forwards reaches it.
func (s *Server) Admin() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_demo/fail", "/_demo/heal":
			s.fail.admin(w, r, r.URL.Path == "/_demo/heal")
		case "/health":
			s.health(w, r)
		default:
			writeError(w, r, newError(http.StatusNotFound, "NotFound", "%s", fmt.Sprintf("no %s here", r.URL.Path)))
		}
	})
}

func errTooLarge(limit int64) *apiError {
	return newError(http.StatusBadRequest, "EntityTooLarge",
		"Your proposed upload exceeds the maximum allowed size of %d bytes.", limit)
}

// Served is the number of storage requests the backend answered (failure-switch refusals and
// refused credentials aside).
func (s *Server) Served() int64 { return s.served.Load() }

// ObjectCount is the number of objects in a bucket (-1 when it does not exist).
func (s *Server) ObjectCount(bucket string) int {
	l, err := s.mem.ListBucket(bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		return -1
	}
	return len(l.Contents)
}
