package ledger

import (
	"context"
	"fmt"

	"tollgate/internal/keys"
)

// Grant is the reply of l2_grant.
type Grant struct {
	Granted        int64
	TokensLeft     int64
	RateMilli      int64 // refill rate in thousandths of a token per second, factor applied
	Burst          int64
	Reason         string // ok, app_exhausted, borrow_limit_exceeded, cluster_exhausted, ...
	ActiveNodes    int64
	EmergencyUntil int64 // Unix seconds while the cluster is in emergency, else 0
}

// Grant leases up to requested tokens (nothing unless at least min) of app to node, as the
// gateway does when its lease runs low.
func (l *Ledger) Grant(ctx context.Context, cluster, app, node string, requested, min, nowUS int64) (Grant, error) {
	if err := checkIDs(cluster, app, node); err != nil {
		return Grant{}, err
	}
	k, args := GrantCall(cluster, app, node, requested, min, nowUS)
	res, err := l.slice(ctx, "l2_grant", k, args...)
	if err != nil {
		return Grant{}, err
	}
	g, err := ParseGrant(res)
	if err == nil && g.Reason == "unknown_app" {
		err = fmt.Errorf("ledger: grant %s: %w", app, ErrUnknownApp)
	}
	return g, err
}

// GrantCall is the keys and arguments of l2_grant (for callers that pipeline it; ids must be
// valid).
func GrantCall(cluster, app, node string, requested, min, nowUS int64) ([]string, []any) {
	return []string{keys.L2(cluster, app), keys.Leases(cluster, app), keys.Nodes(cluster, app), keys.L1(cluster),
			keys.Active(cluster), keys.Debtors(cluster)},
		[]any{node, requested, min, nowArg(nowUS)}
}

// ParseGrant reads a reply of l2_grant.
func ParseGrant(res []any) (Grant, error) {
	if len(res) < 7 {
		return Grant{}, fmt.Errorf("ledger: l2_grant reply %v", res)
	}
	v, _, err := ints(res[:4], 4)
	if err != nil {
		return Grant{}, fmt.Errorf("ledger: l2_grant: %w", err)
	}
	reason, _ := res[4].(string)
	active, _ := res[5].(int64)
	until, _ := res[6].(int64)
	return Grant{Granted: v[0], TokensLeft: v[1], RateMilli: v[2], Burst: v[3], Reason: reason,
		ActiveNodes: active, EmergencyUntil: until}, nil
}

// Report is one consumption report of a node for an app (l3_report).
type Report struct {
	Seq      int64
	Consumed int64
	Requests int64
	Returned int64
	Held     int64
	FailOpen int64
}

// Report applies a node's report at most once per (node, seq); applied is false for a replay.
func (l *Ledger) Report(ctx context.Context, cluster, app, node string, r Report, nowUS int64) (bool, error) {
	if err := checkIDs(cluster, app, node); err != nil {
		return false, err
	}
	k, args := ReportCall(cluster, app, node, r, nowUS)
	res, err := l.slice(ctx, "l3_report", k, args...)
	if err != nil {
		return false, err
	}
	v, status, err := ints(res, 2)
	if err != nil {
		return false, fmt.Errorf("ledger: l3_report: %w", err)
	}
	if status == "unknown_app" {
		return false, fmt.Errorf("ledger: report %s: %w", app, ErrUnknownApp)
	}
	return v[0] == 1, nil
}

// ReportCall is the keys and arguments of l3_report (for callers that pipeline it; ids must be
// valid).
func ReportCall(cluster, app, node string, r Report, nowUS int64) ([]string, []any) {
	return []string{keys.L2(cluster, app), keys.Leases(cluster, app), keys.Stats(cluster, app), keys.Nodes(cluster, app),
			keys.Active(cluster), keys.Totals(cluster)},
		[]any{node, r.Seq, r.Consumed, r.Requests, r.Returned, r.Held, r.FailOpen, nowArg(nowUS)}
}

// Refill is the reply of l2_refill.
type Refill struct {
	Tokens        int64
	Debt          int64
	Borrowed      int64
	Paid          int64 // debt paid by this refill
	PrincipalPaid int64 // the part of it that returned to L1 available
}

// Refill refills an app's bucket now and pays debt with what would overflow its burst; a repaid
// app leaves the cluster's debtors set.
func (l *Ledger) Refill(ctx context.Context, cluster, app string, nowUS int64) (Refill, error) {
	if err := checkIDs(cluster, app); err != nil {
		return Refill{}, err
	}
	res, err := l.slice(ctx, "l2_refill", []string{keys.L2(cluster, app), keys.L1(cluster), keys.Debtors(cluster)},
		nowArg(nowUS))
	if err != nil {
		return Refill{}, err
	}
	v, status, err := ints(res, 5)
	if err != nil {
		return Refill{}, fmt.Errorf("ledger: l2_refill: %w", err)
	}
	if status == "unknown_app" {
		return Refill{}, fmt.Errorf("ledger: refill %s: %w", app, ErrUnknownApp)
	}
	return Refill{Tokens: v[0], Debt: v[1], Borrowed: v[2], Paid: v[3], PrincipalPaid: v[4]}, nil
}
