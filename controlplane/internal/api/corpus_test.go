package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// corpusCase is one entry of the conformance corpus of testdata/rules and testdata/breakers
// (testdata/README.md): a rule, or a breaker config with the name it is stored under, and for
// an invalid one the field and reason every validator must give.
type corpusCase struct {
	Name    string          `json:"name"`
	Rule    json.RawMessage `json:"rule"`
	Breaker string          `json:"breaker"`
	Config  json.RawMessage `json:"config"`
	Field   string          `json:"field"`
	Reason  string          `json:"reason"`
}

func loadCorpus(t *testing.T, name string) []corpusCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var cs []corpusCase
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(cs) == 0 {
		t.Fatalf("%s holds no case", name)
	}
	return cs
}

// refusedFor: the answer refuses the body for exactly one reason, the case's — a 400 of the
// strict decoding (a wrong type) or a dry run's single violation.
func refusedFor(res result, c corpusCase) bool {
	if res.code == 400 && res.errCode() == c.Reason {
		return res.str("error", "details", "field") == c.Field
	}
	vs, _ := res.get("data", "validation", "violations").([]any)
	return res.code == 200 && res.get("data", "validation", "valid") == false && len(vs) == 1 &&
		violation(res, c.Field, c.Reason)
}

// TestConformanceCorpus: the API's dry runs accept every valid rule and breaker config of the
// corpus and refuse every invalid one with its field and reason; the gateway's parser
// (t/lua/rules_spec.lua, breaker_config_spec.lua) and the console (web/src/utils/*.test.ts)
// run the same files.
func TestConformanceCorpus(t *testing.T) {
	f := newFixture(t)
	f.seed(t)
	tok := f.admin(t)
	for _, c := range loadCorpus(t, "rules/valid.json") {
		res := f.call(t, "POST", "/api/v1/rules?dry_run=true", tok, []byte(c.Rule))
		if res.code != 200 || res.get("data", "validation", "valid") != true {
			t.Errorf("valid rule %q refused: %d %s", c.Name, res.code, res.raw)
		}
	}
	for _, c := range loadCorpus(t, "rules/invalid.json") {
		res := f.call(t, "POST", "/api/v1/rules?dry_run=true", tok, []byte(c.Rule))
		if !refusedFor(res, c) {
			t.Errorf("invalid rule %q: want only %s %s, got %d %s", c.Name, c.Field, c.Reason, res.code, res.raw)
		}
	}
	for _, c := range loadCorpus(t, "breakers/valid.json") {
		res := f.call(t, "PUT", "/api/v1/breakers/"+c.Breaker+"?dry_run=true", tok, []byte(c.Config))
		if res.code != 200 || res.get("data", "validation", "valid") != true {
			t.Errorf("valid breaker %q refused: %d %s", c.Name, res.code, res.raw)
		}
	}
	for _, c := range loadCorpus(t, "breakers/invalid.json") {
		res := f.call(t, "PUT", "/api/v1/breakers/"+c.Breaker+"?dry_run=true", tok, []byte(c.Config))
		if !refusedFor(res, c) {
			t.Errorf("invalid breaker %q: want only %s %s, got %d %s", c.Name, c.Field, c.Reason, res.code, res.raw)
		}
	}
}
