package t

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"tollgate/t/harness"
)

// scriptStack is one run of `scripts/stack.sh` (what `make run` runs) on free loopback ports and
// a private run directory.
type scriptStack struct {
	t                      *testing.T
	run                    string // the run directory
	gw, metrics, cp, redis string // listen addresses (host:port)
	env                    []string
}

// newScriptStack prepares a run of the script: every address on a free port, one gateway worker,
// a local Redis; extra ("NAME=value") adds to or overrides that environment. run is the run
// directory (t.TempDir()/run when "").
func newScriptStack(t *testing.T, run string, extra ...string) *scriptStack {
	t.Helper()
	if run == "" {
		run = filepath.Join(t.TempDir(), "run")
	}
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)) }
	s := &scriptStack{t: t, run: run, gw: addr(), metrics: addr(), cp: addr(), redis: addr()}
	s.env = append(os.Environ(),
		"TOLLGATE_GATEWAY_ADDR="+s.gw, "TOLLGATE_METRICS_ADDR="+s.metrics,
		"TOLLGATE_CP_ADDR="+s.cp, "TOLLGATE_REDIS_ADDR="+s.redis,
		"TOLLGATE_BACKEND_ADDR="+addr(), "TOLLGATE_BACKEND_ADMIN_ADDR="+addr(),
		"TOLLGATE_PROMETHEUS_ADDR="+addr(),
		"TOLLGATE_RUN_DIR="+run, "TOLLGATE_BIN_DIR="+harness.BinDir(t), "TOLLGATE_WORKERS=1",
		"TOLLGATE_REDIS_URL=")
	s.env = append(s.env, extra...) // the last of a name wins (os/exec)
	return s
}

// sh runs the script with `arg` and the stack's environment plus extra; its output.
func (s *scriptStack) sh(arg string, extra ...string) (string, error) {
	cmd := exec.Command(filepath.Join(harness.RepoRoot(), "scripts", "stack.sh"), arg)
	cmd.Env = append(append([]string{}, s.env...), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// up starts the stack (stopped when the test ends) and returns the script's output.
func (s *scriptStack) up() string {
	s.t.Helper()
	s.t.Cleanup(func() { _, _ = s.sh("down") })
	out, err := s.sh("up")
	if err != nil {
		s.t.Fatalf("stack.sh up: %v\n%s\nlogs:\n%s", err, out, logsOf(s.run))
	}
	return out
}

// shownAdminPassword is the generated admin password `up` printed.
func (s *scriptStack) shownAdminPassword(out string) string {
	s.t.Helper()
	m := regexp.MustCompile(`created the admin user "admin" with the password\s+(\S+)`).FindStringSubmatch(out)
	if m == nil {
		s.t.Fatalf("stack.sh up did not show a generated admin password:\n%s", out)
	}
	return m[1]
}

// admin signs in to the stack's control plane as "admin".
func (s *scriptStack) admin(password string) *adminAPI {
	s.t.Helper()
	api := &adminAPI{t: s.t, url: "http://" + s.cp}
	var login struct {
		Data struct {
			AccessToken string `json:"access_token"`
		} `json:"data"`
	}
	if code := api.do("POST", "/api/v1/auth/login", map[string]string{"username": "admin", "password": password},
		&login); code != 200 {
		s.t.Fatalf("login as admin: %d", code)
	}
	api.token = login.Data.AccessToken
	return api
}
