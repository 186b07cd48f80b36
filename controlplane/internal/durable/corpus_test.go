package durable

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"tollgate/internal/testutil"
)

// configCase is one entry of the config contract's corpus, testdata/config/.
type configCase = testutil.ConfigCase

func loadCorpus(t *testing.T, name string) []configCase {
	return testutil.LoadConfigCorpus(t, name)
}

var fieldPrefix = regexp.MustCompile(`^(apps|clusters)\[[^\]]*\]\.(connections\.)?`)

// defaults fills what an import document always holds (it is an export) and a case may leave
// out: the contract's defaults of the optional fields.
func defaults(m map[string]any, d map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range d {
		out[k] = v
	}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// docOf is the import document of a case, and the store's config before it (cur).
func docOf(c configCase) (doc, cur map[string]any) {
	corpus := map[string]any{"id": "corpus", "capacity": 1000, "reserved_ratio": 0.1}
	doc = map[string]any{"kind": Kind, "clusters": []any{corpus}, "apps": []any{}}
	cur = map[string]any{"kind": Kind, "clusters": []any{corpus}, "apps": []any{}}
	app := func(extra map[string]any) map[string]any {
		a := defaults(extra, map[string]any{"app_id": "a1", "cluster_id": "corpus", "guaranteed_quota": 1,
			"burst_quota": 1, "priority": 1, "c_bw": 1, "max_borrow": 0, "enabled": true})
		if m, ok := a["max_connections"]; ok {
			conn := map[string]any{"max_connections": m, "burst_connections": m}
			if b, ok := a["burst_connections"]; ok {
				conn["burst_connections"] = b
			}
			a["connections"] = conn
		}
		delete(a, "max_connections")
		delete(a, "burst_connections")
		return a
	}
	switch {
	case c.App != nil:
		doc["apps"] = []any{app(c.App)}
	case c.Cluster != nil:
		cl := defaults(c.Cluster, map[string]any{"reserved_ratio": 0.1})
		doc["clusters"] = []any{cl}
		cur["clusters"] = []any{}
		if c.Allocated > 0 { // the store holds the cluster, larger, with an app guaranteed Allocated
			held := map[string]any{"id": cl["id"], "capacity": 1000000, "reserved_ratio": 0}
			a := app(map[string]any{"cluster_id": cl["id"], "guaranteed_quota": c.Allocated, "burst_quota": c.Allocated})
			cur["clusters"], cur["apps"], doc["apps"] = []any{held}, []any{a}, []any{a}
		}
	case c.Scope == "cluster":
		corpus["connections"] = defaults(c.Limits, map[string]any{"reserved_ratio": 0.1})
	default:
		doc["apps"] = []any{app(c.Limits)}
	}
	return doc, cur
}

func decoded(t *testing.T, v map[string]any) (Document, error) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return Decode(b)
}

// TestConfigContractCorpus: an import (Decode, then Plan against the store's config) accepts
// every valid app, cluster and connection limit of testdata/config/ and refuses every invalid
// one with its field and reason — a wrong type as a document that does not decode. Cases of a
// required field are the API's and the console's: an import document is an export and always
// holds every field.
func TestConfigContractCorpus(t *testing.T) {
	run := func(c configCase) (Document, []string, error) {
		doc, cur := docOf(c)
		d, err := decoded(t, doc)
		if err != nil {
			return d, nil, err
		}
		cd, err := decoded(t, cur)
		if err != nil {
			t.Fatalf("%s: the store's config: %v", c.Name, err)
		}
		var got []string
		for _, v := range Plan(cd, d) {
			got = append(got, fieldPrefix.ReplaceAllString(v.Field, "")+" "+v.Code)
		}
		return d, got, nil
	}
	for _, name := range []string{"apps", "clusters", "connections"} {
		for _, c := range loadCorpus(t, name+"/valid.json") {
			if _, got, err := run(c); err != nil || len(got) > 0 {
				t.Errorf("valid %s %q refused: %v %v", name, c.Name, err, got)
			}
		}
		for _, c := range loadCorpus(t, name+"/invalid.json") {
			if c.Reason == "required" {
				continue
			}
			_, got, err := run(c)
			var de *DecodeError
			switch {
			case c.Reason == "invalid_type":
				if !errors.As(err, &de) {
					t.Errorf("invalid %s %q: decoded (%v), want a wrong type refused", name, c.Name, got)
				}
			case err != nil || len(got) != 1 || got[0] != c.Field+" "+c.Reason:
				t.Errorf("invalid %s %q: want only %s %s, got %v %v", name, c.Name, c.Field, c.Reason, err, got)
			}
		}
	}
}
