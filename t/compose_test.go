// docker-compose.yml and the Dockerfile, checked statically (containers cannot run in CI):
// docker-compose validates the file (Debian's docker-compose, no daemon needed), every TOLLGATE_*
// variable it sets or interpolates is a setting tollgate reads and documented (docs/settings.md,
// docs/operations.md), secrets only come from the uncommitted .env, every bind
// mount exists; the Dockerfile is multi-stage, builds a static binary and runs as non-root.
package t

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"tollgate/internal/scripts"
	"tollgate/internal/seed"
	"tollgate/internal/store"
	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

var settingName = regexp.MustCompile(`"(TOLLGATE_[A-Z0-9_]+)"`)

// readSettings is every TOLLGATE_* name the code reads: string literals of the gateway's Lua
// (lua/) and of the Go programs (controlplane/, demo/, internal/, tests excluded). The compose
// file's names must be among them and documented (docs/settings.md, docs/operations.md).
func readSettings(t *testing.T) map[string]bool {
	t.Helper()
	repo := harness.RepoRoot()
	names := map[string]bool{}
	for _, dir := range []string{"lua", "controlplane", "demo", "internal"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if !(strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go")) {
				return nil
			}
			b, err := os.ReadFile(p)
			for _, m := range settingName.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 40 {
		t.Fatalf("found only %d settings in the code: %v", len(names), names)
	}
	return names
}

type composeFile struct {
	Services map[string]struct {
		Image       string                                `yaml:"image"`
		Build       *struct{ Context, Dockerfile string } `yaml:"build"`
		Environment map[string]string                     `yaml:"environment"`
		EnvFile     any                                   `yaml:"env_file"`
		Volumes     []string                              `yaml:"volumes"`
		Ports       []string                              `yaml:"ports"`
		Command     any                                   `yaml:"command"`
		Entrypoint  any                                   `yaml:"entrypoint"`
	} `yaml:"services"`
}

var tollgateVar = regexp.MustCompile(`TOLLGATE_[A-Z0-9_]+`)

func TestComposeFileIsValidAndUsesDocumentedSettings(t *testing.T) {
	repo := harness.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(repo, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, s := range []string{"redis", "controlplane", "backend", "gateway", "prometheus", "grafana"} {
		if _, ok := cf.Services[s]; !ok {
			t.Errorf("no service %s", s)
		}
	}

	// every TOLLGATE_* name anywhere in the file (set or interpolated) is a setting
	known := readSettings(t)
	// docs/settings.md is the settings' schema (gateway and control plane); the demo backend's
	// and make run's variables are in docs/operations.md
	documented := ""
	source := "the TOLLGATE_* names the code reads (lua/, controlplane/, demo/, internal/)"
	if b, err := os.ReadFile(filepath.Join(repo, "docs", "settings.md")); err == nil {
		ops, _ := os.ReadFile(filepath.Join(repo, "docs", "operations.md"))
		documented = string(b) + string(ops)
		source += " and docs/settings.md or docs/operations.md"
	}
	t.Logf("settings checked against %s", source)
	var unknown []string
	for _, n := range tollgateVar.FindAllString(string(raw), -1) {
		if !known[n] || documented != "" && !strings.Contains(documented, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		t.Errorf("docker-compose.yml uses TOLLGATE_* names that are not settings (%s): %v", source, unknown)
	}

	// secrets are interpolated from .env, never written into the file
	for svc, s := range cf.Services {
		for k, v := range s.Environment {
			if secret := strings.Contains(k, "PASSWORD") || strings.Contains(k, "TOKEN") ||
				strings.Contains(k, "SECRET") || k == "TOLLGATE_REDIS_URL"; secret && !strings.Contains(v, "${") {
				t.Errorf("%s: %s is set in the file (%q), not taken from .env", svc, k, v)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %s is not bound to loopback", svc, p)
			}
		}
		// bind mounts name files of the checkout that exist
		for _, v := range s.Volumes {
			src := strings.SplitN(v, ":", 2)[0]
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join(repo, src)); err != nil {
					t.Errorf("%s: mount %s: %v", svc, v, err)
				}
			}
		}
	}
	if b := cf.Services["controlplane"].Build; b == nil || b.Dockerfile != "Dockerfile" {
		t.Errorf("controlplane is not built from the Dockerfile: %+v", b)
	}
	if c := strings.Join(flatten(cf.Services["redis"].Command), " "); !strings.Contains(c, "--appendonly yes") {
		t.Errorf("redis runs without AOF: %s", c)
	}
	if v := cf.Services["prometheus"].Volumes; !strings.Contains(strings.Join(v, " "), "deploy/prometheus/tollgate-alerts.yml:") {
		t.Errorf("prometheus without the alert rules: %v", v)
	}
	if v := cf.Services["grafana"].Volumes; !strings.Contains(strings.Join(v, " "), "./deploy/grafana:/var/lib/grafana/dashboards/tollgate:") {
		t.Errorf("grafana without the dashboards: %v", v)
	}
	// Grafana's provisioning: the compose Prometheus as data source, the mounted dashboards
	var prov struct {
		Datasources []struct{ URL string } `yaml:"datasources"`
		Providers   []struct {
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	for _, f := range []string{"datasources.yml", "dashboards.yml"} {
		b, err := os.ReadFile(filepath.Join(repo, "deploy", "compose", "grafana", f))
		if err == nil {
			err = yaml.Unmarshal(b, &prov)
		}
		if err != nil {
			t.Fatalf("grafana provisioning %s: %v", f, err)
		}
	}
	if len(prov.Datasources) != 1 || prov.Datasources[0].URL != "http://prometheus:9090" ||
		len(prov.Providers) != 1 || prov.Providers[0].Options.Path != "/var/lib/grafana/dashboards/tollgate" {
		t.Errorf("grafana provisioning does not point at the compose Prometheus and the mounted dashboards: %+v", prov)
	}
	if _, err := exec.LookPath("git"); err == nil {
		if err := exec.Command("git", "-C", repo, "check-ignore", "-q", ".env").Run(); err != nil {
			t.Errorf(".env (the compose secrets) is not ignored by git: %v", err)
		}
	}

	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose is not installed (scripts/install-deps.sh installs Debian's): only the checks above ran")
	}
	dir := t.TempDir()
	config := func(envFile string) ([]byte, error) {
		cmd := exec.Command(dc, "--project-directory", repo, "-f", filepath.Join(repo, "docker-compose.yml"),
			"--env-file", envFile, "config")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir} // none of the secrets
		return cmd.CombinedOutput()
	}
	// without the secrets docker-compose refuses the file
	empty := filepath.Join(dir, "empty.env")
	_ = os.WriteFile(empty, []byte("# nothing\n"), 0o600)
	if out, err := config(empty); err == nil || !strings.Contains(string(out), "REDIS_PASSWORD") {
		t.Errorf("docker-compose config without secrets: err %v, want a refusal naming REDIS_PASSWORD:\n%s", err, out)
	}
	full := filepath.Join(dir, "full.env")
	_ = os.WriteFile(full, []byte("REDIS_PASSWORD=r3d1s\nTOLLGATE_ADMIN_PASSWORD=adm1n-pass\nTOLLGATE_METRICS_TOKEN=m3tr1cs\nGRAFANA_ADMIN_PASSWORD=gr4f\n"), 0o600)
	out, err := config(full)
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var resolved composeFile
	if err := yaml.Unmarshal(out, &resolved); err != nil {
		t.Fatalf("docker-compose config output: %v\n%s", err, out)
	}
	if u := resolved.Services["gateway"].Environment["TOLLGATE_REDIS_URL"]; u != "redis://:r3d1s@redis:6379/0" {
		t.Errorf("gateway TOLLGATE_REDIS_URL resolves to %q", u)
	}
	if u := resolved.Services["controlplane"].Environment["TOLLGATE_REDIS_URL"]; u != "redis://:r3d1s@redis:6379/0" {
		t.Errorf("controlplane TOLLGATE_REDIS_URL resolves to %q", u)
	}
}

func flatten(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return nil
}

// dockerStage is one FROM … stage of a Dockerfile: its base, name and instructions.
type dockerStage struct {
	from, name string
	lines      []string // instructions with their continuations joined
}

func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cur += trimmed
		f := strings.Fields(cur)
		if strings.EqualFold(f[0], "FROM") {
			st := dockerStage{from: f[1]}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				st.name = f[3]
			}
			stages = append(stages, st)
		} else if len(stages) == 0 {
			if !strings.EqualFold(f[0], "ARG") {
				t.Fatalf("Dockerfile: %q before the first FROM", cur)
			}
		} else {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, cur)
		}
		cur = ""
	}
	return stages
}

func TestDockerfileIsMultiStageStaticNonRoot(t *testing.T) {
	repo := harness.RepoRoot()
	stages := parseDockerfile(t, filepath.Join(repo, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build", len(stages))
	}
	find := func(st dockerStage, prefix string) []string {
		var out []string
		for _, l := range st.lines {
			if strings.HasPrefix(strings.ToUpper(l), prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	var goBuild string
	console := false
	for _, st := range stages[:len(stages)-1] {
		for _, r := range find(st, "RUN ") {
			if strings.Contains(r, "go build") && strings.Contains(r, "./controlplane/cmd/tollgate-controlplane") {
				goBuild = r
			}
			if strings.Contains(r, "npm run build") {
				console = true
			}
		}
	}
	if !console {
		t.Error("no stage builds the console (npm run build): the image would serve no console")
	}
	if goBuild == "" {
		t.Fatal("no stage builds the control plane")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X tollgate/internal/version.Version=${VERSION}", "-trimpath"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("the go build lacks %s: %s", want, goBuild)
		}
	}
	// the builder images are new enough for go.mod's go line and package.json's engines
	gomod, _ := os.ReadFile(filepath.Join(repo, "go.mod"))
	pkg, _ := os.ReadFile(filepath.Join(repo, "web", "package.json"))
	needGo := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(gomod))
	needNode := regexp.MustCompile(`"node":\s*">=(\d+)\.(\d+)`).FindStringSubmatch(string(pkg))
	if needGo == nil || needNode == nil {
		t.Fatalf("go.mod go line %v / package.json engines.node %v not found", needGo, needNode)
	}
	for _, st := range stages[:len(stages)-1] {
		for image, need := range map[string][]string{"golang:": needGo, "node:": needNode} {
			if !strings.HasPrefix(st.from, image) {
				continue
			}
			have := regexp.MustCompile(`^\w+:(\d+)(?:\.(\d+))?`).FindStringSubmatch(st.from)
			atLeast := func(a, b []string) bool { // major.minor a >= b; a's minor may be absent (newest)
				am, _ := strconv.Atoi(a[1])
				bm, _ := strconv.Atoi(b[1])
				if am != bm || a[2] == "" {
					return am > bm || am == bm
				}
				an, _ := strconv.Atoi(a[2])
				bn, _ := strconv.Atoi(b[2])
				return an >= bn
			}
			if have == nil || !atLeast(have, need) {
				t.Errorf("%s is older than the %s.%s the sources need", st.from, need[1], need[2])
			}
		}
	}
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Errorf("final base %s: want a static base without a shell (distroless static, scratch)", final.from)
	}
	users := find(final, "USER ")
	if len(users) == 0 {
		t.Fatal("final stage has no USER: the container would run as root")
	}
	user := strings.Fields(users[len(users)-1])[1]
	if u := strings.SplitN(user, ":", 2)[0]; u == "root" || u == "0" {
		t.Errorf("final stage runs as %s", user)
	}
	copies := strings.Join(find(final, "COPY "), "\n")
	if !strings.Contains(copies, "--from=build") || !strings.Contains(copies, "tollgate-controlplane") {
		t.Errorf("final stage does not take the binary from the build stage: %s", copies)
	}
	if e := find(final, "ENTRYPOINT "); len(e) != 1 || !strings.Contains(e[0], `"/usr/bin/tollgate-controlplane"`) {
		t.Errorf("ENTRYPOINT %v", e)
	}
	// the settings the image sets are settings
	known := readSettings(t)
	raw, _ := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	for _, n := range tollgateVar.FindAllString(string(raw), -1) {
		if !known[n] {
			t.Errorf("the Dockerfile sets %s, which the code does not read", n)
		}
	}
	ignore, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"web/node_modules", ".env", ".git"} {
		if !strings.Contains("\n"+string(ignore)+"\n", "\n"+want+"\n") {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// TestComposeGatewayConfigServes runs deploy/compose/nginx.conf (the compose gateway's config
// for OpenResty) in Debian's nginx with this checkout's Lua and includes at the paths the
// compose file mounts them to, as far as a machine without containers can: the Lua modules
// loaded (Debian's nginx needs load_module lines OpenResty does not), paths, ports and the
// backend's name replaced. A request goes through it to a backend.
func TestComposeGatewayConfigServes(t *testing.T) {
	repo := harness.RepoRoot()
	r := testutil.StartRedis(t)
	set, err := scripts.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed.Demo(context.Background(), store.New(r.Client(), set)); err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "from the backend")
	}))
	defer backend.Close()

	prefix := t.TempDir()
	for _, d := range []string{prefix, filepath.Dir(prefix)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"conf", "logs", "lua"} {
		if err := os.MkdirAll(filepath.Join(prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// the compose file's mount of ./lua/tollgate at <prefix>/lua/tollgate
	if err := os.Symlink(filepath.Join(repo, "lua", "tollgate"), filepath.Join(prefix, "lua", "tollgate")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "compose", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	gw, health := "127.0.0.1:"+strconv.Itoa(harness.FreePort(t)), "127.0.0.1:"+strconv.Itoa(harness.FreePort(t))
	conf := strings.NewReplacer(
		"/usr/share/tollgate/nginx/", repo+"/nginx/", // the compose file's mount of ./nginx
		"server backend:9000;", "server "+strings.TrimPrefix(backend.URL, "http://")+";",
		"listen 8080 ", "listen "+gw+" ", "listen 9145;", "listen "+health+";",
		"worker_processes auto;", "worker_processes 2;",
	).Replace(string(raw))
	for _, want := range []string{repo + "/nginx/tollgate_http.conf", gw, health, backend.URL[7:]} {
		if !strings.Contains(conf, want) {
			t.Fatalf("deploy/compose/nginx.conf changed shape: no %s after the replacements", want)
		}
	}
	conf = "load_module /usr/share/nginx/modules/ndk_http_module.so;\n" +
		"load_module /usr/share/nginx/modules/ngx_http_lua_module.so;\n" +
		"pid " + prefix + "/logs/nginx.pid;\ndaemon off;\n" + conf
	confPath := filepath.Join(prefix, "conf", "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nginx", "-p", prefix, "-c", confPath)
	// the compose gateway's environment, with this test's Redis
	cmd.Env = []string{"TOLLGATE_REDIS_URL=" + r.URL(), "TOLLGATE_NODE_ID=gw-compose-1",
		"TOLLGATE_SCRIPTS_DIR=" + filepath.Join(repo, "redis-scripts")}
	p := harness.StartProcess(t, "compose gateway", cmd)
	p.WaitHTTP(t, "http://"+health+"/health", 20*time.Second)
	harness.Eventually(t, 10*time.Second, "a request through the compose gateway config", func() bool {
		req, _ := http.NewRequest("GET", "http://"+gw+"/bucket/key", nil)
		req.Header.Set("X-App-Id", "demo-p1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 200 && string(b) == "from the backend" && res.Header.Get("X-RateLimit-Cost") == "1"
	})
	res, err := http.Get("http://" + gw + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == 200 {
		t.Error("the compose gateway serves /metrics on its public port")
	}
}
