package testutil

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Housekeeping are the commands of a measurement itself and of a new connection's handshake:
// left out when a test counts the commands some work cost.
var Housekeeping = []string{"info", "config|resetstat", "hello", "client|setinfo", "select", "auth", "ping"}

// CommandCalls returns the calls per command Redis has served (INFO commandstats, the commands
// scripts run included), by lower-case name: "hget", "evalsha", "client|setinfo".
func CommandCalls(t testing.TB, rdb redis.Cmdable) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("testutil: commandstats line %q", line)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// WorkCalls sums calls without the commands in skip, and lists them by name ("hget=3 zadd=1").
func WorkCalls(calls map[string]int64, skip ...string) (int64, string) {
	left := map[string]bool{}
	for _, s := range skip {
		left[s] = true
	}
	var sum int64
	var per []string
	for name, n := range calls {
		if !left[name] {
			sum += n
			per = append(per, fmt.Sprintf("%s=%d", name, n))
		}
	}
	sort.Strings(per)
	return sum, strings.Join(per, " ")
}
