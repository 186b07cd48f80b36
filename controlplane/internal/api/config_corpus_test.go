package api

import (
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"tollgate/internal/testutil"
)

// configCase is one entry of the config contract's corpus, testdata/config/.
type configCase = testutil.ConfigCase

func loadConfigCorpus(t *testing.T, name string) []configCase {
	return testutil.LoadConfigCorpus(t, name)
}

// contractField is a violation's field relative to the object checked, as the corpus names it:
// "apps[x].connections.max_connections" -> "max_connections",
// "clusters[c].guaranteed_quota" -> "guaranteed_quota", "cluster.capacity" -> "capacity".
var fieldPrefix = regexp.MustCompile(`^((apps|clusters)\[[^\]]*\]\.|cluster\.)(connections\.)?`)

func contractField(f string) string { return fieldPrefix.ReplaceAllString(f, "") }

// refusedAs: the answer refuses for exactly one reason, the case's — a 400 with that code (the
// strict decoding's invalid_type, a path id's invalid_id: naming the field when it names one)
// or a dry run's single violation.
func refusedAs(res result, c configCase) bool {
	if res.code == 400 && res.errCode() == c.Reason {
		f := res.str("error", "details", "field")
		return f == "" || contractField(f) == c.Field
	}
	vs, _ := res.get("data", "validation", "violations").([]any)
	if res.code != 200 || res.get("data", "validation", "valid") != false || len(vs) != 1 {
		return false
	}
	m, _ := vs[0].(map[string]any)
	f, _ := m["field"].(string)
	return contractField(f) == c.Field && m["code"] == c.Reason
}

func without(m map[string]any, k string) map[string]any {
	out := map[string]any{}
	for kk, v := range m {
		if kk != k {
			out[kk] = v
		}
	}
	return out
}

// TestConfigContractCorpus: the admin API's dry runs accept every valid app, cluster and
// connection limit of testdata/config/ and refuse every invalid one with its field and reason.
// The import (durable), the Redis scripts (internal/store), the gateway's parsers
// (t/lua/config_contract_spec.lua) and the console (web/src/utils/config.test.ts) run the same
// files.
func TestConfigContractCorpus(t *testing.T) {
	f := newFixture(t)
	tok := f.admin(t)
	must := func(r result) {
		t.Helper()
		if r.code != 200 && r.code != 201 {
			t.Fatalf("setup: %d %s", r.code, r.raw)
		}
	}
	must(f.call(t, "PUT", "/api/v1/clusters/corpus", tok, map[string]any{"capacity": 1000, "reserved_ratio": 0.1}))
	must(f.call(t, "PUT", "/api/v1/clusters/corpus-conn", tok, map[string]any{"capacity": 1000, "reserved_ratio": 0.1}))
	must(f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": "conn-app", "cluster_id": "corpus-conn",
		"guaranteed_quota": 1, "burst_quota": 1, "priority": 1}))

	for _, c := range loadConfigCorpus(t, "apps/valid.json") {
		res := f.call(t, "POST", "/api/v1/apps?dry_run=true", tok, c.App)
		if res.code != 200 || res.get("data", "validation", "valid") != true {
			t.Errorf("valid app %q refused: %d %s", c.Name, res.code, res.raw)
		}
	}
	for _, c := range loadConfigCorpus(t, "apps/invalid.json") {
		res := f.call(t, "POST", "/api/v1/apps?dry_run=true", tok, c.App)
		if !refusedAs(res, c) {
			t.Errorf("invalid app %q: want only %s %s, got %d %s", c.Name, c.Field, c.Reason, res.code, res.raw)
		}
	}
	cluster := func(i int, c configCase) result {
		id, _ := c.Cluster["id"].(string)
		if c.Allocated > 0 { // a cluster whose apps guarantee c.Allocated
			id = fmt.Sprintf("alloc%d", i)
			must(f.call(t, "PUT", "/api/v1/clusters/"+id, tok, map[string]any{"capacity": 1000000, "reserved_ratio": 0}))
			must(f.call(t, "POST", "/api/v1/apps", tok, map[string]any{"app_id": id + "-app", "cluster_id": id,
				"guaranteed_quota": c.Allocated, "burst_quota": c.Allocated, "priority": 1}))
		}
		return f.call(t, "PUT", "/api/v1/clusters/"+url.PathEscape(id)+"?dry_run=true", tok, without(c.Cluster, "id"))
	}
	for i, c := range loadConfigCorpus(t, "clusters/valid.json") {
		if res := cluster(i, c); res.code != 200 || res.get("data", "validation", "valid") != true {
			t.Errorf("valid cluster %q refused: %d %s", c.Name, res.code, res.raw)
		}
	}
	for i, c := range loadConfigCorpus(t, "clusters/invalid.json") {
		res := cluster(100+i, c)
		if !refusedAs(res, c) {
			t.Errorf("invalid cluster %q: want only %s %s, got %d %s", c.Name, c.Field, c.Reason, res.code, res.raw)
		}
	}
	conn := func(c configCase) result {
		if c.Scope == "cluster" {
			return f.call(t, "PUT", "/api/v1/clusters/corpus-conn/connections?dry_run=true", tok, c.Limits)
		}
		return f.call(t, "PUT", "/api/v1/connections/conn-app?dry_run=true", tok, c.Limits)
	}
	for _, c := range loadConfigCorpus(t, "connections/valid.json") {
		if res := conn(c); res.code != 200 || res.get("data", "validation", "valid") != true {
			t.Errorf("valid connection limits %q refused: %d %s", c.Name, res.code, res.raw)
		}
	}
	for _, c := range loadConfigCorpus(t, "connections/invalid.json") {
		if res := conn(c); !refusedAs(res, c) {
			t.Errorf("invalid connection limits %q: want only %s %s, got %d %s", c.Name, c.Field, c.Reason, res.code, res.raw)
		}
	}
}
