import { http } from './http'
import type { AppConnLimitInput, ChangeResult, ConnectionLimits, ValidationResult } from './types'

const base = '/api/v1/connections'
const path = (appId: string) => `${base}/${encodeURIComponent(appId)}`

/** Every app's own limits and the usage per app and cluster. */
export function list(): Promise<ConnectionLimits> {
  return http.get<ConnectionLimits>(base)
}

export async function updateDryRun(appId: string, input: AppConnLimitInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(appId), input, { query: { dry_run: true } })).validation
}

export function update(appId: string, input: AppConnLimitInput): Promise<ChangeResult> {
  return http.put<ChangeResult>(path(appId), input)
}
