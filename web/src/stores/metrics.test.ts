import { createPinia, setActivePinia } from 'pinia'
import { beforeEach, describe, expect, it } from 'vitest'
import type { ClusterState, DashboardData, TimeRange } from '@/api/types'
import { json, mockFetch } from '@/testing/fetch'
import { useMetricsStore } from './metrics'

function cluster(id: string, over: Partial<ClusterState> = {}): ClusterState {
  return { cluster_id: id, capacity: 1000, reserved_ratio: 0.1, allocated: 500, available: 800, borrowed: 0,
    emergency_mode: false, reconcile_corrections: 0, connections_active: 2, connections_peak: 5,
    connections_rejected: 0, request_rate: 10, cost_rate: 40, bytes_in_rate: 1024, bytes_out_rate: 65536, ...over }
}

function snapshot(t: number, over: { range?: TimeRange; clusters?: ClusterState[] } = {}): DashboardData {
  return {
    overview: { total_apps: 4, active_apps: 3, total_requests_1h: 1000, total_cost_1h: 5000,
      l1_available_ratio: 0.8, emergency_mode: false, total_bytes_in_1h: 0, total_bytes_out_1h: 0 },
    metrics: {
      request_rate: [{ timestamp: t, value: t }],
      cost_rate: [{ timestamp: t, value: 2 * t }],
      bytes_in_rate: [],
      bytes_out_rate: [],
      cost_distribution: { buckets: [] },
      token_availability: { l1: 0.8, l2_avg: 0.5, l3_cache_hit: 0.99 },
      connection_stats: { active: 3, peak: 9, rejected_1h: 0, leaked_1h: null },
    },
    top_apps: [],
    alerts: [],
    redis_health: { status: 'healthy', latency_p99: 1.2, connection_pool_usage: 0.1 },
    clusters: over.clusters ?? [cluster('a'), cluster('b', { request_rate: 5, cost_rate: 1, bytes_out_rate: 512 })],
    nodes: [],
    range: over.range ?? '1h',
    config_version: 7,
    timestamp: t,
  }
}

function alert(id: string, ts: number, over: object = {}) {
  return { id, severity: 'warning' as const, message: id, timestamp: ts, acknowledged: false, active: true, ...over }
}

describe('metrics store', () => {
  beforeEach(() => {
    setActivePinia(createPinia())
  })

  it('fetches the dashboard of a range: cards, series, current rates summed over clusters', async () => {
    const f = mockFetch(json(200, { data: snapshot(100, { range: '6h' }) }))
    const m = useMetricsStore()
    await m.fetch('6h')
    expect(f.calls[0]?.url).toBe('/api/v1/metrics?range=6h')
    expect(m.range).toBe('6h')
    expect(m.overview?.total_apps).toBe(4)
    expect(m.series.request).toEqual([{ timestamp: 100, value: 100 }])
    expect(m.rates).toEqual({ request: 15, cost: 41, bytesIn: 2048, bytesOut: 66048 })
    expect(m.configVersion).toBe(7)
    expect(m.error).toBeNull()
    expect(m.updatedAt).toBeGreaterThan(0)
  })

  it('keeps the last snapshot and records the error when a fetch fails', async () => {
    mockFetch(json(200, { data: snapshot(1) }), json(503, { error: { code: 'store_unavailable', message: 'Redis is unavailable' } }))
    const m = useMetricsStore()
    await m.fetch()
    await m.fetch()
    expect(m.dashboard?.timestamp).toBe(1)
    expect(m.error?.code).toBe('store_unavailable')
  })

  it("takes pushes (always range 1h) for the cards but keeps a longer range's series", async () => {
    mockFetch(json(200, { data: snapshot(100, { range: '24h' }) }))
    const m = useMetricsStore()
    await m.fetch('24h')
    m.onUpdate({ type: 'metrics', timestamp: 200, data: snapshot(200, { clusters: [cluster('a', { request_rate: 99 })] }) })
    expect(m.dashboard?.timestamp).toBe(200)
    expect(m.rates.request).toBe(99)
    expect(m.series.request).toEqual([{ timestamp: 100, value: 100 }])
    m.reset()
    m.onUpdate({ type: 'metrics', timestamp: 300, data: snapshot(300) })
    expect(m.series.request).toEqual([{ timestamp: 300, value: 300 }])
  })

  it('keeps the active alerts, newest first: a snapshot replaces them, pushes merge and resolve', () => {
    const m = useMetricsStore()
    m.apply({ ...snapshot(1), alerts: [alert('a', 10), alert('old', 5)] })
    m.apply({ ...snapshot(2), alerts: [alert('a', 10)] })
    expect(m.alerts.map((a) => a.id)).toEqual(['a'])
    m.onUpdate({ type: 'alert', timestamp: 3, data: alert('b', 20, { severity: 'critical' }) })
    expect(m.alerts.map((a) => a.id)).toEqual(['b', 'a'])
    m.onUpdate({ type: 'alert', timestamp: 4, data: alert('a', 10, { acknowledged: true }) })
    expect(m.unacknowledged).toBe(1)
    m.onUpdate({ type: 'alert', timestamp: 5, data: alert('b', 20, { active: false, resolved_at: 5 }) })
    expect(m.alerts.map((a) => a.id)).toEqual(['a'])
  })

  it('follows emergency mode per cluster from snapshots and notices', () => {
    const m = useMetricsStore()
    m.apply(snapshot(1))
    expect(m.emergencyActive).toBe(false)
    m.onUpdate({ type: 'emergency', timestamp: 2, data: { cluster_id: 'b', active: true, until: 900, reason: 'overload' } })
    expect(m.emergencyActive).toBe(true)
    expect(m.emergencyClusters).toEqual([{ cluster_id: 'b', active: true, until: 900, reason: 'overload' }])
    expect(m.emergency.map((e) => e.cluster_id)).toEqual(['a', 'b'])
    m.onUpdate({ type: 'emergency', timestamp: 3, data: { cluster_id: 'b', active: false, until: 0 } })
    expect(m.emergencyActive).toBe(false)
    m.setEmergency({ emergency_mode: true, clusters: [{ cluster_id: 'a', active: true, until: 5 }] })
    expect(m.emergencyClusters.map((e) => e.cluster_id)).toEqual(['a'])
  })

  it('follows config changes', () => {
    const m = useMetricsStore()
    m.onUpdate({ type: 'config_change', timestamp: 1, data: { config_version: 42 } })
    expect(m.configVersion).toBe(42)
  })

  it('says when Prometheus is absent rather than failing', async () => {
    mockFetch(json(503, { error: { code: 'prometheus_unavailable', message: 'no Prometheus configured' } }))
    const m = useMetricsStore()
    await m.loadHistory(['request_rate'])
    expect(m.historyState).toBe('absent')
    expect(m.historyMessage).toBe('no Prometheus configured')
  })

  it('tells a failing Prometheus from an absent one', async () => {
    mockFetch(json(502, { error: { code: 'prometheus_error', message: 'query timed out' } }))
    const m = useMetricsStore()
    await m.loadHistory(['request_rate'])
    expect(m.historyState).toBe('error')
  })

  it('loads history series by name', async () => {
    mockFetch(json(200, { data: { range: '1h', step: 15, series: [{ name: 'r', points: [[1, 2]] }] } }),
      json(200, { data: { range: '1h', step: 15, series: [] } }))
    const m = useMetricsStore()
    await m.loadHistory(['request_rate', 'cost_rate'])
    expect(m.historyState).toBe('ok')
    expect(m.history.request_rate?.[0]?.points).toEqual([[1, 2]])
    expect(m.history.cost_rate).toEqual([])
  })

  it('acknowledges an alert', async () => {
    const f = mockFetch(json(200, { data: alert('a', 1, { acknowledged: true, acknowledged_by: 'op' }) }))
    const m = useMetricsStore()
    m.apply({ ...snapshot(1), alerts: [alert('a', 1)] })
    await m.acknowledge('a')
    expect(f.calls[0]).toMatchObject({ method: 'POST', url: '/api/v1/alerts/a/ack' })
    expect(m.alerts[0]?.acknowledged).toBe(true)
  })

  it('resets to the initial state', async () => {
    mockFetch(json(200, { data: snapshot(1, { range: '7d' }) }))
    const m = useMetricsStore()
    await m.fetch('7d')
    m.reset()
    expect([m.dashboard, m.range, m.series.request.length, m.alerts.length, m.emergency.length, m.updatedAt])
      .toEqual([null, '1h', 0, 0, 0, 0])
  })
})
