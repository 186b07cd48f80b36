package s3

import (
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
)

type initiateResult struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

type completeRequest struct {
	XMLName xml.Name        `xml:"CompleteMultipartUpload"`
	Parts   []completedPart `xml:"Part"`
}

type completeResult struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

// maxCompleteBody bounds the CompleteMultipartUpload document (10000 parts fit easily).
const maxCompleteBody = 2 << 20

func (s *Server) initiateUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	id, err := s.store.createUpload(bucket, key, r.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	writeXML(w, http.StatusOK, initiateResult{Bucket: bucket, Key: key, UploadID: id})
	return nil
}

func (s *Server) uploadPart(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	q := r.URL.Query()
	n, err := strconv.Atoi(q.Get("partNumber"))
	if err != nil || n < 1 || n > maxPartNumber {
		return errInvalidArgument("Part number must be an integer between 1 and %d.", maxPartNumber)
	}
	id := q.Get("uploadId")
	if id == "" {
		return errInvalidArgument("uploadId is required with partNumber.")
	}
	data, err := readBody(r, s.store.maxObject)
	if err != nil {
		return err
	}
	etag, err := s.store.putPart(id, bucket, key, n, data)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
	return nil
}

// completeUpload concatenates the parts listed in the request body, in order, or every uploaded
// part by number when the body is empty.
func (s *Server) completeUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxCompleteBody+1))
	if err != nil {
		return newError(http.StatusBadRequest, "IncompleteBody", "Reading the request body failed: %v", err)
	}
	if len(raw) > maxCompleteBody {
		return newError(http.StatusBadRequest, "MalformedXML", "The XML document is too large.")
	}
	var req completeRequest
	if len(raw) > 0 {
		if err := xml.Unmarshal(raw, &req); err != nil {
			return newError(http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed.")
		}
	}
	obj, err := s.store.complete(r.URL.Query().Get("uploadId"), bucket, key, req.Parts)
	if err != nil {
		return err
	}
	writeXML(w, http.StatusOK, completeResult{Location: "/" + bucket + "/" + key,
		Bucket: bucket, Key: key, ETag: obj.etag})
	return nil
}

func (s *Server) abortUpload(w http.ResponseWriter, r *http.Request, bucket, key string) error {
	if err := s.store.abort(r.URL.Query().Get("uploadId"), bucket, key); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
