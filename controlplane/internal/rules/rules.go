package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"tollgate/controlplane/internal/validate"
	"tollgate/internal/keys"
	"tollgate/internal/store"
)

// ListRules returns every rule with its counters, in the order gateways check them: priority,
// then id. An entry that does not decode (not written by this API) is left out and logged.
func (s *Service) ListRules(ctx context.Context) ([]RuleView, error) {
	all, err := s.o.Redis.HGetAll(ctx, keys.RulesIndex()).Result()
	if err != nil {
		return nil, fmt.Errorf("rules: list: %w", err)
	}
	list := make([]Rule, 0, len(all))
	for id, doc := range all {
		r, err := decodeRule(id, doc)
		if err != nil {
			s.o.Logger.Warn("damaged rule entry left out", "rule_id", safeID(id), "err", err)
			continue
		}
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Priority != list[j].Priority {
			return list[i].Priority < list[j].Priority
		}
		return list[i].ID < list[j].ID
	})
	return s.withStats(ctx, list)
}

// GetRule returns one rule with its counters.
func (s *Service) GetRule(ctx context.Context, id string) (RuleView, error) {
	r, err := s.rule(ctx, id)
	if err != nil {
		return RuleView{}, err
	}
	v, err := s.withStats(ctx, []Rule{r})
	if err != nil {
		return RuleView{}, err
	}
	return v[0], nil
}

func (s *Service) rule(ctx context.Context, id string) (Rule, error) {
	if !keys.ValidID(id) {
		return Rule{}, ErrRuleNotFound
	}
	doc, err := s.o.Redis.HGet(ctx, keys.RulesIndex(), id).Result()
	if errors.Is(err, redis.Nil) {
		return Rule{}, ErrRuleNotFound
	}
	if err != nil {
		return Rule{}, fmt.Errorf("rules: get %s: %w", id, err)
	}
	return decodeRule(id, doc)
}

func decodeRule(id, doc string) (Rule, error) {
	var r Rule
	if err := json.Unmarshal([]byte(doc), &r); err != nil {
		return Rule{}, fmt.Errorf("rules: decode %q: %w", safeID(id), err)
	}
	if r.ID != id || !keys.ValidID(id) {
		return Rule{}, fmt.Errorf("rules: entry %q names rule %q", safeID(id), safeID(r.ID))
	}
	return r, nil
}

func safeID(id string) string {
	if keys.ValidID(id) {
		return id
	}
	return "(invalid id)"
}

// withStats reads the counters of rules in one HMGET of ratelimit:rules:stats.
func (s *Service) withStats(ctx context.Context, list []Rule) ([]RuleView, error) {
	out := make([]RuleView, len(list))
	if len(list) == 0 {
		return out, nil
	}
	v, err := s.o.Redis.HMGet(ctx, keys.RuleStats(), statKeys(list)...).Result()
	if err != nil {
		return nil, fmt.Errorf("rules: stats: %w", err)
	}
	for i, r := range list {
		n := func(j int) int64 {
			str, _ := v[i*len(statFields)+j].(string)
			x, _ := strconv.ParseInt(str, 10, 64)
			return max(x, 0)
		}
		out[i] = RuleView{Rule: r, Stats: Stats{Hits: n(0), Blocked: n(1), Throttled: n(2), Shadowed: n(3), FailOpen: n(4)}}
	}
	return out, nil
}

// statKeys are the fields "<id>:hits", "<id>:blocked", … of rules, in statFields order.
func statKeys(list []Rule) []string {
	out := make([]string, 0, len(list)*len(statFields))
	for _, r := range list {
		for _, f := range statFields {
			out = append(out, r.ID+":"+f)
		}
	}
	return out
}

// CreateRule validates f and (unless dryRun) stores the new rule; ErrRuleExists when the id is
// taken (checked again atomically by HSETNX).
func (s *Service) CreateRule(ctx context.Context, actor string, f RuleFields, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.createRule(ctx, actor, f, dryRun)
		return err
	})
	return out, err
}

func (s *Service) createRule(ctx context.Context, actor string, f RuleFields, dryRun bool) (Outcome, error) {
	a := attempt{actor: actor, action: action("rule", "create", dryRun)}
	known, err := s.knownApps(ctx, f)
	if err != nil {
		return Outcome{}, err
	}
	r, vs := BuildRule(f, "", known, nil)
	a.resource = "rule/" + safeID(r.ID)
	if len(vs) == 0 {
		if _, err := s.rule(ctx, r.ID); err == nil {
			a.err = ErrRuleExists
		} else if !errors.Is(err, ErrRuleNotFound) {
			return Outcome{}, err
		}
	}
	now := s.o.Now().Unix()
	r.CreatedAt, r.UpdatedAt, r.UpdatedBy = now, now, actor
	a.out.Validation = result(dryRun, vs, diff("rules["+safeID(r.ID)+"]", (*Rule)(nil), &r))
	return s.finish(ctx, a, "rule", r.ID, vs, func(ctx context.Context) error {
		doc, err := marshal(r)
		if err != nil {
			return err
		}
		created, err := s.o.Redis.HSetNX(ctx, keys.RulesIndex(), r.ID, doc).Result()
		if err == nil && !created {
			return ErrRuleExists
		}
		return err
	})
}

// UpdateRule replaces rule id by f (validated, unless dryRun written); ErrRuleNotFound when
// absent. created_at is kept; app ids kept from the old rule need not exist any more.
func (s *Service) UpdateRule(ctx context.Context, actor, id string, f RuleFields, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.updateRule(ctx, actor, id, f, dryRun)
		return err
	})
	return out, err
}

func (s *Service) updateRule(ctx context.Context, actor, id string, f RuleFields, dryRun bool) (Outcome, error) {
	cur, err := s.rule(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	known, err := s.knownApps(ctx, f)
	if err != nil {
		return Outcome{}, err
	}
	r, vs := BuildRule(f, id, known, cur.Match.AppIDs)
	r.CreatedAt, r.UpdatedAt, r.UpdatedBy = cur.CreatedAt, s.o.Now().Unix(), actor
	a := attempt{actor: actor, action: action("rule", "update", dryRun), resource: "rule/" + id}
	a.out.Validation = result(dryRun, vs, diff("rules["+id+"]", &cur, &r))
	return s.finish(ctx, a, "rule", id, vs, func(ctx context.Context) error {
		doc, err := marshal(r)
		if err != nil {
			return err
		}
		return s.o.Redis.HSet(ctx, keys.RulesIndex(), id, doc).Err()
	})
}

// DeleteRule removes rule id and its counters (unless dryRun); ErrRuleNotFound when absent.
func (s *Service) DeleteRule(ctx context.Context, actor, id string, dryRun bool) (out Outcome, err error) {
	err = s.serial(ctx, dryRun, func(ctx context.Context) error {
		out, err = s.deleteRule(ctx, actor, id, dryRun)
		return err
	})
	return out, err
}

func (s *Service) deleteRule(ctx context.Context, actor, id string, dryRun bool) (Outcome, error) {
	cur, err := s.rule(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	a := attempt{actor: actor, action: action("rule", "delete", dryRun), resource: "rule/" + id}
	a.out.Validation = result(dryRun, nil, diff("rules["+id+"]", &cur, (*Rule)(nil)))
	return s.finish(ctx, a, "rule", id, nil, func(ctx context.Context) error {
		if err := s.o.Redis.HDel(ctx, keys.RulesIndex(), id).Err(); err != nil {
			return err
		}
		return s.o.Redis.HDel(ctx, keys.RuleStats(), statKeys([]Rule{cur})...).Err()
	})
}

// finish answers a checked change: rejected when it has violations or a conflict, done
// when a dry run, else written; audited in every case.
func (s *Service) finish(ctx context.Context, a attempt, kind, id string, vs []validate.Violation, fn func(context.Context) error) (Outcome, error) {
	switch {
	case len(vs) > 0:
		a.err = &InvalidError{Kind: kind, Result: a.out.Validation}
	case a.err != nil:
	case a.out.Validation.DryRun:
	default:
		a.err = s.write(ctx, changeKind[kind], id, &a.out, fn)
	}
	s.record(ctx, a)
	return a.out, a.err
}

// changeKind is the change-log kind of a rule or breaker write.
var changeKind = map[string]string{"rule": store.ChangeRule, "breaker": store.ChangeBreaker}

// action is the audit action of a change: "<kind>.<verb>", or "<kind>.validate" for a dry run.
func action(kind, verb string, dryRun bool) string {
	if dryRun {
		return kind + ".validate"
	}
	return kind + "." + verb
}
