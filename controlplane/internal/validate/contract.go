package validate

import (
	"fmt"
	"math"

	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// The config contract: what makes a cluster, an app and a connection limit valid, defined once
// here and used by the admin API (Validator), import and restore (durable.Check), the snapshots
// (checked at start by Stored) and mirrored, case for case, by the Redis scripts
// (redis-scripts/cluster_config.lua, app_config.lua), the gateway's parsers
// (lua/tollgate/config/contract.lua) and the console (web/src/utils/config.ts); the corpus
// testdata/config/ holds the cases every one of them runs (docs/config-contract.md).
//
// Field names in the violations these functions return are relative to the object checked
// ("burst_quota", "connections.max_connections"); callers prefix them ("apps[demo-p1].").

// MaxInt bounds every integer of the config: beyond it the Lua scripts lose precision.
const MaxInt = 1 << 53

// Allocatable is the one allocation cap: the guaranteed quotas of a cluster's apps sum to at
// most floor((1 - reserved_ratio) x capacity) tokens/s (90 % with the default reserved ratio
// 0.1). The reserve is the share of the cluster no app is promised and none may borrow.
func Allocatable(capacity int64, reservedRatio float64) int64 {
	return int64(math.Floor(float64(capacity)*(1-reservedRatio) + 1e-6))
}

// ClusterConnLimits are a cluster's connection limits (connlimit:{c}:cluster): the cluster-wide
// maximum, and the share of it that apps' burst connections may not use.
type ClusterConnLimits struct {
	MaxConnections int64   `json:"max_connections"`
	ReservedRatio  float64 `json:"reserved_ratio"`
}

func violation(field, code, format string, args ...any) Violation {
	return Violation{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}

func validRatio(r float64) bool { return !math.IsNaN(r) && r >= 0 && r < 1 }

// CheckCluster returns the violations of a cluster's own fields (id, capacity, reserved_ratio).
func CheckCluster(c store.Cluster) []Violation {
	var out []Violation
	if !keys.ValidID(c.ID) {
		out = append(out, violation("id", "invalid_id", "cluster id must match ^[A-Za-z0-9_-]{1,128}$"))
	}
	if c.Capacity <= 0 || c.Capacity >= MaxInt {
		out = append(out, violation("capacity", "invalid_capacity",
			"capacity must be a positive number of tokens per second below 2^53, got %d", c.Capacity))
	}
	if !validRatio(c.ReservedRatio) {
		out = append(out, violation("reserved_ratio", "invalid_reserved_ratio", "reserved_ratio must be in [0, 1), got %v", c.ReservedRatio))
	}
	return out
}

// CheckApp returns the violations of an app's own fields and of its connection limits; the
// cluster it names and the allocation are checked against the state (CheckAllocation).
func CheckApp(a App) []Violation {
	var out []Violation
	add := func(field, code, format string, args ...any) {
		out = append(out, violation(field, code, format, args...))
	}
	if !keys.ValidID(a.AppID) {
		add("app_id", "invalid_id", "app id must match ^[A-Za-z0-9_-]{1,128}$")
	} else if keys.ReservedAppID(a.AppID) {
		add("app_id", "reserved_id", "app ids beginning with _ are reserved for the gateway's labels")
	}
	if !keys.ValidID(a.ClusterID) {
		add("cluster_id", "invalid_id", "cluster id must match ^[A-Za-z0-9_-]{1,128}$")
	}
	if a.GuaranteedQuota <= 0 || a.GuaranteedQuota >= MaxInt {
		add("guaranteed_quota", "invalid_guaranteed_quota", "guaranteed_quota must be a positive number of tokens per second below 2^53, got %d", a.GuaranteedQuota)
	}
	switch {
	case a.BurstQuota <= 0 || a.BurstQuota >= MaxInt:
		add("burst_quota", "invalid_burst_quota", "burst_quota must be a positive number of tokens below 2^53, got %d", a.BurstQuota)
	case a.BurstQuota < a.GuaranteedQuota:
		add("burst_quota", "burst_below_guaranteed", "burst_quota (%d) must be at least guaranteed_quota (%d)", a.BurstQuota, a.GuaranteedQuota)
	}
	if a.Priority < 0 || a.Priority > 3 {
		add("priority", "invalid_priority", "priority must be 0, 1, 2 or 3, got %d", a.Priority)
	}
	if a.CBw < 0 || a.CBw >= MaxInt {
		add("c_bw", "invalid_c_bw", "c_bw must be an integer from 0 below 2^53, got %d", a.CBw)
	}
	if a.MaxBorrow < 0 || a.MaxBorrow >= MaxInt {
		add("max_borrow", "invalid_max_borrow", "max_borrow must be an integer from 0 below 2^53, got %d", a.MaxBorrow)
	}
	if a.Connections != nil {
		for _, v := range CheckConnLimits(*a.Connections) {
			v.Field = "connections." + v.Field
			out = append(out, v)
		}
	}
	return out
}

// CheckConnLimits returns the violations of an app's connection limits: max_connections a
// positive integer below 2^53, burst_connections at least it and below 2^53.
func CheckConnLimits(l ConnLimits) []Violation {
	var out []Violation
	if l.MaxConnections <= 0 || l.MaxConnections >= MaxInt {
		out = append(out, violation("max_connections", "invalid_max_connections", "max_connections must be a positive integer below 2^53, got %d", l.MaxConnections))
	}
	switch {
	case l.BurstConnections >= MaxInt:
		out = append(out, violation("burst_connections", "invalid_burst_connections", "burst_connections must be below 2^53, got %d", l.BurstConnections))
	case l.BurstConnections < l.MaxConnections:
		out = append(out, violation("burst_connections", "burst_below_max_connections", "burst_connections (%d) must be at least max_connections (%d)", l.BurstConnections, l.MaxConnections))
	}
	return out
}

// CheckClusterConnLimits returns the violations of a cluster's connection limits:
// max_connections a positive integer below 2^53, reserved_ratio in [0, 1).
func CheckClusterConnLimits(l ClusterConnLimits) []Violation {
	var out []Violation
	if l.MaxConnections <= 0 || l.MaxConnections >= MaxInt {
		out = append(out, violation("max_connections", "invalid_max_connections", "max_connections must be a positive integer below 2^53, got %d", l.MaxConnections))
	}
	if !validRatio(l.ReservedRatio) {
		out = append(out, violation("reserved_ratio", "invalid_reserved_ratio", "reserved_ratio must be in [0, 1), got %v", l.ReservedRatio))
	}
	return out
}

// CheckAllocation: the guaranteed quotas of cluster c would sum to after (they sum to before
// now). Refused (over_allocation, field "guaranteed_quota") only when after is above the cap
// and the change makes it worse — raises the sum, or lowers the cap below it: a cluster
// already over its cap (stored before the contract, or by hand) stays editable, and every
// change that does not add to the excess is accepted. beforeCap is the cap before the change
// (the same as c's for an app change). nil when accepted, or when c is itself invalid.
func CheckAllocation(c store.Cluster, before, after, beforeCap int64) *Violation {
	if c.Capacity <= 0 || c.Capacity >= MaxInt || !validRatio(c.ReservedRatio) {
		return nil
	}
	limit := Allocatable(c.Capacity, c.ReservedRatio)
	if after <= limit || (after <= before && limit >= beforeCap) {
		return nil
	}
	v := violation("guaranteed_quota", "over_allocation",
		"the guaranteed quotas of cluster %s would sum to %d, above (1 - reserved_ratio %v) x capacity %d = %d",
		c.ID, after, c.ReservedRatio, c.Capacity, limit)
	return &v
}

// Prefixed returns vs with prefix before every field.
func Prefixed(prefix string, vs []Violation) []Violation {
	out := make([]Violation, len(vs))
	for i, v := range vs {
		v.Field = prefix + v.Field
		out[i] = v
	}
	return out
}
