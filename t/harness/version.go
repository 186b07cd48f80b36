package harness

import (
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	versionOnce sync.Once
	version     string
	versionErr  error
)

// Version is what scripts/version.sh prints for the checkout (git describe, the VERSION file or
// "dev"): the harness builds the control plane with it and writes it into every gateway's
// tollgate_build.lua, as make build and scripts/render-gateway.sh do.
func Version(t testing.TB) string {
	t.Helper()
	versionOnce.Do(func() {
		out, err := exec.Command(filepath.Join(RepoRoot(), "scripts", "version.sh")).Output()
		version, versionErr = strings.TrimSpace(string(out)), err
	})
	if versionErr != nil || version == "" {
		t.Fatalf("harness: scripts/version.sh: %v", versionErr)
	}
	return version
}
