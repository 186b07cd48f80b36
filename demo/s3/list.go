package s3

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

const maxListKeys = 1000

type listContent struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int    `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

// listResult is ListBucketResult of ListObjects (v1) and ListObjectsV2 (list-type=2); fields of
// the other version are left out.
type listResult struct {
	XMLName               xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	Marker                *string        `xml:"Marker"`
	NextMarker            string         `xml:"NextMarker,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	KeyCount              *int           `xml:"KeyCount"`
	MaxKeys               int            `xml:"MaxKeys"`
	IsTruncated           bool           `xml:"IsTruncated"`
	Contents              []listContent  `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

type listParams struct {
	v2        bool
	prefix    string
	delimiter string
	after     string // list keys strictly after this one
	maxKeys   int
}

func parseListParams(q url.Values) (listParams, error) {
	p := listParams{v2: q.Get("list-type") == "2", prefix: q.Get("prefix"),
		delimiter: q.Get("delimiter"), maxKeys: maxListKeys}
	if v := q.Get("max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, errInvalidArgument("max-keys must be a non-negative integer, got %q.", v)
		}
		p.maxKeys = min(n, maxListKeys)
	}
	if !p.v2 {
		p.after = q.Get("marker")
		return p, nil
	}
	p.after = q.Get("start-after")
	if tok := q.Get("continuation-token"); tok != "" {
		key, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return p, errInvalidArgument("The continuation token provided is incorrect.")
		}
		p.after = max(p.after, string(key))
	}
	return p, nil
}

func (s *Server) listObjects(w http.ResponseWriter, r *http.Request, bucket string) error {
	q := r.URL.Query()
	p, err := parseListParams(q)
	if err != nil {
		return err
	}
	entries, err := s.store.sortedEntries(bucket, p.prefix, p.after)
	if err != nil {
		return err
	}
	res := listResult{Name: bucket, Prefix: p.prefix, Delimiter: p.delimiter, MaxKeys: p.maxKeys}
	last := fillList(&res, entries, p)
	if res.IsTruncated {
		if p.v2 {
			res.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(last))
		} else if p.delimiter != "" {
			res.NextMarker = last
		}
	}
	if p.v2 {
		n := len(res.Contents) + len(res.CommonPrefixes)
		res.KeyCount = &n
		res.ContinuationToken, res.StartAfter = q.Get("continuation-token"), q.Get("start-after")
	} else {
		marker := q.Get("marker")
		res.Marker = &marker
	}
	writeXML(w, http.StatusOK, res)
	return nil
}

// fillList adds up to maxKeys contents and common prefixes to res and returns the last key (or
// prefix) listed, from which a next page starts.
func fillList(res *listResult, entries []listEntry, p listParams) string {
	var last string
	for _, e := range entries {
		if cp, ok := rollUp(e.key, p); ok {
			// cp == p.after: the prefix ended the previous page.
			if n := len(res.CommonPrefixes); cp == p.after || n > 0 && res.CommonPrefixes[n-1].Prefix == cp {
				continue
			}
			if full(res, p) {
				res.IsTruncated = true
				break
			}
			res.CommonPrefixes = append(res.CommonPrefixes, commonPrefix{cp})
			last = cp
			continue
		}
		if full(res, p) {
			res.IsTruncated = true
			break
		}
		res.Contents = append(res.Contents, listContent{Key: e.key, Size: len(e.obj.data),
			ETag: e.obj.etag, LastModified: e.obj.modified.Format(timeFormat), StorageClass: "STANDARD"})
		last = e.key
	}
	return last
}

func full(res *listResult, p listParams) bool {
	return len(res.Contents)+len(res.CommonPrefixes) >= p.maxKeys
}

// rollUp returns the common prefix a key is rolled up into under the delimiter, if any.
func rollUp(key string, p listParams) (string, bool) {
	if p.delimiter == "" {
		return "", false
	}
	rest := key[len(p.prefix):]
	i := strings.Index(rest, p.delimiter)
	if i < 0 {
		return "", false
	}
	return p.prefix + rest[:i+len(p.delimiter)], true
}

type uploadEntry struct {
	Key       string `xml:"Key"`
	UploadID  string `xml:"UploadId"`
	Initiated string `xml:"Initiated"`
}

type listUploadsResult struct {
	XMLName     xml.Name      `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListMultipartUploadsResult"`
	Bucket      string        `xml:"Bucket"`
	Prefix      string        `xml:"Prefix"`
	MaxUploads  int           `xml:"MaxUploads"`
	IsTruncated bool          `xml:"IsTruncated"`
	Uploads     []uploadEntry `xml:"Upload"`
}

func (s *Server) listUploads(w http.ResponseWriter, r *http.Request, bucket string) error {
	prefix := r.URL.Query().Get("prefix")
	ups, err := s.store.listUploads(bucket, prefix)
	if err != nil {
		return err
	}
	res := listUploadsResult{Bucket: bucket, Prefix: prefix, MaxUploads: maxListKeys}
	for _, u := range ups {
		res.Uploads = append(res.Uploads, uploadEntry{Key: u.key, UploadID: u.id,
			Initiated: u.initiated.Format(timeFormat)})
	}
	writeXML(w, http.StatusOK, res)
	return nil
}
