import { http } from './http'
import type { App, AppInput, AppListQuery, ChangeResult, Page, ValidationResult } from './types'

const base = '/api/v1/apps'
const path = (id: string) => `${base}/${encodeURIComponent(id)}`

export async function list(q: AppListQuery, signal?: AbortSignal): Promise<Page<App>> {
  const env = await http.envelope<App[]>('GET', base, {
    query: { page: q.page, limit: q.limit, search: q.search, cluster_id: q.cluster_id }, signal,
  })
  const items = env.data ?? []
  return { items, total: env.meta?.total ?? items.length, page: env.meta?.page ?? q.page,
    limit: env.meta?.limit ?? q.limit }
}

export function get(id: string): Promise<App> {
  return http.get<App>(path(id))
}

/** Validates and returns the diff without writing (Req 22.10). */
export async function createDryRun(input: AppInput): Promise<ValidationResult> {
  return (await http.post<ChangeResult>(base, input, { query: { dry_run: true } })).validation
}

export function create(input: AppInput): Promise<ChangeResult<App>> {
  return http.post<ChangeResult<App>>(base, input)
}

export async function updateDryRun(id: string, input: AppInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(id), input, { query: { dry_run: true } })).validation
}

export function update(id: string, input: AppInput): Promise<ChangeResult<App>> {
  return http.put<ChangeResult<App>>(path(id), input)
}

export function remove(id: string): Promise<ChangeResult> {
  return http.delete<ChangeResult>(path(id))
}
