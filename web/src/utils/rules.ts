// Rules in the console: the form's model and the body it sends, the client-side checks that
// mirror the API's (docs/rules-contract.md §2; the server's refusal is shown regardless), and
// the summaries of the list.
import type { Rule, RuleAction, RuleAlgorithm, RuleDistribution, RuleInput, RuleMatch, RuleScope,
  RuleUnit, Violation } from '@/api/types'

export const ID_RE = /^[A-Za-z0-9_-]{1,128}$/
/** an HTTP header name (RFC 9110 token) */
const HEADER_RE = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/
const METHOD_RE = /^[A-Z]{1,20}$/
export const HTTP_METHODS = ['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'PATCH', 'OPTIONS'] as const
export const MAX_WINDOW_SECONDS = 86400
export const MAX_THROTTLE_DELAY_MS = 5000
/** RFC 3339 date-time (the API parses it; this only catches what certainly is not one) */
const RFC3339_RE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/

/** The form: every field of the rule JSON, lists as arrays, headers as rows, times as Dates. */
export interface RuleForm {
  id: string
  description: string
  scope: RuleScope
  /** user scope: "header" (with userHeader) or "s3_access_key" */
  userKeyKind: 'header' | 's3_access_key'
  userHeader: string
  app_ids: string[]
  methods: string[]
  bucket: string
  key_prefix: string
  path: string
  cidrs: string[]
  headers: { name: string; value: string }[]
  algorithm: RuleAlgorithm
  limit: number
  window_seconds: number
  /** token bucket: a capacity other than the limit */
  customBurst: boolean
  burst: number
  unit: RuleUnit
  distribution: RuleDistribution
  priority: number
  enabled: boolean
  effective_from: Date | null
  effective_to: Date | null
  action: RuleAction
  throttle_max_delay_ms: number
}

export function emptyForm(): RuleForm {
  return {
    id: '', description: '', scope: 'app', userKeyKind: 'header', userHeader: 'X-User-Id',
    app_ids: [], methods: [], bucket: '', key_prefix: '', path: '', cidrs: [], headers: [],
    algorithm: 'sliding_window', limit: 100, window_seconds: 1, customBurst: false, burst: 100,
    unit: 'requests', distribution: 'node', priority: 100, enabled: true,
    effective_from: null, effective_to: null, action: 'reject', throttle_max_delay_ms: 500,
  }
}

function parseTime(s: string | null | undefined): Date | null {
  if (!s) return null
  const d = new Date(s)
  return Number.isNaN(d.getTime()) ? null : d
}

/** The form of an existing rule. */
export function toForm(r: Rule): RuleForm {
  const f = emptyForm()
  const m = r.match ?? {}
  const header = r.user_key?.startsWith('header:') ? r.user_key.slice('header:'.length) : ''
  return {
    ...f,
    id: r.id, description: r.description ?? '', scope: r.scope,
    userKeyKind: r.user_key === 's3_access_key' ? 's3_access_key' : 'header',
    userHeader: header || f.userHeader,
    app_ids: [...(m.app_ids ?? [])], methods: [...(m.methods ?? [])], bucket: m.bucket ?? '',
    key_prefix: m.key_prefix ?? '', path: m.path ?? '', cidrs: [...(m.cidrs ?? [])],
    headers: Object.entries(m.headers ?? {}).map(([name, value]) => ({ name, value })),
    algorithm: r.algorithm, limit: r.limit, window_seconds: r.window_seconds,
    customBurst: r.burst !== undefined && r.burst !== null, burst: r.burst ?? r.limit,
    unit: r.unit, distribution: r.distribution, priority: r.priority, enabled: r.enabled,
    effective_from: parseTime(r.effective_from), effective_to: parseTime(r.effective_to),
    action: r.action, throttle_max_delay_ms: r.throttle_max_delay_ms ?? f.throttle_max_delay_ms,
  }
}

/** RFC 3339 in UTC without milliseconds; an unchanged time keeps the text it was read from. */
export function rfc3339(d: Date | null, original?: string | null): string | undefined {
  if (!d) return undefined
  if (original && parseTime(original)?.getTime() === d.getTime()) return original
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z')
}

const trimmed = (xs: string[]) => xs.map((x) => x.trim()).filter((x) => x !== '')

/**
 * The body of a create or replace: only what the form's choices make meaningful (no burst on
 * windows, no delay unless throttling, no user key outside the user scope, no empty match
 * fields). `original` is the rule being edited (its times keep their text when unchanged).
 */
export function toInput(f: RuleForm, original?: Rule): RuleInput {
  const match: RuleMatch = {}
  const apps = trimmed(f.app_ids)
  if (apps.length) match.app_ids = apps
  const methods = trimmed(f.methods).map((m) => m.toUpperCase())
  if (methods.length) match.methods = methods
  if (f.bucket.trim()) match.bucket = f.bucket.trim()
  if (f.key_prefix !== '') match.key_prefix = f.key_prefix
  if (f.path.trim()) match.path = f.path.trim()
  const cidrs = trimmed(f.cidrs)
  if (cidrs.length) match.cidrs = cidrs
  const headers = f.headers.filter((h) => h.name.trim() !== '')
  if (headers.length) match.headers = Object.fromEntries(headers.map((h) => [h.name.trim(), h.value]))

  const body: RuleInput = {
    id: f.id.trim(), scope: f.scope, algorithm: f.algorithm, limit: f.limit,
    window_seconds: f.window_seconds, unit: f.unit, distribution: f.distribution,
    priority: f.priority, enabled: f.enabled, action: f.action,
  }
  if (f.description.trim()) body.description = f.description.trim()
  if (f.scope === 'user') {
    body.user_key = f.userKeyKind === 's3_access_key' ? 's3_access_key' : `header:${f.userHeader.trim()}`
  }
  if (Object.keys(match).length) body.match = match
  if (f.algorithm === 'token_bucket' && f.customBurst) body.burst = f.burst
  const from = rfc3339(f.effective_from, original?.effective_from)
  const to = rfc3339(f.effective_to, original?.effective_to)
  if (from) body.effective_from = from
  if (to) body.effective_to = to
  if (f.action === 'throttle') body.throttle_max_delay_ms = f.throttle_max_delay_ms
  return body
}

/** The rule as a replace body (PUT): the API's own fields and the counters left out. */
export function inputOf(r: Rule): RuleInput {
  const { created_at: _c, updated_at: _u, updated_by: _b, stats: _s, ...input } = r
  return input
}

// ---- validation ---------------------------------------------------------------------------------

function v(field: string, code: string, message: string): Violation {
  return { field, code, message }
}

const isInt = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n)

function ipv4(s: string): boolean {
  const parts = s.split('.')
  return parts.length === 4 && parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)
}

function ipv6(s: string): boolean {
  if (!/^[0-9A-Fa-f:.]+$/.test(s)) return false
  const halves = s.split('::')
  if (halves.length > 2) return false
  const groups = (h: string) => (h === '' ? [] : h.split(':'))
  const all = halves.flatMap(groups)
  let n = all.length
  const last = all[all.length - 1]
  if (last !== undefined && last.includes('.')) {
    if (!ipv4(last)) return false
    n += 1 // an embedded IPv4 address is two groups
    all.pop()
  }
  if (!all.every((g) => /^[0-9A-Fa-f]{1,4}$/.test(g))) return false
  return halves.length === 2 ? n <= 7 : n === 8
}

/** "10.0.0.0/8", "::1/128" (a bare address counts as one host) */
export function validCidr(s: string): boolean {
  const [addr = '', bits, extra] = s.split('/')
  if (extra !== undefined) return false
  const v4 = ipv4(addr)
  if (!v4 && !ipv6(addr)) return false
  if (bits === undefined) return true
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (v4 ? 32 : 128)
}

function validTime(s: string | null | undefined): boolean {
  return s === undefined || s === null || (RFC3339_RE.test(s) && parseTime(s) !== null)
}

/** The API's checks of a rule body, as violations with the body's field paths. */
export function validateRule(r: RuleInput): Violation[] {
  const out: Violation[] = []
  if (!ID_RE.test(r.id)) out.push(v('id', 'invalid_id', 'id: 1 to 128 letters, digits, "_" or "-"'))
  if (!['global', 'app', 'user', 'ip', 'endpoint'].includes(r.scope)) {
    out.push(v('scope', 'invalid_scope', 'scope: global, app, user, ip or endpoint'))
  }
  if (r.scope === 'user') {
    const k = r.user_key ?? ''
    if (k !== 's3_access_key' && !(k.startsWith('header:') && HEADER_RE.test(k.slice(7)))) {
      out.push(v('user_key', 'invalid_user_key', 'user_key: "header:<Name>" or "s3_access_key"'))
    }
  } else if (r.user_key !== undefined) {
    out.push(v('user_key', 'invalid_user_key', 'user_key is for the user scope only'))
  }
  out.push(...validateMatch(r.match))
  if (!['token_bucket', 'sliding_window', 'fixed_window'].includes(r.algorithm)) {
    out.push(v('algorithm', 'invalid_algorithm', 'algorithm: token_bucket, sliding_window or fixed_window'))
  }
  if (!isInt(r.limit) || r.limit < 1) out.push(v('limit', 'invalid_limit', 'limit: a whole number of at least 1'))
  if (!isInt(r.window_seconds) || r.window_seconds < 1 || r.window_seconds > MAX_WINDOW_SECONDS) {
    out.push(v('window_seconds', 'invalid_window', `window_seconds: 1 to ${MAX_WINDOW_SECONDS}`))
  }
  if (r.burst !== undefined) {
    if (r.algorithm !== 'token_bucket') {
      out.push(v('burst', 'invalid_burst', 'burst is for the token bucket only'))
    } else if (!isInt(r.burst) || r.burst < 1) {
      out.push(v('burst', 'invalid_burst', 'burst: a whole number of at least 1'))
    }
  }
  if (!['requests', 'cost'].includes(r.unit)) out.push(v('unit', 'invalid_unit', 'unit: requests or cost'))
  if (!['node', 'global'].includes(r.distribution)) {
    out.push(v('distribution', 'invalid_distribution', 'distribution: node or global'))
  }
  if (!isInt(r.priority)) out.push(v('priority', 'invalid_priority', 'priority: a whole number'))
  if (typeof r.enabled !== 'boolean') out.push(v('enabled', 'invalid_enabled', 'enabled: true or false'))
  if (!validTime(r.effective_from)) out.push(v('effective_from', 'invalid_time', 'effective_from: an RFC 3339 time'))
  if (!validTime(r.effective_to)) out.push(v('effective_to', 'invalid_time', 'effective_to: an RFC 3339 time'))
  const from = parseTime(r.effective_from)
  const to = parseTime(r.effective_to)
  if (from && to && to.getTime() <= from.getTime()) {
    out.push(v('effective_to', 'invalid_time', 'effective_to must be after effective_from'))
  }
  if (!['reject', 'throttle', 'shadow'].includes(r.action)) {
    out.push(v('action', 'invalid_action', 'action: reject, throttle or shadow'))
  }
  if (r.action === 'throttle') {
    const d = r.throttle_max_delay_ms
    if (!isInt(d) || d < 1 || d > MAX_THROTTLE_DELAY_MS) {
      out.push(v('throttle_max_delay_ms', 'invalid_delay', `throttle_max_delay_ms: 1 to ${MAX_THROTTLE_DELAY_MS}`))
    }
  } else if (r.throttle_max_delay_ms !== undefined) {
    out.push(v('throttle_max_delay_ms', 'invalid_delay', 'throttle_max_delay_ms is for the throttle action only'))
  }
  return out
}

function validateMatch(m: RuleMatch | undefined): Violation[] {
  const out: Violation[] = []
  if (!m) return out
  if (m.app_ids !== undefined) {
    if (m.app_ids.length === 0) out.push(v('match.app_ids', 'invalid_match', 'match.app_ids: at least one app'))
    const bad = m.app_ids.find((a) => !ID_RE.test(a))
    if (bad !== undefined) out.push(v('match.app_ids', 'invalid_match', `match.app_ids: "${bad}" is not an app id`))
  }
  if (m.methods !== undefined) {
    if (m.methods.length === 0) out.push(v('match.methods', 'invalid_match', 'match.methods: at least one method'))
    const bad = m.methods.find((x) => !METHOD_RE.test(x))
    if (bad !== undefined) out.push(v('match.methods', 'invalid_match', `match.methods: "${bad}" is not an HTTP method`))
  }
  if (m.bucket !== undefined && (m.bucket === '' || m.bucket.includes('/'))) {
    out.push(v('match.bucket', 'invalid_match', 'match.bucket: a bucket name without "/"'))
  }
  if (m.key_prefix !== undefined && m.key_prefix === '') {
    out.push(v('match.key_prefix', 'invalid_match', 'match.key_prefix: not empty'))
  }
  if (m.path !== undefined && !m.path.startsWith('/')) {
    out.push(v('match.path', 'invalid_match', 'match.path: a glob starting with "/"'))
  }
  if (m.cidrs !== undefined) {
    if (m.cidrs.length === 0) out.push(v('match.cidrs', 'invalid_match', 'match.cidrs: at least one CIDR'))
    const bad = m.cidrs.find((c) => !validCidr(c))
    if (bad !== undefined) out.push(v('match.cidrs', 'invalid_cidr', `match.cidrs: "${bad}" is not a CIDR`))
  }
  if (m.headers !== undefined) {
    const bad = Object.keys(m.headers).find((h) => !HEADER_RE.test(h))
    if (bad !== undefined) out.push(v('match.headers', 'invalid_match', `match.headers: "${bad}" is not a header name`))
  }
  return out
}

/** The form fields messages are shown under. */
export const RULE_FIELDS = ['id', 'description', 'scope', 'user_key', 'match.app_ids', 'match.methods',
  'match.bucket', 'match.key_prefix', 'match.path', 'match.cidrs', 'match.headers', 'match', 'algorithm',
  'limit', 'window_seconds', 'burst', 'unit', 'distribution', 'priority', 'enabled', 'effective_from',
  'effective_to', 'action', 'throttle_max_delay_ms'] as const

/**
 * A violation's field as a form field: "rules[x].limit" and "rule.limit" -> "limit",
 * "match.cidrs[1]" -> "match.cidrs", "match.headers.X-Tier" -> "match.headers"; unknown: "".
 */
export function ruleField(path: string): string {
  let p = path.replace(/^rules?\[[^\]]*\]\./, '').replace(/^rule\./, '').replace(/\[[^\]]*\]$/, '')
  if (p.startsWith('match.headers')) p = 'match.headers'
  return (RULE_FIELDS as readonly string[]).includes(p) ? p : ''
}

/** Messages by form field (the first per field); the rest, joined, under "". */
export function ruleErrors(vs: readonly Violation[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const x of vs) {
    const k = ruleField(x.field)
    if (!(k in out)) out[k] = k === '' ? `${x.field ? x.field + ': ' : ''}${x.message}` : x.message
    else if (k === '') out[k] += `; ${x.message}`
  }
  return out
}

// ---- summaries ------------------------------------------------------------------------------------

/** "apps demo-p1 · PUT · bucket photos …", or "every request". */
export function matchSummary(m: RuleMatch | undefined): string {
  if (!m) return 'every request'
  const parts: string[] = []
  if (m.app_ids?.length) parts.push(`app ${m.app_ids.join(', ')}`)
  if (m.methods?.length) parts.push(m.methods.join(', '))
  if (m.bucket) parts.push(`bucket ${m.bucket}`)
  if (m.key_prefix) parts.push(`key ${m.key_prefix}*`)
  if (m.path) parts.push(`path ${m.path}`)
  if (m.cidrs?.length) parts.push(m.cidrs.length > 2 ? `${m.cidrs.length} CIDRs` : m.cidrs.join(', '))
  for (const [k, val] of Object.entries(m.headers ?? {})) parts.push(`${k}: ${val}`)
  return parts.length ? parts.join(' · ') : 'every request'
}

/** "100 / 1s", "100 / 1s, burst 150" */
export function limitSummary(r: Pick<RuleInput, 'limit' | 'window_seconds' | 'burst' | 'algorithm'>): string {
  const w = r.window_seconds >= 3600 && r.window_seconds % 3600 === 0 ? `${r.window_seconds / 3600}h`
    : r.window_seconds >= 60 && r.window_seconds % 60 === 0 ? `${r.window_seconds / 60}m` : `${r.window_seconds}s`
  const burst = r.algorithm === 'token_bucket' ? `, burst ${r.burst ?? r.limit}` : ''
  return `${r.limit} / ${w}${burst}`
}

export type RuleStatus = 'active' | 'disabled' | 'scheduled' | 'expired'

/** Whether the rule is being checked at `now` (ms). */
export function ruleStatus(r: Pick<RuleInput, 'enabled' | 'effective_from' | 'effective_to'>, now = Date.now()): RuleStatus {
  if (!r.enabled) return 'disabled'
  const from = parseTime(r.effective_from)
  const to = parseTime(r.effective_to)
  if (from && now < from.getTime()) return 'scheduled'
  if (to && now >= to.getTime()) return 'expired'
  return 'active'
}

/** The order gateways check rules in: priority, then id. */
export function byPriority(a: Pick<Rule, 'priority' | 'id'>, b: Pick<Rule, 'priority' | 'id'>): number {
  return a.priority - b.priority || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
}
