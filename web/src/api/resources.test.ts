// The resource modules call the routes of the admin API with the right methods and parameters.
import { describe, expect, it } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import * as apps from './apps'
import * as audit from './audit'
import * as clusters from './clusters'
import * as connections from './connections'
import * as emergency from './emergency'
import * as metrics from './metrics'
import * as users from './users'

describe('API modules', () => {
  it('lists apps as a page built from the envelope', async () => {
    const f = mockFetch(json(200, { data: [{ app_id: 'a' }], meta: { total: 21, page: 2, limit: 20 } }))
    const p = await apps.list({ page: 2, limit: 20, search: 'ph' })
    expect(f.calls[0]?.url).toBe('/api/v1/apps?page=2&limit=20&search=ph')
    expect(p).toEqual({ items: [{ app_id: 'a' }], total: 21, page: 2, limit: 20 })
  })

  it('dry-runs app writes with ?dry_run=true and escapes ids', async () => {
    const res = { valid: true, dry_run: true, violations: [], diff: [{ path: 'apps[a b].priority', old: 1, new: 2 }] }
    const f = mockFetch(json(200, { data: { validation: res, written: false } }),
      json(200, { data: { validation: res, written: false } }))
    expect(await apps.updateDryRun('a b', { cluster_id: 'c', guaranteed_quota: 1, burst_quota: 2,
      priority: 2, c_bw: 1, max_borrow: 0, enabled: true })).toEqual(res)
    await apps.createDryRun({ app_id: 'n', cluster_id: 'c', guaranteed_quota: 1, burst_quota: 2,
      priority: 2, c_bw: 1, max_borrow: 0, enabled: true })
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual([
      'PUT /api/v1/apps/a%20b?dry_run=true', 'POST /api/v1/apps?dry_run=true'])
  })

  it('puts connection limits per app and per cluster', async () => {
    const f = mockFetch(json(200, { data: {} }), json(200, { data: { validation: { valid: true } } }))
    await connections.update('a', { max_connections: 5, burst_connections: 8 })
    await clusters.connectionsDryRun('c', { max_connections: 50, reserved_ratio: 0.1 })
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['PUT /api/v1/connections/a',
      'PUT /api/v1/clusters/c/connections?dry_run=true'])
  })

  it('reads the connection limits a page at a time, with the number of apps', async () => {
    const usage = { apps: [], clusters: [], timestamp: 1 }
    const f = mockFetch(json(200, { data: { apps: [{ app_id: 'a', cluster_id: 'c', limits: null }], usage },
      meta: { total: 12345, page: 3, limit: 100 } }))
    const d = await connections.list(3, 100)
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['GET /api/v1/connections?page=3&limit=100'])
    expect(d.total).toBe(12345)
    expect(d.apps).toHaveLength(1)
  })

  it('activates and deactivates emergency mode', async () => {
    const f = mockFetch(json(200, { data: { clusters: [] } }), json(200, { data: { clusters: [] } }))
    await emergency.activate({ reason: 'overload', duration: 300 })
    await emergency.deactivate('default')
    expect(f.calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ['POST', '/api/v1/emergency/activate', { reason: 'overload', duration: 300 }],
      ['POST', '/api/v1/emergency/deactivate', { cluster_id: 'default' }]])
  })

  it('asks for history by series, range and app', async () => {
    const f = mockFetch(json(200, { data: { range: '6h', step: 60, series: [] } }))
    await metrics.history('request_rate', '6h', { appId: 'demo-p1' })
    expect(f.calls[0]?.url).toBe('/api/v1/metrics/history?series=request_rate&range=6h&app_id=demo-p1')
  })

  it('recognises the Prometheus-absent answer', () => {
    expect(metrics.isPrometheusAbsent({ status: 503, code: 'prometheus_unavailable' })).toBe(true)
    expect(metrics.isPrometheusAbsent({ status: 503, code: 'prometheus_down' })).toBe(true)
    expect(metrics.isPrometheusAbsent({ status: 404, code: 'not_found' })).toBe(true) // no such endpoint
    expect(metrics.isPrometheusAbsent({ status: 503, code: 'redis_unavailable' })).toBe(false)
    expect(metrics.isPrometheusAbsent(new Error('x'))).toBe(false)
  })

  it('passes audit filters and the cursor', async () => {
    const f = mockFetch(json(200, { data: [{ id: '1-0' }], meta: { next_cursor: '1-0', count: 1 } }))
    const page = await audit.query({ action: 'app.*', cursor: '1700000000000-0', limit: 50 })
    expect(f.calls[0]?.url).toBe('/api/v1/audit?action=app.*&cursor=1700000000000-0&limit=50')
    expect(page).toEqual({ entries: [{ id: '1-0' }], next_cursor: '1-0' })
  })

  it('asks for the anonymous audit stream', async () => {
    const f = mockFetch(json(200, { data: [], meta: { count: 0 } }))
    await audit.query({ stream: 'anonymous', limit: 50 })
    expect(f.calls[0]?.url).toBe('/api/v1/audit?stream=anonymous&limit=50')
  })

  it('updates users by name', async () => {
    const f = mockFetch(json(200, { data: {} }))
    await users.update('bob', { role: 'operator' })
    expect(f.calls[0]).toMatchObject({ method: 'PUT', url: '/api/v1/users/bob', body: { role: 'operator' } })
  })
})
