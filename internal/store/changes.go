package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// ChangeLogLength is how many versions ratelimit:config:changes keeps; a gateway further behind
// than that reloads the whole config.
const ChangeLogLength = 10000

// MaxChangesPerVersion bounds the entries one version logs; a write that changes more (an app
// removed with thousands of access keys) is logged as ChangeAll.
const MaxChangesPerVersion = 500

// Change kinds of the change log, each naming what a gateway re-reads (docs/scale.md):
const (
	ChangeApp         = "app"          // the app's entry of the apps index (or its removal)
	ChangeKey         = "key"          // an access key id's owner (ratelimit:access_keys)
	ChangeBucket      = "bucket"       // a bucket's owner (ratelimit:buckets)
	ChangeRule        = "rule"         // a rule of ratelimit:rules
	ChangeBreaker     = "breaker"      // a breaker of ratelimit:breakers
	ChangeCluster     = "cluster"      // a cluster's L1 config (read by the scripts, not by gateways)
	ChangeConnApp     = "conn_app"     // an app's connection limits
	ChangeConnCluster = "conn_cluster" // a cluster's connection limits
	ChangeUser        = "user"         // an admin user: nothing a gateway holds
	ChangeAll         = "all"          // anything global (import, restore): a gateway reloads everything
)

type changeKey struct{}

type change struct{ kind, id string }

// changeSet is what one version announces: one or more entries.
type changeSet struct{ items []change }

// WithChange tells the version bump of ctx what it announces (kind and id in the change log);
// without it a bump is logged as ChangeAll. Writes inside the bump may add entries (AlsoChange).
func WithChange(ctx context.Context, kind, id string) context.Context {
	return context.WithValue(ctx, changeKey{}, &changeSet{items: []change{{kind, id}}})
}

// AlsoChange adds an entry to the change the bump of ctx announces (an app's removal also
// releases its access keys and buckets, in the same version); a no-op for a ctx without
// WithChange, which is logged as ChangeAll anyway.
func AlsoChange(ctx context.Context, kind, id string) {
	if cs, ok := ctx.Value(changeKey{}).(*changeSet); ok {
		cs.items = append(cs.items, change{kind, id})
	}
}

// logChange appends version v's entries to the change log (one ZADD, so a reader sees all of a
// version's entries or none) and trims it, after the INCR and before the announcement: a
// gateway that sees the version finds its entries, or a gap (a writer still between INCR and
// ZADD), which it treats like a trimmed log.
func (s *Store) logChange(ctx context.Context, v int64) error {
	var items []change
	if cs, ok := ctx.Value(changeKey{}).(*changeSet); ok {
		items = cs.items
	}
	if len(items) == 0 || len(items) > MaxChangesPerVersion {
		items = []change{{ChangeAll, "-"}}
	}
	prefix := strconv.FormatInt(v, 10) + " "
	zs := make([]redis.Z, 0, len(items))
	seen := map[change]bool{}
	for _, c := range items {
		if !seen[c] {
			seen[c] = true
			zs = append(zs, redis.Z{Score: float64(v), Member: prefix + c.kind + " " + c.id})
		}
	}
	if err := s.rdb.ZAdd(ctx, keys.ConfigChanges(), zs...).Err(); err != nil {
		return fmt.Errorf("change log: %w", err)
	}
	if v%100 == 0 { // trim now and then, by version (never half of a version's entries)
		max := strconv.FormatInt(v-ChangeLogLength, 10)
		if err := s.rdb.ZRemRangeByScore(ctx, keys.ConfigChanges(), "-inf", max).Err(); err != nil {
			return fmt.Errorf("change log trim: %w", err)
		}
	}
	return nil
}
