// Dashboard state: the latest snapshot (GET /metrics, then the WebSocket's pushes every
// collection period), the request and cost series of the chosen range, the Prometheus history
// when the control plane has one, alerts, and emergency mode per cluster.
import { defineStore } from 'pinia'
import { computed, ref, shallowRef } from 'vue'
import * as alertsApi from '@/api/alerts'
import { ApiError } from '@/api/http'
import * as metricsApi from '@/api/metrics'
import type { Alert, ClusterEmergency, DashboardData, EmergencyStatus, HistorySeries, MetricsHistory,
  RealtimeUpdate, TimePoint, TimeRange } from '@/api/types'

export type HistoryState = 'idle' | 'loading' | 'ok' | 'absent' | 'error'

export const MAX_ALERTS = 100

export const useMetricsStore = defineStore('metrics', () => {
  const dashboard = shallowRef<DashboardData | null>(null)
  const range = ref<TimeRange>('1h')
  /** request and cost rates over the chosen range (the control plane's own history) */
  const series = shallowRef<{ request: TimePoint[]; cost: TimePoint[] }>({ request: [], cost: [] })
  const loading = ref(false)
  const error = ref<ApiError | null>(null)
  /** ms of the last snapshot received */
  const updatedAt = ref(0)
  const history = shallowRef<Partial<Record<HistorySeries, MetricsHistory['series']>>>({})
  const historyState = ref<HistoryState>('idle')
  const historyMessage = ref('')
  const alerts = ref<Alert[]>([])
  const emergency = ref<ClusterEmergency[]>([])
  const configVersion = ref<number | null>(null)

  const overview = computed(() => dashboard.value?.overview ?? null)
  /** requests/s, cost/s and bytes/s in and out now, summed over clusters */
  const rates = computed(() => (dashboard.value?.clusters ?? []).reduce(
    (r, c) => ({ request: r.request + c.request_rate, cost: r.cost + c.cost_rate,
      bytesIn: r.bytesIn + (c.bytes_in_rate ?? 0), bytesOut: r.bytesOut + (c.bytes_out_rate ?? 0) }),
    { request: 0, cost: 0, bytesIn: 0, bytesOut: 0 }))
  const unacknowledged = computed(() => alerts.value.filter((a) => !a.acknowledged).length)
  const emergencyClusters = computed(() => emergency.value.filter((e) => e.active))
  const emergencyActive = computed(() => emergencyClusters.value.length > 0)

  let controller: AbortController | null = null

  async function fetch(r: TimeRange = range.value): Promise<void> {
    range.value = r
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      apply(await metricsApi.overall(r, c.signal))
      error.value = null
    } catch (e) {
      if (c.signal.aborted) return
      error.value = e instanceof ApiError ? e : new ApiError(0, 'unknown', String(e))
    } finally {
      if (controller === c) loading.value = false
    }
  }

  /** A snapshot from GET /metrics or a push; the series count only for the chosen range. */
  function apply(d: DashboardData): void {
    dashboard.value = d
    updatedAt.value = Date.now()
    if (d.range === range.value) {
      series.value = { request: d.metrics.request_rate, cost: d.metrics.cost_rate }
    }
    alerts.value = mergeAlerts(d.alerts, true)
    emergency.value = d.clusters.map((c) => ({ cluster_id: c.cluster_id, active: c.emergency_mode,
      until: c.emergency_until, reason: c.emergency_reason }))
    configVersion.value = d.config_version
  }

  /** History of the chosen range from Prometheus (through the control plane). */
  async function loadHistory(names: HistorySeries[], r: TimeRange = range.value, appId?: string): Promise<void> {
    historyState.value = 'loading'
    try {
      const got = await Promise.all(names.map((s) => metricsApi.history(s, r, { appId })))
      const next: Partial<Record<HistorySeries, MetricsHistory['series']>> = {}
      names.forEach((s, i) => { next[s] = got[i]?.series ?? [] })
      history.value = next
      historyState.value = 'ok'
      historyMessage.value = ''
    } catch (e) {
      history.value = {}
      historyState.value = metricsApi.isPrometheusAbsent(e) ? 'absent' : 'error'
      historyMessage.value = e instanceof ApiError ? e.message : String(e)
    }
  }

  /**
   * The dashboard's alerts are the active ones: with `replace`, an alert that is no longer in
   * the list is dropped; pushed alerts (raised, acknowledged, resolved) are merged in.
   */
  function mergeAlerts(list: Alert[], replace = false): Alert[] {
    const byId = new Map(replace ? [] : alerts.value.map((a) => [a.id, a]))
    for (const a of list) byId.set(a.id, a)
    return [...byId.values()].filter((a) => a.active !== false)
      .sort((a, b) => b.timestamp - a.timestamp).slice(0, MAX_ALERTS)
  }

  async function acknowledge(id: string): Promise<void> {
    alerts.value = mergeAlerts([await alertsApi.acknowledge(id)])
  }

  function setEmergency(s: EmergencyStatus): void {
    emergency.value = s.clusters
  }

  /** Applies a WebSocket message. */
  function onUpdate(u: RealtimeUpdate): void {
    switch (u.type) {
      case 'metrics':
        apply(u.data)
        break
      case 'alert':
        alerts.value = mergeAlerts([u.data])
        break
      case 'emergency': {
        const n = u.data
        const others = emergency.value.filter((e) => e.cluster_id !== n.cluster_id)
        emergency.value = [...others, { cluster_id: n.cluster_id, active: n.active,
          until: n.until || undefined, reason: n.reason }].sort((a, b) => a.cluster_id.localeCompare(b.cluster_id))
        break
      }
      case 'config_change':
        configVersion.value = u.data.config_version
        break
    }
  }

  function reset(): void {
    controller?.abort()
    controller = null
    dashboard.value = null
    range.value = '1h'
    series.value = { request: [], cost: [] }
    loading.value = false
    error.value = null
    updatedAt.value = 0
    history.value = {}
    historyState.value = 'idle'
    historyMessage.value = ''
    alerts.value = []
    emergency.value = []
    configVersion.value = null
  }

  return { dashboard, range, series, loading, error, updatedAt, history, historyState, historyMessage,
    alerts, emergency, configVersion, overview, rates, unacknowledged, emergencyClusters, emergencyActive,
    fetch, apply, loadHistory, acknowledge, setEmergency, onUpdate, reset }
})
