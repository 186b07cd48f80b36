package rules

import (
	"encoding/json"
	"reflect"
	"sort"

	"tollgate/controlplane/internal/validate"
)

// bookkeeping fields the API sets itself: never part of a diff.
var bookkeeping = map[string]bool{"created_at": true, "updated_at": true, "updated_by": true}

// diff lists the fields of cur that differ from old (nil: created), one entry per field with
// the path "<prefix>.<field>" (match fields one level deeper), sorted by path. A field present
// in old and absent in cur has New nil.
func diff(prefix string, old, cur any) []validate.DiffEntry {
	o, n := flatten(old), flatten(cur)
	paths := map[string]bool{}
	for k := range o {
		paths[k] = true
	}
	for k := range n {
		paths[k] = true
	}
	out := []validate.DiffEntry{}
	for p := range paths {
		ov, inOld := o[p]
		nv, inNew := n[p]
		if inOld && inNew && reflect.DeepEqual(ov, nv) {
			continue
		}
		out = append(out, validate.DiffEntry{Path: prefix + "." + p, Old: ov, New: nv})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// flatten turns a rule or breaker into field -> JSON value, with "match.<field>" for the
// fields of a match object; nil gives an empty map.
func flatten(v any) map[string]any {
	out := map[string]any{}
	if v == nil || reflect.ValueOf(v).IsNil() {
		return out
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return out
	}
	for k, val := range m {
		if bookkeeping[k] {
			continue
		}
		if sub, ok := val.(map[string]any); ok && k == "match" {
			for sk, sv := range sub {
				out[k+"."+sk] = sv
			}
			continue
		}
		out[k] = val
	}
	return out
}
