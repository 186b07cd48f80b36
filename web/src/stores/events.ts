// The events table: filters, the loaded pages (newest first) and the cursor of the next older one.
import { defineStore } from 'pinia'
import { reactive, ref, shallowRef } from 'vue'
import * as eventsApi from '@/api/events'
import { ApiError } from '@/api/http'
import type { TollgateEvent } from '@/api/types'
import { onSessionEnd } from './session'

export const EVENTS_PAGE = 100

export interface EventFilter {
  event_type: string
  app_id: string
  rule_id: string
}

export const useEventsStore = defineStore('events', () => {
  const filter = reactive<EventFilter>({ event_type: '', app_id: '', rule_id: '' })
  const items = shallowRef<TollgateEvent[]>([])
  const cursor = ref<string | undefined>()
  const loading = ref(false)
  const error = ref<ApiError | null>(null)
  let controller: AbortController | null = null

  /** The first page for the filters, or (more) the next older page. */
  async function load(more = false): Promise<void> {
    if (more && !cursor.value) return
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      const page = await eventsApi.query({
        event_type: filter.event_type || undefined, app_id: filter.app_id.trim() || undefined,
        rule_id: filter.rule_id.trim() || undefined, limit: EVENTS_PAGE,
        cursor: more ? cursor.value : undefined,
      }, c.signal)
      if (more) {
        const seen = new Set(items.value.map((e) => e.id))
        items.value = [...items.value, ...page.events.filter((e) => !seen.has(e.id))]
      } else {
        items.value = page.events
      }
      cursor.value = page.next_cursor
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

  function reset(): void {
    controller?.abort()
    controller = null
    Object.assign(filter, { event_type: '', app_id: '', rule_id: '' })
    items.value = []
    cursor.value = undefined
    loading.value = false
    error.value = null
  }
  onSessionEnd(reset)

  return { filter, items, cursor, loading, error, load, reset }
})
