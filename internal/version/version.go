// Package version is the build's version: `git describe --always --dirty --tags` of the
// checkout it was built from, set by the Makefile with
//
//	-ldflags "-X tollgate/internal/version.Version=<version>"
//
// (scripts/version.sh computes it; without git it reads the VERSION file, else "dev"). A plain
// `go build` or `go test` leaves "dev".
package version

import (
	"fmt"
	"runtime"
)

// Version of this build ("dev" when the linker did not set it).
var Version = "dev"

// String is the line `--version` prints: program, version, Go version and platform.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
