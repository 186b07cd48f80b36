package runner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tollgate/bench/internal/redisenv"
)

// benchMatches tells whether rule r matches the benchmark's request (GET /bucket/obj with
// X-App-Id and no other header a rule reads): the contract's semantics for the fields the mixes
// use.
func benchMatches(t *testing.T, r map[string]any) bool {
	m, _ := r["match"].(map[string]any)
	if r["scope"] == "user" {
		return false // no X-User-Id, no Authorization
	}
	for k, v := range m {
		switch k {
		case "app_ids", "methods":
			want := map[string]string{"app_ids": redisenv.AppID, "methods": "GET"}[k]
			found := false
			for _, x := range v.([]string) {
				found = found || x == want
			}
			if !found {
				return false
			}
		case "bucket":
			if v != "bucket" {
				return false
			}
		case "key_prefix":
			if !strings.HasPrefix("obj", v.(string)) {
				return false
			}
		case "path":
			g := v.(string)
			if !strings.HasSuffix(g, "/**") || strings.Contains(strings.TrimSuffix(g, "/**"), "*") {
				t.Fatalf("rule %s: glob %q is not a prefix glob", r["id"], g)
			}
			if !strings.HasPrefix("/bucket/obj", strings.TrimSuffix(g, "**")) {
				return false
			}
		case "headers":
			for name, val := range v.(map[string]string) {
				if name != "X-App-Id" || val != redisenv.AppID {
					return false
				}
			}
		default:
			t.Fatalf("rule %s: match field %s not modelled", r["id"], k)
		}
	}
	return true
}

// The realistic mix: the benchmark's request matches 5 of 10 rules and 6 of 100 (the claim of
// RuleMix); the old mix: all of them.
func TestBenchRulesMatchWhatTheMixSays(t *testing.T) {
	count := func(rs []map[string]any) int {
		n := 0
		for _, r := range rs {
			if benchMatches(t, r) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct{ n, want int }{{10, 5}, {100, 6}} {
		if got := count(BenchRules(c.n)); got != c.want {
			t.Errorf("BenchRules(%d): the request matches %d rules, want %d", c.n, got, c.want)
		}
		if got := count(BenchRulesAllMatch(c.n)); got != c.n {
			t.Errorf("BenchRulesAllMatch(%d): the request matches %d rules, want all", c.n, got)
		}
	}
}

// Every rule of both mixes is one the gateway's parser accepts (a refused rule would be left
// out of the benchmark silently): the Lua parser under luajit, as t/lua runs it.
func TestBenchRulesParseInTheGateway(t *testing.T) {
	if _, err := exec.LookPath("luajit"); err != nil {
		t.Skip("luajit not installed")
	}
	repo, err := FindRepo(".")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(append(BenchRules(100), BenchRulesAllMatch(100)...))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
package.path = "lua/?.lua;" .. package.path
ngx = { log = function() end, ERR = 0 }
local cjson = require("cjson.safe")
local parse = require("tollgate.rules.parse")
local f = assert(io.open(arg[1]))
local n = 0
for _, r in ipairs(cjson.decode(f:read("*a"))) do
    local ok, field, reason = parse.parse(r.id, cjson.encode(r))
    if not ok then
        error(r.id .. ": " .. tostring(field) .. " " .. tostring(reason))
    end
    n = n + 1
end
print(n)`
	lua := filepath.Join(dir, "parse.lua")
	if err := os.WriteFile(lua, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("luajit", lua, file)
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the gateway's parser refused a bench rule: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "200" {
		t.Fatalf("parsed %q rules, want 200", out)
	}
}
