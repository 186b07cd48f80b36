// The Prometheus alerting rules of deploy/prometheus/tollgate-alerts.yml are loaded and
// evaluated by Debian's Prometheus with the config scripts/stack.sh writes for make run / up.
package t

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"tollgate/t/harness"
)

func TestPrometheusLoadsTheAlertRules(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	free := func() string { return "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)) }
	gen := exec.Command(filepath.Join(harness.RepoRoot(), "scripts", "stack.sh"), "prometheus-config")
	gen.Env = append(os.Environ(), "TOLLGATE_RUN_DIR="+dir, "TOLLGATE_GATEWAY_ADDR="+free(),
		"TOLLGATE_CP_ADDR="+free())
	out, err := gen.CombinedOutput()
	if err != nil {
		t.Fatalf("stack.sh prometheus-config: %v\n%s", err, out)
	}
	cfg := strings.TrimSpace(string(out))
	addr := free()
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logf.Close() })

	want := []string{"auth_failures_burst", "block_rate_high", "block_rate_high_global", "circuit_open", "cleanup_stalled",
		"config_dict_partial", "config_store_lost",
		"connections_high", "connections_high_cluster", "connections_leaked", "connections_rejected",
		"controlplane_down", "drift_high", "emergency", "gateway_down", "l1_exhausted",
		"node_degraded", "node_degraded_critical", "node_stale", "redis_slow", "shared_dict_full", "traffic_spike"}
	var got []string
	var health []string
	ok := false
	deadline := time.Now().Add(60 * time.Second)
	for !ok && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		res, err := http.Get("http://" + addr + "/api/v1/rules?type=alert")
		if err != nil {
			continue
		}
		var body struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					File  string `json:"file"`
					Rules []struct {
						Name           string `json:"name"`
						Health         string `json:"health"`
						LastError      string `json:"lastError"`
						LastEvaluation string `json:"lastEvaluation"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		_ = res.Body.Close()
		if err != nil {
			continue
		}
		for _, g := range body.Data.Groups {
			if g.Name != "tollgate" || !strings.HasSuffix(g.File, "deploy/prometheus/tollgate-alerts.yml") {
				continue
			}
			got, health = nil, nil
			evaluated := true
			for _, r := range g.Rules {
				got = append(got, r.Name)
				if r.Health != "ok" {
					health = append(health, r.Name+": "+r.Health+" "+r.LastError)
				}
				evaluated = evaluated && r.Health == "ok" && !strings.HasPrefix(r.LastEvaluation, "0001")
			}
			sort.Strings(got)
			ok = evaluated && strings.Join(got, ",") == strings.Join(want, ",")
		}
	}
	if !ok {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("group tollgate: rules %v (want %v), unhealthy %v\nprometheus log:\n%s", got, want, health, b)
	}
}
