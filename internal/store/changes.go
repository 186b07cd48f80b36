package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// ChangeLogLength is how many changes ratelimit:config:changes keeps; a gateway further behind
// than that reloads the whole config.
const ChangeLogLength = 10000

// Change kinds of the change log. ChangeApp: the app's entry of the apps index changed (or is
// gone); a gateway applies that one app. ChangeAll: anything else; a gateway reloads everything.
const (
	ChangeApp = "app"
	ChangeAll = "all"
)

type changeKey struct{}

type change struct{ kind, id string }

// WithChange tells the version bump of ctx what it announces (kind and id in the change log);
// without it a bump is logged as ChangeAll.
func WithChange(ctx context.Context, kind, id string) context.Context {
	return context.WithValue(ctx, changeKey{}, change{kind, id})
}

// logChange appends version v to the change log and trims it, after the INCR and before the
// announcement: a gateway that sees the version finds its entry, or a gap (a writer still
// between INCR and ZADD), which it treats like a trimmed log.
func (s *Store) logChange(ctx context.Context, v int64) error {
	c, _ := ctx.Value(changeKey{}).(change)
	if c.kind == "" {
		c = change{ChangeAll, "-"}
	}
	member := strconv.FormatInt(v, 10) + " " + c.kind + " " + c.id
	if err := s.rdb.ZAdd(ctx, keys.ConfigChanges(), redis.Z{Score: float64(v), Member: member}).Err(); err != nil {
		return fmt.Errorf("change log: %w", err)
	}
	if v%100 == 0 { // trim now and then: O(log n) per change on average
		if err := s.rdb.ZRemRangeByRank(ctx, keys.ConfigChanges(), 0, -ChangeLogLength-1).Err(); err != nil {
			return fmt.Errorf("change log trim: %w", err)
		}
	}
	return nil
}
