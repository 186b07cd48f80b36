package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateListsEveryProblem(t *testing.T) {
	ok := Config{Repo: "/r", Threads: 2, Connections: 64, Duration: 10 * time.Second,
		Warmup: 2 * time.Second, Rounds: 3, Workers: 2}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", ok, err)
	}
	bad := Config{Threads: 4, Connections: 2, Duration: 500 * time.Millisecond, Pairs: 3,
		Slice: 100 * time.Millisecond}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted an empty config")
	}
	for _, want := range []string{"repository", "threads", "duration", "rounds", "pairs (3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %q: %v", want, err)
		}
	}
}

func TestFindRepoWalksUp(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module tollgate\n\ngo 1.24\n"),
		0o644); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "bench", "cmd", "x")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := FindRepo(deep)
	if err != nil || got != root {
		t.Fatalf("FindRepo = %q, %v; want %q", got, err, root)
	}
	if _, err := FindRepo(t.TempDir()); err == nil {
		t.Error("FindRepo found a repository in an unrelated directory")
	}
}
