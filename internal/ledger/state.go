package ledger

import (
	"context"
	"fmt"
	"strconv"

	"tollgate/internal/keys"
)

// L1 is a cluster's L1 hash.
type L1 struct {
	Capacity        int64
	ReservedRatio   float64
	Allocated       int64
	Available       int64
	Borrowed        int64
	EmergencyMode   bool
	EmergencyUntil  int64 // Unix seconds
	EmergencyReason string
	OverloadUsage   float64
	OverloadUntil   int64 // Unix seconds
	Corrections     int64
}

// EmergencyActive reports whether the emergency mode is on at nowUnix (seconds), honouring its
// end exactly as the grant script does.
func (s L1) EmergencyActive(nowUnix int64) bool { return s.EmergencyMode && s.EmergencyUntil > nowUnix }

// L2 is an app's L2 hash.
type L2 struct {
	Guaranteed, Burst, Priority, MaxBorrow int64
	Tokens                                 float64
	LastRefillUS                           int64
	RefillFactor                           float64
	Borrowed, Debt                         int64
	ReturnedPending                        int64
	Outstanding                            int64 // held + unreported on the nodes
	TotalGranted, TotalReturned            int64
	TotalBorrowed, TotalInterest           int64
	TotalRepaid                            int64
}

type fields map[string]string

func (f fields) int(k string) int64 {
	v, _ := strconv.ParseFloat(f[k], 64)
	return int64(v)
}

func (f fields) float(k string) float64 {
	v, _ := strconv.ParseFloat(f[k], 64)
	return v
}

// ReadL1 reads a cluster's L1 hash; ErrUnknownCluster when it has no capacity.
func (l *Ledger) ReadL1(ctx context.Context, cluster string) (L1, error) {
	if err := checkIDs(cluster); err != nil {
		return L1{}, err
	}
	m, err := l.rdb.HGetAll(ctx, keys.L1(cluster)).Result()
	if err != nil {
		return L1{}, fmt.Errorf("ledger: read l1 %s: %w", cluster, err)
	}
	f := fields(m)
	if f["capacity"] == "" {
		return L1{}, fmt.Errorf("ledger: read l1 %s: %w", cluster, ErrUnknownCluster)
	}
	return L1{Capacity: f.int("capacity"), ReservedRatio: f.float("reserved_ratio"),
		Allocated: f.int("allocated"), Available: f.int("available"), Borrowed: f.int("borrowed"),
		EmergencyMode: f["emergency_mode"] == "1", EmergencyUntil: f.int("emergency_until"),
		EmergencyReason: f["emergency_reason"], OverloadUsage: f.float("overload_usage"),
		OverloadUntil: f.int("overload_until"), Corrections: f.int("correction_count")}, nil
}

// ReadL2 reads an app's L2 hash; ErrUnknownApp when it has no config.
func (l *Ledger) ReadL2(ctx context.Context, cluster, app string) (L2, error) {
	if err := checkIDs(cluster, app); err != nil {
		return L2{}, err
	}
	m, err := l.rdb.HGetAll(ctx, keys.L2(cluster, app)).Result()
	if err != nil {
		return L2{}, fmt.Errorf("ledger: read l2 %s: %w", app, err)
	}
	f := fields(m)
	if f["guaranteed_quota"] == "" {
		return L2{}, fmt.Errorf("ledger: read l2 %s: %w", app, ErrUnknownApp)
	}
	factor := 1.0
	if f["refill_factor"] != "" {
		factor = f.float("refill_factor")
	}
	return L2{Guaranteed: f.int("guaranteed_quota"), Burst: f.int("burst_quota"),
		Priority: f.int("priority"), MaxBorrow: f.int("max_borrow"), Tokens: f.float("current_tokens"),
		LastRefillUS: f.int("last_refill_us"), RefillFactor: factor, Borrowed: f.int("borrowed"),
		Debt: f.int("debt"), ReturnedPending: f.int("returned_pending"), Outstanding: f.int("outstanding"),
		TotalGranted: f.int("total_granted"), TotalReturned: f.int("total_returned"),
		TotalBorrowed: f.int("total_borrowed"), TotalInterest: f.int("total_interest"),
		TotalRepaid: f.int("total_repaid")}, nil
}
