// Package rules is the control plane's side of the rules, circuit breakers and events of
// docs/rules-contract.md (§2, §3, §5, §8): the rule and breaker JSON, their validation with a
// machine-readable code and the offending field for every refusal, their writes into the
// ratelimit:rules / ratelimit:breakers hashes with the config version bump and announcement
// that app writes use, the rule counters the gateways report, the breaker states of the node
// reports, and the query of the sampled-events stream.
package rules

import (
	"time"

	"tollgate/controlplane/internal/validate"
)

// Enumerations of the rule JSON (docs/rules-contract.md §2).
var (
	Scopes        = []string{"global", "app", "user", "ip", "endpoint"}
	Algorithms    = []string{"token_bucket", "sliding_window", "fixed_window"}
	Units         = []string{"requests", "cost"}
	Distributions = []string{"node", "global"}
	Actions       = []string{"reject", "throttle", "shadow"}
	Methods       = []string{"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"}
)

// Defaults of the optional rule fields; the stored JSON always carries them explicitly, so a
// gateway never has to apply a default of its own.
const (
	DefaultUnit         = "requests"
	DefaultDistribution = "node"
	DefaultAction       = "reject"
	DefaultPriority     = 100
)

// Bounds of the rule fields.
const (
	MaxWindowSeconds   = 86400
	MaxThrottleDelayMS = 5000
	MaxPriority        = 1000000
	MaxDescription     = 512
	MaxListEntries     = 100
	MaxHeaders         = 20
	MaxPath            = 512
	MaxKeyPrefix       = 1024
	MaxHeaderValue     = 256
	MaxLimit           = 1000000000000 // limit and burst: the gateway's bound
)

// Match selects the requests a rule applies to; every present field must match.
type Match struct {
	AppIDs    []string          `json:"app_ids,omitempty"`
	Methods   []string          `json:"methods,omitempty"`
	Bucket    *string           `json:"bucket,omitempty"`
	KeyPrefix *string           `json:"key_prefix,omitempty"`
	Path      *string           `json:"path,omitempty"`
	CIDRs     []string          `json:"cidrs,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// Rule is a stored rule: the JSON of ratelimit:rules (docs/rules-contract.md §2).
type Rule struct {
	ID                 string  `json:"id"`
	Description        string  `json:"description"`
	Scope              string  `json:"scope"`
	UserKey            string  `json:"user_key,omitempty"`
	Match              Match   `json:"match"`
	Algorithm          string  `json:"algorithm"`
	Limit              int64   `json:"limit"`
	WindowSeconds      int64   `json:"window_seconds"`
	Burst              *int64  `json:"burst,omitempty"`
	Unit               string  `json:"unit"`
	Distribution       string  `json:"distribution"`
	Priority           int64   `json:"priority"`
	Enabled            bool    `json:"enabled"`
	EffectiveFrom      *string `json:"effective_from,omitempty"`
	EffectiveTo        *string `json:"effective_to,omitempty"`
	Action             string  `json:"action"`
	ThrottleMaxDelayMS *int64  `json:"throttle_max_delay_ms,omitempty"`
	CreatedAt          int64   `json:"created_at"`
	UpdatedAt          int64   `json:"updated_at"`
	UpdatedBy          string  `json:"updated_by"`
}

// RuleFields is a rule as the API receives it (POST creates, PUT replaces): every field is a
// pointer so that a missing required field is told apart from a zero. created_at, updated_at
// and updated_by are set by the API; they are accepted (a rule read by GET may be sent back
// as is) and ignored.
type RuleFields struct {
	ID                 *string `json:"id"`
	Description        *string `json:"description"`
	Scope              *string `json:"scope"`
	UserKey            *string `json:"user_key"`
	Match              *Match  `json:"match"`
	Algorithm          *string `json:"algorithm"`
	Limit              *int64  `json:"limit"`
	WindowSeconds      *int64  `json:"window_seconds"`
	Burst              *int64  `json:"burst"`
	Unit               *string `json:"unit"`
	Distribution       *string `json:"distribution"`
	Priority           *int64  `json:"priority"`
	Enabled            *bool   `json:"enabled"`
	EffectiveFrom      *string `json:"effective_from"`
	EffectiveTo        *string `json:"effective_to"`
	Action             *string `json:"action"`
	ThrottleMaxDelayMS *int64  `json:"throttle_max_delay_ms"`
	CreatedAt          *int64  `json:"created_at"`
	UpdatedAt          *int64  `json:"updated_at"`
	UpdatedBy          *string `json:"updated_by"`
}

// Stats are a rule's cumulative counters from ratelimit:rules:stats.
type Stats struct {
	Hits      int64 `json:"hits"`
	Blocked   int64 `json:"blocked"`
	Throttled int64 `json:"throttled"`
	Shadowed  int64 `json:"shadowed"`
	FailOpen  int64 `json:"fail_open"`
}

// statFields are the suffixes of a rule's fields in ratelimit:rules:stats, in Stats order.
var statFields = []string{"hits", "blocked", "throttled", "shadowed", "fail_open"}

// RuleView is a rule with its counters, as the API shows it.
type RuleView struct {
	Rule
	Stats Stats `json:"stats"`
}

// AppExists tells whether an app id names a configured app.
type AppExists func(id string) bool

// BuildRule turns the fields into a rule with the defaults applied and checks every field.
// pathID is the id of the URL (PUT) or "" (POST); appKnown tells whether an app exists (nil:
// not checked) and oldApps are the app ids of the rule being replaced, which are not checked
// again. The violations are empty when the rule is valid.
func BuildRule(f RuleFields, pathID string, appKnown AppExists, oldApps []string) (Rule, []validate.Violation) {
	var c checker
	r := Rule{Unit: DefaultUnit, Distribution: DefaultDistribution, Action: DefaultAction,
		Priority: DefaultPriority, Enabled: true}
	r.ID = c.ruleID(f.ID, pathID)
	setStr(&r.Description, f.Description)
	setStr(&r.Scope, f.Scope)
	setStr(&r.Algorithm, f.Algorithm)
	setStr(&r.Unit, f.Unit)
	setStr(&r.Distribution, f.Distribution)
	setStr(&r.Action, f.Action)
	setStr(&r.UserKey, f.UserKey)
	if f.Priority != nil {
		r.Priority = *f.Priority
	}
	if f.Enabled != nil {
		r.Enabled = *f.Enabled
	}
	if f.Match != nil {
		r.Match = *f.Match
	}
	r.Burst, r.ThrottleMaxDelayMS = f.Burst, f.ThrottleMaxDelayMS
	r.EffectiveFrom, r.EffectiveTo = f.EffectiveFrom, f.EffectiveTo

	c.text("description", r.Description, MaxDescription, "invalid_description")
	if c.required(f.Scope != nil, "scope") {
		c.enum("scope", r.Scope, Scopes, "invalid_scope")
	}
	if c.required(f.Algorithm != nil, "algorithm") {
		c.enum("algorithm", r.Algorithm, Algorithms, "invalid_algorithm")
	}
	c.enum("unit", r.Unit, Units, "invalid_unit")
	c.enum("distribution", r.Distribution, Distributions, "invalid_distribution")
	c.enum("action", r.Action, Actions, "invalid_action")
	if c.required(f.Limit != nil, "limit") {
		r.Limit = *f.Limit
		c.rangeInt("limit", r.Limit, 1, MaxLimit, "invalid_limit")
	}
	if c.required(f.WindowSeconds != nil, "window_seconds") {
		r.WindowSeconds = *f.WindowSeconds
		c.rangeInt("window_seconds", r.WindowSeconds, 1, MaxWindowSeconds, "invalid_window")
	}
	c.rangeInt("priority", r.Priority, 0, MaxPriority, "invalid_priority")
	c.burst(&r)
	c.throttle(r)
	c.userKey(r)
	c.effective(r)
	c.match(r, appKnown, oldApps)
	return r, c.out()
}

func setStr(dst *string, v *string) {
	if v != nil {
		*dst = *v
	}
}

// burst: token bucket capacity, any from 1 (default = limit, stored explicitly); windows: absent.
func (c *checker) burst(r *Rule) {
	switch r.Algorithm {
	case "token_bucket":
		if r.Burst == nil {
			if r.Limit >= 1 {
				b := r.Limit
				r.Burst = &b
			}
			return
		}
		// a capacity below the refill per window is a smoothing bucket (burst 10 at 100/s)
		c.rangeInt("burst", *r.Burst, 1, MaxLimit, "invalid_burst")
	case "sliding_window", "fixed_window":
		if r.Burst != nil {
			c.add("burst", "burst_not_allowed", "burst applies to token_bucket only; leave it out for %s", r.Algorithm)
		}
	}
}

// throttle: throttle_max_delay_ms is required by (and only allowed with) action throttle.
func (c *checker) throttle(r Rule) {
	d := r.ThrottleMaxDelayMS
	switch {
	case r.Action == "throttle" && d == nil:
		c.add("throttle_max_delay_ms", "required", "throttle_max_delay_ms is required with action throttle")
	case r.Action == "throttle":
		c.rangeInt("throttle_max_delay_ms", *d, 1, MaxThrottleDelayMS, "invalid_throttle_delay")
	case d != nil:
		c.add("throttle_max_delay_ms", "throttle_delay_not_allowed",
			"throttle_max_delay_ms applies to action throttle only")
	}
}

// userKey: scope user needs "header:<Name>" or "s3_access_key"; other scopes none.
func (c *checker) userKey(r Rule) {
	switch {
	case r.Scope == "user" && r.UserKey == "":
		c.add("user_key", "required", `scope user needs user_key "header:<Name>" or "s3_access_key"`)
	case r.Scope == "user":
		name, isHeader := cutPrefix(r.UserKey, "header:")
		if r.UserKey != "s3_access_key" && !(isHeader && headerName(name)) {
			c.add("user_key", "invalid_user_key", `user_key must be "header:<Name>" (a header name of A-Z a-z 0-9 - _) or "s3_access_key"`)
		}
	case r.UserKey != "":
		c.add("user_key", "user_key_not_allowed", "user_key applies to scope user only")
	}
}

// effective: RFC 3339 times, from strictly before to.
func (c *checker) effective(r Rule) {
	from, okFrom := c.time("effective_from", r.EffectiveFrom)
	to, okTo := c.time("effective_to", r.EffectiveTo)
	if okFrom && okTo && !from.Before(to) {
		c.add("effective_to", "empty_interval", "effective_to must be after effective_from")
	}
}

func (c *checker) time(field string, v *string) (time.Time, bool) {
	if v == nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, *v)
	if err != nil || len(*v) > 64 {
		c.add(field, "invalid_time", "%s must be an RFC 3339 time like 2026-11-21T00:00:00Z", field)
		return time.Time{}, false
	}
	return t, true
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}
