// An idle gateway is quiet: no error-level line in nginx's error.log (a config subscription
// that receives nothing is normal, not a read timeout to report).
package t

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/internal/keys"
	"tollgate/t/harness"
)

func TestIdleGatewayLogsNoError(t *testing.T) {
	s := newStack(t, stackOptions{env: map[string]string{"TOLLGATE_REPORT_INTERVAL": "1"}})
	g := s.gw()
	// idle for longer than the subscriber's old read timeout (5 s) and its new one (6 s): the
	// node's reports (every second) tell how long
	lastSeen := func() int64 {
		v, err := s.rdb.HGet(context.Background(), keys.Gateways(), g.NodeID).Result()
		if err != nil {
			return 0
		}
		var r struct {
			LastSeen int64 `json:"last_seen"`
		}
		_ = json.Unmarshal([]byte(v), &r)
		return r.LastSeen
	}
	var first int64
	slowly(t, 20*time.Second, "the node's first report", func() bool { first = lastSeen(); return first > 0 })
	slowly(t, 30*time.Second, "13 s of idle reports", func() bool { return lastSeen() >= first+13 })
	bad := regexp.MustCompile(`(?m)^.*\[(error|crit|alert|emerg)\].*$`).FindAllString(g.ErrorLog(), 10)
	if len(bad) > 0 {
		t.Fatalf("an idle gateway logged %d error-level lines:\n%s", len(bad), bad)
	}
}

// A gateway started with five bad settings names all five in the one error that stops it,
// including those parsed by their own modules (sources, S3 domains, costs, the Redis URL),
// and never echoes the Redis password.
func TestGatewayNamesEveryBadSettingAtStart(t *testing.T) {
	prefix := t.TempDir()
	for _, d := range []string{prefix, filepath.Dir(prefix)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)) }
	conf := harness.Render(t, prefix, addr(), addr(), addr(), 1, "info", "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nginx", "-p", prefix, "-c", conf) // init_by_lua refuses to start
	cmd.Env = append(os.Environ(), "TOLLGATE_NODE_ID=bad-settings",
		"TOLLGATE_APP_SOURCES=header,cookie", "TOLLGATE_S3_DOMAINS=s3.example.com,bad..dom",
		"TOLLGATE_COSTS=GetObject=1,Teleport=3", "TOLLGATE_REDIS_URL=redis://:hunter2@nowhere/0",
		"TOLLGATE_REPORT_INTERVAL=99")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("nginx accepted five bad settings:\n%s", out)
	}
	b, _ := os.ReadFile(filepath.Join(prefix, "logs", "error.log"))
	out = append(out, b...)
	for _, want := range []string{"TOLLGATE_APP_SOURCES='header,cookie' names an unknown source 'cookie'",
		"TOLLGATE_S3_DOMAINS='s3.example.com,bad..dom' has a bad domain 'bad..dom'",
		"TOLLGATE_COSTS='GetObject=1,Teleport=3' is refused: unknown operation in cost table: Teleport",
		"TOLLGATE_REDIS_URL (value not shown) is refused: invalid redis url",
		"TOLLGATE_REPORT_INTERVAL='99' must be"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("nginx output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "hunter2") {
		t.Errorf("the Redis password in the output:\n%s", out)
	}
}
