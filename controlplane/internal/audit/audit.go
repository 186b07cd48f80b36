// Package audit writes and reads the audit log: a Redis stream (ratelimit:admin:audit) with
// bounded retention (XADD MAXLEN ~), and a second one (ratelimit:admin:audit:anonymous) for
// requests refused before authentication, trimmed on its own so that anonymous refusals can
// never push an authenticated entry out. Changes and validation attempts are written before the API
// answers (Req 10.8, 16.7); every API access (Req 21.10) goes through a buffered writer that
// batches entries in pipelines and counts what it had to drop rather than slow the API down.
package audit

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// Outcomes of an audited action.
const (
	OK       = "ok"       // done
	Rejected = "rejected" // refused: validation failed, bad input, conflict
	Denied   = "denied"   // authentication or authorization failed
	Failed   = "failed"   // an internal or Redis error
)

const (
	maxDetails    = 8 << 10 // bytes of details JSON kept per entry
	defaultBuffer = 4096
	batchSize     = 256
	writeTimeout  = 2 * time.Second
)

// Entry is one audit record.
type Entry struct {
	ID        string          `json:"id"`
	Time      int64           `json:"ts"` // Unix milliseconds
	Actor     string          `json:"actor"`
	Role      string          `json:"role,omitempty"`
	IP        string          `json:"ip,omitempty"`
	Action    string          `json:"action"`             // e.g. access, app.create, config.validate
	Resource  string          `json:"resource,omitempty"` // e.g. app/demo-p1, cluster/default
	Method    string          `json:"method,omitempty"`
	Route     string          `json:"route,omitempty"` // the route template, never the raw path
	Status    int             `json:"status,omitempty"`
	Outcome   string          `json:"outcome"`
	RequestID string          `json:"request_id,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`

	// Anonymous sends the entry to the anonymous stream: a request refused before anyone was
	// authenticated (a 401, a failed login), which anyone on the network can cause.
	Anonymous bool `json:"-"`
}

// Options of the log.
type Options struct {
	MaxLen     int64 // approximate retention in entries (default 100000)
	AnonMaxLen int64 // approximate retention of the anonymous stream (default 10000)
	Buffer     int   // access entries waiting for the writer (default 4096)
	Logger     *slog.Logger
	OnWrite    func(action, outcome string) // e.g. a metrics counter; may be nil
}

// Log is the audit log.
type Log struct {
	rdb     redis.Cmdable
	opts    Options
	ch      chan Entry
	dropped atomic.Int64
	done    chan struct{}
	once    sync.Once
}

// New returns the log; Run must be started for Enqueue'd entries to be written.
func New(rdb redis.Cmdable, o Options) *Log {
	if o.MaxLen <= 0 {
		o.MaxLen = 100000
	}
	if o.AnonMaxLen <= 0 {
		o.AnonMaxLen = 10000
	}
	if o.Buffer <= 0 {
		o.Buffer = defaultBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Log{rdb: rdb, opts: o, ch: make(chan Entry, o.Buffer), done: make(chan struct{})}
}

// Dropped is the number of access entries dropped because the writer fell behind.
func (l *Log) Dropped() int64 { return l.dropped.Load() }

// Record writes e now (changes, validation attempts, logins).
func (l *Log) Record(ctx context.Context, e Entry) error {
	e = l.complete(ctx, e)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	err := l.rdb.XAdd(ctx, l.args(e)).Err()
	if err != nil {
		l.opts.Logger.Error("audit entry not written", "action", e.Action, "actor", e.Actor, "err", err)
		return err
	}
	l.wrote(e)
	return nil
}

// Enqueue hands e to the background writer (API accesses); dropped when the buffer is full.
func (l *Log) Enqueue(ctx context.Context, e Entry) {
	e = l.complete(ctx, e)
	select {
	case l.ch <- e:
	default:
		if l.dropped.Add(1)%1000 == 1 {
			l.opts.Logger.Warn("audit buffer full: access entries dropped", "dropped", l.dropped.Load())
		}
	}
}

// Run writes queued entries in batches until ctx ends, then writes what is left and returns.
func (l *Log) Run(ctx context.Context) {
	defer l.once.Do(func() { close(l.done) })
	batch := make([]Entry, 0, batchSize)
	for {
		select {
		case e := <-l.ch:
			batch = append(batch[:0], e)
			batch = l.drain(batch)
			l.flush(batch)
		case <-ctx.Done():
			for {
				batch = l.drain(batch[:0])
				if len(batch) == 0 {
					return
				}
				l.flush(batch)
			}
		}
	}
}

// Wait returns once Run has returned.
func (l *Log) Wait() { <-l.done }

func (l *Log) drain(batch []Entry) []Entry {
	for len(batch) < batchSize {
		select {
		case e := <-l.ch:
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

func (l *Log) flush(batch []Entry) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range batch {
			p.XAdd(ctx, l.args(e))
		}
		return nil
	})
	if err != nil {
		l.dropped.Add(int64(len(batch)))
		l.opts.Logger.Error("audit entries not written", "count", len(batch), "err", err)
		return
	}
	for _, e := range batch {
		l.wrote(e)
	}
}

func (l *Log) wrote(e Entry) {
	if l.opts.OnWrite != nil {
		l.opts.OnWrite(e.Action, e.Outcome)
	}
}

func (l *Log) args(e Entry) *redis.XAddArgs {
	doc, _ := json.Marshal(e)
	stream, maxLen := keys.AdminAudit(), l.opts.MaxLen
	if e.Anonymous {
		stream, maxLen = keys.AdminAuditAnonymous(), l.opts.AnonMaxLen
	}
	return &redis.XAddArgs{Stream: stream, MaxLen: maxLen, Approx: true, Values: []any{"e", doc}}
}

// complete fills what the request context knows and bounds the details.
func (l *Log) complete(ctx context.Context, e Entry) Entry {
	if r, ok := FromContext(ctx); ok {
		e.Actor = or(e.Actor, r.Actor)
		e.Role = or(e.Role, r.Role)
		e.IP = or(e.IP, r.IP)
		e.Method = or(e.Method, r.Method)
		e.Route = or(e.Route, r.Route)
		e.RequestID = or(e.RequestID, r.RequestID)
	}
	if e.Actor == "" {
		e.Actor = "_anonymous"
	}
	if e.Time == 0 {
		e.Time = time.Now().UnixMilli()
	}
	if len(e.Details) > maxDetails {
		e.Details, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(e.Details)})
	}
	return e
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Details marshals v for Entry.Details (nil on error).
func Details(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}
