package redisenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Calls counts the commands Redis has executed, from INFO commandstats.
type Calls struct {
	// All is the sum of calls= over every command, including the commands scripts run inside
	// Redis, without INFO itself (only the benchmark sends INFO, and each snapshot would
	// otherwise count the previous one).
	All int64
	// Scripts are the script invocations (EVAL, EVALSHA and their _RO forms, FCALL): the round
	// trips of a limiter that keeps all its state transitions in scripts.
	Scripts int64
}

// Sub is c - o.
func (c Calls) Sub(o Calls) Calls { return Calls{All: c.All - o.All, Scripts: c.Scripts - o.Scripts} }

// CommandCalls snapshots the counters.
func CommandCalls(ctx context.Context, rdb *redis.Client) (Calls, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return Calls{}, fmt.Errorf("redisenv: info commandstats: %w", err)
	}
	return ParseCalls(info)
}

// ParseCalls parses INFO commandstats text.
func ParseCalls(info string) (Calls, error) {
	var c Calls
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		_, rest, ok := strings.Cut(stats, "calls=")
		if !ok {
			return Calls{}, fmt.Errorf("redisenv: no calls= in %q", line)
		}
		field, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return Calls{}, fmt.Errorf("redisenv: calls of %s: %w", name, err)
		}
		c.All += n
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			c.Scripts += n
		}
	}
	return c, nil
}
