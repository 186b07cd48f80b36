package s3

import (
	"net/http"
	"strconv"
)

// The blob pattern repeats every blobPeriod bytes; a chunk holds whole periods so the pattern
// runs on across chunk boundaries.
const (
	blobPeriod = 26
	blobChunk  = blobPeriod * 2520 // 65520 bytes
)

// blob answers GET /_demo/blob?size=N with N bytes of a fixed pattern, streamed without
// allocating N bytes (N at most the object size limit).
func (s *Server) blob(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, r, errMethodNotAllowed(r.Method))
		return
	}
	size, err := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
	if err != nil || size < 0 || size > s.store.maxObject {
		writeError(w, r, errInvalidArgument("size must be an integer between 0 and %d.", s.store.maxObject))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	chunk := make([]byte, min(size, blobChunk))
	for i := range chunk {
		chunk[i] = blobByte(int64(i))
	}
	for left := size; left > 0; {
		n := min(left, int64(len(chunk)))
		if _, err := w.Write(chunk[:n]); err != nil {
			return
		}
		left -= n
	}
}

// blobByte is the byte at offset i of every blob: 'a'..'z' repeating.
func blobByte(i int64) byte { return byte('a' + i%blobPeriod) }
