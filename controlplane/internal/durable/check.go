package durable

// Check: every violation of a document as a whole, before anything is applied.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/secrets"
	"tollgate/internal/store"
)

// Check returns every violation of the document as a whole; empty when it can be applied.
func Check(d Document) []validate.Violation {
	vs := []validate.Violation{}
	add := func(field, code, format string, a ...any) {
		vs = append(vs, validate.Violation{Field: field, Code: code, Message: fmt.Sprintf(format, a...)})
	}
	clusters := map[string]Cluster{}
	for i, c := range d.Clusters {
		f := fmt.Sprintf("clusters[%d]", i)
		switch {
		case !keys.ValidID(c.ID):
			add(f+".id", "invalid_id", "cluster id must match ^[A-Za-z0-9_-]{1,128}$")
			continue
		case clusters[c.ID].ID != "":
			add(f+".id", "duplicate", "cluster %s listed twice", c.ID)
		}
		clusters[c.ID] = c
		if c.Capacity < 1 || c.Capacity >= 1<<53 {
			add(f+".capacity", "invalid_capacity", "capacity must be a positive integer below 2^53")
		}
		if !(c.ReservedRatio >= 0 && c.ReservedRatio < 1) {
			add(f+".reserved_ratio", "invalid_reserved_ratio", "reserved_ratio must be in [0, 1)")
		}
		if cc := c.Connections; cc != nil && (cc.MaxConnections < 1 || cc.MaxConnections >= 1<<53 ||
			!(cc.ReservedRatio >= 0 && cc.ReservedRatio < 1)) {
			add(f+".connections", "invalid_connections", "max_connections must be positive, reserved_ratio in [0, 1)")
		}
	}
	apps := map[string]bool{}
	guaranteed := map[string]int64{}
	keyOwner, bucketOwner := map[string]string{}, map[string]string{}
	for i, a := range d.Apps {
		f := fmt.Sprintf("apps[%d]", i)
		if !keys.ValidID(a.AppID) {
			add(f+".app_id", "invalid_id", "app id must match ^[A-Za-z0-9_-]{1,128}$")
			continue
		}
		if apps[a.AppID] {
			add(f+".app_id", "duplicate", "app %s listed twice", a.AppID)
		}
		apps[a.AppID] = true
		if _, ok := clusters[a.ClusterID]; !ok {
			add(f+".cluster_id", "unknown_cluster", "app %s: cluster %q is not in the document", a.AppID, a.ClusterID)
		}
		const max = 1 << 53
		switch {
		case a.GuaranteedQuota < 1 || a.GuaranteedQuota >= max:
			add(f+".guaranteed_quota", "invalid_guaranteed_quota", "guaranteed_quota must be a positive integer")
		case a.BurstQuota < a.GuaranteedQuota || a.BurstQuota >= max:
			add(f+".burst_quota", "burst_below_guaranteed", "burst_quota must be at least guaranteed_quota")
		}
		if a.Priority < 0 || a.Priority > 3 {
			add(f+".priority", "invalid_priority", "priority must be 0 to 3")
		}
		if a.CBw < 0 || a.CBw >= max {
			add(f+".c_bw", "invalid_c_bw", "c_bw must be a non-negative integer")
		}
		if a.MaxBorrow < 0 || a.MaxBorrow >= max {
			add(f+".max_borrow", "invalid_max_borrow", "max_borrow must be a non-negative integer")
		}
		if l := a.Connections; l != nil && (l.MaxConnections < 1 || l.BurstConnections < l.MaxConnections ||
			l.BurstConnections >= max) {
			add(f+".connections", "invalid_connections", "max_connections must be positive and burst_connections at least it")
		}
		guaranteed[a.ClusterID] += a.GuaranteedQuota
		for j, k := range a.AccessKeys {
			switch {
			case !store.ValidAccessKey(k):
				add(fmt.Sprintf("%s.access_keys[%d]", f, j), "invalid_access_key", "not an access key id")
			case keyOwner[k] != "":
				add(fmt.Sprintf("%s.access_keys[%d]", f, j), "duplicate", "access key %s listed for %s and %s", k, keyOwner[k], a.AppID)
			}
			keyOwner[k] = a.AppID
		}
		listed := map[string]bool{}
		for _, k := range a.AccessKeys {
			listed[k] = true
		}
		for k, v := range a.AccessKeySecrets {
			if _, err := secrets.KeyIDOf(v); err != nil || !listed[k] {
				add(fmt.Sprintf("%s.access_key_secrets[%s]", f, k), "invalid_secret",
					"a sealed secret (as exported with secrets) of one of the app's access_keys")
			}
		}
		for j, b := range a.Buckets {
			switch {
			case !store.ValidBucket(b):
				add(fmt.Sprintf("%s.buckets[%d]", f, j), "invalid_bucket", "not a valid S3 bucket name")
			case bucketOwner[b] != "":
				add(fmt.Sprintf("%s.buckets[%d]", f, j), "duplicate", "bucket %s listed for %s and %s", b, bucketOwner[b], a.AppID)
			}
			bucketOwner[b] = a.AppID
		}
	}
	for id, g := range guaranteed {
		c, ok := clusters[id]
		if ok && float64(g) > math.Floor(float64(c.Capacity)*(1-c.ReservedRatio)+1e-6) {
			add("clusters["+id+"]", "over_allocation",
				"cluster %s: the apps' guaranteed quotas (%d) exceed its non-reserved capacity", id, g)
		}
	}
	known := func(id string) bool { return apps[id] }
	seen := map[string]bool{}
	for i, r := range d.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		fields, err := ruleFields(r)
		if err != nil {
			add(f, "invalid_rule", "%v", err)
			continue
		}
		built, rvs := rules.BuildRule(fields, r.ID, known, nil)
		for _, v := range rvs {
			add(f+"."+v.Field, v.Code, "%s", v.Message)
		}
		if len(rvs) == 0 && seen[built.ID] {
			add(f+".id", "duplicate", "rule %s listed twice", built.ID)
		}
		seen[built.ID] = true
	}
	seen = map[string]bool{}
	for i, b := range d.Breakers {
		f := fmt.Sprintf("breakers[%d]", i)
		if !keys.ValidID(b.Name) {
			add(f+".name", "invalid_id", "breaker name must match ^[A-Za-z0-9_-]{1,128}$")
			continue
		}
		_, bvs := rules.BuildBreaker(breakerFields(b), b.Name)
		for _, v := range bvs {
			add(f+"."+v.Field, v.Code, "%s", v.Message)
		}
		if seen[b.Name] {
			add(f+".name", "duplicate", "breaker %s listed twice", b.Name)
		}
		seen[b.Name] = true
	}
	if d.Users != nil {
		admins := 0
		seen = map[string]bool{}
		for i, u := range d.Users {
			f := fmt.Sprintf("users[%d]", i)
			if !keys.ValidID(u.Username) || seen[u.Username] {
				add(f+".username", "invalid_username", "user name invalid or listed twice")
			}
			seen[u.Username] = true
			if _, err := auth.ParseRole(string(u.Role)); err != nil {
				add(f+".role", "invalid_role", "role must be viewer, operator or admin")
			}
			if !strings.HasPrefix(u.PasswordHash, "$2") {
				add(f+".password_hash", "invalid_password_hash", "password_hash must be a bcrypt hash")
			}
			if u.Role == auth.Admin && !u.Disabled {
				admins++
			}
		}
		if admins == 0 {
			add("users", "no_admin", "the users must include an enabled admin")
		}
	}
	if d.JWTSecret != "" {
		if b, err := hex.DecodeString(d.JWTSecret); err != nil || len(b) < 32 {
			add("jwt_secret", "invalid_jwt_secret", "jwt_secret must be hex of at least 32 bytes")
		}
	}
	return vs
}

// ruleFields turns a stored rule back into the fields BuildRule checks.
func ruleFields(r rules.Rule) (rules.RuleFields, error) {
	var f rules.RuleFields
	b, err := json.Marshal(r)
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	return f, err
}

func breakerFields(b rules.Breaker) rules.BreakerFields {
	var f rules.BreakerFields
	j, _ := json.Marshal(b)
	_ = json.Unmarshal(j, &f)
	return f
}
