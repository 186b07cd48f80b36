package ledger

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"tollgate/internal/keys"
)

// AppReconcile is the reply of l2_reconcile.
type AppReconcile struct {
	DriftPPM     int64 // |imbalance| / granted in millionths
	Corrected    bool  // drift was above the tolerance and the ledger was corrected
	ReapedNodes  int64
	ReapedTokens int64 // held tokens of reaped nodes returned to L2
	Granted      int64 // granted over the window
	Imbalance    int64 // granted - (consumed + returned + held + unreported), before correction
	Paid         int64 // debt paid by the refill
	Deactivated  bool  // the app left the cluster's active set (idle, nothing left to reconcile)
}

// Drift is DriftPPM as a fraction.
func (r AppReconcile) Drift() float64 { return float64(r.DriftPPM) / 1e6 }

// ReconcileApp reaps stale leases, measures drift, corrects it above tolerance, refills, starts a
// new window and keeps the cluster's active and debtors sets (see redis-scripts/l2_reconcile.lua).
func (l *Ledger) ReconcileApp(ctx context.Context, cluster, app string, tolerance float64,
	reapAfter time.Duration, nowUS int64) (AppReconcile, error) {
	if err := checkIDs(cluster, app); err != nil {
		return AppReconcile{}, err
	}
	secs := int64(reapAfter / time.Second)
	if secs < 1 {
		secs = 1
	}
	res, err := l.slice(ctx, "l2_reconcile",
		[]string{keys.L2(cluster, app), keys.Leases(cluster, app), keys.Nodes(cluster, app),
			keys.Stats(cluster, app), keys.L1(cluster), keys.Active(cluster), keys.Debtors(cluster)},
		strconv.FormatFloat(tolerance, 'f', -1, 64), secs, nowArg(nowUS))
	if err != nil {
		return AppReconcile{}, err
	}
	v, status, err := ints(res, 8)
	if err != nil {
		return AppReconcile{}, fmt.Errorf("ledger: l2_reconcile: %w", err)
	}
	if status == "unknown_app" {
		return AppReconcile{}, fmt.Errorf("ledger: reconcile %s: %w", app, ErrUnknownApp)
	}
	return AppReconcile{DriftPPM: v[0], Corrected: v[1] == 1, ReapedNodes: v[2],
		ReapedTokens: v[3], Granted: v[4], Imbalance: v[5], Paid: v[6], Deactivated: v[7] == 1}, nil
}

// ClusterReconcile is the reply of l1_reconcile: the L1 values after and before.
type ClusterReconcile struct {
	Corrected                               bool
	Allocated, Borrowed, Available          int64
	OldAllocated, OldBorrowed, OldAvailable int64
}

// ReconcileCluster restores allocated + borrowed = capacity - available from the L2 buckets of
// apps, which must include every app allocated in the cluster (else ErrStaleAppList).
func (l *Ledger) ReconcileCluster(ctx context.Context, cluster string, apps []string) (ClusterReconcile, error) {
	if err := checkIDs(cluster); err != nil {
		return ClusterReconcile{}, err
	}
	k := []string{keys.L1(cluster), keys.L1Apps(cluster)}
	args := make([]any, 0, len(apps))
	for _, a := range apps {
		if err := checkIDs(a); err != nil {
			return ClusterReconcile{}, err
		}
		k = append(k, keys.L2(cluster, a))
		args = append(args, a)
	}
	res, err := l.slice(ctx, "l1_reconcile", k, args...)
	if err != nil {
		return ClusterReconcile{}, err
	}
	v, _, err := ints(res, 7)
	if err != nil {
		return ClusterReconcile{}, fmt.Errorf("ledger: l1_reconcile: %w", err)
	}
	return ClusterReconcile{Corrected: v[0] == 1, Allocated: v[1], Borrowed: v[2], Available: v[3],
		OldAllocated: v[4], OldBorrowed: v[5], OldAvailable: v[6]}, nil
}
