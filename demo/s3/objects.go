package s3

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// timeFormat is S3's ISO 8601 form of LastModified in XML bodies.
const timeFormat = "2006-01-02T15:04:05.000Z"

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	data, err := readBody(r, s.store.maxObject)
	if err != nil {
		return err
	}
	obj := newObject(data, r.Header.Get("Content-Type"), userMeta(r.Header))
	if err := s.store.put(bucket, key, obj); err != nil {
		return err
	}
	w.Header().Set("ETag", obj.etag)
	w.WriteHeader(http.StatusOK)
	return nil
}

// getObject serves GET and HEAD, with ranges and conditional requests by http.ServeContent.
func (s *Server) getObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	obj, err := s.store.get(bucket, key)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("ETag", obj.etag)
	h.Set("Accept-Ranges", "bytes")
	ct := obj.contentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	for k, v := range obj.meta {
		h[k] = v
	}
	http.ServeContent(w, r, "", obj.modified, bytes.NewReader(obj.data))
	return nil
}

func (s *Server) deleteObject(w http.ResponseWriter, bucket, key string) error {
	if err := s.store.del(bucket, key); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type copyResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
}

// copyObject copies the object named by x-amz-copy-source ("/bucket/key" or "bucket/key",
// URL-encoded, optionally with ?versionId) to bucket/key.
func (s *Server) copyObject(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	src := r.Header.Get("x-amz-copy-source")
	src, _, _ = strings.Cut(src, "?")
	if dec, err := url.PathUnescape(src); err == nil {
		src = dec
	}
	srcBucket, srcKey, ok := strings.Cut(strings.TrimPrefix(src, "/"), "/")
	if !ok || srcKey == "" || !validBucket(srcBucket) {
		return errInvalidArgument("Copy Source must be /<bucket>/<key>, got %q.", src)
	}
	obj, err := s.store.copyObject(srcBucket, srcKey, bucket, key)
	if err != nil {
		return err
	}
	writeXML(w, http.StatusOK, copyResult{ETag: obj.etag, LastModified: obj.modified.Format(timeFormat)})
	return nil
}

// userMeta keeps the x-amz-meta-* headers of a request.
func userMeta(h http.Header) http.Header {
	var meta http.Header
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-amz-meta-") {
			if meta == nil {
				meta = http.Header{}
			}
			meta[k] = append([]string(nil), v...)
		}
	}
	return meta
}

type bucketEntry struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
}

type listBucketsResult struct {
	XMLName xml.Name      `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListAllMyBucketsResult"`
	Owner   string        `xml:"Owner>ID"`
	Buckets []bucketEntry `xml:"Buckets>Bucket"`
}

func (s *Server) listBuckets(w http.ResponseWriter) error {
	res := listBucketsResult{Owner: "tollgate-demo"}
	now := time.Now().UTC().Format(timeFormat)
	for _, b := range s.store.bucketNames() {
		res.Buckets = append(res.Buckets, bucketEntry{Name: b, CreationDate: now})
	}
	writeXML(w, http.StatusOK, res)
	return nil
}
