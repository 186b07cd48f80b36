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

// the bounds of controlplane/internal/rules/breaker.go
const MIN_MS = 100
const MAX_MS = 3600000
const MAX_COUNT = 1000000
const MAX_STATUSES = 100
const inRange = (n: unknown, lo: number, hi: number): boolean =>
  typeof n === 'number' && Number.isInteger(n) && n >= lo && n <= hi

const BOOLEANS = ['enabled', 'per_app'] as const
const INTEGERS = ['window_ms', 'min_requests', 'failure_threshold', 'open_timeout_ms', 'success_threshold',
  'half_open_max_inflight'] as const

/** The field of a config whose JSON type is wrong (the API's decoding refuses it as invalid_type). */
function typeViolation(b: BreakerConfig): Violation | undefined {
  const bad = (field: string, what: string): Violation => ({ field, code: 'invalid_type', message: `${field} must be ${what}` })
  const f = BOOLEANS.find((k) => typeof b[k] !== 'boolean')
  if (f) return bad(f, 'true or false')
  const i = INTEGERS.find((k) => !Number.isInteger(b[k]))
  if (i) return bad(i, 'a whole number')
  if (typeof b.failure_ratio !== 'number') return bad('failure_ratio', 'a number')
  if (!Array.isArray(b.failure_statuses) || !b.failure_statuses.every((s) => Number.isInteger(s))) {
    return bad('failure_statuses', 'a list of whole numbers')
  }
  return undefined
}

/**
 * The API's checks of breaker `name` (the path's; default: the config's own), as violations
 * with the API's field paths. testdata/breakers/ is the corpus it shares with the API and the
 * gateway (corpus.test.ts).
 */
export function validateBreaker(b: BreakerConfig, name: string = b.name): Violation[] {
  const typeErr = typeViolation(b)
  if (typeErr) return [typeErr]
  const out: Violation[] = []
  const v = (field: string, code: string, message: string) => out.push({ field, code, message })
  if (!ID_RE.test(name)) v('name', 'invalid_id', 'name must match ^[A-Za-z0-9_-]{1,128}$ (the backend\'s $tollgate_backend)')
  else if (b.name !== name) v('name', 'name_mismatch', 'name in the body must match the path')
  for (const [f, lo, hi] of [['window_ms', MIN_MS, MAX_MS], ['min_requests', 1, MAX_COUNT],
    ['failure_threshold', 1, MAX_COUNT], ['open_timeout_ms', MIN_MS, MAX_MS], ['success_threshold', 1, MAX_COUNT],
    ['half_open_max_inflight', 1, MAX_COUNT]] as const) {
    if (!inRange(b[f], lo, hi)) v(f, `invalid_${f}`, `${f} must be an integer from ${lo} to ${hi}`)
  }
  const r = b.failure_ratio
  if (!(typeof r === 'number' && r > 0 && r <= 1)) v('failure_ratio', 'invalid_failure_ratio', 'failure_ratio must be in (0, 1]')
  if (b.failure_statuses.length === 0) v('failure_statuses', 'empty_list', 'failure_statuses must list at least one status')
  if (b.failure_statuses.length > MAX_STATUSES) {
    v('failure_statuses', 'too_many', `failure_statuses holds at most ${MAX_STATUSES} entries`)
    return out
  }
  const seen = new Set<number>()
  b.failure_statuses.forEach((s, i) => {
    if (!Number.isInteger(s) || s < 500 || s > 599) v(`failure_statuses[${i}]`, 'invalid_status', `failure statuses are 500-599, got ${s}`)
    else if (seen.has(s)) v(`failure_statuses[${i}]`, 'duplicate', `status ${s} is listed twice`)
    seen.add(s)
  })
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
