// The rules list with its counters: loaded on demand, refreshed by polling, at once on a config
// change and at most every few seconds on the WebSocket's metrics pushes.
import { defineStore } from 'pinia'
import { computed, ref, shallowRef } from 'vue'
import { ApiError } from '@/api/http'
import * as rulesApi from '@/api/rules'
import type { RealtimeUpdate, Rule, RuleStats } from '@/api/types'
import { byPriority } from '@/utils/rules'
import { onSessionEnd } from './session'

/** a metrics push refreshes the counters when the list is older than this (ms) */
export const STATS_REFRESH_MS = 3000

export const ZERO_STATS: RuleStats = { hits: 0, blocked: 0, throttled: 0, shadowed: 0, fail_open: 0 }

export const useRulesStore = defineStore('rules', () => {
  const items = shallowRef<Rule[]>([])
  const loading = ref(false)
  const error = ref<ApiError | null>(null)
  /** ms of the last successful load */
  const updatedAt = ref(0)

  const totals = computed<RuleStats>(() => items.value.reduce((t, r) => {
    const s = r.stats ?? ZERO_STATS
    return { hits: t.hits + s.hits, blocked: t.blocked + s.blocked, throttled: t.throttled + s.throttled,
      shadowed: t.shadowed + s.shadowed, fail_open: t.fail_open + s.fail_open }
  }, { ...ZERO_STATS }))

  let controller: AbortController | null = null

  async function fetch(): Promise<void> {
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      const list = await rulesApi.list(c.signal)
      items.value = [...list].sort(byPriority)
      updatedAt.value = Date.now()
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

  /** A WebSocket message: which ones mean the list or its counters moved. */
  function onUpdate(u: RealtimeUpdate, now = Date.now()): Promise<void> | undefined {
    if (u.type === 'config_change') return fetch()
    if (u.type === 'metrics' && !loading.value && now - updatedAt.value >= STATS_REFRESH_MS) return fetch()
    return undefined
  }

  function find(id: string): Rule | undefined {
    return items.value.find((r) => r.id === id)
  }

  async function remove(id: string): Promise<void> {
    await rulesApi.remove(id)
    items.value = items.value.filter((r) => r.id !== id)
    await fetch()
  }

  function reset(): void {
    controller?.abort()
    controller = null
    items.value = []
    loading.value = false
    error.value = null
    updatedAt.value = 0
  }
  onSessionEnd(reset)

  return { items, loading, error, updatedAt, totals, fetch, onUpdate, find, remove, reset }
})
