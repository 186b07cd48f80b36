package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tollgate/internal/seed"
)

func (f *fixture) get(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET %s: body %q is not JSON: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	if acao := rec.Header().Get("Access-Control-Allow-Origin"); acao != "" {
		t.Errorf("GET %s: unexpected CORS header %q", path, acao)
	}
	return rec.Code, body
}

// scriptFiles counts the scripts of redis-scripts/ (every *.lua but the _common.lua prelude):
// a healthy control plane reports all of them loaded.
func scriptFiles(t *testing.T) float64 {
	t.Helper()
	files, err := filepath.Glob("../../../redis-scripts/*.lua")
	if err != nil || len(files) < 2 {
		t.Fatalf("list redis-scripts: %v %v", files, err)
	}
	return float64(len(files) - 1)
}

func TestHealth(t *testing.T) {
	n := scriptFiles(t)
	cases := []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		code  int
		body  map[string]any
	}{
		{"fresh redis", func(*testing.T, *fixture) {}, 200,
			map[string]any{"status": "ok", "redis": "ok", "scripts": n, "config_version": 0.0, "version": "dev"}},
		{"seeded", seedDemo, 200,
			map[string]any{"status": "ok", "redis": "ok", "scripts": n, "config_version": 5.0, "version": "dev"}},
		{"after script flush", flushScripts, 200,
			map[string]any{"status": "ok", "redis": "ok", "scripts": n, "config_version": 0.0, "version": "dev"}},
		// The client retries refused dials until the deadline, so a stopped Redis is a timeout.
		{"redis stopped", func(_ *testing.T, f *fixture) { f.redis.Stop() }, 503,
			map[string]any{"status": "unavailable", "redis": "timeout", "version": "dev"}},
		{"redis frozen", freeze, 503,
			map[string]any{"status": "unavailable", "redis": "timeout", "version": "dev"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			start := time.Now()
			code, body := f.get(t, "/health")
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("health took %s, want about %s at most", d, DefaultHealthTimeout)
			}
			if code != tc.code || fmt.Sprint(body) != fmt.Sprint(tc.body) {
				t.Fatalf("GET /health = %d %v, want %d %v", code, body, tc.code, tc.body)
			}
		})
	}
}

func seedDemo(t *testing.T, f *fixture) {
	if _, err := seed.Demo(context.Background(), f.store); err != nil {
		t.Fatal(err)
	}
}

func flushScripts(t *testing.T, f *fixture) {
	ctx := context.Background()
	if err := f.set.LoadAll(ctx, f.rdb); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range f.set.Names() {
			sha, _ := f.set.SHA(name)
			if ok, _ := f.rdb.ScriptExists(ctx, sha).Result(); len(ok) != 1 || !ok[0] {
				t.Errorf("script %s not reloaded by /health", name)
			}
		}
	})
}

func freeze(t *testing.T, f *fixture) {
	if err := f.rdb.Ping(context.Background()).Err(); err != nil { // pool one live connection
		t.Fatal(err)
	}
	f.redis.Freeze()
	t.Cleanup(f.redis.Thaw)
}

func TestHealthRecoversAfterRestart(t *testing.T) {
	f := newFixture(t)
	f.redis.Stop()
	if code, _ := f.get(t, "/health"); code != 503 {
		t.Fatalf("health with redis stopped = %d, want 503", code)
	}
	f.redis.Restart()
	if code, body := f.get(t, "/health"); code != 200 || body["scripts"] != scriptFiles(t) {
		t.Fatalf("health after restart = %d %v, want 200 with %v scripts", code, body, scriptFiles(t))
	}
}

func TestRedisReason(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("ping: %w", context.DeadlineExceeded), "timeout"},
		{refused, "unreachable"},
		{io.EOF, "unreachable"},
		{redisError("LOADING Redis is loading the dataset in memory"), "loading"},
		{redisError("READONLY You can't write against a read only replica."), "readonly"},
		{redisError("NOAUTH Authentication required."), "noauth"},
		{redisError("ERR something else"), "error"},
	}
	for _, c := range cases {
		if got := redisReason(c.err); got != c.want {
			t.Errorf("redisReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// redisError is a server error reply as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestUnknownRouteIs404JSON(t *testing.T) {
	f := newFixture(t)
	code, body := f.get(t, "/nope")
	if e, _ := body["error"].(map[string]any); code != 404 || e["code"] != "not_found" {
		t.Fatalf("GET /nope = %d %v", code, body)
	}
}
