// Package proc starts and stops the benchmark's own child processes (redis-server, nginx, wrk
// is run directly by its package), finds free loopback ports and polls for readiness. Every
// child runs in its own process group so that a terminal Ctrl-C reaches only the benchmark,
// which then stops its children in order, by PID.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ErrExited is returned by Poll when the watched process exits before the condition holds.
var ErrExited = errors.New("process exited")

// Process is one started child process.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
	once sync.Once
}

// Start runs cmd (its stdout and stderr are kept for error messages) in a new process group.
func Start(name string, cmd *exec.Cmd) (*Process, error) {
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{}), out: out}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// PID of the process.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Output is what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Stop sends sig to the process and waits up to grace for it to exit; then it kills the
// process's own group (the process and the children it started, e.g. nginx workers).
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) {
	p.once.Do(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
			<-p.done
		}
	})
}

// Poll calls cond every `every` until it returns true, ctx ends, timeout passes or the process
// exits. The last error of cond is part of the timeout error.
func (p *Process) Poll(ctx context.Context, timeout, every time.Duration,
	cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-p.done:
			return fmt.Errorf("proc: %s: %w: %s", p.name, ErrExited, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("proc: %s not ready within %s (last error: %v): %w",
				p.name, timeout, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("proc: free port: %w", err)
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("proc: free port: unexpected address %v", l.Addr())
	}
	return addr.Port, nil
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
