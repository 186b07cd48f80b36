// The apps list: query (page, size, search), the current page and its loading state.
import { defineStore } from 'pinia'
import { ref } from 'vue'
import * as appsApi from '@/api/apps'
import { ApiError } from '@/api/http'
import type { App } from '@/api/types'

export const PAGE_SIZES = [10, 20, 50, 100] as const

export const useAppsStore = defineStore('apps', () => {
  const items = ref<App[]>([])
  const total = ref(0)
  const page = ref(1)
  const limit = ref(20)
  const search = ref('')
  const loading = ref(false)
  const error = ref<ApiError | null>(null)

  let controller: AbortController | null = null

  async function fetch(): Promise<void> {
    controller?.abort()
    const c = new AbortController()
    controller = c
    loading.value = true
    try {
      const p = await appsApi.list({ page: page.value, limit: limit.value,
        search: search.value.trim() || undefined }, c.signal)
      items.value = p.items
      total.value = p.total
      error.value = null
      // deleting the last app of the last page: step back
      if (p.items.length === 0 && p.total > 0 && page.value > 1) {
        page.value = Math.max(1, Math.ceil(p.total / limit.value))
        return fetch()
      }
    } catch (e) {
      if (c.signal.aborted) return
      error.value = e instanceof ApiError ? e : new ApiError(0, 'unknown', String(e))
    } finally {
      if (controller === c) loading.value = false
    }
  }

  function setSearch(q: string): Promise<void> {
    search.value = q
    page.value = 1
    return fetch()
  }

  function setPage(p: number, size = limit.value): Promise<void> {
    if (size !== limit.value) p = 1
    page.value = p
    limit.value = size
    return fetch()
  }

  async function remove(id: string): Promise<void> {
    await appsApi.remove(id)
    await fetch()
  }

  function reset(): void {
    controller?.abort()
    controller = null
    items.value = []
    total.value = 0
    page.value = 1
    limit.value = 20
    search.value = ''
    loading.value = false
    error.value = null
  }

  return { items, total, page, limit, search, loading, error, fetch, setSearch, setPage, remove, reset }
})
