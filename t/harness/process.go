package harness

import (
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Process is a long-running program a test started (an installed binary, Prometheus): its
// output is kept and shown when the test fails; it is stopped with SIGTERM at cleanup.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *lockedBuffer
}

// StartProcess starts cmd (its Env, Dir set by the caller) and stops it when the test ends.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd) *Process {
	t.Helper()
	p := &Process{Name: name, cmd: cmd, done: make(chan struct{}), out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		stopProcess(cmd.Process, p.done, syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(p.out.String(), 40))
		}
	})
	return p
}

// Output is what the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitHTTP polls url until it answers 200 (or the process exits, or timeout passes).
func (p *Process) WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			t.Fatalf("%s exited:\n%s", p.Name, tail(p.out.String(), 40))
		}
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not answering 200 after %s:\n%s", p.Name, url, timeout, tail(p.out.String(), 40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
