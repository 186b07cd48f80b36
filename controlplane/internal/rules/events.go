package rules

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"tollgate/controlplane/internal/streampage"
	"tollgate/internal/keys"
)

// Event query limits.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
	eventScanBatch    = 500
	maxEventsScanned  = 20000 // entries read per query at most; the cursor continues from there
)

// EventTypes are the event_type values of docs/rules-contract.md §5.
// auth_failed: the backend refused a request as unauthenticated and the gateway refunded it.
var EventTypes = []string{"request_blocked", "rule_triggered", "threshold_exceeded", "circuit_opened", "circuit_closed", "auth_failed"}

// ErrBadCursor: the cursor is not a stream id.
var ErrBadCursor = streampage.ErrBadCursor

// EventFilter selects events; zero fields match everything.
type EventFilter struct {
	EventType string
	AppID     string
	RuleID    string
	Since     int64 // Unix ms, inclusive (of the stream id: the time Redis appended the entry)
	Until     int64 // Unix ms, inclusive
	Limit     int
	Cursor    string // continue with entries older than this stream id
}

// Event is one stream entry: its stream id and the known fields of docs/rules-contract.md §5;
// numeric fields are numbers (left out when they do not parse), unknown fields are dropped.
type Event map[string]any

// EventPage is a page of events, newest first; NextCursor is empty when nothing older is left.
type EventPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

var eventStrings = map[string]int{
	"event_type": 64, "severity": 16, "app_id": 128, "user_id": 256, "ip_address": 64,
	"user_agent": 256, "endpoint": 512, "http_method": 16, "request_id": 64, "rule_id": 128,
	"rule_type": 32, "action_taken": 32, "node_id": 128, "reason": 64, "access_key_id": 128,
}

var eventNumbers = []string{"limit_value", "current_usage", "response_code", "response_time_ms", "sampled", "created_at"}

// Events reads the events stream newest first with XREVRANGE, filtering as it goes.
func (s *Service) Events(ctx context.Context, f EventFilter) (EventPage, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultEventLimit
	}
	page := EventPage{Events: []Event{}}
	q := streampage.Query{Since: f.Since, Until: f.Until, Cursor: f.Cursor, Limit: min(f.Limit, MaxEventLimit)}
	next, err := streampage.Scan(ctx, s.o.Redis, keys.EventsStream(), q,
		streampage.Limits{Batch: eventScanBatch, MaxScanned: maxEventsScanned},
		func(id string, v map[string]any) bool {
			if !f.match(v) {
				return false
			}
			page.Events = append(page.Events, eventOf(id, v))
			return true
		})
	if errors.Is(err, streampage.ErrBadCursor) {
		return EventPage{}, err
	}
	if err != nil {
		return EventPage{}, fmt.Errorf("rules: events: %w", err)
	}
	page.NextCursor = next
	return page, nil
}

func (f EventFilter) match(v map[string]any) bool {
	str := func(k string) string { s, _ := v[k].(string); return s }
	return (f.EventType == "" || str("event_type") == f.EventType) &&
		(f.AppID == "" || str("app_id") == f.AppID) &&
		(f.RuleID == "" || str("rule_id") == f.RuleID)
}

func eventOf(id string, v map[string]any) Event {
	e := Event{"id": id}
	for k, max := range eventStrings {
		if s, ok := v[k].(string); ok && len(s) <= max && printable(s) {
			e[k] = s
		}
	}
	for _, k := range eventNumbers {
		s, _ := v[k].(string)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			e[k] = n
		} else if x, err := strconv.ParseFloat(s, 64); err == nil && x == x && x < 1e15 && x > -1e15 {
			e[k] = x
		}
	}
	return e
}
