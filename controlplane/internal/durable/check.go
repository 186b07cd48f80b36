package durable

// Check: every violation of a document as a whole, before anything is applied.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"tollgate/controlplane/internal/auth"
	"tollgate/controlplane/internal/rules"
	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/secrets"
	"tollgate/internal/store"
)

// Check returns every violation of the document as a whole; empty when it can be applied to
// an empty store. The clusters, apps and connection limits are checked by the config contract
// (validate.CheckCluster, CheckApp, CheckClusterConnLimits, CheckAllocation), as the admin
// API checks them.
func Check(d Document) []validate.Violation { return check(d, nil) }

// check is Check against the store's current config cur (nil: an empty store): a cluster over
// its allocation cap in cur may stay so as long as the document does not add to the excess.
func check(d Document, cur *Document) []validate.Violation {
	vs := []validate.Violation{}
	add := func(field, code, format string, a ...any) {
		vs = append(vs, validate.Violation{Field: field, Code: code, Message: fmt.Sprintf(format, a...)})
	}
	clusters := map[string]Cluster{}
	for i, c := range d.Clusters {
		f := fmt.Sprintf("clusters[%d].", i)
		cvs := validate.CheckCluster(store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio})
		if !keys.ValidID(c.ID) {
			vs = append(vs, validate.Prefixed(f, cvs)...)
			continue
		}
		if clusters[c.ID].ID != "" {
			add(f+"id", "duplicate", "cluster %s listed twice", c.ID)
		}
		clusters[c.ID] = c
		vs = append(vs, validate.Prefixed(f, cvs)...)
		if cc := c.Connections; cc != nil {
			vs = append(vs, validate.Prefixed(f+"connections.", validate.CheckClusterConnLimits(*cc))...)
		}
	}
	apps := map[string]bool{}
	guaranteed := map[string]int64{}
	keyOwner, bucketOwner := map[string]string{}, map[string]string{}
	for i, a := range d.Apps {
		f := fmt.Sprintf("apps[%d]", i)
		vs = append(vs, validate.Prefixed(f+".", validate.CheckApp(validate.App{App: a.App, Connections: a.Connections}))...)
		if !keys.ValidID(a.AppID) {
			continue
		}
		if apps[a.AppID] {
			add(f+".app_id", "duplicate", "app %s listed twice", a.AppID)
		}
		apps[a.AppID] = true
		if _, ok := clusters[a.ClusterID]; !ok && keys.ValidID(a.ClusterID) {
			add(f+".cluster_id", "unknown_cluster", "app %s: cluster %q is not in the document", a.AppID, a.ClusterID)
		}
		guaranteed[a.ClusterID] += a.GuaranteedQuota
		for j, k := range a.AccessKeys {
			switch {
			case !store.ValidAccessKey(k):
				add(fmt.Sprintf("%s.access_keys[%d]", f, j), "invalid_access_key_id", "not an access key id")
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
	before, beforeCap := map[string]int64{}, map[string]int64{}
	if cur != nil {
		for _, c := range cur.Clusters {
			beforeCap[c.ID] = validate.Allocatable(c.Capacity, c.ReservedRatio)
		}
		for _, a := range cur.Apps {
			before[a.ClusterID] += a.GuaranteedQuota
		}
	}
	for _, id := range slices.Sorted(maps.Keys(guaranteed)) {
		c, ok := clusters[id]
		if !ok {
			continue
		}
		sc := store.Cluster{ID: c.ID, Capacity: c.Capacity, ReservedRatio: c.ReservedRatio}
		bc, had := beforeCap[id]
		if !had {
			bc = validate.Allocatable(c.Capacity, c.ReservedRatio)
		}
		if v := validate.CheckAllocation(sc, before[id], guaranteed[id], bc); v != nil {
			v.Field = "clusters[" + id + "]." + v.Field
			vs = append(vs, *v)
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
