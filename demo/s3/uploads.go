package s3

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

const maxPartNumber = 10000

// completedPart is one entry of a CompleteMultipartUpload request.
type completedPart struct {
	PartNumber int    `xml:"PartNumber"`
	ETag       string `xml:"ETag"`
}

func (s *storage) createUpload(bucket, key, contentType string) (string, error) {
	id, err := newUploadID()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[bucket] == nil {
		s.buckets[bucket] = map[string]*object{}
	}
	s.uploads[id] = &upload{bucket: bucket, key: key, contentType: contentType,
		initiated: time.Now().UTC(), parts: map[int]part{}}
	return id, nil
}

// uploadLocked finds an upload of bucket/key; the caller holds the lock.
func (s *storage) uploadLocked(id, bucket, key string) (*upload, error) {
	u := s.uploads[id]
	if u == nil || u.bucket != bucket || u.key != key {
		return nil, errNoSuchUpload(id)
	}
	return u, nil
}

func (s *storage) putPart(id, bucket, key string, n int, data []byte) (string, error) {
	p := part{data: data, md5: md5.Sum(data)}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadLocked(id, bucket, key)
	if err != nil {
		return "", err
	}
	old := int64(len(u.parts[n].data))
	if err := s.reserve(int64(len(data)) - old); err != nil {
		return "", err
	}
	u.parts[n] = p
	return p.etag(), nil
}

func (s *storage) abort(id, bucket, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadLocked(id, bucket, key)
	if err != nil {
		return err
	}
	s.dropUploadLocked(id, u)
	return nil
}

func (s *storage) dropUploadLocked(id string, u *upload) {
	for _, p := range u.parts {
		s.used -= int64(len(p.data))
	}
	delete(s.uploads, id)
}

// complete concatenates the chosen parts (all parts in order when want is empty) into the
// object, frees every part of the upload and stores the object.
func (s *storage) complete(id, bucket, key string, want []completedPart) (*object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadLocked(id, bucket, key)
	if err != nil {
		return nil, err
	}
	chosen, err := chooseParts(u, want)
	if err != nil {
		return nil, err
	}
	var size int64
	for _, p := range chosen {
		size += int64(len(p.data))
	}
	if size > s.maxObject {
		return nil, errTooLarge(s.maxObject)
	}
	obj := assemble(chosen, size, u.contentType)
	s.dropUploadLocked(id, u)
	if err := s.putLocked(bucket, key, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func chooseParts(u *upload, want []completedPart) ([]part, error) {
	if len(want) == 0 {
		nums := make([]int, 0, len(u.parts))
		for n := range u.parts {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		want = make([]completedPart, len(nums))
		for i, n := range nums {
			want[i].PartNumber = n
		}
	}
	if len(want) == 0 {
		return nil, newError(http.StatusBadRequest, "InvalidRequest", "The upload has no parts.")
	}
	chosen := make([]part, 0, len(want))
	for i, w := range want {
		if i > 0 && w.PartNumber <= want[i-1].PartNumber {
			return nil, newError(http.StatusBadRequest, "InvalidPartOrder",
				"The list of parts was not in ascending order.")
		}
		p, ok := u.parts[w.PartNumber]
		if !ok || (w.ETag != "" && strings.Trim(w.ETag, `"`) != strings.Trim(p.etag(), `"`)) {
			return nil, newError(http.StatusBadRequest, "InvalidPart",
				"Part %d could not be found or its ETag does not match.", w.PartNumber)
		}
		chosen = append(chosen, p)
	}
	return chosen, nil
}

// assemble builds the object; its ETag is S3's multipart form md5(md5(part1)...md5(partN))-N.
func assemble(parts []part, size int64, contentType string) *object {
	data := make([]byte, 0, size)
	sums := make([]byte, 0, len(parts)*md5.Size)
	for _, p := range parts {
		data = append(data, p.data...)
		sums = append(sums, p.md5[:]...)
	}
	obj := newObject(data, contentType, nil)
	all := md5.Sum(sums)
	obj.etag = fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(all[:]), len(parts))
	return obj
}

// uploadInfo is one unfinished upload of a listing.
type uploadInfo struct {
	id, key   string
	initiated time.Time
}

func (s *storage) listUploads(bucket, prefix string) ([]uploadInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.buckets[bucket] == nil {
		return nil, errNoSuchBucket(bucket)
	}
	var out []uploadInfo
	for id, u := range s.uploads {
		if u.bucket == bucket && strings.HasPrefix(u.key, prefix) {
			out = append(out, uploadInfo{id: id, key: u.key, initiated: u.initiated})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key != out[j].key {
			return out[i].key < out[j].key
		}
		return out[i].id < out[j].id
	})
	return out, nil
}
