// Store logic of the issue-7 views: rules (order, counters, when a live message refreshes),
// breakers, alerts (merge of pushes, acknowledgement shared with the dashboard), events (cursor).
import { createPinia, setActivePinia } from 'pinia'
import { beforeEach, describe, expect, it, vi } from 'vitest'
import type { Alert, DashboardData, RealtimeUpdate } from '@/api/types'
import { onLive, liveListeners, publishLive } from '@/composables/liveBus'
import { useDryRun } from '@/composables/useDryRun'
import { json, mockFetch } from '@/testing/fetch'
import { useAlertsStore } from './alerts'
import { useBreakersStore } from './breakers'
import { useEventsStore } from './events'
import { useMetricsStore } from './metrics'
import { useRulesStore } from './rules'
import { resetSessionStores } from './session'

const rule = (id: string, priority: number, hits = 0) => ({ id, priority, scope: 'global', algorithm: 'fixed_window',
  limit: 1, window_seconds: 1, unit: 'requests', distribution: 'node', enabled: true, action: 'reject',
  stats: { hits, blocked: hits ? 1 : 0, throttled: 0, shadowed: 0, fail_open: 0 } })
const alert = (id: string, timestamp: number, extra: Partial<Alert> = {}): Alert => ({ id, kind: 'circuit_open',
  severity: 'critical', message: id, timestamp, acknowledged: false, active: true, ...extra })
const metricsMsg = { type: 'metrics', data: {} as DashboardData, timestamp: 1 } as const

describe('rules store', () => {
  beforeEach(() => { setActivePinia(createPinia()) })

  it('keeps the rules in the order gateways check them and sums the counters', async () => {
    mockFetch(json(200, { data: [rule('b', 10, 5), rule('z', 1, 2), rule('a', 10)] }))
    const s = useRulesStore()
    await s.fetch()
    expect(s.items.map((r) => r.id)).toEqual(['z', 'a', 'b'])
    expect(s.totals).toEqual({ hits: 7, blocked: 2, throttled: 0, shadowed: 0, fail_open: 0 })
    expect(s.updatedAt).toBeGreaterThan(0)
  })

  it('refreshes at once on a config change, on metrics pushes only when the counters are old', async () => {
    const f = mockFetch(json(200, { data: [] }), json(200, { data: [] }), json(200, { data: [] }))
    const s = useRulesStore()
    await s.onUpdate({ type: 'config_change', data: { config_version: 2 }, timestamp: 1 })
    expect(f.calls).toHaveLength(1)
    const t = s.updatedAt
    expect(s.onUpdate(metricsMsg, t + 1000)).toBeUndefined() // fresh enough
    expect(s.onUpdate({ type: 'alert', data: alert('x', 1), timestamp: 1 }, t + 60_000)).toBeUndefined()
    await s.onUpdate(metricsMsg, t + 3000)
    expect(f.calls).toHaveLength(2)
    await s.onUpdate({ type: 'config_change', data: { config_version: 3 }, timestamp: 1 }, t + 3001)
    expect(f.calls).toHaveLength(3)
  })

  it('deletes, reloads, records errors, and is reset when the session ends', async () => {
    const f = mockFetch(json(200, { data: [rule('a', 1), rule('b', 2)] }), json(200, { data: { written: true } }),
      json(200, { data: [rule('b', 2)] }), json(403, { error: { code: 'forbidden', message: 'no' } }))
    const s = useRulesStore()
    await s.fetch()
    await s.remove('a')
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['GET /api/v1/rules', 'DELETE /api/v1/rules/a',
      'GET /api/v1/rules'])
    expect(s.items.map((r) => r.id)).toEqual(['b'])
    await s.fetch()
    expect(s.error?.forbidden).toBe(true)
    expect(s.items).toHaveLength(1) // the last good list stays
    resetSessionStores()
    expect([s.items.length, s.error, s.updatedAt]).toEqual([0, null, 0])
  })
})

describe('breakers store', () => {
  beforeEach(() => { setActivePinia(createPinia()) })

  it('lists by name and refreshes on config changes and circuit alerts', async () => {
    const b = (name: string) => ({ name, nodes: [] })
    const f = mockFetch(json(200, { data: [b('z'), b('a')] }), json(200, { data: [b('a')] }))
    const s = useBreakersStore()
    await s.onUpdate({ type: 'config_change', data: { config_version: 2 }, timestamp: 1 })
    expect(s.items.map((x) => x.name)).toEqual(['a', 'z'])
    expect(s.onUpdate({ type: 'alert', data: alert('d', 1, { kind: 'drift_high' }), timestamp: 1 })).toBeUndefined()
    await s.onUpdate({ type: 'alert', data: alert('c', 1), timestamp: 1 })
    expect(f.calls).toHaveLength(2)
  })
})

describe('alerts store', () => {
  beforeEach(() => { setActivePinia(createPinia()) })

  it('loads active and resolved alerts, active first, and filters them', async () => {
    const f = mockFetch(json(200, { data: [alert('res', 9, { active: false, resolved_at: 10, kind: 'drift_high' }),
      alert('a', 5), alert('b', 7)] }))
    const s = useAlertsStore()
    await s.fetch()
    expect(f.calls[0]?.url).toBe('/api/v1/alerts?active=false')
    expect(s.items.map((a) => a.id)).toEqual(['b', 'a', 'res'])
    expect(s.counts).toEqual({ active: 2, resolved: 1, unacknowledged: 2 })
    s.filter = 'resolved'
    expect(s.shown.map((a) => a.id)).toEqual(['res'])
    s.filter = 'all'
    s.kind = 'circuit_open'
    expect(s.shown.map((a) => a.id)).toEqual(['b', 'a'])
    expect(s.kinds).toEqual(['circuit_open', 'drift_high'])
  })

  it('merges pushed alerts and marks new ones', async () => {
    mockFetch(json(200, { data: [alert('a', 5)] }))
    const s = useAlertsStore()
    await s.fetch()
    s.onUpdate({ type: 'alert', data: alert('n', 8, { kind: 'traffic_spike' }), timestamp: 8 })
    s.onUpdate({ type: 'alert', data: alert('a', 5, { active: false, resolved_at: 9 }), timestamp: 9 })
    expect(s.items.map((a) => [a.id, a.active])).toEqual([['n', true], ['a', false]])
    expect([...s.fresh]).toEqual(['n'])
  })

  it('acknowledges, and the dashboard and the bell see it', async () => {
    const f = mockFetch(json(200, { data: [alert('a', 5)] }),
      json(200, { data: alert('a', 5, { acknowledged: true, acknowledged_by: 'op' }) }))
    const s = useAlertsStore()
    const m = useMetricsStore()
    await s.fetch()
    m.onUpdate({ type: 'alert', data: alert('a', 5), timestamp: 5 })
    expect(m.unacknowledged).toBe(1)
    await s.acknowledge('a')
    expect(f.calls[1]).toMatchObject({ method: 'POST', url: '/api/v1/alerts/a/ack' })
    expect(s.items[0]).toMatchObject({ acknowledged: true, acknowledged_by: 'op' })
    expect(s.counts.unacknowledged).toBe(0)
    expect(m.unacknowledged).toBe(0)
  })
})

describe('events store', () => {
  beforeEach(() => { setActivePinia(createPinia()) })

  it('loads with the filters, appends older pages, and starts over when the filters change', async () => {
    const f = mockFetch(json(200, { data: [{ id: '3-0' }, { id: '2-0' }], meta: { next_cursor: '2-0' } }),
      json(200, { data: [{ id: '2-0' }, { id: '1-0' }], meta: { next_cursor: '' } }),
      json(200, { data: [{ id: '9-0' }], meta: { next_cursor: '' } }))
    const s = useEventsStore()
    s.filter.rule_id = ' r1 '
    s.filter.event_type = 'rule_triggered'
    await s.load()
    await s.load(true)
    expect(s.items.map((e) => e.id)).toEqual(['3-0', '2-0', '1-0']) // no duplicate at the seam
    expect(s.cursor).toBeUndefined()
    await s.load(true) // nothing older: no call
    s.filter.app_id = 'demo-p1'
    await s.load()
    expect(s.items.map((e) => e.id)).toEqual(['9-0'])
    expect(f.calls.map((c) => c.url)).toEqual([
      '/api/v1/events?event_type=rule_triggered&rule_id=r1&limit=100',
      '/api/v1/events?event_type=rule_triggered&rule_id=r1&limit=100&cursor=2-0',
      '/api/v1/events?event_type=rule_triggered&app_id=demo-p1&rule_id=r1&limit=100'])
  })
})

describe('live bus and dry run', () => {
  it('delivers updates to listeners until they leave, and one failing listener does not stop the rest', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {})
    const got: string[] = []
    const offBad = onLive(() => { throw new Error('boom') })
    const off = onLive((u) => got.push(u.type))
    const before = liveListeners()
    publishLive({ type: 'config_change', data: { config_version: 1 }, timestamp: 1 } as RealtimeUpdate)
    off()
    offBad()
    publishLive(metricsMsg)
    expect(got).toEqual(['config_change'])
    expect(liveListeners()).toBe(before - 2)
    expect(warn).toHaveBeenCalledTimes(1)
  })

  it('refuses locally without asking the server, and shows the server refusal with its code', async () => {
    const d = useDryRun()
    d.refuse([{ field: 'limit', code: 'invalid_limit', message: 'limit: at least 1' }])
    expect([d.open.value, d.failure.value, d.violations.value.length, d.code.value])
      .toEqual([false, 'Some fields need attention.', 1, null])
    mockFetch(json(400, { error: { code: 'invalid_rule', message: 'limit too high', details: { field: 'limit' } } }))
    const rules = await import('@/api/rules')
    await d.review(() => rules.createDryRun({} as never))
    expect(d.code.value).toBe('invalid_rule')
    expect(d.violations.value).toEqual([{ field: 'limit', code: 'invalid_rule', message: 'limit too high' }])
    expect(d.open.value).toBe(false)
  })
})
