package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tollgate/internal/keys"
)

// StaleAfter: a node report older than this is left out of the breaker states (the same age
// after which the live view marks a node stale).
const StaleAfter = 30 * time.Second

const scanCount = 200

// NodeState is one node's state of a breaker (from the node's report, docs/rules-contract.md §6).
type NodeState struct {
	NodeID   string `json:"node_id"`
	Key      string `json:"key"` // "<name>" or "<name>/<app>" (per_app breakers)
	State    string `json:"state"`
	Failures int64  `json:"failures"`
	Requests int64  `json:"requests"`
	OpenedAt int64  `json:"opened_at,omitempty"`
	RetryAt  int64  `json:"retry_at,omitempty"`
}

// BreakerView is a breaker config with the states the live nodes report.
type BreakerView struct {
	Breaker
	Nodes []NodeState `json:"nodes"`
}

// ListBreakers returns every breaker config, by name, each with its node states.
func (s *Service) ListBreakers(ctx context.Context) ([]BreakerView, error) {
	all, err := s.o.Redis.HGetAll(ctx, keys.BreakersIndex()).Result()
	if err != nil {
		return nil, fmt.Errorf("rules: list breakers: %w", err)
	}
	states, err := s.nodeStates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BreakerView, 0, len(all))
	for name, doc := range all {
		b, err := decodeBreaker(name, doc)
		if err != nil {
			s.o.Logger.Warn("damaged breaker entry left out", "breaker", safeID(name), "err", err)
			continue
		}
		ns := states[name]
		if ns == nil {
			ns = []NodeState{}
		}
		out = append(out, BreakerView{Breaker: b, Nodes: ns})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GetBreaker returns breaker name's config; ErrBreakerNotFound when absent.
func (s *Service) GetBreaker(ctx context.Context, name string) (Breaker, error) {
	b, err := s.breaker(ctx, name)
	if err == nil && b == nil {
		err = ErrBreakerNotFound
	}
	if err != nil {
		return Breaker{}, err
	}
	return *b, nil
}

func (s *Service) breaker(ctx context.Context, name string) (*Breaker, error) {
	doc, err := s.o.Redis.HGet(ctx, keys.BreakersIndex(), name).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rules: get breaker %s: %w", name, err)
	}
	b, err := decodeBreaker(name, doc)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

func decodeBreaker(name, doc string) (Breaker, error) {
	var b Breaker
	if err := json.Unmarshal([]byte(doc), &b); err != nil {
		return Breaker{}, fmt.Errorf("rules: decode breaker %q: %w", safeID(name), err)
	}
	if b.Name != name || !keys.ValidID(name) {
		return Breaker{}, fmt.Errorf("rules: entry %q names breaker %q", safeID(name), safeID(b.Name))
	}
	return b, nil
}

// PutBreaker creates or replaces breaker name (unless dryRun); created tells which.
func (s *Service) PutBreaker(ctx context.Context, actor, name string, f BreakerFields, dryRun bool) (out Outcome, created bool, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, created, err = s.putBreaker(ctx, actor, name, f, dryRun)
		return err
	})
	return out, created, err
}

func (s *Service) putBreaker(ctx context.Context, actor, name string, f BreakerFields, dryRun bool) (out Outcome, created bool, err error) {
	cur, err := s.breaker(ctx, name)
	if err != nil {
		return Outcome{}, false, err
	}
	b, vs := BuildBreaker(f, name)
	a := attempt{actor: actor, action: action("breaker", "put", dryRun), resource: "breaker/" + name}
	a.out.Validation = result(dryRun, vs, diff("breakers["+name+"]", cur, &b))
	out, err = s.finish(ctx, a, "breaker", name, vs, func(ctx context.Context) error {
		doc, err := marshal(b)
		if err != nil {
			return err
		}
		return s.o.Redis.HSet(ctx, keys.BreakersIndex(), name, doc).Err()
	})
	return out, cur == nil, err
}

// DeleteBreaker removes breaker name (unless dryRun); ErrBreakerNotFound when absent.
func (s *Service) DeleteBreaker(ctx context.Context, actor, name string, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.deleteBreaker(ctx, actor, name, dryRun)
		return err
	})
	return out, err
}

func (s *Service) deleteBreaker(ctx context.Context, actor, name string, dryRun bool) (Outcome, error) {
	cur, err := s.breaker(ctx, name)
	if err != nil {
		return Outcome{}, err
	}
	if cur == nil {
		return Outcome{}, ErrBreakerNotFound
	}
	a := attempt{actor: actor, action: action("breaker", "delete", dryRun), resource: "breaker/" + name}
	a.out.Validation = result(dryRun, nil, diff("breakers["+name+"]", cur, (*Breaker)(nil)))
	return s.finish(ctx, a, "breaker", name, nil, func(ctx context.Context) error {
		return s.o.Redis.HDel(ctx, keys.BreakersIndex(), name).Err()
	})
}

// nodeStates reads the "breakers" of every live node report in ratelimit:gateways, by
// breaker name, each list sorted by node then key. Damaged or stale reports, odd ids and
// unknown states are left out.
func (s *Service) nodeStates(ctx context.Context) (map[string][]NodeState, error) {
	out := map[string][]NodeState{}
	seen := map[string]bool{}
	now := s.o.Now()
	var cursor uint64
	for {
		kv, next, err := s.o.Redis.HScan(ctx, keys.Gateways(), cursor, "", scanCount).Result()
		if err != nil {
			return nil, fmt.Errorf("rules: gateways: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if seen[kv[i]] {
				continue // HSCAN may return a field twice
			}
			seen[kv[i]] = true
			for _, st := range parseReport(kv[i], kv[i+1], now) {
				name, _, _ := strings.Cut(st.Key, "/")
				out[name] = append(out[name], st)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool {
			if l[i].NodeID != l[j].NodeID {
				return l[i].NodeID < l[j].NodeID
			}
			return l[i].Key < l[j].Key
		})
	}
	return out, nil
}

// parseReport reads the breaker states of one node report (nil when damaged or stale).
func parseReport(node, doc string, now time.Time) []NodeState {
	var raw struct {
		LastSeen float64                    `json:"last_seen"`
		Breakers map[string]json.RawMessage `json:"breakers"`
	}
	if !keys.ValidID(node) || json.Unmarshal([]byte(doc), &raw) != nil {
		return nil
	}
	if math.IsNaN(raw.LastSeen) || now.Sub(time.Unix(int64(raw.LastSeen), 0)) > StaleAfter {
		return nil
	}
	var out []NodeState
	for key, v := range raw.Breakers {
		var b struct {
			State    string  `json:"state"`
			Failures float64 `json:"failures"`
			Requests float64 `json:"requests"`
			OpenedAt float64 `json:"opened_at"`
			RetryAt  float64 `json:"retry_at"`
		}
		name, app, perApp := strings.Cut(key, "/")
		if json.Unmarshal(v, &b) != nil || !keys.ValidID(name) || perApp && !keys.ValidID(app) {
			continue
		}
		switch b.State {
		case "closed", "open", "half_open":
		default:
			continue
		}
		out = append(out, NodeState{NodeID: node, Key: key, State: b.State, Failures: count(b.Failures),
			Requests: count(b.Requests), OpenedAt: count(b.OpenedAt), RetryAt: count(b.RetryAt)})
	}
	return out
}

// count is a reported number as a non-negative integer (0 when odd).
func count(f float64) int64 {
	if math.IsNaN(f) || f < 0 || f > 1<<53 {
		return 0
	}
	return int64(f)
}
