package harness

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	cpBuild    sync.Once
	cpDir      string // where the build went (RemoveBuilds deletes it)
	cpBin      string
	cpBuildErr error
)

// ControlPlane is one running tollgate-controlplane process.
type ControlPlane struct {
	t         testing.TB
	URL       string
	BackupDir string   // its TOLLGATE_CONFIG_BACKUP_DIR (a temporary directory unless env sets one)
	env       []string // its environment (for Command)
	cmd       *exec.Cmd
	done      chan struct{}
	out       *lockedBuffer
	health    *http.Client // only polls liveness: over TLS it does not check the certificate
}

// lockedBuffer collects a process' output (written by exec's copier, read by the test).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ControlPlaneBinary is the control plane the harness built (once per test binary, with the
// checkout's version linked in as make build does).
func ControlPlaneBinary(t testing.TB) string { return controlPlaneBinary(t) }

// controlPlaneBinary builds the control plane (and the demo backend) once per test binary.
func controlPlaneBinary(t testing.TB) string {
	t.Helper()
	cpBuild.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-cp-")
		if err != nil {
			cpBuildErr = err
			return
		}
		cpDir = dir
		cpBin = filepath.Join(dir, "tollgate-controlplane")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		// the demo backend too: BinDir is a bin/ for scripts/stack.sh (TOLLGATE_BIN_DIR)
		cmd := exec.Command(goBin, "build", "-ldflags", "-X tollgate/internal/version.Version="+Version(t),
			"-o", dir+string(filepath.Separator),
			"./controlplane/cmd/tollgate-controlplane", "./demo/cmd/tollgate-demo-s3")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			cpBuildErr = err
			cpBin = string(out)
		}
	})
	if cpBuildErr != nil {
		t.Fatalf("harness: build control plane: %v\n%s", cpBuildErr, cpBin)
	}
	return cpBin
}

// BinDir is a directory with the binaries `make build` puts into bin/ (tollgate-controlplane,
// tollgate-demo-s3 built once per test binary; versitygw linked from bin/).
func BinDir(t testing.TB) string {
	dir := filepath.Dir(controlPlaneBinary(t))
	link := filepath.Join(dir, "versitygw")
	if _, err := os.Lstat(link); err != nil {
		if err := os.Symlink(VersityGW(t), link); err != nil {
			t.Fatalf("harness: link versitygw: %v", err)
		}
	}
	return dir
}

// RemoveBuilds deletes what the harness built for this test binary (the control plane's
// executable, ~14 MB in the temp directory); TestMain calls it after the tests ran.
func RemoveBuilds() {
	if cpDir != "" {
		os.RemoveAll(cpDir)
	}
}

// StartControlPlane starts the control plane on redisURL (any TOLLGATE_REDIS_URL form) and
// waits until its /health answers 200; URL is https:// when env sets TOLLGATE_TLS_CERT.
func StartControlPlane(t testing.TB, redisURL string, env map[string]string) *ControlPlane {
	t.Helper()
	bin := controlPlaneBinary(t)
	port := FreePort(t)
	cp := &ControlPlane{t: t, URL: "http://127.0.0.1:" + strconv.Itoa(port), out: &lockedBuffer{},
		health: &http.Client{Timeout: time.Second}}
	if env["TOLLGATE_TLS_CERT"] != "" {
		cp.URL = "https" + strings.TrimPrefix(cp.URL, "http")
		cp.health.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // liveness only
	}
	cmd := exec.Command(bin)
	cp.BackupDir = env["TOLLGATE_CONFIG_BACKUP_DIR"]
	if cp.BackupDir == "" { // never the working directory's .run/: each test its own snapshots
		cp.BackupDir = t.TempDir()
	}
	cmd.Env = append(os.Environ(), "TOLLGATE_REDIS_URL="+redisURL,
		"TOLLGATE_CP_ADDR=127.0.0.1:"+strconv.Itoa(port), "TOLLGATE_CONFIG_BACKUP_DIR="+cp.BackupDir)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cp.env = cmd.Env
	cmd.Stdout, cmd.Stderr = cp.out, cp.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: start control plane: %v", err)
	}
	cp.cmd, cp.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(cp.done) }()
	t.Cleanup(cp.stop)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-cp.done:
			t.Fatalf("harness: control plane exited at start:\n%s", cp.out.String())
		default:
		}
		if cp.Health() != nil {
			return cp
		}
		if time.Now().After(deadline) {
			t.Fatalf("harness: control plane not healthy after 15s:\n%s", cp.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Command runs the control plane binary with args (export, import, restore, ...) in the
// environment of this control plane and returns its stdout, stderr and exit status.
func (cp *ControlPlane) Command(args ...string) (stdout, stderr string, code int) {
	cp.t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(controlPlaneBinary(cp.t), args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = cp.env, &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		cp.t.Fatalf("harness: run control plane %v: %v", args, err)
	}
	return o.String(), e.String(), 0
}

// Health returns the decoded /health body when it answers 200, else nil.
func (cp *ControlPlane) Health() map[string]any {
	resp, err := cp.health.Get(cp.URL + "/health")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body map[string]any
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	return body
}

// Output is what the process wrote to stdout and stderr so far.
func (cp *ControlPlane) Output() string { return cp.out.String() }

// Stop stops the control plane (SIGTERM) and waits for it to exit.
func (cp *ControlPlane) Stop() { cp.stop() }

func (cp *ControlPlane) stop() {
	if cp.cmd == nil {
		return
	}
	stopProcess(cp.cmd.Process, cp.done, syscall.SIGTERM, 5*time.Second)
	cp.cmd = nil
	if cp.t.Failed() {
		cp.t.Logf("control plane output:\n%s", tail(cp.out.String(), 40))
	}
}
