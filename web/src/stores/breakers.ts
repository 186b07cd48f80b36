// Circuit breakers: configs with each node's state (from the node reports, every 5 s).
import { defineStore } from 'pinia'
import { ref, shallowRef } from 'vue'
import * as breakersApi from '@/api/breakers'
import { ApiError } from '@/api/http'
import type { Breaker, RealtimeUpdate } from '@/api/types'
import { onSessionEnd } from './session'

export const useBreakersStore = defineStore('breakers', () => {
  const items = shallowRef<Breaker[]>([])
  const loading = ref(false)
  const error = ref<ApiError | null>(null)
  const updatedAt = ref(0)
  let controller: AbortController | null = null

  async function fetch(): Promise<void> {
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      const list = await breakersApi.list(c.signal)
      items.value = [...list].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
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

  /** a config change or a circuit alert: states or configs moved */
  function onUpdate(u: RealtimeUpdate): Promise<void> | undefined {
    if (u.type === 'config_change' || (u.type === 'alert' && u.data.kind === 'circuit_open')) return fetch()
    return undefined
  }

  async function remove(name: string): Promise<void> {
    await breakersApi.remove(name)
    items.value = items.value.filter((b) => b.name !== name)
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

  return { items, loading, error, updatedAt, fetch, onUpdate, remove, reset }
})
