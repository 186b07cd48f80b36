// make install: the FHS layout, the systemd units (systemd-analyze verify), and a control
// plane, demo backend and gateway (real nginx) started from the installed files alone against a
// private redis-server.
package t

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

// buildBins puts the control plane (the harness' build) and the demo backend, both with the
// checkout's version linked in, into a temporary directory for make install's BIN_DIR.
func buildBins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cp, err := os.ReadFile(harness.ControlPlaneBinary(t))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tollgate-controlplane"), cp, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-ldflags",
		"-X tollgate/internal/version.Version="+harness.Version(t), "-o", dir+"/", "./demo/cmd/tollgate-demo-s3")
	cmd.Dir = harness.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build demo: %v\n%s", err, out)
	}
	return dir
}

func makeInstall(t *testing.T, bins string, vars ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "install", "BIN_DIR=" + bins}, vars...)...)
	cmd.Dir = harness.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install %v: %v\n%s", vars, err, out)
	}
}

// envFile reads a systemd EnvironmentFile (KEY=VALUE lines, # comments).
func envFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

// edit replaces old by new in an installed file, as an operator edits it (old must be there).
func edit(t *testing.T, path string, pairs ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("%s has no %q", path, pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	if err := os.WriteFile(path, []byte(s), 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestInstallLayoutAndUnits(t *testing.T) {
	bins := buildBins(t)
	root := t.TempDir()
	makeInstall(t, bins, "DESTDIR="+root, "PREFIX=/usr")
	for path, mode := range map[string]os.FileMode{
		"usr/bin/tollgate-controlplane":                        0o755,
		"usr/bin/tollgate-demo-s3":                             0o755,
		"usr/share/tollgate/lua/tollgate/handler.lua":          0o644,
		"usr/share/tollgate/lua/tollgate_build.lua":            0o644,
		"usr/share/tollgate/redis-scripts/_common.lua":         0o644,
		"usr/share/tollgate/nginx/tollgate_http.conf":          0o644,
		"usr/share/tollgate/nginx/tollgate_location.conf":      0o644,
		"usr/share/tollgate/nginx/tollgate_s3_errors.conf":     0o644,
		"usr/lib/systemd/system/tollgate-controlplane.service": 0o644,
		"usr/lib/systemd/system/nginx.service.d/tollgate.conf": 0o644,
		"etc/tollgate/controlplane.env":                        0o640, // secrets: not world-readable
		"etc/tollgate/gateway.env":                             0o640,
		"usr/share/tollgate/nginx/tollgate_env.conf":           0o644,
		"etc/tollgate/nginx/tollgate-site.conf":                0o644,
		"etc/nginx/modules-enabled/90-tollgate.conf":           0o644,
		"etc/nginx/conf.d/tollgate.conf":                       0o644,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
		}
	}
	build, _ := os.ReadFile(filepath.Join(root, "usr/share/tollgate/lua/tollgate_build.lua"))
	if want := `return { version = "` + harness.Version(t) + `" }`; strings.TrimSpace(string(build)) != want {
		t.Errorf("tollgate_build.lua = %q, want %q", build, want)
	}
	httpConf, _ := os.ReadFile(filepath.Join(root, "usr/share/tollgate/nginx/tollgate_http.conf"))
	if !strings.Contains(string(httpConf), `lua_package_path "/usr/share/tollgate/lua/?.lua;;";`) {
		t.Errorf("installed tollgate_http.conf does not point at /usr/share/tollgate/lua:\n%s", httpConf)
	}
	unit, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/tollgate-controlplane.service"))
	for _, want := range []string{"ExecStart=/usr/bin/tollgate-controlplane\n", "StateDirectory=tollgate\n",
		"EnvironmentFile=/etc/tollgate/controlplane.env\n", "DynamicUser=yes\n", "ProtectSystem=strict\n",
		"NoNewPrivileges=yes\n", "CapabilityBoundingSet=\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", strings.TrimSpace(want))
		}
	}
	// a second install keeps the operator's settings and writes the new ones next to them
	edit(t, filepath.Join(root, "etc/tollgate/gateway.env"), "#TOLLGATE_NODE_ID=", "TOLLGATE_NODE_ID=gw-7")
	makeInstall(t, bins, "DESTDIR="+root, "PREFIX=/usr")
	if b, _ := os.ReadFile(filepath.Join(root, "etc/tollgate/gateway.env")); !strings.Contains(string(b), "TOLLGATE_NODE_ID=gw-7") {
		t.Error("a second make install overwrote the edited gateway.env")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/tollgate/gateway.env.new")); err != nil {
		t.Errorf("no gateway.env.new next to the edited one: %v", err)
	}
	verifyUnits(t, root)
}

// verifyUnits runs systemd-analyze verify on the control plane's unit (ExecStart pointed at the
// installed binary) and on Debian's nginx.service with the installed drop-in: no error and no
// warning about our files; and the unit's exposure (systemd-analyze security) at most 2.0.
func verifyUnits(t *testing.T, root string) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the units were checked by the assertions above only")
		return
	}
	dir := t.TempDir()
	unit, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/tollgate-controlplane.service"))
	u := strings.Replace(string(unit), "ExecStart=/usr/bin/", "ExecStart="+root+"/usr/bin/", 1)
	files := []string{filepath.Join(dir, "tollgate-controlplane.service")}
	if err := os.WriteFile(files[0], []byte(u), 0o644); err != nil {
		t.Fatal(err)
	}
	if nginxUnit, err := os.ReadFile("/lib/systemd/system/nginx.service"); err == nil {
		if err := os.MkdirAll(filepath.Join(dir, "nginx.service.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		dropin, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/nginx.service.d/tollgate.conf"))
		if !strings.Contains(string(dropin), "EnvironmentFile=/etc/tollgate/gateway.env\n") {
			t.Errorf("the nginx drop-in does not read /etc/tollgate/gateway.env:\n%s", dropin)
		}
		_ = os.WriteFile(filepath.Join(dir, "nginx.service.d", "tollgate.conf"), dropin, 0o644)
		_ = os.WriteFile(filepath.Join(dir, "nginx.service"), nginxUnit, 0o644)
		files = append(files, filepath.Join(dir, "nginx.service"))
	}
	out, err := exec.Command(sa, append([]string{"verify"}, files...)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "tollgate") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=yes", "--root="+root, "--threshold=20",
		"tollgate-controlplane.service").CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v):\n%s", err, tail(string(out), 5))
	}
	t.Logf("systemd-analyze security: %s", strings.TrimSpace(tail(string(out), 1)))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func TestInstalledStackServesRequests(t *testing.T) {
	bins := buildBins(t)
	root := t.TempDir()
	// the workers of a root nginx run as nobody: they must reach the installed Lua
	for _, d := range []string{root, filepath.Dir(root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// a temporary root as PREFIX/SYSCONFDIR, so the paths the install writes into the configs
	// are the ones its files are at
	makeInstall(t, bins, "PREFIX="+root+"/usr", "SYSCONFDIR="+root+"/etc")
	repo := harness.RepoRoot()
	if out, _ := exec.Command("grep", "-rlI", repo, root).Output(); len(out) > 0 {
		t.Fatalf("installed files refer to the checkout:\n%s", out)
	}
	r := testutil.StartRedis(t)
	free := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)) }
	cpAddr, backendAddr, gwAddr, metricsAddr := free(), free(), free(), free()
	token := strings.Repeat("t", 32)

	// the operator's edits of the installed settings
	cpEnv := filepath.Join(root, "etc/tollgate/controlplane.env")
	edit(t, cpEnv, "TOLLGATE_CP_ADDR=127.0.0.1:9090", "TOLLGATE_CP_ADDR="+cpAddr,
		"TOLLGATE_REDIS_URL=redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_URL="+r.URL(),
		"TOLLGATE_SEED_DEMO=false", "TOLLGATE_SEED_DEMO=true",
		"#TOLLGATE_METRICS_TOKEN=", "TOLLGATE_METRICS_TOKEN="+token)
	gwEnv := filepath.Join(root, "etc/tollgate/gateway.env")
	edit(t, gwEnv, "TOLLGATE_REDIS_URL=redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_URL="+r.URL(),
		"#TOLLGATE_NODE_ID=", "TOLLGATE_NODE_ID=gw-installed")
	edit(t, filepath.Join(root, "etc/tollgate/nginx/tollgate-site.conf"), "listen 8080 ", "listen "+gwAddr+" ",
		"listen 127.0.0.1:9145;", "listen "+metricsAddr+";", "server 127.0.0.1:9000;", "server "+backendAddr+";")

	bin := filepath.Join(root, "usr/bin")
	for _, b := range []string{"tollgate-controlplane", "tollgate-demo-s3"} {
		out, err := exec.Command(filepath.Join(bin, b), "--version").Output()
		if want := b + " " + harness.Version(t) + " ("; err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s --version = %q (%v), want %q…", b, out, err, want)
		}
	}
	// the unit's StateDirectory, which systemd would create: the control plane's run directory
	state := filepath.Join(root, "var/lib/tollgate")
	edit(t, cpEnv, "TOLLGATE_RUN_DIR=/var/lib/tollgate", "TOLLGATE_RUN_DIR="+state)
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "tollgate-controlplane"))
	cmd.Env = envFile(t, cpEnv) // systemd's EnvironmentFile: nothing else
	cmd.Dir = "/"               // systemd's working directory: nothing relative lands in the checkout
	harness.StartProcess(t, "control plane", cmd).WaitHTTP(t, "http://"+cpAddr+"/health", 20*time.Second)
	cmd = exec.Command(filepath.Join(bin, "tollgate-demo-s3"))
	cmd.Env = []string{"TOLLGATE_BACKEND_ADDR=" + backendAddr}
	harness.StartProcess(t, "demo backend", cmd).WaitHTTP(t, "http://"+backendAddr+"/health", 10*time.Second)

	// nginx.conf as Debian's: the modules, modules-enabled/*.conf in the main context,
	// conf.d/*.conf in http; the rest comes from the installed files
	run := filepath.Join(root, "run")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := `load_module /usr/share/nginx/modules/ndk_http_module.so;
load_module /usr/share/nginx/modules/ngx_http_lua_module.so;
include ` + root + `/etc/nginx/modules-enabled/*.conf;
worker_processes 2;
daemon off;
pid ` + run + `/nginx.pid;
error_log ` + run + `/logs/error.log notice;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path ` + run + `/tmp/body;
    proxy_temp_path ` + run + `/tmp/proxy;
    include ` + root + `/etc/nginx/conf.d/*.conf;
}
`
	if err := os.WriteFile(filepath.Join(run, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command("nginx", "-p", run, "-c", filepath.Join(run, "nginx.conf"))
	cmd.Env = envFile(t, gwEnv) // what the nginx.service drop-in passes
	gw := harness.StartProcess(t, "gateway", cmd)
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(run, "logs/error.log"))
			t.Logf("nginx error.log:\n%s", tail(string(b), 40))
		}
	}()
	var health struct {
		Status        string `json:"status"`
		NodeID        string `json:"node_id"`
		Version       string `json:"version"`
		ConfigVersion *int   `json:"config_version"`
	}
	harness.Eventually(t, 20*time.Second, "the installed gateway's /health with a config", func() bool {
		if gw.Exited() {
			t.Fatalf("nginx exited:\n%s", gw.Output())
		}
		res, err := http.Get("http://" + metricsAddr + "/health")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == 200 && json.NewDecoder(res.Body).Decode(&health) == nil && health.ConfigVersion != nil
	})
	if health.NodeID != "gw-installed" || health.Version != harness.Version(t) {
		t.Errorf("gateway /health = %+v, want node gw-installed, version %s", health, harness.Version(t))
	}

	// a request through the gateway to the backend: PUT then GET of an object
	do := func(method, body string) (*http.Response, string) {
		req, _ := http.NewRequest(method, "http://"+gwAddr+"/bucket/installed", strings.NewReader(body))
		req.Header.Set("X-App-Id", "demo-p1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := do("PUT", "hello from an installed gateway"); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Cost") != "6" {
		t.Fatalf("PUT through the installed gateway = %d cost %q: %s", res.StatusCode, res.Header.Get("X-RateLimit-Cost"), body)
	}
	if res, body := do("GET", ""); res.StatusCode != 200 || body != "hello from an installed gateway" {
		t.Fatalf("GET through the installed gateway = %d %q", res.StatusCode, body)
	}
	// the control plane's health and metrics carry the version
	res, err := http.Get("http://" + cpAddr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var cpHealth struct{ Version string }
	_ = json.NewDecoder(res.Body).Decode(&cpHealth)
	res.Body.Close()
	if cpHealth.Version != harness.Version(t) {
		t.Errorf("control plane /health version %q, want %q", cpHealth.Version, harness.Version(t))
	}
	req, _ := http.NewRequest("GET", "http://"+cpAddr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := `tollgate_build_info{component="controlplane",version="` + harness.Version(t) + `"} 1`; !strings.Contains(string(b), want) {
		t.Errorf("control plane /metrics lacks %s", want)
	}
	res, err = http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if want := `tollgate_build_info{component="gateway",node_id="gw-installed",version="` + harness.Version(t) + `"} 1`; !strings.Contains(string(b), want) {
		t.Errorf("gateway /metrics lacks %s", want)
	}
}
