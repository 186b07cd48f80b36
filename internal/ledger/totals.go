package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// fieldOf reads one field of a hash per app in one round trip; a missing hash or field is "".
func (l *Ledger) fieldOf(ctx context.Context, apps []string, key func(app string) string, field string) ([]string, error) {
	for _, a := range apps {
		if err := checkIDs(a); err != nil {
			return nil, err
		}
	}
	cmds := make([]*redis.StringCmd, len(apps))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range apps {
			cmds[i] = p.HGet(ctx, key(a), field)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ledger: read %s: %w", field, err)
	}
	out := make([]string, len(apps))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("ledger: read %s of %s: %w", field, apps[i], err)
		}
		out[i] = v
	}
	return out, nil
}

// Consumed is the sum of total_consumed of the apps' stats hashes (reported consumption,
// fail-open included): the cluster's measured consumption, in tokens.
func (l *Ledger) Consumed(ctx context.Context, cluster string, apps []string) (int64, error) {
	if err := checkIDs(cluster); err != nil {
		return 0, err
	}
	vals, err := l.fieldOf(ctx, apps, func(a string) string { return keys.Stats(cluster, a) }, "total_consumed")
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, v := range vals {
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return sum, nil
}

// Debts returns the apps with debt > 0 and their debt.
func (l *Ledger) Debts(ctx context.Context, cluster string, apps []string) (map[string]int64, error) {
	if err := checkIDs(cluster); err != nil {
		return nil, err
	}
	vals, err := l.fieldOf(ctx, apps, func(a string) string { return keys.L2(cluster, a) }, "debt")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i, v := range vals {
		if n, _ := strconv.ParseInt(v, 10, 64); n > 0 {
			out[apps[i]] = n
		}
	}
	return out, nil
}
