package s3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/johannesboyne/gofakes3"
)

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	Xmlns        string   `xml:"xmlns,attr"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
}

// uploadPartCopy serves UploadPartCopy: the source object (or its x-amz-copy-source-range) is
// read from storage and uploaded as the part through gofakes3's own UploadPart.
func (s *Server) uploadPartCopy(w http.ResponseWriter, r *http.Request) error {
	src, err := url.PathUnescape(r.Header.Get("x-amz-copy-source"))
	if err != nil {
		return newError(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source is not URL-encoded.")
	}
	src, _, _ = strings.Cut(src, "?versionId=")
	bucket, key, ok := strings.Cut(strings.TrimPrefix(src, "/"), "/")
	if !ok || bucket == "" || key == "" {
		return newError(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source must be bucket/key.")
	}
	var rng *gofakes3.ObjectRangeRequest
	if v := r.Header.Get("x-amz-copy-source-range"); v != "" {
		from, to, ok := strings.Cut(strings.TrimPrefix(v, "bytes="), "-")
		a, err1 := strconv.ParseInt(from, 10, 64)
		b, err2 := strconv.ParseInt(to, 10, 64)
		if !strings.HasPrefix(v, "bytes=") || !ok || err1 != nil || err2 != nil || a < 0 || b < a {
			return newError(http.StatusBadRequest, "InvalidArgument", "x-amz-copy-source-range must be bytes=first-last.")
		}
		rng = &gofakes3.ObjectRangeRequest{Start: a, End: b}
	}
	obj, err := s.mem.GetObject(bucket, key, rng)
	if err != nil {
		var er *gofakes3.ErrorResponse
		if errors.As(err, &er) {
			return newError(er.Code.Status(), string(er.Code), "%s", er.Message)
		}
		return newError(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	}
	defer obj.Contents.Close()
	data, err := io.ReadAll(io.LimitReader(obj.Contents, s.o.MaxObjectSize+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > s.o.MaxObjectSize {
		return newError(http.StatusBadRequest, "EntityTooLarge", "The part exceeds %d bytes.", s.o.MaxObjectSize)
	}
	part, err := http.NewRequestWithContext(r.Context(), http.MethodPut, r.URL.String(), bytes.NewReader(data))
	if err != nil {
		return err
	}
	part.Host = r.Host
	part.Header.Set("Content-Length", strconv.Itoa(len(data)))
	rec := httptest.NewRecorder()
	s.fake.ServeHTTP(rec, part)
	if rec.Code != http.StatusOK {
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return nil
	}
	writeXML(w, http.StatusOK, copyPartResult{Xmlns: "http://s3.amazonaws.com/doc/2006-03-01/",
		ETag: rec.Header().Get("ETag"), LastModified: time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
	return nil
}
