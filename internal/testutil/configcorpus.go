package testutil

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// ConfigCase is one entry of the config contract's corpus, testdata/config/ (testdata/README.md):
// an app (the API's create body), a cluster (id, capacity, reserved_ratio; allocated: its apps
// already guarantee that much) or connection limits (scope app or cluster), and for an invalid
// one the field and reason every checker must give.
type ConfigCase struct {
	Name      string         `json:"name"`
	App       map[string]any `json:"app"`
	Cluster   map[string]any `json:"cluster"`
	Allocated int64          `json:"allocated"`
	Scope     string         `json:"scope"`
	Limits    map[string]any `json:"limits"`
	Field     string         `json:"field"`
	Reason    string         `json:"reason"`
}

// LoadConfigCorpus reads testdata/config/<name> (found from the test's directory upwards); a file
// that is missing, malformed or empty fails the test.
func LoadConfigCorpus(t testing.TB, name string) []ConfigCase {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
	b, err := os.ReadFile(filepath.Join(dir, "testdata", "config", name))
	if err != nil {
		t.Fatal(err)
	}
	var cs []ConfigCase
	if err := json.Unmarshal(b, &cs); err != nil || len(cs) == 0 {
		t.Fatalf("%s: %v (%d cases)", name, err, len(cs))
	}
	return cs
}
