// make dist's tarball: built by scripts/dist.sh (twice: the same bytes), unpacked, its
// SHA256SUMS and outer .sha256 verified with sha256sum, its binaries static and answering
// --version with the version in its name, the parts a release must carry present.
package t

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"tollgate/t/harness"
)

func TestDistTarballUnpacksVerifiesAndRuns(t *testing.T) {
	repo := harness.RepoRoot()
	if _, err := os.Stat(filepath.Join(repo, "web", "dist", "index.html")); err != nil {
		t.Skip("the console is not built (make build): make dist refuses to package without it")
	}
	out := t.TempDir()
	cmd := exec.Command(filepath.Join(repo, "scripts", "dist.sh"))
	cmd.Env = append(os.Environ(), "OUT_DIR="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dist.sh: %v\n%s", err, b)
	}
	version := harness.Version(t)
	name := "tollgate-" + version + "-linux-amd64"
	tarball := filepath.Join(out, name+".tar.gz")
	if got := strings.TrimSpace(string(b)); got != tarball {
		t.Fatalf("dist.sh printed %q, want %q", got, tarball)
	}
	// a second build of the same sources gives the same bytes (commit times, owners 0, gzip -n,
	// -trimpath)
	again := t.TempDir()
	cmd = exec.Command(filepath.Join(repo, "scripts", "dist.sh"))
	cmd.Env = append(os.Environ(), "OUT_DIR="+again)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dist.sh again: %v\n%s", err, b)
	}
	first, _ := os.ReadFile(filepath.Join(out, name+".tar.gz.sha256"))
	second, _ := os.ReadFile(filepath.Join(again, name+".tar.gz.sha256"))
	if len(first) == 0 || string(first) != string(second) {
		t.Errorf("two builds of the same sources differ:\n%s%s", first, second)
	}
	sum := exec.Command("sha256sum", "-c", name+".tar.gz.sha256")
	sum.Dir = out
	if b, err := sum.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c of the tarball: %v\n%s", err, b)
	}
	unpack := t.TempDir()
	if b, err := exec.Command("tar", "-xzf", tarball, "-C", unpack).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	top := filepath.Join(unpack, name)
	sum = exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	sum.Dir = top
	if b, err := sum.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, tail(string(b), 10))
	}
	// every file of the tarball is in SHA256SUMS
	sums, _ := os.ReadFile(filepath.Join(top, "SHA256SUMS"))
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.SplitN(line, "  ", 2); len(f) == 2 {
			listed[f[1]] = true
		}
	}
	_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(top, p)
			if rel != "SHA256SUMS" && !listed[rel] {
				t.Errorf("%s is not in SHA256SUMS", rel)
			}
		}
		return nil
	})
	for _, want := range []string{
		"usr/bin/tollgate-controlplane", "usr/bin/tollgate-demo-s3",
		"usr/share/tollgate/lua/tollgate/handler.lua", "usr/share/tollgate/lua/tollgate_build.lua",
		"usr/share/tollgate/nginx/tollgate_http.conf", "usr/share/tollgate/nginx/tollgate_location.conf",
		"usr/share/tollgate/nginx/tollgate_s3_errors.conf",
		"usr/share/tollgate/redis-scripts/_common.lua", "usr/share/tollgate/console/index.html",
		"usr/share/tollgate/deploy/prometheus/tollgate-alerts.yml",
		"usr/lib/systemd/system/tollgate-controlplane.service", "etc/tollgate/gateway.env",
		"docker-compose.yml", "Dockerfile", "VERSION", "scripts/stack.sh",
	} {
		if !listed[want] {
			t.Errorf("the tarball lacks %s", want)
		}
	}
	for _, bin := range []string{"tollgate-controlplane", "tollgate-demo-s3"} {
		path := filepath.Join(top, "usr", "bin", bin)
		b, err := exec.Command(path, "--version").Output()
		if want := bin + " " + version + " ("; err != nil || !strings.HasPrefix(string(b), want) {
			t.Errorf("%s --version = %q (%v), want %q…", bin, b, err, want)
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if interp := f.Section(".interp"); interp != nil {
			t.Errorf("%s is dynamically linked (has .interp): want a static binary", bin)
		}
		f.Close()
	}
}
