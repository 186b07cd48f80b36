// make run / make up build the console only when one of its sources changed since the last
// build: on an unchanged tree, `make web` has nothing to do.
package t

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tollgate/t/harness"
)

func TestMakeBuildsTheConsoleOnlyWhenItsSourcesChanged(t *testing.T) {
	repo := harness.RepoRoot()
	built, err := os.Stat(filepath.Join(repo, "web", "dist", "index.html"))
	if err != nil {
		t.Skip("the console is not built (make web)")
	}
	newer := ""
	_ = filepath.Walk(filepath.Join(repo, "web", "src"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && fi.ModTime().After(built.ModTime()) {
			newer = p
		}
		return nil
	})
	if newer != "" {
		t.Skipf("%s changed since the console's last build (make web)", newer)
	}
	dry := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "-C", repo}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := dry("web"); strings.Contains(out, "npm run build") {
		t.Fatalf("make web on an unchanged tree rebuilds the console:\n%s", out)
	}
	for _, src := range []string{"web/src/App.vue", "web/package-lock.json", "web/index.html"} {
		if out := dry("-W", src, "web"); !strings.Contains(out, "npm run build") {
			t.Fatalf("make web after a change of %s does not build the console:\n%s", src, out)
		}
	}
}
