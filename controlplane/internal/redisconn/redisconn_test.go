package redisconn

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/testutil"
)

// syncBuffer is a log sink safe for concurrent use.
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

func logger(b *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func fast() Options {
	return Options{GiveUpAfter: 10 * time.Second, PingTimeout: 200 * time.Millisecond,
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
}

func TestWaitReturnsWhenRedisAnswers(t *testing.T) {
	r := testutil.StartRedis(t)
	var logs syncBuffer
	if err := Wait(context.Background(), r.Client(), logger(&logs), fast()); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !strings.Contains(logs.String(), "redis connected") {
		t.Errorf("logs = %q, want a connected line", logs.String())
	}
}

func TestWaitRetriesUntilRedisComesUp(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := r.Client()
	r.Stop()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), rdb, logger(&logs), fast()) }()
	testutil.Eventually(t, 5*time.Second, func() bool {
		return strings.Count(logs.String(), "retrying") >= 2
	}, "two failed attempts logged")
	r.Restart()
	if err := <-done; err != nil {
		t.Fatalf("Wait after restart: %v", err)
	}
}

func TestWaitGivesUp(t *testing.T) {
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer rdb.Close()
	r.Stop()
	var logs syncBuffer
	o := fast()
	o.GiveUpAfter = 300 * time.Millisecond
	start := time.Now()
	err := Wait(context.Background(), rdb, logger(&logs), o)
	if err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("Wait on a dead port = %v, want give-up error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %s, want about %s", d, o.GiveUpAfter)
	}
	if n := strings.Count(logs.String(), "retrying"); n < 2 {
		t.Errorf("%d attempt lines logged, want one per attempt (>= 2)", n)
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.GiveUpAfter != 30*time.Second || o.MaxBackoff != 2*time.Second {
		t.Fatalf("defaults = %+v", o)
	}
}
