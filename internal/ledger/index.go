package ledger

import (
	"context"
	"fmt"
	"strconv"

	"tollgate/internal/keys"
)

// The per-cluster indexes the scripts keep (redis-scripts/README.md, "The cluster's indexes"),
// read by the control plane's jobs and live collector instead of every app of the cluster.

// validIDs keeps the ids a key may be built from (the sets are written by scripts only, but a
// foreign member must not reach a key or a log line).
func validIDs(ids []string) []string {
	out := ids[:0]
	for _, id := range ids {
		if keys.ValidID(id) {
			out = append(out, id)
		}
	}
	return out
}

// ActiveApps returns the apps of the cluster's active set (granted or reported lately, or not
// yet idle long enough to leave it), in order of last activity.
func (l *Ledger) ActiveApps(ctx context.Context, cluster string) ([]string, error) {
	if err := checkIDs(cluster); err != nil {
		return nil, err
	}
	ids, err := l.rdb.ZRange(ctx, keys.Active(cluster), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: active apps of %s: %w", cluster, err)
	}
	return validIDs(ids), nil
}

// Debtors returns the apps of the cluster's debtors set (in debt at their last grant, refill or
// reconciliation).
func (l *Ledger) Debtors(ctx context.Context, cluster string) ([]string, error) {
	if err := checkIDs(cluster); err != nil {
		return nil, err
	}
	ids, err := l.rdb.SMembers(ctx, keys.Debtors(cluster)).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: debtors of %s: %w", cluster, err)
	}
	return validIDs(ids), nil
}

// Totals are a cluster's cumulative reported consumption (fail-open included) and requests.
type Totals struct {
	Consumed, Requests int64
}

// ClusterTotals reads the cluster's totals hash: one command whatever the number of apps.
func (l *Ledger) ClusterTotals(ctx context.Context, cluster string) (Totals, error) {
	if err := checkIDs(cluster); err != nil {
		return Totals{}, err
	}
	v, err := l.rdb.HMGet(ctx, keys.Totals(cluster), "total_consumed", "total_requests").Result()
	if err != nil {
		return Totals{}, fmt.Errorf("ledger: totals of %s: %w", cluster, err)
	}
	return Totals{Consumed: anyInt(v[0]), Requests: anyInt(v[1])}, nil
}

func anyInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// AllocPage returns the apps at ranks [from, from+n) of the cluster's allocation set: the
// reconcile job's sweep cursor. Ranks shift when apps come and go; every change of the set
// bumps alloc_rev, which voids the chunked L1 check (see TallyL1).
func (l *Ledger) AllocPage(ctx context.Context, cluster string, from, n int64) ([]string, error) {
	if err := checkIDs(cluster); err != nil {
		return nil, err
	}
	ids, err := l.rdb.ZRange(ctx, keys.L1Apps(cluster), from, from+n-1).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: allocations of %s: %w", cluster, err)
	}
	return ids, nil
}

// Revs are the L1 hash's change counters: AllocRev moves with every allocation change,
// BorrowRev with every loan and principal repayment.
type Revs struct {
	AllocRev, BorrowRev int64
}

// ReadRevs reads the cluster's change counters, at the start of a chunked L1 check.
func (l *Ledger) ReadRevs(ctx context.Context, cluster string) (Revs, error) {
	if err := checkIDs(cluster); err != nil {
		return Revs{}, err
	}
	v, err := l.rdb.HMGet(ctx, keys.L1(cluster), "alloc_rev", "borrow_rev").Result()
	if err != nil {
		return Revs{}, fmt.Errorf("ledger: revs of %s: %w", cluster, err)
	}
	return Revs{AllocRev: anyInt(v[0]), BorrowRev: anyInt(v[1])}, nil
}

// Tally is one page of a chunked L1 check (l1_tally).
type Tally struct {
	Allocated, Borrowed int64
	Fixed               int64 // allocation entries rewritten to match the apps' L2 buckets
}

// TallyL1 sums the guaranteed quotas and borrowed tokens of apps (a page of the allocation
// set), fixing their allocation entries; invalid ids are skipped.
func (l *Ledger) TallyL1(ctx context.Context, cluster string, apps []string) (Tally, error) {
	if err := checkIDs(cluster); err != nil {
		return Tally{}, err
	}
	k := []string{keys.L1(cluster), keys.L1Apps(cluster)}
	args := make([]any, 0, len(apps))
	for _, a := range apps {
		if keys.ValidID(a) {
			k = append(k, keys.L2(cluster, a))
			args = append(args, a)
		}
	}
	res, err := l.slice(ctx, "l1_tally", k, args...)
	if err != nil {
		return Tally{}, err
	}
	v, _, err := ints(res, 3)
	if err != nil {
		return Tally{}, fmt.Errorf("ledger: l1_tally: %w", err)
	}
	return Tally{Allocated: v[0], Borrowed: v[1], Fixed: v[2]}, nil
}

// L1Correction is the reply of l1_correct.
type L1Correction struct {
	ClusterReconcile
	Applied         bool // no allocation changed during the pass: its sums were compared
	BorrowedChecked bool // nor any loan or repayment: borrowed was compared too
}

// CorrectL1 ends a chunked L1 check: sums are the pass's totals, revs what ReadRevs returned
// when it began.
func (l *Ledger) CorrectL1(ctx context.Context, cluster string, revs Revs, sums Tally) (L1Correction, error) {
	if err := checkIDs(cluster); err != nil {
		return L1Correction{}, err
	}
	res, err := l.slice(ctx, "l1_correct", []string{keys.L1(cluster)},
		revs.AllocRev, revs.BorrowRev, sums.Allocated, sums.Borrowed)
	if err != nil {
		return L1Correction{}, err
	}
	v, _, err := ints(res, 9)
	if err != nil {
		return L1Correction{}, fmt.Errorf("ledger: l1_correct: %w", err)
	}
	return L1Correction{ClusterReconcile: ClusterReconcile{Corrected: v[1] == 1, Allocated: v[2],
		Borrowed: v[3], Available: v[4], OldAllocated: v[5], OldBorrowed: v[6], OldAvailable: v[7]},
		Applied: v[0] == 1, BorrowedChecked: v[8] == 1}, nil
}
