package ledger

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"tollgate/internal/keys"
)

// Activation is a request to put a cluster in emergency mode.
type Activation struct {
	Duration time.Duration // whole seconds, 1 s to 24 h
	Reason   string        // free text, at most 256 bytes, no control characters
	Source   string        // "manual" or "auto"
	Actor    string        // user id or "controlplane"
}

// ActivateEmergency activates (or extends) a cluster's emergency mode. It returns whether the
// cluster was inactive before, and the end of the mode in Unix seconds.
func (l *Ledger) ActivateEmergency(ctx context.Context, cluster string, a Activation, nowUS int64) (bool, int64, error) {
	if err := checkIDs(cluster); err != nil {
		return false, 0, err
	}
	res, err := l.slice(ctx, "emergency_activate",
		[]string{keys.L1(cluster), keys.EmergencyHistory(cluster)},
		cluster, int64(a.Duration/time.Second), a.Reason, a.Source, a.Actor,
		keys.EmergencyChannel(), nowArg(nowUS))
	if err != nil {
		return false, 0, err
	}
	v, _, err := ints(res, 2)
	if err != nil {
		return false, 0, fmt.Errorf("ledger: emergency_activate: %w", err)
	}
	return v[0] == 1, v[1], nil
}

// Deactivation is a request to end a cluster's emergency mode.
type Deactivation struct {
	Reason        string
	Source        string // "manual" or "expired"
	Actor         string
	OnlyIfExpired bool // end it only if its end time has passed (the expiry job)
}

// DeactivateEmergency ends a cluster's emergency mode; it reports whether it ended one.
func (l *Ledger) DeactivateEmergency(ctx context.Context, cluster string, d Deactivation, nowUS int64) (bool, error) {
	if err := checkIDs(cluster); err != nil {
		return false, err
	}
	only := "0"
	if d.OnlyIfExpired {
		only = "1"
	}
	res, err := l.slice(ctx, "emergency_deactivate",
		[]string{keys.L1(cluster), keys.EmergencyHistory(cluster)},
		cluster, d.Reason, d.Source, d.Actor, keys.EmergencyChannel(), only, nowArg(nowUS))
	if err != nil {
		return false, err
	}
	v, _, err := ints(res, 2)
	if err != nil {
		return false, fmt.Errorf("ledger: emergency_deactivate: %w", err)
	}
	return v[0] == 1, nil
}

// SetOverload records a cluster's usage for ttl and returns the refill factors of P0-P3 that
// follow from it, in thousandths.
func (l *Ledger) SetOverload(ctx context.Context, cluster string, usage float64, ttl time.Duration, nowUS int64) ([4]int64, error) {
	var out [4]int64
	if err := checkIDs(cluster); err != nil {
		return out, err
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	res, err := l.slice(ctx, "overload_set", []string{keys.L1(cluster)},
		strconv.FormatFloat(usage, 'f', 6, 64), secs, nowArg(nowUS))
	if err != nil {
		return out, err
	}
	v, _, err := ints(res, 4)
	if err != nil {
		return out, fmt.Errorf("ledger: overload_set: %w", err)
	}
	copy(out[:], v)
	return out, nil
}

// EmergencyEvent is one entry of a cluster's emergency history.
type EmergencyEvent struct {
	ID     string
	Event  string // activate, extend, deactivate
	Reason string
	Source string
	Actor  string
	At     int64 // Unix seconds
	Until  int64 // Unix seconds
}

// EmergencyHistory returns up to n of the newest history entries, newest first.
func (l *Ledger) EmergencyHistory(ctx context.Context, cluster string, n int64) ([]EmergencyEvent, error) {
	if err := checkIDs(cluster); err != nil {
		return nil, err
	}
	msgs, err := l.rdb.XRevRangeN(ctx, keys.EmergencyHistory(cluster), "+", "-", n).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: emergency history %s: %w", cluster, err)
	}
	out := make([]EmergencyEvent, 0, len(msgs))
	for _, m := range msgs {
		s := func(k string) string { v, _ := m.Values[k].(string); return v }
		at, _ := strconv.ParseInt(s("at"), 10, 64)
		until, _ := strconv.ParseInt(s("until"), 10, 64)
		out = append(out, EmergencyEvent{ID: m.ID, Event: s("event"), Reason: s("reason"),
			Source: s("source"), Actor: s("actor"), At: at, Until: until})
	}
	return out, nil
}
