package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/proc"
)

var client = &http.Client{Timeout: 5 * time.Second}

// get fetches url as app and returns the status and body.
func get(ctx context.Context, url, app string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil
	}
	req.Header.Set("X-App-Id", app)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// containsReason reports whether a JSON refusal names reason.
func containsReason(body []byte, reason string) bool {
	return bytes.Contains(body, []byte(`"`+reason+`"`))
}

// scrape sums the samples of metric on a gateway's /metrics (0 when absent).
func scrape(ctx context.Context, metricsURL, metric string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// cpProcess is the control plane binary the benchmark started.
type cpProcess struct {
	p    *proc.Process
	base string
}

func (c *cpProcess) pid() int { return c.p.PID() }
func (c *cpProcess) stop()    { c.p.Stop(syscall.SIGTERM, 10*time.Second) }

// startControlPlane runs the repository's bin/tollgate-controlplane (make build) on a free port
// against redisURL, without the per-user API rate limit (which would be what is measured).
func startControlPlane(ctx context.Context, o options, dir, redisURL string) (*cpProcess, error) {
	bin := filepath.Join(o.repo, "bin", "tollgate-controlplane")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w (run make build)", bin, err)
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TOLLGATE_REDIS_URL="+redisURL, "TOLLGATE_CP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"TOLLGATE_ADMIN_PASSWORD="+adminPass, "TOLLGATE_API_RATE=1000000", "TOLLGATE_API_BURST=1000000",
		"TOLLGATE_CONFIG_BACKUP_DIR="+filepath.Join(dir, "backups"), "TOLLGATE_SEED_DEMO=false")
	p, err := proc.Start("tollgate-controlplane", cmd)
	if err != nil {
		return nil, err
	}
	c := &cpProcess{p: p, base: base}
	up := func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	}
	if err := p.Poll(ctx, o.ready, 50*time.Millisecond, up); err != nil {
		c.stop()
		return nil, fmt.Errorf("control plane: %w\n%s", err, p.Output())
	}
	return c, nil
}

// maxWorkerPrivate is the largest private memory (Private_Clean + Private_Dirty of
// smaps_rollup) among the nginx master's children (the workers), in bytes.
func maxWorkerPrivate(master int) int64 {
	kids, err := proc.Children(master)
	if err != nil {
		return 0
	}
	var max int64
	for _, k := range kids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", k))
		if err != nil {
			continue
		}
		var sum int64
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "Private_Clean:") || strings.HasPrefix(line, "Private_Dirty:") {
				f := strings.Fields(line)
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					sum += v * 1024
				}
			}
		}
		if sum > max {
			max = sum
		}
	}
	return max
}

// rss is VmRSS of pid in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v * 1024
		}
	}
	return 0
}

// redisUsedMemory is INFO memory's used_memory.
func redisUsedMemory(ctx context.Context, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// zoneFull reports whether a shared dict ran out of room (nginx logs "no memory").
func zoneFull(errorLog string) bool {
	return strings.Contains(errorLog, "no memory") || strings.Contains(errorLog, "zone full")
}
