package durable

// Diff: the fields two documents disagree on, by path.

import (
	"encoding/json"
	"sort"
	"strconv"

	"tollgate/controlplane/internal/validate"
)

// Diff lists the fields that differ from old to cur, by path ("apps[demo-p1].burst_quota");
// users' password hashes and the secret show as "(secret)".
func Diff(old, cur Document) []validate.DiffEntry {
	a, b := flatten(old), flatten(cur)
	paths := map[string]bool{}
	for k := range a {
		paths[k] = true
	}
	for k := range b {
		paths[k] = true
	}
	out := []validate.DiffEntry{}
	for p := range paths {
		x, okx := a[p]
		y, oky := b[p]
		if okx && oky && x == y {
			continue
		}
		e := validate.DiffEntry{Path: p}
		if okx {
			e.Old = x
		}
		if oky {
			e.New = y
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func flatten(d Document) map[string]any {
	out := map[string]any{}
	put := func(prefix string, v any) {
		j, _ := json.Marshal(v)
		var m any
		_ = json.Unmarshal(j, &m)
		walk(prefix, m, out)
	}
	for _, c := range d.Clusters {
		put("clusters["+c.ID+"]", c)
	}
	for _, a := range d.Apps {
		if a.AccessKeySecrets != nil {
			hidden := make(map[string]string, len(a.AccessKeySecrets))
			for k, v := range a.AccessKeySecrets {
				hidden[k] = "(secret " + shortHash(v) + ")"
			}
			a.AccessKeySecrets = hidden
		}
		put("apps["+a.AppID+"]", a)
	}
	for _, r := range d.Rules {
		put("rules["+r.ID+"]", r)
	}
	for _, b := range d.Breakers {
		put("breakers["+b.Name+"]", b)
	}
	for _, u := range d.Users {
		u.PasswordHash = "(secret " + shortHash(u.PasswordHash) + ")"
		put("users["+u.Username+"]", u)
	}
	if d.JWTSecret != "" {
		out["jwt_secret"] = "(secret " + shortHash(d.JWTSecret) + ")"
	}
	return out
}

// shortHash tells two secrets apart in a diff without showing them.
func shortHash(s string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return strconv.FormatUint(uint64(h), 16)
}

func walk(prefix string, v any, out map[string]any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			walk(prefix+"."+k, e, out)
		}
	case []any:
		j, _ := json.Marshal(x)
		out[prefix] = string(j)
	default:
		out[prefix] = x
	}
}
