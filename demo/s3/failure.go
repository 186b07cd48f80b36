package s3

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// failure makes the backend fail on command (circuit-breaker demos and tests):
//
//	POST /_demo/fail?status=503[&count=N | &ratio=R]   answer `status` to the next N storage
//	                                                   requests, or to a share R of them, or
//	                                                   (neither) to all of them
//	POST /_demo/heal                                   answer normally again
//	GET  /_demo/fail                                   the mode in force, as JSON
//
// Served by Server.Admin only, a handler for a listener of its own (never the storage port a
// gateway proxies to), and from loopback clients only, so that no client of the gateway can
// break the backend whatever header the gateway forwards.
type failure struct {
	mu     sync.Mutex
	status int     // 0: healthy
	left   int64   // requests still to fail; -1: no count
	ratio  float64 // share of requests that fail when left == -1
	last   int     // status of the last command (a counted mode ends with its last failure)
}

type failureMode struct {
	Status int     `json:"status"`
	Count  int64   `json:"count"`
	Ratio  float64 `json:"ratio"`
}

// next reports the status the current request must fail with (0: serve it).
func (f *failure) next() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.status == 0:
		return 0
	case f.left > 0:
		f.left--
		if f.left == 0 {
			f.status = 0
		}
		return failStatusOf(f)
	case f.left == -1 && (f.ratio >= 1 || rand.Float64() < f.ratio):
		return f.status
	}
	return 0
}

// failStatusOf is the status of a counted failure (the mode may just have ended with it).
func failStatusOf(f *failure) int {
	if f.status == 0 {
		return f.last
	}
	return f.status
}

func loopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// admin answers /_demo/fail and /_demo/heal.
func (f *failure) admin(w http.ResponseWriter, r *http.Request, heal bool) {
	if !loopback(r) {
		writeError(w, r, newError(http.StatusForbidden, "AccessDenied",
			"The failure switch answers loopback clients only."))
		return
	}
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && !heal:
	case r.Method != http.MethodPost:
		writeError(w, r, errMethodNotAllowed(r.Method))
		return
	case heal:
		f.mu.Lock()
		f.status, f.left, f.ratio = 0, -1, 0
		f.mu.Unlock()
	default:
		status, err := strconv.Atoi(q.Get("status"))
		if err != nil || status < 400 || status > 599 {
			writeError(w, r, errInvalidArgument("status must be an HTTP status between 400 and 599."))
			return
		}
		count, ratio := int64(-1), 1.0
		if v := q.Get("count"); v != "" {
			if count, err = strconv.ParseInt(v, 10, 64); err != nil || count < 1 {
				writeError(w, r, errInvalidArgument("count must be a positive integer."))
				return
			}
		}
		if v := q.Get("ratio"); v != "" {
			if ratio, err = strconv.ParseFloat(v, 64); err != nil || ratio <= 0 || ratio > 1 || count != -1 {
				writeError(w, r, errInvalidArgument("ratio must be in (0, 1] and not combined with count."))
				return
			}
		}
		f.mu.Lock()
		f.status, f.left, f.ratio, f.last = status, count, ratio, status
		f.mu.Unlock()
	}
	f.mu.Lock()
	mode := failureMode{Status: f.status, Count: f.left, Ratio: f.ratio}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(mode)
}

// failCode is the S3 error code of a commanded failure.
func failCode(status int) string {
	switch status {
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusInternalServerError:
		return "InternalError"
	case http.StatusTooManyRequests:
		return "SlowDown"
	}
	return "CommandedFailure"
}
