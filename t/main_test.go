package t

import (
	"os"
	"testing"

	"tollgate/t/harness"
)

// TestMain removes what the harness built once for all the tests (the control plane binary)
// when they are done, so test runs leave nothing in the temp directory.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
