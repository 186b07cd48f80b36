// Circuit breakers (docs/rules-contract.md §3, §8): configs with each node's state; create or
// replace by name (with a dry run) and delete.
import { http } from './http'
import type { Breaker, BreakerConfig, ChangeResult, ValidationResult } from './types'

const base = '/api/v1/breakers'
const path = (name: string) => `${base}/${encodeURIComponent(name)}`

export async function list(signal?: AbortSignal): Promise<Breaker[]> {
  return (await http.get<Breaker[] | null>(base, { signal })) ?? []
}

export async function putDryRun(name: string, cfg: BreakerConfig): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(name), cfg, { query: { dry_run: true } })).validation
}

export function put(name: string, cfg: BreakerConfig): Promise<ChangeResult<Breaker>> {
  return http.put<ChangeResult<Breaker>>(path(name), cfg)
}

export function remove(name: string): Promise<ChangeResult> {
  return http.delete<ChangeResult>(path(name))
}
