package runner

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"tollgate/bench/internal/report"
)

// Describe is the report header of a run with cfg on this machine; loadStart is the load
// average when the run began.
func Describe(cfg Config, loadStart string) report.Meta {
	return report.Meta{
		LoadStart: loadStart, LoadEnd: loadAverage(),
		Date: time.Now(), CPUs: runtime.NumCPU(), CPUModel: cpuModel(),
		Nginx: toolVersion("nginx", "-v"), Redis: toolVersion("redis-server", "--version"),
		Wrk: toolVersion("wrk", "-v"), Threads: cfg.Threads, Connections: cfg.Connections,
		Duration: cfg.Duration, Warmup: cfg.Warmup, Rounds: cfg.Rounds, Env: tollgateEnv(),
	}
}

// loadAverage is the first three fields of /proc/loadavg ("1.02 0.87 0.55").
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU (" + err.Error() + ")"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// toolVersion is the first line a tool prints for its version flag, shortened to name/version
// ("nginx version: nginx/1.22.1" -> "nginx/1.22.1", "Redis server v=7.0.15 ..." ->
// "redis-server 7.0.15", "wrk debian/4.1.0 [epoll] ..." -> "wrk debian/4.1.0").
func toolVersion(bin, flag string) string {
	out, _ := exec.Command(bin, flag).CombinedOutput() // wrk -v exits 1 after printing
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	switch {
	case line == "":
		return bin + " (version unknown)"
	case strings.HasPrefix(line, "nginx version: "):
		return strings.TrimPrefix(line, "nginx version: ")
	case strings.HasPrefix(line, "Redis server v="):
		v, _, _ := strings.Cut(strings.TrimPrefix(line, "Redis server v="), " ")
		return "redis-server " + v
	default:
		f := strings.Fields(line)
		if len(f) >= 2 {
			return f[0] + " " + f[1]
		}
		return line
	}
}

// tollgateEnv are the TOLLGATE_* settings the gateways inherit from the environment (the
// benchmark sets the Redis URL, node id and limiter mode itself).
func tollgateEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "TOLLGATE_REDIS_URL", "TOLLGATE_NODE_ID", "TOLLGATE_LIMITER_MODE":
			continue
		}
		if strings.HasPrefix(k, "TOLLGATE_") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	return env
}
