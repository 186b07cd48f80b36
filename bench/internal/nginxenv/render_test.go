package nginxenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Every variant renders to a config nginx accepts, with the backend block and the object.
func TestRenderedConfigsPassNginxCheck(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Fatalf("nginx is required: %v", err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			prefix := filepath.Join(dir, v.Name)
			conf, err := Render(v, Layout{Prefix: prefix, Repo: repoRoot(t), Listen: "127.0.0.1:1",
				MetricsListen: "127.0.0.1:3", Backend: "127.0.0.1:2", Workers: 2, LogLevel: "warn"})
			if err != nil {
				t.Fatal(err)
			}
			text, _ := os.ReadFile(conf)
			for _, want := range []string{"include " + prefix + "/conf/backend.conf;",
				"keepalive 64;", "access_log off;"} {
				if !strings.Contains(string(text), want) {
					t.Errorf("nginx.conf lacks %q", want)
				}
			}
			// the gateway's template sends requests with a body over connections of their own
			if !strings.Contains(string(text), "proxy_pass http://storage;") &&
				!strings.Contains(string(text), "proxy_pass http://$storage_pick;") {
				t.Errorf("nginx.conf proxies to neither storage nor $storage_pick")
			}
			has := strings.Contains(string(text), "tollgate_location.conf")
			if has != v.Tollgate() {
				t.Errorf("tollgate location include in nginx.conf = %v, want %v", has, v.Tollgate())
			}
			if fi, err := os.Stat(filepath.Join(prefix, "www", "bucket", "obj")); err != nil ||
				fi.Size() != ObjectSize {
				t.Fatalf("object: %v, %v", fi, err)
			}
			out, err := exec.Command("nginx", "-t", "-q", "-p", prefix, "-c", conf).CombinedOutput()
			if err != nil {
				t.Fatalf("nginx -t: %v\n%s", err, out)
			}
		})
	}
}

func TestParseL3(t *testing.T) {
	text := "# HELP ratelimit_l3_hits_total Requests admitted from the local lease.\n" +
		"# TYPE ratelimit_l3_hits_total counter\n" +
		"ratelimit_l3_hits_total 123456\n" +
		"ratelimit_l3_cache_hit_ratio 0.99\n" +
		"ratelimit_l3_misses_total 7\n"
	got, err := ParseL3(text)
	if err != nil || got != (L3{Hits: 123456, Misses: 7}) {
		t.Fatalf("ParseL3 = %+v, %v; want hits 123456, misses 7", got, err)
	}
	if got, err := ParseL3("ratelimit_requests_total{} 3\n"); err != nil || got != (L3{}) {
		t.Fatalf("ParseL3 without L3 series = %+v, %v; want zeros", got, err)
	}
}
