package api

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tollgate/controlplane/internal/openapi"
)

var updateAPIDoc = flag.Bool("update-api-doc", false, "rewrite the route table of docs/api.md")

const (
	apiDocPath   = "../../../docs/api.md"
	routesBegin  = "<!-- BEGIN ROUTES (generated; do not edit) -->"
	routesEnd    = "<!-- END ROUTES -->"
	apiDocUpdate = "go test ./controlplane/internal/api -run TestAPIDocListsTheRoutes -update-api-doc"
)

// accessName is how docs/api.md names the access level of a route.
func accessName(a access) string {
	switch a {
	case public:
		return "public"
	case viewer:
		return "viewer"
	case operator:
		return "operator"
	case admin:
		return "admin"
	case scrape:
		return "viewer, or the metrics token"
	case viewerWrite:
		return "viewer (own account)"
	}
	panic(fmt.Sprintf("access %d has no name", a))
}

// openAPIPath turns Gin's "/apps/:id" back into the document's "/apps/{id}".
func openAPIPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

// routeTable renders the route table of docs/api.md: every route in the order of the route
// table, with its least role and the OpenAPI document's summary.
func routeTable(t *testing.T) string {
	t.Helper()
	ops, err := openapi.Operations()
	if err != nil {
		t.Fatal(err)
	}
	summary := map[string]string{}
	for _, op := range ops {
		summary[op.Method+" "+op.Path] = op.Summary
	}
	var b strings.Builder
	b.WriteString("| method | path | role | what |\n|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, rt := range (*server)(nil).table() {
		key := rt.method + " " + rt.path
		s, ok := summary[key]
		if !ok {
			t.Errorf("%s is registered but not in the OpenAPI document", key)
			continue
		}
		if strings.TrimSpace(s) == "" {
			t.Errorf("%s has no summary in the OpenAPI document", key)
		}
		seen[key] = true
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", rt.method, openAPIPath(rt.path),
			accessName(rt.access), strings.ReplaceAll(strings.TrimSpace(s), "|", `\|`))
	}
	for key := range summary {
		if !seen[key] {
			t.Errorf("%s is in the OpenAPI document but not registered", key)
		}
	}
	return b.String()
}

// TestAPIDocListsTheRoutes keeps the route table of docs/api.md identical to what the OpenAPI
// document and the route table say; with -update-api-doc it rewrites the table instead.
func TestAPIDocListsTheRoutes(t *testing.T) {
	want := routeTable(t)
	path := filepath.FromSlash(apiDocPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, routesBegin)
	j := strings.Index(doc, routesEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q … %q block", path, routesBegin, routesEnd)
	}
	start := i + len(routesBegin) + 1
	if got := doc[start:j]; got != want {
		if *updateAPIDoc {
			if err := os.WriteFile(path, []byte(doc[:start]+want+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote the route table of %s", path)
			return
		}
		t.Fatalf("the route table of %s is not what the OpenAPI document says; run\n  %s\n"+
			"got:\n%s\nwant:\n%s", path, apiDocUpdate, got, want)
	}
}
