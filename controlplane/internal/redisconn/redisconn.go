// Package redisconn waits for Redis at start-up: PING with exponential backoff, one log line per
// failed attempt, giving up after a deadline.
package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pinger is the part of a Redis client that Wait needs.
type Pinger interface {
	Ping(ctx context.Context) *redis.StatusCmd
}

// Options tune Wait; zero fields take the defaults.
type Options struct {
	GiveUpAfter    time.Duration // default 30 s
	PingTimeout    time.Duration // default 1 s
	InitialBackoff time.Duration // default 100 ms
	MaxBackoff     time.Duration // default 2 s
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.GiveUpAfter, 30*time.Second)
	def(&o.PingTimeout, time.Second)
	def(&o.InitialBackoff, 100*time.Millisecond)
	def(&o.MaxBackoff, 2*time.Second)
	return o
}

// Wait pings until Redis answers, ctx is done, or GiveUpAfter has passed.
func Wait(ctx context.Context, rdb Pinger, log *slog.Logger, o Options) error {
	o = o.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.GiveUpAfter)
	defer cancel()
	backoff := o.InitialBackoff
	for attempt := 1; ; attempt++ {
		err := ping(ctx, rdb, o.PingTimeout)
		if err == nil {
			log.Info("redis connected", "attempt", attempt)
			return nil
		}
		log.Warn("redis not reachable, retrying", "attempt", attempt, "err", err, "retry_in", backoff)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("redis not reachable after %d attempts: %w", attempt, err)
		case <-timer.C:
		}
		backoff = min(2*backoff, o.MaxBackoff)
	}
}

func ping(ctx context.Context, rdb Pinger, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}
