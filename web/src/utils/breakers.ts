// Circuit breakers in the console: defaults of a new one, the client-side checks that mirror the
// API's (docs/rules-contract.md §3), and the state shown per node.
import type { Breaker, BreakerConfig, BreakerNodeState, BreakerState, Violation } from '@/api/types'
import { ID_RE } from './rules'

export function defaultBreaker(name = ''): BreakerConfig {
  return {
    name, enabled: true, per_app: false, window_ms: 10000, min_requests: 10, failure_threshold: 5,
    failure_ratio: 0.5, open_timeout_ms: 30000, success_threshold: 3, half_open_max_inflight: 1,
    failure_statuses: [500, 502, 503, 504],
  }
}

/** The config part of a listed breaker (what PUT takes): the node states left out. */
export function configOf(b: Breaker): BreakerConfig {
  const { nodes: _n, ...cfg } = b
  return { ...cfg, failure_statuses: [...cfg.failure_statuses] }
}

const posInt = (n: unknown): boolean => typeof n === 'number' && Number.isInteger(n) && n >= 1

export function validateBreaker(b: BreakerConfig): Violation[] {
  const out: Violation[] = []
  const v = (field: string, message: string) => out.push({ field, code: 'invalid_breaker', message })
  if (!ID_RE.test(b.name)) v('name', 'name: 1 to 128 letters, digits, "_" or "-" (the backend\'s $tollgate_backend)')
  for (const f of ['window_ms', 'failure_threshold', 'open_timeout_ms', 'success_threshold',
    'half_open_max_inflight'] as const) {
    if (!posInt(b[f])) v(f, `${f}: a whole number of at least 1`)
  }
  if (!(typeof b.min_requests === 'number' && Number.isInteger(b.min_requests) && b.min_requests >= 0)) {
    v('min_requests', 'min_requests: a whole number of at least 0')
  }
  if (!(typeof b.failure_ratio === 'number' && b.failure_ratio > 0 && b.failure_ratio <= 1)) {
    v('failure_ratio', 'failure_ratio: above 0, at most 1')
  }
  if (b.failure_statuses.length === 0) v('failure_statuses', 'failure_statuses: at least one status')
  const bad = b.failure_statuses.find((s) => !Number.isInteger(s) || s < 100 || s > 599)
  if (bad !== undefined) v('failure_statuses', `failure_statuses: ${bad} is not an HTTP status`)
  else if (new Set(b.failure_statuses).size !== b.failure_statuses.length) {
    v('failure_statuses', 'failure_statuses: each status once')
  }
  return out
}

/** "breakers[demo].window_ms" / "breaker.window_ms" -> "window_ms"; "failure_statuses[2]" -> "failure_statuses" */
export function breakerField(path: string): string {
  return path.replace(/^breakers?\[[^\]]*\]\./, '').replace(/^breaker\./, '').replace(/\[[^\]]*\]$/, '')
}

const SEVERITY: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 }

/** The worst state over the nodes (closed when no node reports the breaker). */
export function worstState(nodes: readonly BreakerNodeState[] | undefined): BreakerState {
  return (nodes ?? []).reduce<BreakerState>((w, n) =>
    (SEVERITY[n.state] ?? 0) > SEVERITY[w] ? n.state : w, 'closed')
}

export const STATE_TAG: Record<BreakerState, 'success' | 'warning' | 'danger'> = {
  closed: 'success', half_open: 'warning', open: 'danger',
}

export function stateLabel(s: BreakerState | string): string {
  return s === 'half_open' ? 'half-open' : s
}

export function stateTag(s: BreakerState | string): 'success' | 'warning' | 'danger' | 'info' {
  return STATE_TAG[s as BreakerState] ?? 'info'
}
