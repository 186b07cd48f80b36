package live

import (
	"encoding/json"
	"math"
	"strings"
)

// The node report additions of docs/rules-contract.md §6: request and block counters (cumulative
// since the node started), breaker states, leaked connection slots and the last run of the
// connection cleanup. Each field is parsed on its own, so that one damaged field costs only
// that field and never the node; values that are not finite non-negative numbers, ids that are
// not keys.ValidID and unknown breaker states are dropped.

// NodeAppCounts is one app's cumulative requests, blocked requests and body bytes (in: uploads
// to the backend, out: downloads to clients; absent from older gateways and left out at 0) on
// one node.
type NodeAppCounts struct {
	Requests int64 `json:"requests"`
	Blocked  int64 `json:"blocked"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
}

// BreakerState is one circuit breaker of one node ("<backend>" or "<backend>/<app>").
type BreakerState struct {
	State    string `json:"state"` // closed, open, half_open
	Failures int64  `json:"failures"`
	Requests int64  `json:"requests"`
	OpenedAt int64  `json:"opened_at,omitempty"`
	RetryAt  int64  `json:"retry_at,omitempty"`
}

// maxReportEntries bounds the apps and breakers taken from one node report.
const maxReportEntries = 10000

// nodeReport is the raw form of the §6 fields.
type nodeReport struct {
	RequestsTotal      json.RawMessage `json:"requests_total"`
	BlockedTotal       json.RawMessage `json:"blocked_total"`
	Apps               json.RawMessage `json:"apps"`
	Breakers           json.RawMessage `json:"breakers"`
	ConnLeakedTotal    json.RawMessage `json:"conn_leaked_total"`
	ConnCleanupLastRun json.RawMessage `json:"conn_cleanup_last_run"`
	ReportedAt         json.RawMessage `json:"reported_at"`
}

// counter parses a non-negative finite number that fits an int64 exactly (2^53).
func counter(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || math.IsNaN(f) || f < 0 || f > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

func counterPtr(raw json.RawMessage) *int64 {
	if v, ok := counter(raw); ok {
		return &v
	}
	return nil
}

// applyReport fills the §6 fields of n from the registry document.
func applyReport(n *Node, doc string, validID func(string) bool) {
	var r nodeReport
	if json.Unmarshal([]byte(doc), &r) != nil {
		return
	}
	n.RequestsTotal, n.BlockedTotal = counterPtr(r.RequestsTotal), counterPtr(r.BlockedTotal)
	n.ConnLeakedTotal, n.ConnCleanupLastRun = counterPtr(r.ConnLeakedTotal), counterPtr(r.ConnCleanupLastRun)
	if len(r.ReportedAt) > 0 {
		var at float64
		if json.Unmarshal(r.ReportedAt, &at) == nil && at > 0 && at < 1<<40 {
			n.ReportedAt = at
		}
	}
	for id, raw := range objects(r.Apps) {
		var c struct {
			Requests, Blocked json.RawMessage
			BytesIn           json.RawMessage `json:"bytes_in"`
			BytesOut          json.RawMessage `json:"bytes_out"`
		}
		if !validID(id) || json.Unmarshal(raw, &c) != nil || len(n.Apps) >= maxReportEntries {
			continue
		}
		req, ok1 := counter(c.Requests)
		blk, ok2 := counter(c.Blocked)
		if !ok1 || !ok2 {
			continue
		}
		if n.Apps == nil {
			n.Apps = map[string]NodeAppCounts{}
		}
		// bytes: absent (0 or an older gateway) or damaged reads 0
		bin, _ := counter(c.BytesIn)
		bout, _ := counter(c.BytesOut)
		n.Apps[id] = NodeAppCounts{Requests: req, Blocked: blk, BytesIn: bin, BytesOut: bout}
	}
	for key, raw := range objects(r.Breakers) {
		var b struct {
			State              json.RawMessage `json:"state"`
			Failures, Requests json.RawMessage
			OpenedAt           json.RawMessage `json:"opened_at"`
			RetryAt            json.RawMessage `json:"retry_at"`
		}
		var state string
		if !validBreakerKey(key, validID) || json.Unmarshal(raw, &b) != nil || json.Unmarshal(b.State, &state) != nil ||
			len(n.Breakers) >= maxReportEntries {
			continue
		}
		switch state {
		case "closed", "open", "half_open":
		default:
			continue
		}
		st := BreakerState{State: state}
		st.Failures, _ = counter(b.Failures)
		st.Requests, _ = counter(b.Requests)
		st.OpenedAt, _ = counter(b.OpenedAt)
		st.RetryAt, _ = counter(b.RetryAt)
		if n.Breakers == nil {
			n.Breakers = map[string]BreakerState{}
		}
		n.Breakers[key] = st
	}
}

// objects decodes a JSON object into its members (nil for anything else).
func objects(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

// validBreakerKey: "<backend>" or "<backend>/<app>", both valid ids.
func validBreakerKey(key string, validID func(string) bool) bool {
	backend, app, per := strings.Cut(key, "/")
	return validID(backend) && (!per || validID(app))
}
