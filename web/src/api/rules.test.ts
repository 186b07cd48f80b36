// The rule, breaker, event and alert modules call the routes of docs/rules-contract.md §8 with
// the right methods and parameters, and a refusal about one field lands on that field.
import { describe, expect, it } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import * as alerts from './alerts'
import * as breakers from './breakers'
import * as events from './events'
import { ApiError, toApiError } from './http'
import * as rules from './rules'
import type { BreakerConfig, RuleInput } from './types'

const RULE: RuleInput = { id: 'per user', scope: 'user', user_key: 'header:X-User-Id', algorithm: 'sliding_window',
  limit: 100, window_seconds: 1, unit: 'requests', distribution: 'node', priority: 100, enabled: true, action: 'reject' }
const VALID = { valid: true, dry_run: true, violations: [], diff: [{ path: 'rules[x].limit', new: 100 }] }
const BREAKER: BreakerConfig = { name: 'demo', enabled: true, per_app: false, window_ms: 10000, min_requests: 10,
  failure_threshold: 5, failure_ratio: 0.5, open_timeout_ms: 30000, success_threshold: 3,
  half_open_max_inflight: 1, failure_statuses: [502] }

describe('rules API', () => {
  it('lists rules (an empty list from null) and reads one by escaped id', async () => {
    const f = mockFetch(json(200, { data: null }), json(200, { data: { ...RULE, stats: { hits: 1 } } }))
    expect(await rules.list()).toEqual([])
    expect(await rules.get('per user')).toMatchObject({ id: 'per user', stats: { hits: 1 } })
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['GET /api/v1/rules', 'GET /api/v1/rules/per%20user'])
  })

  it('dry-runs creates and replaces with ?dry_run=true and returns the validation', async () => {
    const f = mockFetch(json(200, { data: { validation: VALID, written: false } }),
      json(200, { data: { validation: VALID, written: false } }), json(201, { data: { validation: VALID, written: true } }),
      json(200, { data: { validation: VALID, written: true } }), json(200, { data: { written: true } }))
    expect(await rules.createDryRun(RULE)).toEqual(VALID)
    expect(await rules.updateDryRun('per user', RULE)).toEqual(VALID)
    await rules.create(RULE)
    await rules.update('per user', RULE)
    await rules.remove('per user')
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual([
      'POST /api/v1/rules?dry_run=true', 'PUT /api/v1/rules/per%20user?dry_run=true', 'POST /api/v1/rules',
      'PUT /api/v1/rules/per%20user', 'DELETE /api/v1/rules/per%20user'])
    expect(f.calls[0]?.body).toEqual(RULE)
  })

  it('turns invalid_rule with a field into a violation of that field', async () => {
    mockFetch(json(400, { error: { code: 'invalid_rule', message: 'window_seconds: 1 to 86400',
      details: { field: 'window_seconds' } } }))
    const e = await rules.createDryRun(RULE).catch((x: unknown) => x)
    expect(e).toBeInstanceOf(ApiError)
    expect((e as ApiError).code).toBe('invalid_rule')
    expect((e as ApiError).violations).toEqual([{ field: 'window_seconds', code: 'invalid_rule',
      message: 'window_seconds: 1 to 86400' }])
  })

  it('also reads the field beside the code, and keeps explicit violations as they are', () => {
    expect(toApiError(400, { error: { code: 'invalid_rule', message: 'bad', field: 'match.cidrs' } }).violations)
      .toEqual([{ field: 'match.cidrs', code: 'invalid_rule', message: 'bad' }])
    const vs = [{ field: 'limit', code: 'x', message: 'y' }]
    expect(toApiError(400, { error: { code: 'config_validation_failed', message: 'm', details: { violations: vs, field: 'z' } } })
      .violations).toEqual(vs)
    expect(toApiError(409, { error: { code: 'rule_exists', message: 'exists' } }).violations).toEqual([])
  })
})

describe('breakers API', () => {
  it('lists, dry-runs, puts and deletes by escaped name', async () => {
    const f = mockFetch(json(200, { data: [{ ...BREAKER, nodes: [] }] }), json(200, { data: { validation: VALID } }),
      json(200, { data: { validation: VALID, written: true } }), json(200, { data: { written: true } }))
    expect(await breakers.list()).toHaveLength(1)
    expect(await breakers.putDryRun('a/b', BREAKER)).toEqual(VALID)
    await breakers.put('demo', BREAKER)
    await breakers.remove('demo')
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['GET /api/v1/breakers',
      'PUT /api/v1/breakers/a%2Fb?dry_run=true', 'PUT /api/v1/breakers/demo', 'DELETE /api/v1/breakers/demo'])
    expect(f.calls[2]?.body).toEqual(BREAKER)
  })
})

describe('events API', () => {
  it('passes the filters and the cursor, and reads next_cursor from meta', async () => {
    const f = mockFetch(json(200, { data: [{ id: '5-0', event_type: 'rule_triggered' }], meta: { next_cursor: '5-0' } }))
    const page = await events.query({ event_type: 'rule_triggered', app_id: 'demo-p1', rule_id: 'r', limit: 100,
      cursor: '9-0' })
    expect(f.calls[0]?.url).toBe('/api/v1/events?event_type=rule_triggered&app_id=demo-p1&rule_id=r&limit=100&cursor=9-0')
    expect(page).toEqual({ events: [{ id: '5-0', event_type: 'rule_triggered' }], next_cursor: '5-0' })
  })

  it('ends when the server says so (empty cursor) and, without a cursor, continues a full page before its oldest', async () => {
    mockFetch(json(200, { data: [{ id: '2-0' }, { id: '1-0' }], meta: { next_cursor: '' } }),
      json(200, { data: [{ id: '2-0' }, { id: '1-0' }] }), json(200, { data: [{ id: '1-0' }] }))
    expect((await events.query({ limit: 2 })).next_cursor).toBeUndefined()
    expect((await events.query({ limit: 2 })).next_cursor).toBe('1-0')
    expect((await events.query({ limit: 2 })).next_cursor).toBeUndefined() // a short page is the last
  })
})

describe('alerts API', () => {
  it('lists active or all alerts and acknowledges by id', async () => {
    const f = mockFetch(json(200, { data: [] }), json(200, { data: null }), json(200, { data: { id: 'a b' } }))
    await alerts.list()
    expect(await alerts.list(false)).toEqual([])
    await alerts.acknowledge('a b')
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['GET /api/v1/alerts?active=true',
      'GET /api/v1/alerts?active=false', 'POST /api/v1/alerts/a%20b/ack'])
  })
})
