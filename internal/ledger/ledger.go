// Package ledger is the typed Go face of the token-economy scripts of redis-scripts/: grants
// and reports (as the gateway runs them), refill and repayment, reconciliation, emergency mode,
// overload and the control plane's leader lock, plus readers of the L1 and L2 hashes. Every
// state change goes through a script; the optional explicit time (Unix microseconds, 0 for
// Redis TIME) exists for the simulator.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// Error taxonomy of the ledger; callers classify with errors.Is / errors.As.
var (
	ErrUnknownCluster = errors.New("unknown cluster")
	ErrUnknownApp     = errors.New("unknown app")
	// ErrStaleAppList: an app allocated in L1 was missing from the list given to
	// ReconcileCluster; nothing changed, list the apps again.
	ErrStaleAppList = errors.New("stale app list")
	ErrInvalidID    = errors.New("invalid id")
)

// ScriptError is an error reply of a script, e.g. code "invalid_duration".
type ScriptError struct {
	Script string
	Code   string
}

func (e *ScriptError) Error() string { return e.Script + ": " + e.Code }

// Runner runs a script of redis-scripts/ by name (implemented by *scripts.Set).
type Runner interface {
	Run(ctx context.Context, rdb redis.Scripter, name string, keys []string, args ...any) *redis.Cmd
}

// Redis is what the ledger needs of a client: scripts and hash, set and stream reads.
type Redis interface {
	redis.Scripter
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	ZRange(ctx context.Context, key string, start, stop int64) *redis.StringSliceCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	XRevRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Ledger runs the scripts on one Redis.
type Ledger struct {
	rdb Redis
	run Runner
}

// New returns a ledger over rdb and the script set.
func New(rdb Redis, run Runner) *Ledger { return &Ledger{rdb: rdb, run: run} }

// nowArg is the optional time argument: "" (Redis TIME) or Unix microseconds.
func nowArg(nowUS int64) string {
	if nowUS <= 0 {
		return ""
	}
	return fmt.Sprintf("%d", nowUS)
}

func checkIDs(ids ...string) error {
	for _, id := range ids {
		if !keys.ValidID(id) {
			return fmt.Errorf("ledger: id %q: %w", id, ErrInvalidID)
		}
	}
	return nil
}

// classify turns a script's error reply into ErrUnknownCluster, ErrStaleAppList or a
// *ScriptError; other errors (network, timeouts) pass through wrapped.
func classify(script string, err error) error {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return fmt.Errorf("ledger: %s: %w", script, err)
	}
	code := strings.TrimPrefix(rerr.Error(), "ERR ")
	switch code {
	case "unknown_cluster":
		return fmt.Errorf("ledger: %s: %w", script, ErrUnknownCluster)
	case "stale_app_list":
		return fmt.Errorf("ledger: %s: %w", script, ErrStaleAppList)
	}
	return &ScriptError{Script: script, Code: code}
}

// ints reads a reply of integers, with an optional trailing status string.
func ints(res []any, n int) ([]int64, string, error) {
	if len(res) < n {
		return nil, "", fmt.Errorf("reply %v: want %d values", res, n)
	}
	out := make([]int64, n)
	for i := 0; i < n; i++ {
		v, ok := res[i].(int64)
		if !ok {
			return nil, "", fmt.Errorf("reply %v: value %d is %T", res, i, res[i])
		}
		out[i] = v
	}
	status := ""
	if len(res) > n {
		status, _ = res[n].(string)
	}
	return out, status, nil
}

func (l *Ledger) slice(ctx context.Context, script string, k []string, args ...any) ([]any, error) {
	res, err := l.run.Run(ctx, l.rdb, script, k, args...).Slice()
	if err != nil {
		return nil, classify(script, err)
	}
	return res, nil
}
