package api

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"tollgate/controlplane/internal/openapi"
)

// TestOpenAPIMatchesTheRoutes keeps the document identical to the route table: the same
// operations, and security: [] exactly on the public routes.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	f := newFixture(t)
	ops, err := openapi.Operations()
	if err != nil {
		t.Fatal(err)
	}
	isPublic := map[string]bool{}
	for _, p := range publicRoutes {
		isPublic[p] = true
	}
	var doc, routes []string
	for _, op := range ops {
		doc = append(doc, op.Method+" "+op.Path)
		if op.Public != isPublic[op.Method+" "+op.Path] {
			t.Errorf("%s %s: public in the document = %v", op.Method, op.Path, op.Public)
		}
	}
	for _, rt := range registered(t, f) {
		routes = append(routes, rt.Method+" "+rt.Path)
	}
	sort.Strings(doc)
	sort.Strings(routes)
	if strings.Join(doc, "\n") != strings.Join(routes, "\n") {
		t.Fatalf("document:\n%s\n\nroutes:\n%s", strings.Join(doc, "\n"), strings.Join(routes, "\n"))
	}
	res := f.call(t, "GET", "/api/v1/openapi.json", "", nil)
	var body map[string]any
	if res.code != 200 || json.Unmarshal([]byte(res.raw), &body) != nil || body["openapi"] != "3.0.3" {
		t.Fatalf("GET /api/v1/openapi.json = %d %.200s", res.code, res.raw)
	}
}
