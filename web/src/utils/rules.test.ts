// The rule form's body, the client-side checks that mirror the API's, and the list's summaries.
import { describe, expect, it } from 'vitest'
import type { Rule, RuleInput } from '@/api/types'
import { byPriority, cidrProblem, emptyForm, inputOf, limitSummary, matchSummary, ruleErrors, ruleField, ruleStatus,
  toForm, toInput, validateRule, validCidr } from './rules'

const BASE: RuleInput = { id: 'r1', scope: 'app', algorithm: 'sliding_window', limit: 100, window_seconds: 1,
  unit: 'requests', distribution: 'node', priority: 100, enabled: true, action: 'reject' }
const fields = (r: RuleInput) => validateRule(r).map((v) => v.field)

describe('rule form → body', () => {
  it('sends only what the choices make meaningful', () => {
    const f = { ...emptyForm(), id: ' r1 ', algorithm: 'sliding_window' as const, customBurst: true, burst: 500,
      scope: 'app' as const, userHeader: 'X-User', action: 'reject' as const, throttle_max_delay_ms: 300,
      bucket: '  ', headers: [{ name: '', value: 'x' }] }
    const b = toInput(f)
    expect(b).toEqual({ id: 'r1', scope: 'app', algorithm: 'sliding_window', limit: 100, window_seconds: 1,
      unit: 'requests', distribution: 'node', priority: 100, enabled: true, action: 'reject' })
  })

  it('carries every field of the rule JSON when chosen', () => {
    const f = {
      ...emptyForm(), id: 'per-user-puts', description: ' at most 100 PUT/s ', scope: 'user' as const,
      userKeyKind: 'header' as const, userHeader: 'X-User-Id', app_ids: ['demo-p1'], methods: ['put'],
      bucket: 'photos', key_prefix: 'thumbs/', path: '/photos/*/raw/*', cidrs: ['10.0.0.0/8', ' ::1/128 '],
      headers: [{ name: 'X-Tier', value: 'free' }], algorithm: 'token_bucket' as const, limit: 100,
      window_seconds: 1, customBurst: true, burst: 150, unit: 'cost' as const, distribution: 'global' as const,
      priority: 5, enabled: false, effective_from: new Date('2026-11-21T00:00:00.000Z'),
      effective_to: new Date('2026-12-01T12:30:00Z'), action: 'throttle' as const, throttle_max_delay_ms: 500,
    }
    expect(toInput(f)).toEqual({
      id: 'per-user-puts', description: 'at most 100 PUT/s', scope: 'user', user_key: 'header:X-User-Id',
      match: { app_ids: ['demo-p1'], methods: ['PUT'], bucket: 'photos', key_prefix: 'thumbs/',
        path: '/photos/*/raw/*', cidrs: ['10.0.0.0/8', '::1/128'], headers: { 'X-Tier': 'free' } },
      algorithm: 'token_bucket', limit: 100, window_seconds: 1, burst: 150, unit: 'cost', distribution: 'global',
      priority: 5, enabled: false, effective_from: '2026-11-21T00:00:00Z', effective_to: '2026-12-01T12:30:00Z',
      action: 'throttle', throttle_max_delay_ms: 500,
    })
    expect(toInput({ ...f, userKeyKind: 's3_access_key' }).user_key).toBe('s3_access_key')
  })

  it('round-trips a stored rule without a change (times keep their text)', () => {
    const stored: Rule = { ...BASE, id: 'x', scope: 'ip', match: { cidrs: ['::1/128'], headers: { 'X-A': '1' } },
      algorithm: 'token_bucket', burst: 300, effective_from: '2026-11-21T01:00:00+01:00', action: 'throttle',
      throttle_max_delay_ms: 200, created_at: 1, updated_at: 2, updated_by: 'admin',
      stats: { hits: 1, blocked: 0, throttled: 0, shadowed: 0, fail_open: 0 } }
    expect(toInput(toForm(stored), stored)).toEqual(inputOf(stored))
    expect(inputOf(stored)).not.toHaveProperty('stats')
    expect(inputOf(stored)).not.toHaveProperty('updated_by')
    // a token bucket without its own burst: the switch is off and no burst is sent
    // the API stores burst = limit for a token bucket without its own: the switch is off and no
    // burst is sent (the server applies the same default, so nothing changes)
    const plain: Rule = { ...BASE, algorithm: 'token_bucket', burst: BASE.limit }
    expect(toForm(plain).customBurst).toBe(false)
    const { burst: _b, ...withoutBurst } = plain
    expect(toInput(toForm(plain), plain)).toEqual(withoutBurst)
  })
})

describe('validateRule mirrors the API', () => {
  it('accepts the contract example', () => {
    expect(validateRule({ ...BASE, id: 'per-user-puts', scope: 'user', user_key: 'header:X-User-Id',
      match: { app_ids: ['demo-p1'], methods: ['PUT'], bucket: 'photos', key_prefix: 'thumbs/',
        path: '/photos/*/raw/*', cidrs: ['10.0.0.0/8', '::1/128'], headers: { 'X-Tier': 'free' } },
      algorithm: 'token_bucket', burst: 150, effective_from: '2026-11-21T00:00:00Z', effective_to: null,
      action: 'throttle', throttle_max_delay_ms: 500 })).toEqual([])
  })

  it('refuses each broken field under its name', () => {
    expect(fields({ ...BASE, id: 'a b' })).toEqual(['id'])
    expect(fields({ ...BASE, id: 'x'.repeat(129) })).toEqual(['id'])
    expect(fields({ ...BASE, scope: 'tenant' as RuleInput['scope'] })).toEqual(['scope'])
    expect(fields({ ...BASE, scope: 'user' })).toEqual(['user_key'])
    expect(fields({ ...BASE, scope: 'user', user_key: 'cookie:x' })).toEqual(['user_key'])
    expect(fields({ ...BASE, scope: 'user', user_key: 's3_access_key' })).toEqual([])
    expect(fields({ ...BASE, user_key: 'header:X' })).toEqual(['user_key'])
    expect(fields({ ...BASE, limit: 0 })).toEqual(['limit'])
    expect(fields({ ...BASE, limit: 1.5 })).toEqual(['limit'])
    expect(fields({ ...BASE, window_seconds: 0 })).toEqual(['window_seconds'])
    expect(fields({ ...BASE, window_seconds: 86401 })).toEqual(['window_seconds'])
    expect(fields({ ...BASE, window_seconds: 86400 })).toEqual([])
    expect(fields({ ...BASE, burst: 10 })).toEqual(['burst']) // windows have no burst
    expect(fields({ ...BASE, algorithm: 'token_bucket', burst: 0 })).toEqual(['burst'])
    expect(fields({ ...BASE, unit: 'bytes' as RuleInput['unit'] })).toEqual(['unit'])
    expect(fields({ ...BASE, distribution: 'cluster' as RuleInput['distribution'] })).toEqual(['distribution'])
    expect(fields({ ...BASE, priority: 1.5 })).toEqual(['priority'])
    expect(fields({ ...BASE, priority: -1 })).toEqual(['priority'])
    expect(fields({ ...BASE, priority: 1000001 })).toEqual(['priority'])
    expect(fields({ ...BASE, priority: 0 })).toEqual([])
    // a smoothing bucket: a capacity below the limit (docs/rules-contract.md §8, testdata/rules)
    expect(fields({ ...BASE, algorithm: 'token_bucket', limit: 10, burst: 9 })).toEqual([])
    expect(fields({ ...BASE, description: 'x'.repeat(513) })).toEqual(['description'])
    expect(fields({ ...BASE, description: 'tab\there' })).toEqual(['description'])
    expect(fields({ ...BASE, action: 'drop' as RuleInput['action'] })).toEqual(['action'])
    expect(fields({ ...BASE, action: 'throttle' })).toEqual(['throttle_max_delay_ms'])
    expect(fields({ ...BASE, action: 'throttle', throttle_max_delay_ms: 5001 })).toEqual(['throttle_max_delay_ms'])
    expect(fields({ ...BASE, action: 'throttle', throttle_max_delay_ms: 5000 })).toEqual([])
    expect(fields({ ...BASE, throttle_max_delay_ms: 5 })).toEqual(['throttle_max_delay_ms'])
    expect(fields({ ...BASE, effective_from: 'tomorrow' })).toEqual(['effective_from'])
    expect(fields({ ...BASE, effective_from: '2026-11-22T00:00:00Z', effective_to: '2026-11-21T00:00:00Z' }))
      .toEqual(['effective_to'])
  })

  it('checks the match fields', () => {
    const m = (match: RuleInput['match']) => fields({ ...BASE, match })
    expect(m({ app_ids: [] })).toEqual(['match.app_ids'])
    expect(m({ app_ids: ['ok', 'bad id'] })).toEqual(['match.app_ids[1]'])
    expect(m({ app_ids: ['a', 'A'] })).toEqual(['match.app_ids'])
    expect(m({ methods: ['get'] })).toEqual(['match.methods[0]'])
    expect(m({ methods: ['PUT', 'PUT'] })).toEqual(['match.methods'])
    expect(m({ bucket: 'a/b' })).toEqual(['match.bucket'])
    expect(m({ key_prefix: '' })).toEqual(['match.key_prefix'])
    expect(m({ path: 'photos/*' })).toEqual(['match.path'])
    expect(m({ path: '/a b' })).toEqual(['match.path'])
    expect(m({ path: '/a/***' })).toEqual(['match.path'])
    expect(m({ cidrs: ['10.0.0.0/8', '10.0.0.0/33'] })).toEqual(['match.cidrs[1]'])
    expect(m({ headers: { 'X Tier': 'a' } })).toEqual(['match.headers'])
    expect(m({ headers: {} })).toEqual(['match.headers'])
    expect(m({ headers: { 'X-A': 'x'.repeat(257) } })).toEqual(['match.headers.X-A'])
    expect(m({ path: '/photos/**', bucket: 'photos', key_prefix: 'a/' })).toEqual([])
    expect(fields({ ...BASE, scope: 'endpoint' })).toEqual(['match'])
    expect(fields({ ...BASE, scope: 'endpoint', match: { app_ids: ['a'] } })).toEqual([])
    expect(fields({ ...BASE, scope: 'endpoint', match: { path: '/x/*' } })).toEqual([])
  })

  it('knows IPv4 and IPv6 CIDRs as Go netip.ParsePrefix does, host bits refused', () => {
    for (const ok of ['10.0.0.0/8', '0.0.0.0/0', '192.168.1.1/32', '::1/128', '::/0', 'fe80::/10',
      '2001:db8::/32', '2001:db8::1:0/112', '::ffff:10.0.0.1/128', '1:2:3:4:5:6:7:8/128']) expect(validCidr(ok), ok).toBe(true)
    for (const bad of ['10.0.0/8', '256.0.0.0/8', '10.0.0.0/33', '::1/129', '1::2::3/64', 'fe80::1%eth0/64',
      '1:2:3:4:5:6:7:8:9/128', 'x/8', '10.0.0.0/8/1', '', '192.168.1.1', '010.0.0.0/8', '10.0.0.0/08'])
      expect(cidrProblem(bad), bad).toBe('invalid')
    for (const host of ['10.0.0.1/8', '192.168.1.1/24', '2001:db8::1/64', 'fe80::1/10', '::1/127'])
      expect(cidrProblem(host), host).toBe('host_bits')
  })
})

describe('violations to form fields', () => {
  it('maps the API paths to the form fields', () => {
    expect(ruleField('rules[per-user].window_seconds')).toBe('window_seconds')
    expect(ruleField('rule.limit')).toBe('limit')
    expect(ruleField('match.cidrs[1]')).toBe('match.cidrs')
    expect(ruleField('match.headers.X-Tier')).toBe('match.headers')
    expect(ruleField('rules')).toBe('')
  })

  it('keeps the first message per field and the unplaced ones together', () => {
    expect(ruleErrors([{ field: 'limit', code: 'a', message: 'one' }, { field: 'limit', code: 'b', message: 'two' },
      { field: 'rules', code: 'c', message: 'too many' }, { field: '', code: 'd', message: 'busy' }]))
      .toEqual({ limit: 'one', '': 'rules: too many; busy' })
  })
})

describe('summaries', () => {
  it('describes the match and the limit', () => {
    expect(matchSummary(undefined)).toBe('every request')
    expect(matchSummary({})).toBe('every request')
    expect(matchSummary({ app_ids: ['a', 'b'], methods: ['PUT'], bucket: 'photos', key_prefix: 't/',
      cidrs: ['1.0.0.0/8', '2.0.0.0/8', '3.0.0.0/8'], headers: { 'X-Tier': 'free' } }))
      .toBe('app a, b · PUT · bucket photos · key t/* · 3 CIDRs · X-Tier: free')
    expect(limitSummary({ limit: 100, window_seconds: 60, algorithm: 'fixed_window' })).toBe('100 / 1m')
    expect(limitSummary({ limit: 5, window_seconds: 7200, algorithm: 'token_bucket' })).toBe('5 / 2h, burst 5')
    expect(limitSummary({ limit: 5, window_seconds: 90, algorithm: 'token_bucket', burst: 9 })).toBe('5 / 90s, burst 9')
  })

  it('tells whether a rule is checked now', () => {
    const now = Date.parse('2026-11-21T12:00:00Z')
    expect(ruleStatus({ enabled: false }, now)).toBe('disabled')
    expect(ruleStatus({ enabled: true }, now)).toBe('active')
    expect(ruleStatus({ enabled: true, effective_from: '2026-11-22T00:00:00Z' }, now)).toBe('scheduled')
    expect(ruleStatus({ enabled: true, effective_to: '2026-11-21T12:00:00Z' }, now)).toBe('expired')
    expect(ruleStatus({ enabled: true, effective_from: '2026-11-21T00:00:00Z', effective_to: null }, now)).toBe('active')
  })

  it('orders by priority, then id', () => {
    const rs = [{ priority: 10, id: 'b' }, { priority: 5, id: 'z' }, { priority: 10, id: 'a' }]
    expect(rs.sort(byPriority).map((r) => r.id)).toEqual(['z', 'a', 'b'])
  })
})
