package t

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
	"tollgate/t/harness"
)

// streamEvents reads the whole event stream, oldest first.
func (s *stack) streamEvents() []redis.XMessage {
	s.t.Helper()
	msgs, err := s.rdb.XRange(context.Background(), keys.EventsStream(), "-", "+").Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return msgs
}

// eventsOf are the stream entries of one type (and app, when app != "").
func (s *stack) eventsOf(typ, app string) []map[string]any {
	var out []map[string]any
	for _, m := range s.streamEvents() {
		if m.Values["event_type"] == typ && (app == "" || m.Values["app_id"] == app) {
			out = append(out, m.Values)
		}
	}
	return out
}

func sampledSum(evs []map[string]any) int {
	n := 0
	for _, e := range evs {
		v, _ := strconv.Atoi(e["sampled"].(string))
		n += v
	}
	return n
}

// A tier rejection lands in the stream with the request's fields.
func TestEvents01RequestBlockedFields(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("ev-small", 10, 10))})
	g := s.gw()
	blocked := 0
	for i := 0; i < 200 && blocked == 0; i++ {
		r := g.Do("GET", "/bucket/obj-1", "ev-small", nil, map[string]string{"User-Agent": "evtest/1"})
		if r.Status == 429 {
			blocked++
		}
	}
	if blocked == 0 {
		t.Fatal("no request of an app with a quota of 10/s was rejected")
	}
	var evs []map[string]any
	eventually(t, "a request_blocked event in the stream", func() bool {
		evs = s.eventsOf("request_blocked", "ev-small")
		return len(evs) > 0
	})
	e := evs[0]
	want := map[string]string{
		"event_type": "request_blocked", "app_id": "ev-small", "ip_address": "127.0.0.1",
		"user_agent": "evtest/1", "endpoint": "/bucket/obj-1", "http_method": "GET",
		"rule_type": "tier", "action_taken": "blocked", "response_code": "429",
		"node_id": "node-1", "severity": "warning",
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("field %s = %v, want %q (entry %v)", k, e[k], v, e)
		}
	}
	for _, k := range []string{"reason", "request_id", "created_at", "sampled", "limit_value"} {
		if s, _ := e[k].(string); s == "" {
			t.Errorf("field %s missing in %v", k, e)
		}
	}
	ms, _ := strconv.ParseInt(e["created_at"].(string), 10, 64)
	if d := time.Since(time.UnixMilli(ms)); d < 0 || d > time.Minute {
		t.Errorf("created_at %d is not a recent Unix ms time (off by %s)", ms, d)
	}
}

// At most TOLLGATE_EVENTS_PER_SEC entries per second leave a node, and the `sampled` counts of
// the entries add up to every occurrence.
func TestEvents02SamplingCapsAndAddsUp(t *testing.T) {
	const perSec = 3
	s := newStack(t, stackOptions{
		apps: appsOf(app("ev-flood", 5, 5)),
		env:  map[string]string{"TOLLGATE_EVENTS_PER_SEC": strconv.Itoa(perSec)},
	})
	g := s.gw()
	blocked := 0
	for i := 0; i < 300; i++ {
		if g.Do("GET", "/bucket/o", "ev-flood", nil, nil).Status == 429 {
			blocked++
		}
	}
	if blocked < 50 {
		t.Fatalf("only %d of 300 requests at 5/s were rejected", blocked)
	}
	// the occurrences folded after the last entry ride on the next one: in a fresh second
	// (budget unspent) provoke one more rejection, whose entry must account for all of them
	for round := 0; ; round++ {
		time.Sleep(1100 * time.Millisecond)
		for i := 0; i < 100; i++ {
			if g.Do("GET", "/bucket/o", "ev-flood", nil, nil).Status == 429 {
				blocked++
				break
			}
		}
		ok := false
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			if n := sampledSum(s.eventsOf("request_blocked", "ev-flood")); n == blocked {
				ok = true
				break
			} else if n > blocked {
				t.Fatalf("sampled counts add up to %d, more than the %d rejections", n, blocked)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if ok {
			break
		}
		if round == 3 {
			evs := s.eventsOf("request_blocked", "ev-flood")
			t.Fatalf("sampled counts add up to %d, want %d (%d entries)", sampledSum(evs), blocked, len(evs))
		}
	}
	perSecond := map[int64]int{}
	for _, m := range s.streamEvents() {
		ms, _ := strconv.ParseInt(m.Values["created_at"].(string), 10, 64)
		perSecond[ms/1000]++
	}
	for sec, n := range perSecond {
		if n > perSec {
			t.Errorf("%d entries created in second %d, the cap is %d", n, sec, perSec)
		}
	}
	if len(s.streamEvents()) >= blocked {
		t.Errorf("%d entries for %d rejections: nothing was sampled", len(s.streamEvents()), blocked)
	}
}

// The node report in ratelimit:gateways carries cumulative totals, breakers and the leak
// cleanup's figures, and they move.
func TestEvents03NodeReport(t *testing.T) {
	s := newStack(t, stackOptions{apps: appsOf(app("nr-small", 5, 5))})
	g := s.gw()
	s.putBreaker("default", breakerCfg(nil))
	type report struct {
		RequestsTotal      *int64                                       `json:"requests_total"`
		BlockedTotal       *int64                                       `json:"blocked_total"`
		Apps               map[string]struct{ Requests, Blocked int64 } `json:"apps"`
		Breakers           map[string]brkState                          `json:"breakers"`
		ConnLeakedTotal    *int64                                       `json:"conn_leaked_total"`
		ConnCleanupLastRun *int64                                       `json:"conn_cleanup_last_run"`
	}
	read := func() report {
		var r report
		raw, err := s.rdb.HGet(context.Background(), keys.Gateways(), "node-1").Result()
		if err == nil {
			_ = json.Unmarshal([]byte(raw), &r)
		}
		return r
	}
	sent, blocked := 0, 0
	for i := 0; i < 60; i++ {
		sent++
		if g.Do("GET", "/b/o", "nr-small", nil, nil).Status == 429 {
			blocked++
		}
	}
	if blocked == 0 {
		t.Fatal("no rejection at 5/s")
	}
	var r report
	harness.Eventually(t, 20*time.Second, "node report with the requests", func() bool {
		r = read()
		return r.Apps["nr-small"].Requests == int64(sent)
	})
	if r.RequestsTotal == nil || *r.RequestsTotal < int64(sent) || r.BlockedTotal == nil ||
		*r.BlockedTotal < int64(blocked) || r.Apps["nr-small"].Blocked != int64(blocked) {
		t.Fatalf("report totals: %+v, want %d requests, %d blocked", r, sent, blocked)
	}
	if r.ConnLeakedTotal == nil || r.ConnCleanupLastRun == nil ||
		time.Since(time.Unix(*r.ConnCleanupLastRun, 0)) > 10*time.Minute {
		t.Fatalf("report connection fields: %+v", r)
	}
	if b, ok := r.Breakers["default"]; !ok || b.State != "closed" {
		t.Fatalf("report breakers: %+v", r.Breakers)
	}
	before := *r.RequestsTotal
	g.Do("GET", "/b/o", "nr-small", nil, nil)
	harness.Eventually(t, 20*time.Second, "requests_total to move", func() bool {
		r = read()
		return r.RequestsTotal != nil && *r.RequestsTotal > before
	})
}

// threshold_exceeded once when an app's in-flight requests cross 90 % of its limit.
func TestEvents04ThresholdExceeded(t *testing.T) {
	s := connStack(t, 2, nil)
	g := s.gw()
	s.appLimits("demo-p2", 10, 10)
	h := newHolder(t, g)
	done := h.start("demo-p2", "th", 10)
	eventually(t, "10 requests held", func() bool { return connStateOf(g, "demo-p2").AppCurrent == 10 })
	h.unhold("th")
	for r := range done {
		if r.err != nil || r.status != 200 {
			t.Fatalf("held request: %v %d", r.err, r.status)
		}
	}
	var evs []map[string]any
	eventually(t, "threshold_exceeded event", func() bool {
		evs = s.eventsOf("threshold_exceeded", "demo-p2")
		return len(evs) > 0
	})
	if len(evs) != 1 || evs[0]["limit_value"] != "10" || evs[0]["current_usage"] != "9" ||
		evs[0]["rule_type"] != "connection" {
		t.Fatalf("threshold_exceeded events: %v", evs)
	}
}
