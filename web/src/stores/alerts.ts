// The alerts page: active and resolved alerts (GET /alerts?active=false), new ones merged in as
// the WebSocket pushes them, acknowledgements shared with the dashboard's panel and the bell.
import { defineStore } from 'pinia'
import { computed, ref } from 'vue'
import * as alertsApi from '@/api/alerts'
import { ApiError } from '@/api/http'
import type { Alert, RealtimeUpdate } from '@/api/types'
import { byRecency } from '@/utils/alerts'
import { useMetricsStore } from './metrics'
import { onSessionEnd } from './session'

export const MAX_LISTED = 500

export type AlertFilter = 'active' | 'resolved' | 'all'

export const useAlertsStore = defineStore('alerts', () => {
  const items = ref<Alert[]>([])
  const loading = ref(false)
  const error = ref<ApiError | null>(null)
  const filter = ref<AlertFilter>('all')
  const kind = ref('')
  /** ids that arrived over the WebSocket since the page loaded (highlighted) */
  const fresh = ref<Set<string>>(new Set())

  const kinds = computed(() => [...new Set(items.value.map((a) => a.kind ?? ''))].filter(Boolean).sort())
  const shown = computed(() => items.value.filter((a) =>
    (filter.value === 'all' || (filter.value === 'active') === (a.active !== false)) &&
    (kind.value === '' || a.kind === kind.value)))
  const counts = computed(() => ({
    active: items.value.filter((a) => a.active !== false).length,
    resolved: items.value.filter((a) => a.active === false).length,
    unacknowledged: items.value.filter((a) => a.active !== false && !a.acknowledged).length,
  }))

  function merge(list: readonly Alert[], replace = false): void {
    const byId = new Map(replace ? [] : items.value.map((a) => [a.id, a]))
    for (const a of list) byId.set(a.id, a)
    items.value = [...byId.values()].sort(byRecency).slice(0, MAX_LISTED)
  }

  let controller: AbortController | null = null

  async function fetch(): Promise<void> {
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      merge(await alertsApi.list(false, c.signal), true)
      error.value = null
    } catch (e) {
      if (c.signal.aborted) return
      error.value = e instanceof ApiError ? e : new ApiError(0, 'unknown', String(e))
    } finally {
      if (controller === c) {
        loading.value = false
        controller = null
      }
    }
  }

  function onUpdate(u: RealtimeUpdate): void {
    if (u.type !== 'alert') return
    const known = items.value.some((a) => a.id === u.data.id && a.active !== false)
    merge([u.data])
    if (!known && u.data.active !== false) fresh.value = new Set([...fresh.value, u.data.id])
  }

  async function acknowledge(id: string): Promise<Alert> {
    const a = await alertsApi.acknowledge(id)
    merge([a])
    // the dashboard's panel and the header's bell count from the metrics store
    useMetricsStore().onUpdate({ type: 'alert', data: a, timestamp: Math.floor(Date.now() / 1000) })
    return a
  }

  function reset(): void {
    controller?.abort()
    controller = null
    items.value = []
    loading.value = false
    error.value = null
    filter.value = 'all'
    kind.value = ''
    fresh.value = new Set()
  }
  onSessionEnd(reset)

  return { items, loading, error, filter, kind, fresh, kinds, shown, counts, fetch, onUpdate, acknowledge, reset }
})
