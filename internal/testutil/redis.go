// Package testutil is the one test fixture package of the repository. It starts real
// redis-server processes (a free loopback port, a temporary directory, no persistence, readiness
// by polling PING, never a fixed sleep): one server (StartRedis), a Redis Cluster
// (StartCluster) and a Sentinel group (StartSentinelGroup). On top of one server, Fixture is the
// control plane's view of it (config store, ledger, fake Clock) for the job and API tests.
// Eventually polls for a state instead of sleeping.
package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	readyTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
	pollEvery    = 10 * time.Millisecond
	startTries   = 3
)

// Redis is one redis-server process owned by a test.
type Redis struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // extra redis-server arguments (see StartRedisArgs)
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts a redis-server on a free 127.0.0.1 port and kills it in t.Cleanup.
// The binary is $TOLLGATE_REDIS_SERVER, else redis-server from PATH.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return StartRedisArgs(t)
}

// StartRedisArgs is StartRedis with extra redis-server arguments (e.g. "--cluster-enabled",
// "yes"); they are kept for Restart.
func StartRedisArgs(t testing.TB, args ...string) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: serverBin(t), dir: t.TempDir(), args: args}
	t.Cleanup(r.kill)
	var lastErr error
	for i := 0; i < startTries; i++ {
		if r.port, lastErr = freePort(); lastErr != nil {
			continue
		}
		if lastErr = r.start(); lastErr == nil {
			return r
		}
	}
	t.Fatalf("testutil: start redis-server: %v", lastErr)
	return nil
}

// serverBin is $TOLLGATE_REDIS_SERVER, else redis-server from PATH (also run as a sentinel).
func serverBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("TOLLGATE_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("testutil: redis-server not found: %v", err)
	}
	return path
}

// Addr is host:port of the server.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Port is the TCP port of the server.
func (r *Redis) Port() int { return r.port }

// URL is a redis:// URL for database 0 of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Client returns a new client for the server, closed when the test ends.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  r.Addr(),
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop terminates the server and waits for it to exit.
func (r *Redis) Stop() {
	r.t.Helper()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(stopTimeout):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd = nil
}

// Restart stops the server and starts a new, empty one on the same port.
func (r *Redis) Restart() {
	r.t.Helper()
	r.Stop()
	if err := r.start(); err != nil {
		r.t.Fatalf("testutil: restart redis-server on port %d: %v", r.port, err)
	}
}

// Crash kills the server with SIGKILL (no shutdown: nothing saved or flushed on the way out)
// and starts it again on the same port with the same directory and arguments.
func (r *Redis) Crash() {
	r.t.Helper()
	r.kill()
	if err := r.start(); err != nil {
		r.t.Fatalf("testutil: restart redis-server on port %d after SIGKILL: %v", r.port, err)
	}
}

// Kill kills the server with SIGKILL and leaves it down.
func (r *Redis) Kill() { r.kill() }

// Freeze stops the process with SIGSTOP: it keeps its socket but answers nothing.
func (r *Redis) Freeze() { r.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process with SIGCONT.
func (r *Redis) Thaw() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig os.Signal) {
	r.t.Helper()
	if r.cmd == nil {
		r.t.Fatalf("testutil: redis-server is not running")
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("testutil: signal redis-server: %v", err)
	}
}

func (r *Redis) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

func (r *Redis) start() error {
	logFile := filepath.Join(r.dir, "redis.log")
	cmd := exec.Command(r.bin, append([]string{
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", logFile}, r.args...)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", r.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done = cmd, done
	if err := r.waitReady(done); err != nil {
		r.kill()
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("port %d: %w; log:\n%s", r.port, err, log)
	}
	return nil
}

func (r *Redis) waitReady(exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited before answering PING")
		case <-deadline.C:
			return fmt.Errorf("no PING answer within %s: %w", readyTimeout, err)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
