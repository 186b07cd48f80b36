package live

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// Alert thresholds (docs/rules-contract.md §9; docs/operations.md "Alerts" lists them, and
// deploy/prometheus/tollgate-alerts.yml states the same conditions for Prometheus). The spike
// windows and the cleanup age are defaults of AlertSettings, which a deployment may change.
const (
	DriftAlert     = 0.05 // docs/design.md §3: drift bar
	RedisSlowAlert = 100 * time.Millisecond

	BlockRateAlert       = 0.10            // blocked / requests above this …
	BlockRateWindow      = 5 * time.Minute // … over this window …
	BlockRateMinRequests = 100             // … with at least this many requests

	SpikeFactor      = 5.0              // request rate over SpikeWindow >= this × the baseline …
	SpikeWindow      = time.Minute      // …
	SpikeBaseline    = 30 * time.Minute // … the rate over the SpikeBaseline before SpikeWindow …
	SpikeMinBaseline = 1.0              // … which is at least this many requests per second …
	SpikeMinSpan     = 10 * time.Minute // … and covers at least this much history

	ConnHighRatio       = 0.90 // in flight on one node >= this × the app's or cluster's limit
	DefaultAppConns     = 1000 // the gateway's default limits (TOLLGATE_CONN_APP_LIMIT, …
	DefaultClusterConns = 5000 // … TOLLGATE_CONN_CLUSTER_LIMIT) when Redis sets none

	LeakWindow     = 5 * time.Minute   // connections_leaked while a node's leak counter grew within this
	CleanupStalled = 120 * time.Second // a fresh node's last connection cleanup older than this

	DegradedWarning  = 1 // node_degraded: a gateway's degradation level >= this is a warning …
	DegradedCritical = 3 // … and >= this critical (fail-open)

	resolvedRetention = 24 * time.Hour
)

// history kept for the windowed alerts (with the default settings), and the spacing of its points
const (
	trafficKeep = SpikeBaseline + SpikeWindow + time.Minute
	trafficStep = 5 * time.Second
)

// AlertSettings are the alert thresholds a deployment may change (TOLLGATE_ALERT_*,
// docs/operations.md "Alerts"); a zero field takes its default constant.
type AlertSettings struct {
	CleanupStalled  time.Duration // cleanup_stalled: a live node's last cleanup older than this (CleanupStalled)
	SpikeWindow     time.Duration // traffic_spike: the recent window (SpikeWindow) …
	SpikeBaseline   time.Duration // … the baseline before it (SpikeBaseline) …
	SpikeMinHistory time.Duration // … which covers at least this much history (SpikeMinSpan)
}

func (a AlertSettings) withDefaults() AlertSettings {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&a.CleanupStalled, CleanupStalled}, {&a.SpikeWindow, SpikeWindow}, {&a.SpikeBaseline, SpikeBaseline},
		{&a.SpikeMinHistory, SpikeMinSpan}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return a
}

// keep is the history the windowed alerts need.
func (a AlertSettings) keep() time.Duration {
	return max(BlockRateWindow, LeakWindow, a.SpikeBaseline+a.SpikeWindow) + time.Minute
}

// ErrAlertNotFound: no alert with that id.
var ErrAlertNotFound = errors.New("alert not found")

// Alert is one condition worth an operator's attention (the alerts of docs/operations.md
// "Alerts": kind, resource, severity and life cycle).
type Alert struct {
	ID             string `json:"id"`
	Kind           string `json:"kind"`
	Resource       string `json:"resource"`
	Severity       string `json:"severity"` // info, warning, critical
	Message        string `json:"message"`
	Timestamp      int64  `json:"timestamp"` // raised, Unix seconds
	Acknowledged   bool   `json:"acknowledged"`
	AcknowledgedBy string `json:"acknowledged_by,omitempty"`
	Active         bool   `json:"active"`
	ResolvedAt     int64  `json:"resolved_at,omitempty"`
}

// alertID is "<kind>-<resource>" when that is a valid id (the ack route takes only those),
// else the kind and a hash of the resource.
func alertID(kind, resource string) string {
	id := kind + "-" + resource
	if !keys.ValidID(id) {
		sum := sha256.Sum256([]byte(resource))
		id = kind + "-" + hex.EncodeToString(sum[:16])
	}
	return id
}

func cond(kind, resource, severity, format string, args ...any) Alert {
	return Alert{ID: alertID(kind, resource), Kind: kind, Resource: resource, Severity: severity,
		Message: fmt.Sprintf(format, args...), Active: true}
}

// evaluate lists the conditions that hold in s (prev, if any, is the snapshot before; tr has
// observed s) with the thresholds of set (defaults filled in).
func evaluate(s, prev *Snapshot, tr *traffic, set AlertSettings) []Alert {
	var out []Alert
	for _, c := range s.Clusters {
		if c.Emergency {
			out = append(out, cond("emergency", c.ID, "critical", "emergency mode on cluster %s until %s: %s",
				c.ID, time.Unix(c.EmergencyUntil, 0).UTC().Format(time.RFC3339), c.EmergencyReason))
		}
		if reserve := int64(c.ReservedRatio * float64(c.Capacity)); c.Capacity > 0 && c.Available <= reserve {
			out = append(out, cond("l1_exhausted", c.ID, "warning",
				"cluster %s: nothing left to borrow (available %d, reserve %d)", c.ID, c.Available, reserve))
		}
	}
	for _, n := range s.Nodes {
		if n.Stale {
			out = append(out, cond("node_stale", n.NodeID, "warning", "gateway %s has not reported since %s",
				n.NodeID, time.Unix(n.LastSeen, 0).UTC().Format(time.RFC3339)))
			continue
		}
		if n.DegradationLevel != nil && *n.DegradationLevel >= DegradedWarning {
			sev := "warning"
			if *n.DegradationLevel >= DegradedCritical {
				sev = "critical"
			}
			out = append(out, cond("node_degraded", n.NodeID, sev, "gateway %s at degradation level %d",
				n.NodeID, *n.DegradationLevel))
		}
	}
	prevApps := map[string]AppState{}
	if prev != nil {
		for _, a := range prev.Apps {
			prevApps[a.ID] = a
		}
	}
	for _, a := range s.Apps {
		if d := float64(a.DriftPPM) / 1e6; d > DriftAlert {
			out = append(out, cond("drift_high", a.ID, "warning", "app %s: lease drift %.1f%% above %.0f%%",
				a.ID, d*100, DriftAlert*100))
		}
		if p, ok := prevApps[a.ID]; ok && a.ConnRejected > p.ConnRejected {
			out = append(out, cond("connections_rejected", a.ID, "info", "app %s: %d connections rejected lately",
				a.ID, a.ConnRejected-p.ConnRejected))
		}
	}
	out = append(out, trafficAlerts(s, tr, set)...)
	out = append(out, nodeAlerts(s, tr, set)...)
	out = append(out, connectionAlerts(s)...)
	if s.RedisLatency > RedisSlowAlert {
		out = append(out, cond("redis_slow", "controlplane", "warning", "Redis answered the control plane in %s",
			s.RedisLatency.Round(time.Millisecond)))
	}
	return out
}

// alertStore keeps alerts in the hash ratelimit:admin:alerts, shared by the replicas.
type alertStore struct{ rdb redis.Cmdable }

func (a alertStore) all(ctx context.Context) (map[string]Alert, error) {
	m, err := a.rdb.HGetAll(ctx, keys.AdminAlerts()).Result()
	if err != nil {
		return nil, fmt.Errorf("live: alerts: %w", err)
	}
	out := make(map[string]Alert, len(m))
	for id, doc := range m {
		var al Alert
		if json.Unmarshal([]byte(doc), &al) == nil && al.ID == id {
			out[id] = al
		}
	}
	return out, nil
}

// sync stores the current conditions and returns the alerts that changed state (raised or
// resolved).
func (a alertStore) sync(ctx context.Context, now time.Time, conds []Alert) ([]Alert, error) {
	cur, err := a.all(ctx)
	if err != nil {
		return nil, err
	}
	write := map[string]any{}
	var changed []Alert
	active := map[string]bool{}
	for _, c := range conds {
		active[c.ID] = true
		old, ok := cur[c.ID]
		switch {
		case ok && old.Active && old.Message == c.Message && old.Severity == c.Severity:
			continue
		case ok && old.Active: // same condition, new details: keep when raised and the ack
			c.Timestamp, c.Acknowledged, c.AcknowledgedBy = old.Timestamp, old.Acknowledged, old.AcknowledgedBy
		default:
			c.Timestamp = now.Unix()
			changed = append(changed, c)
		}
		write[c.ID] = mustJSON(c)
	}
	var prune []string
	for id, old := range cur {
		switch {
		case old.Active && !active[id]:
			old.Active, old.ResolvedAt = false, now.Unix()
			write[id] = mustJSON(old)
			changed = append(changed, old)
		case !old.Active && !active[id] && now.Sub(time.Unix(old.ResolvedAt, 0)) > resolvedRetention:
			prune = append(prune, id)
		}
	}
	if len(write) > 0 {
		if err := a.rdb.HSet(ctx, keys.AdminAlerts(), write).Err(); err != nil {
			return nil, fmt.Errorf("live: store alerts: %w", err)
		}
	}
	if len(prune) > 0 {
		_ = a.rdb.HDel(ctx, keys.AdminAlerts(), prune...).Err()
	}
	return changed, nil
}

// list returns alerts newest first; activeOnly drops the resolved ones.
func (a alertStore) list(ctx context.Context, activeOnly bool) ([]Alert, error) {
	cur, err := a.all(ctx)
	if err != nil {
		return nil, err
	}
	out := []Alert{}
	for _, al := range cur {
		if al.Active || !activeOnly {
			out = append(out, al)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Timestamp != out[j].Timestamp {
			return out[i].Timestamp > out[j].Timestamp
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func (a alertStore) ack(ctx context.Context, id, actor string) (Alert, error) {
	doc, err := a.rdb.HGet(ctx, keys.AdminAlerts(), id).Result()
	if errors.Is(err, redis.Nil) {
		return Alert{}, ErrAlertNotFound
	}
	if err != nil {
		return Alert{}, fmt.Errorf("live: ack alert: %w", err)
	}
	var al Alert
	if json.Unmarshal([]byte(doc), &al) != nil {
		return Alert{}, ErrAlertNotFound
	}
	al.Acknowledged, al.AcknowledgedBy = true, actor
	if err := a.rdb.HSet(ctx, keys.AdminAlerts(), id, mustJSON(al)).Err(); err != nil {
		return Alert{}, fmt.Errorf("live: ack alert: %w", err)
	}
	return al, nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
