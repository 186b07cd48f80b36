package rules

import (
	"fmt"
	"math"
	"strconv"

	"tollgate/controlplane/internal/validate"
)

// Breaker is a circuit breaker config: the JSON of ratelimit:breakers (docs/rules-contract.md §3).
type Breaker struct {
	Name                string  `json:"name"`
	Enabled             bool    `json:"enabled"`
	PerApp              bool    `json:"per_app"`
	WindowMS            int64   `json:"window_ms"`
	MinRequests         int64   `json:"min_requests"`
	FailureThreshold    int64   `json:"failure_threshold"`
	FailureRatio        float64 `json:"failure_ratio"`
	OpenTimeoutMS       int64   `json:"open_timeout_ms"`
	SuccessThreshold    int64   `json:"success_threshold"`
	HalfOpenMaxInflight int64   `json:"half_open_max_inflight"`
	FailureStatuses     []int64 `json:"failure_statuses"`
}

// BreakerFields is a breaker as PUT /breakers/:name receives it; a field left out takes the
// default of DefaultBreaker (the contract's example), and the stored JSON carries every field.
type BreakerFields struct {
	Name                *string  `json:"name"`
	Enabled             *bool    `json:"enabled"`
	PerApp              *bool    `json:"per_app"`
	WindowMS            *int64   `json:"window_ms"`
	MinRequests         *int64   `json:"min_requests"`
	FailureThreshold    *int64   `json:"failure_threshold"`
	FailureRatio        *float64 `json:"failure_ratio"`
	OpenTimeoutMS       *int64   `json:"open_timeout_ms"`
	SuccessThreshold    *int64   `json:"success_threshold"`
	HalfOpenMaxInflight *int64   `json:"half_open_max_inflight"`
	FailureStatuses     []int64  `json:"failure_statuses"`
}

// Bounds of the breaker fields.
const (
	MinBreakerMS  = 100
	MaxBreakerMS  = 3600000 // one hour
	MaxBreakerInt = 1000000
)

// DefaultBreaker is the config a breaker gets for the fields left out.
func DefaultBreaker(name string) Breaker {
	return Breaker{Name: name, Enabled: true, WindowMS: 10000, MinRequests: 10, FailureThreshold: 5,
		FailureRatio: 0.5, OpenTimeoutMS: 30000, SuccessThreshold: 3, HalfOpenMaxInflight: 1,
		FailureStatuses: []int64{500, 502, 503, 504}}
}

// BuildBreaker applies f over the defaults and checks every field: positive thresholds and
// timeouts within [100 ms, 1 h], failure_ratio in (0, 1], failure statuses 500-599 listed once.
func BuildBreaker(f BreakerFields, name string) (Breaker, []validate.Violation) {
	var c checker
	b := DefaultBreaker(name)
	if f.Name != nil && *f.Name != name {
		c.add("name", "name_mismatch", "name in the body must match the path")
	}
	setBool := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	setBool(&b.Enabled, f.Enabled)
	setBool(&b.PerApp, f.PerApp)
	for _, p := range []struct {
		field  string
		dst    *int64
		v      *int64
		lo, hi int64
	}{
		{"window_ms", &b.WindowMS, f.WindowMS, MinBreakerMS, MaxBreakerMS},
		{"min_requests", &b.MinRequests, f.MinRequests, 1, MaxBreakerInt},
		{"failure_threshold", &b.FailureThreshold, f.FailureThreshold, 1, MaxBreakerInt},
		{"open_timeout_ms", &b.OpenTimeoutMS, f.OpenTimeoutMS, MinBreakerMS, MaxBreakerMS},
		{"success_threshold", &b.SuccessThreshold, f.SuccessThreshold, 1, MaxBreakerInt},
		{"half_open_max_inflight", &b.HalfOpenMaxInflight, f.HalfOpenMaxInflight, 1, MaxBreakerInt},
	} {
		if p.v != nil {
			*p.dst = *p.v
			c.rangeInt(p.field, *p.v, p.lo, p.hi, "invalid_"+p.field)
		}
	}
	if f.FailureRatio != nil {
		b.FailureRatio = *f.FailureRatio
		if r := b.FailureRatio; math.IsNaN(r) || r <= 0 || r > 1 {
			c.add("failure_ratio", "invalid_failure_ratio", "failure_ratio must be in (0, 1], got %v", r)
		}
	}
	if f.FailureStatuses != nil {
		b.FailureStatuses = f.FailureStatuses
		c.statuses(f.FailureStatuses)
	}
	return b, c.out()
}

func (c *checker) statuses(l []int64) {
	switch {
	case len(l) == 0:
		c.add("failure_statuses", "empty_list", "failure_statuses must list at least one status")
		return
	case len(l) > MaxListEntries:
		c.add("failure_statuses", "too_many", "failure_statuses holds at most %d entries", MaxListEntries)
		return
	}
	seen := map[int64]bool{}
	for i, s := range l {
		field := fmt.Sprintf("failure_statuses[%d]", i)
		switch {
		case s < 500 || s > 599:
			c.add(field, "invalid_status", "failure statuses are 500-599, got %d", s)
		case seen[s]:
			c.add(field, "duplicate", "status %s is listed twice", strconv.FormatInt(s, 10))
		}
		seen[s] = true
	}
}
