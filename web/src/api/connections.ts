import { http } from './http'
import type { AppConnLimitInput, ChangeResult, ConnectionLimits, ValidationResult } from './types'

const base = '/api/v1/connections'
const path = (appId: string) => `${base}/${encodeURIComponent(appId)}`

/** One page of the apps' own limits (id order) with their usage, the usage per cluster, and the
 *  number of apps. */
export async function list(page = 1, limit = 100): Promise<ConnectionLimits & { total: number }> {
  const env = await http.envelope<ConnectionLimits>('GET', base, { query: { page, limit } })
  const d = env.data ?? { apps: [], usage: { apps: [], clusters: [], timestamp: 0 } }
  return { ...d, total: env.meta?.total ?? d.apps.length }
}

export async function updateDryRun(appId: string, input: AppConnLimitInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(appId), input, { query: { dry_run: true } })).validation
}

export function update(appId: string, input: AppConnLimitInput): Promise<ChangeResult> {
  return http.put<ChangeResult>(path(appId), input)
}
