import { createPinia, setActivePinia } from 'pinia'
import { beforeEach, describe, expect, it } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import { useAppsStore } from './apps'

describe('apps store', () => {
  beforeEach(() => {
    setActivePinia(createPinia())
  })

  it('searches from the first page', async () => {
    const f = mockFetch(json(200, { data: [], meta: { total: 0 } }))
    const s = useAppsStore()
    s.page = 4
    await s.setSearch('  photo ')
    expect(f.calls[0]?.url).toBe('/api/v1/apps?page=1&limit=20&search=photo')
  })

  it('changes page size from the first page', async () => {
    const f = mockFetch(json(200, { data: [], meta: { total: 0 } }))
    const s = useAppsStore()
    s.page = 3
    await s.setPage(3, 50)
    expect(f.calls[0]?.url).toBe('/api/v1/apps?page=1&limit=50')
  })

  it('steps back when the page emptied (last app of the last page deleted)', async () => {
    const f = mockFetch(json(200, { data: { written: true, validation: { valid: true, dry_run: false, violations: [], diff: [] } } }), json(200, { data: [], meta: { total: 40, page: 3, limit: 20 } }),
      json(200, { data: [{ app_id: 'z' }], meta: { total: 40, page: 2, limit: 20 } }))
    const s = useAppsStore()
    s.page = 3
    await s.remove('y')
    expect(f.calls.map((c) => `${c.method} ${c.url}`)).toEqual(['DELETE /api/v1/apps/y',
      'GET /api/v1/apps?page=3&limit=20', 'GET /api/v1/apps?page=2&limit=20'])
    expect(s.page).toBe(2)
    expect(s.items).toEqual([{ app_id: 'z' }])
  })

  it('records errors and resets', async () => {
    mockFetch(json(403, { error: { code: 'forbidden', message: 'your role does not allow this' } }))
    const s = useAppsStore()
    await s.fetch()
    expect(s.error?.forbidden).toBe(true)
    s.reset()
    expect([s.error, s.items.length, s.page, s.search]).toEqual([null, 0, 1, ''])
  })
})
