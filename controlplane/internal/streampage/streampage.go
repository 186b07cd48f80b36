// Package streampage pages through a Redis stream newest first (XREVRANGE) between two times,
// from a cursor, through a filter: the admin audit log and the events stream are read this way.
package streampage

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrBadCursor: the cursor is not a stream id.
var ErrBadCursor = errors.New("cursor must be a stream id like 1700000000000-0")

// Query bounds a scan; zero fields are open.
type Query struct {
	Since  int64  // Unix ms, inclusive (of the stream id: when Redis appended the entry)
	Until  int64  // Unix ms, inclusive
	Cursor string // continue with entries older than this stream id
	Limit  int    // entries kept at most (> 0)
}

// Limits of one scan: entries per XREVRANGE call and entries looked at in all.
type Limits struct {
	Batch, MaxScanned int
}

// ValidID reports whether s is a stream id Redis accepts: <uint64>-<uint64>, digits only.
func ValidID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	return ok && digits(ms) && digits(seq)
}

func digits(s string) bool {
	if len(s) == 0 || len(s) > 20 || strings.TrimLeft(s, "0123456789") != "" {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// Scan reads key newest first within q, handing each entry to keep, which says whether it
// counts towards q.Limit. It stops at the limit, at the oldest entry, or after lim.MaxScanned
// entries, and returns the cursor to continue from: "" when nothing older is left.
func Scan(ctx context.Context, rdb redis.Cmdable, key string, q Query, lim Limits,
	keep func(id string, values map[string]any) bool) (string, error) {
	if q.Cursor != "" && !ValidID(q.Cursor) {
		return "", ErrBadCursor
	}
	end, start := "+", "-"
	if q.Until > 0 {
		end = strconv.FormatInt(q.Until, 10) + "-18446744073709551615"
	}
	if q.Cursor != "" {
		end = "(" + q.Cursor
	}
	if q.Since > 0 {
		start = strconv.FormatInt(q.Since, 10) + "-0"
	}
	kept := 0
	for scanned := 0; scanned < lim.MaxScanned; {
		msgs, err := rdb.XRevRangeN(ctx, key, end, start, int64(lim.Batch)).Result()
		if err != nil {
			return "", err
		}
		for _, m := range msgs {
			scanned++
			end = "(" + m.ID
			if keep(m.ID, m.Values) {
				if kept++; kept == q.Limit {
					return m.ID, nil
				}
			}
		}
		if len(msgs) < lim.Batch {
			return "", nil
		}
	}
	return strings.TrimPrefix(end, "("), nil
}
