// Package redisenv runs the benchmark's private redis-server (free loopback port, temporary
// directory, no persistence), seeds the benchmark's cluster and app through the control plane's
// store, and counts the commands Redis has served.
package redisenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/bench/internal/proc"
)

const (
	readyTimeout = 10 * time.Second
	stopGrace    = 5 * time.Second
	pollEvery    = 10 * time.Millisecond
)

// Server is one running redis-server.
type Server struct {
	p      *proc.Process
	port   int
	client *redis.Client
}

// Start starts redis-server with its working directory and log in dir and waits for PING.
func Start(ctx context.Context, dir string) (*Server, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("redisenv: %w", err)
	}
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	p, err := proc.Start("redis-server", cmd)
	if err != nil {
		return nil, fmt.Errorf("redisenv: %w", err)
	}
	s := &Server{p: p, port: port}
	s.client = redis.NewClient(&redis.Options{
		Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: true, PoolSize: 2,
	})
	ping := func(ctx context.Context) (bool, error) {
		err := s.client.Ping(ctx).Err()
		return err == nil, err
	}
	if err := p.Poll(ctx, readyTimeout, pollEvery, ping); err != nil {
		s.Stop()
		return nil, fmt.Errorf("redisenv: %w", err)
	}
	return s, nil
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is the redis:// URL of database 0, as TOLLGATE_REDIS_URL expects it.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client is the benchmark's own client of the server (closed by Stop).
func (s *Server) Client() *redis.Client { return s.client }

// PID of redis-server.
func (s *Server) PID() int { return s.p.PID() }

// CPU is the CPU time redis-server has used so far.
func (s *Server) CPU() (time.Duration, error) {
	t, err := proc.CPUTime(s.PID())
	if err != nil {
		return 0, fmt.Errorf("redisenv: %w", err)
	}
	return t, nil
}

// Stop closes the client and terminates the server.
func (s *Server) Stop() {
	_ = s.client.Close()
	s.p.Stop(syscall.SIGTERM, stopGrace)
}
