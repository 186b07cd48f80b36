package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"tollgate/controlplane/internal/streampage"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
)

// Query limits.
const (
	DefaultLimit = 50
	MaxLimit     = 500
	scanBatch    = 500
	maxScanned   = 20000 // entries read per query at most; the cursor continues from there
)

// ErrBadCursor: the cursor is not a stream id.
var ErrBadCursor = streampage.ErrBadCursor

// Filter selects entries; zero fields match everything. Action "app.*" matches by prefix.
type Filter struct {
	Actor    string
	Action   string
	Resource string
	Outcome  string
	Since    int64 // Unix ms, inclusive
	Until    int64 // Unix ms, inclusive
	Limit    int
	Cursor   string // continue after this id (exclusive), newest first
	Stream   string // StreamAuthenticated (default) or StreamAnonymous
}

// Streams of the log (Filter.Stream).
const (
	StreamAuthenticated = "authenticated"
	StreamAnonymous     = "anonymous"
)

// Page is a result page, newest first; NextCursor is empty when nothing older is left.
type Page struct {
	Entries    []Entry `json:"entries"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

func (f Filter) match(e Entry) bool {
	if f.Actor != "" && e.Actor != f.Actor || f.Resource != "" && e.Resource != f.Resource ||
		f.Outcome != "" && e.Outcome != f.Outcome {
		return false
	}
	if p, ok := strings.CutSuffix(f.Action, "*"); ok {
		return strings.HasPrefix(e.Action, p)
	}
	return f.Action == "" || e.Action == f.Action
}

// Query reads entries newest first with XREVRANGE, filtering as it goes.
func (l *Log) Query(ctx context.Context, f Filter) (Page, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	page := Page{Entries: []Entry{}}
	q := streampage.Query{Since: f.Since, Until: f.Until, Cursor: f.Cursor, Limit: min(f.Limit, MaxLimit)}
	stream := keys.AdminAudit()
	if f.Stream == StreamAnonymous {
		stream = keys.AdminAuditAnonymous()
	}
	next, err := streampage.Scan(ctx, l.rdb, stream, q, streampage.Limits{Batch: scanBatch, MaxScanned: maxScanned},
		func(id string, v map[string]any) bool {
			e, ok := decode(id, v)
			if ok && f.match(e) {
				page.Entries = append(page.Entries, e)
				return true
			}
			return false
		})
	if errors.Is(err, streampage.ErrBadCursor) {
		return Page{}, err
	}
	if err != nil {
		return Page{}, fmt.Errorf("audit: query: %w", err)
	}
	page.NextCursor = next
	return page, nil
}

func decode(id string, v map[string]any) (Entry, bool) {
	doc, _ := v["e"].(string)
	var e Entry
	if json.Unmarshal([]byte(doc), &e) != nil {
		return Entry{}, false
	}
	e.ID = id
	return e, true
}

// ValidationAttempt records a validation (validate.Auditor): every attempt, dry run or not,
// with its result, synchronously (Req 16.7).
func (l *Log) ValidationAttempt(ctx context.Context, a validate.Attempt) {
	outcome, res := OK, a.Result
	switch {
	case a.Err != nil:
		outcome = Failed
	case !res.Valid:
		outcome = Rejected
	}
	_ = l.Record(ctx, Entry{Action: "config.validate", Resource: changeResource(a.Change),
		Outcome: outcome, Time: a.At.UnixMilli(),
		Details: Details(map[string]any{"dry_run": res.DryRun, "valid": res.Valid,
			"violations": res.Violations, "changes": len(res.Diff)})})
}

// changeResource names what a change touches: cluster/<id> and/or app/<id> (valid ids only).
func changeResource(ch validate.Change) string {
	var parts []string
	if ch.Cluster != nil && keys.ValidID(ch.Cluster.ID) {
		parts = append(parts, "cluster/"+ch.Cluster.ID)
	}
	for _, a := range ch.Apps {
		if keys.ValidID(a.AppID) {
			parts = append(parts, "app/"+a.AppID)
		}
	}
	return strings.Join(parts, ",")
}
