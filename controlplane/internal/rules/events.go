package rules

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"tollgate/internal/keys"
)

// Event query limits.
const (
	DefaultEventLimit = 100
	MaxEventLimit     = 1000
	eventScanBatch    = 500
	maxEventsScanned  = 20000 // entries read per query at most; the cursor continues from there
)

// EventTypes are the event_type values of contract §5.
var EventTypes = []string{"request_blocked", "rule_triggered", "threshold_exceeded", "circuit_opened", "circuit_closed"}

// ErrBadCursor: the cursor is not a stream id.
var ErrBadCursor = errors.New("cursor must be a stream id like 1700000000000-0")

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

// Event is one stream entry: its stream id and the known fields of contract §5; numeric fields
// are numbers (left out when they do not parse), unknown fields are dropped.
type Event map[string]any

// EventPage is a page of events, newest first; NextCursor is empty when nothing older is left.
type EventPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

var eventStrings = map[string]int{
	"event_type": 64, "severity": 16, "app_id": 128, "user_id": 256, "ip_address": 64,
	"user_agent": 256, "endpoint": 512, "http_method": 16, "request_id": 64, "rule_id": 128,
	"rule_type": 32, "action_taken": 32, "node_id": 128, "reason": 64,
}

var eventNumbers = []string{"limit_value", "current_usage", "response_code", "response_time_ms", "sampled", "created_at"}

// Events reads the events stream newest first with XREVRANGE, filtering as it goes.
func (s *Service) Events(ctx context.Context, f EventFilter) (EventPage, error) {
	if f.Cursor != "" && !streamID(f.Cursor) {
		return EventPage{}, ErrBadCursor
	}
	if f.Limit <= 0 {
		f.Limit = DefaultEventLimit
	}
	f.Limit = min(f.Limit, MaxEventLimit)
	end, start := "+", "-"
	if f.Until > 0 {
		end = strconv.FormatInt(f.Until, 10) + "-18446744073709551615"
	}
	if f.Cursor != "" {
		end = "(" + f.Cursor
	}
	if f.Since > 0 {
		start = strconv.FormatInt(f.Since, 10) + "-0"
	}
	page := EventPage{Events: []Event{}}
	for scanned := 0; scanned < maxEventsScanned; {
		msgs, err := s.o.Redis.XRevRangeN(ctx, keys.EventsStream(), end, start, eventScanBatch).Result()
		if err != nil {
			return EventPage{}, fmt.Errorf("rules: events: %w", err)
		}
		for _, m := range msgs {
			scanned++
			end = "(" + m.ID
			if !f.match(m.Values) {
				continue
			}
			page.Events = append(page.Events, eventOf(m.ID, m.Values))
			if len(page.Events) == f.Limit {
				page.NextCursor = m.ID
				return page, nil
			}
		}
		if len(msgs) < eventScanBatch {
			return page, nil
		}
	}
	page.NextCursor = strings.TrimPrefix(end, "(")
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

// streamID reports whether s is a stream id Redis accepts: <uint64>-<uint64>, digits only.
func streamID(s string) bool {
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
