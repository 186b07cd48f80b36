package t

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/testutil"
	"tollgate/t/harness"
)

// Issue 19 items 5 and 8 on the real `scripts/stack.sh up` / `down` (what `make run` runs), on
// free ports and a private run directory: the run directory and what it holds are private, the
// generated admin password reaches the terminal only, Redis refuses clients without the
// generated password, the gateway works as the restricted Redis user (Redis' ACL LOG stays
// empty) which cannot reach the control plane's keys, no password is on a command line, and
// the gateway's /metrics is on its own listener.
func TestStackScriptKeepsSecrets(t *testing.T) {
	st := newScriptStack(t, "", "TOLLGATE_NODE_ID=gw-stack-test", "TOLLGATE_ADMIN_PASSWORD=")
	run, gwAddr, redisAddr := st.run, st.gw, st.redis
	out := st.up()

	// the generated admin password: on the terminal, and it signs in
	adminPw := st.shownAdminPassword(out)
	api := st.admin(adminPw)

	readSecret := func(name string) string {
		b, err := os.ReadFile(filepath.Join(run, "redis", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	redisPw, gatewayPw := readSecret("default.password"), readSecret("gateway.password")
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: redisAddr, Password: redisPw})
	defer admin.Close()

	// Redis refuses clients without the password; the gateway's user reaches its keys only
	anon := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without a password: %v, want NOAUTH", err)
	}
	gwc := redis.NewClient(&redis.Options{Addr: redisAddr, Username: "tollgate-gateway", Password: gatewayPw})
	defer gwc.Close()
	if err := gwc.HGet(ctx, "ratelimit:apps", "demo-p1").Err(); err != nil {
		t.Fatalf("the gateway's user reading ratelimit:apps: %v", err)
	}
	for _, c := range [][]any{{"GET", "ratelimit:admin:jwt_secret"}, {"HGETALL", "ratelimit:admin:users"},
		{"FLUSHALL"}, {"CONFIG", "GET", "requirepass"}, {"KEYS", "*"}} {
		if err := gwc.Do(ctx, c...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("the gateway's user sent %v: %v, want NOPERM", c, err)
		}
	}
	if err := admin.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}

	// the gateway works as that user: config, leases, a global rule (a script), events
	ver := api.change("POST", "/api/v1/rules", map[string]any{"id": "stack-global", "scope": "app",
		"algorithm": "fixed_window", "limit": 3, "window_seconds": 60, "distribution": "global",
		"match": map[string]any{"app_ids": []string{"demo-p2"}}})
	gw := harness.Running(t, "http://"+gwAddr, "http://"+st.metrics)
	eventually(t, "the gateway on the rule's config version", func() bool {
		var h health
		return json.Unmarshal(gw.Monitor("/health").Body, &h) == nil && h.ConfigVersion >= ver
	}, func() {
		b, _ := os.ReadFile(filepath.Join(run, "gateway", "logs", "error.log"))
		t.Logf("health %s; want config version %d; gateway error.log:\n%s", gw.Monitor("/health").Body, ver,
			tailBytes(string(b), 3000))
	})
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		codes[gw.Do("PUT", "/bucket/k"+strconv.Itoa(i), "demo-p1", strings.NewReader("x"), nil).Status]++
		codes[gw.Do("GET", "/bucket/k", "demo-p2", nil, nil).Status]++
	}
	t.Logf("answers through the gateway: %v", codes)
	if codes[429] == 0 || codes[200]+codes[404] < 10 || codes[500]+codes[503] > 0 {
		t.Fatalf("answers through the gateway: %v, want the PUTs admitted and the global rule's 429s", codes)
	}
	eventually(t, "the gateway's node report in Redis", func() bool {
		return admin.HLen(ctx, "ratelimit:gateways").Val() > 0 && admin.XLen(ctx, "ratelimit:events").Val() > 0
	})
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) != 0 {
		t.Fatalf("Redis refused the gateway something (ACL LOG): %v %v", log, err)
	}
	if el, _ := os.ReadFile(filepath.Join(run, "gateway", "logs", "error.log")); bytes.Contains(el, []byte("NOPERM")) ||
		bytes.Contains(el, []byte("NOAUTH")) || bytes.Contains(el, []byte("WRONGPASS")) {
		t.Fatalf("the gateway's error log shows refusals:\n%s", el)
	}
	// item 8: the tenants' listener does not serve the gateway's /metrics
	if r := gw.Do("GET", "/metrics", "", nil, nil); r.Status == 200 || strings.Contains(string(r.Body), "ratelimit_") {
		t.Fatalf("tenant listener /metrics: %d %.200s", r.Status, r.Body)
	}

	// a dump of Redis (JWT secret, password hashes, sessions) is private like the rest
	if err := admin.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	secrets := []string{adminPw, redisPw, gatewayPw}
	root := os.Geteuid() == 0
	err := filepath.WalkDir(run, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode&fs.ModeSymlink != 0:
			return nil
		case d.IsDir():
			// nginx's workers (nobody, under a root master) may only traverse to the prefix
			traverse := root && (p == run || p == filepath.Join(run, "gateway") ||
				p == filepath.Join(run, "gateway", "lua") || strings.HasPrefix(p, filepath.Join(run, "gateway", "tmp")))
			if mode.Perm()&0o077 != 0 && !(traverse && mode.Perm()&0o066 == 0) {
				t.Errorf("%s: mode %v", p, mode.Perm())
			}
			return nil
		}
		if mode.Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want 0600", p, mode.Perm())
		}
		if strings.HasSuffix(p, ".password") || strings.HasSuffix(p, "auth.conf") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a password", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(run, "redis", "dump.rdb")); err != nil {
		t.Fatalf("no dump to check: %v", err)
	}
	if st, _ := os.Stat(run); root && st.Mode().Perm() != 0o711 || !root && st.Mode().Perm() != 0o700 {
		t.Errorf("run directory mode %v", st.Mode().Perm())
	}

	// no password on a command line of the stack's processes
	pids, err := os.ReadFile(filepath.Join(run, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(pids)), "\n") {
		f := strings.Fields(line)
		argv, err := os.ReadFile("/proc/" + f[1] + "/cmdline")
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		for _, s := range secrets {
			if bytes.Contains(argv, []byte(s)) {
				t.Errorf("%s's command line holds a password", f[0])
			}
		}
	}
}

// logsOf is the tail of every log of a stack.sh run directory (for failures).
func logsOf(run string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(run, "logs", "*.log"))
	files = append(files, filepath.Join(run, "gateway", "logs", "error.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		b.WriteString("== " + f + "\n" + strings.Join(lines, "\n") + "\n")
	}
	return b.String()
}

// Issue 19 item 5, the control plane's side: with TOLLGATE_ADMIN_PASSWORD_FILE the generated
// first password goes to that file (0600), never to the process' output (a supervisor's log);
// the password signs in; a later start that generates nothing leaves no file.
func TestControlPlaneAdminPasswordFile(t *testing.T) {
	r := testutil.StartRedis(t)
	file := filepath.Join(t.TempDir(), "admin-password")
	env := map[string]string{"TOLLGATE_ADMIN_PASSWORD": "", "TOLLGATE_ADMIN_PASSWORD_FILE": file,
		"TOLLGATE_CP_JOBS": "false"}
	cp := harness.StartControlPlane(t, r.URL(), env)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatalf("no password file: %v\n%s", err, cp.Output())
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("password file mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(file)
	m := regexp.MustCompile(`with the password\s+(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("password file without a password:\n%s", b)
	}
	pw := string(m[1])
	if strings.Contains(cp.Output(), pw) {
		t.Fatalf("the generated password is in the control plane's output:\n%s", cp.Output())
	}
	if code := loginStatus(t, http.DefaultClient, cp.URL, pw, nil); code != 200 {
		t.Fatalf("login with the password of the file: %d", code)
	}
	os.Remove(file)
	harness.StartControlPlane(t, r.URL(), env) // the admin exists: nothing generated
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("a start that generated no password left a file: %v", err)
	}
}
