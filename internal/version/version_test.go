package version

import (
	"strings"
	"testing"
)

func TestStringNamesProgramAndVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v1.2.3-4-gabcdef0-dirty"
	s := String("tollgate-controlplane")
	if !strings.HasPrefix(s, "tollgate-controlplane v1.2.3-4-gabcdef0-dirty (go") {
		t.Fatalf("String = %q", s)
	}
}
