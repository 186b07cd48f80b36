// Package openapi holds the admin API's OpenAPI 3 document (openapi.yaml, embedded), served as
// JSON at /api/v1/openapi.json. A test of the api package keeps its paths and methods identical
// to the registered routes.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var source []byte

// Operation is one method and path of the document, with the path in Gin's form (":id").
type Operation struct {
	Method  string
	Path    string
	Public  bool   // security: [] (no token)
	Summary string // the operation's summary (one line)
}

// JSON returns the document as JSON.
func JSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(source, &doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return json.Marshal(doc)
}

// Operations lists the document's operations, sorted.
func Operations() ([]Operation, error) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(source, &doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var out []Operation
	for path, ops := range doc.Paths {
		for method, node := range ops {
			if method == "parameters" {
				continue
			}
			var op struct {
				Security *[]any `yaml:"security"`
				Summary  string `yaml:"summary"`
			}
			if err := node.Decode(&op); err != nil {
				return nil, fmt.Errorf("openapi: %s %s: %w", method, path, err)
			}
			out = append(out, Operation{Method: strings.ToUpper(method), Path: ginPath(path),
				Public: op.Security != nil && len(*op.Security) == 0, Summary: op.Summary})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Method < out[j].Method
	})
	return out, nil
}

// ginPath turns "/apps/{id}" into "/apps/:id".
func ginPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			parts[i] = ":" + s[1:len(s)-1]
		}
	}
	return strings.Join(parts, "/")
}
