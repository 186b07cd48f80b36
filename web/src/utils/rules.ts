// Rules in the console: the form's model and the body it sends, the client-side checks that
// mirror the API's (docs/rules-contract.md §2; the server's refusal is shown regardless), and
// the summaries of the list.
import { RULE_ACTIONS, RULE_ALGORITHMS, RULE_DISTRIBUTIONS, RULE_SCOPES, RULE_UNITS, type Rule, type RuleAction,
  type RuleAlgorithm, type RuleDistribution, type RuleInput, type RuleMatch, type RuleScope, type RuleUnit,
  type Violation } from '@/api/types'

export const ID_RE = /^[A-Za-z0-9_-]{1,128}$/
/**
 * a header name as the gateway's rule parser takes it: 1-128 of A-Z a-z 0-9 - _
 * (docs/rules-contract.md §8)
 */
const HEADER_RE = /^[A-Za-z0-9_-]{1,128}$/
const BUCKET_RE = /^[A-Za-z0-9._-]{1,255}$/
export const HTTP_METHODS = ['GET', 'HEAD', 'PUT', 'POST', 'DELETE', 'OPTIONS', 'PATCH'] as const
// the bounds of controlplane/internal/rules (rule.go)
export const MAX_WINDOW_SECONDS = 86400
export const MAX_THROTTLE_DELAY_MS = 5000
export const MAX_PRIORITY = 1000000
export const MAX_DESCRIPTION = 512
const MAX_LIST = 100
const MAX_HEADERS = 20
const MAX_PATH = 512
const MAX_KEY_PREFIX = 1024
const MAX_HEADER_VALUE = 256
/** limit and burst: the gateway's bound (MaxLimit of rule.go) */
export const MAX_LIMIT = 1e12
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
    // the API stores a token bucket's burst even when it is the default (= limit)
    customBurst: r.burst !== undefined && r.burst !== null && r.burst !== r.limit, burst: r.burst ?? r.limit,
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

// ---- validation (controlplane/internal/rules: rule.go, check.go) -------------------------------

function v(field: string, code: string, message: string): Violation {
  return { field, code, message }
}

const isInt = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n)
const inRange = (n: unknown, lo: number, hi: number): boolean => isInt(n) && n >= lo && n <= hi
const utf8Bytes = (s: string): number => new TextEncoder().encode(s).length

/** valid UTF-8 without control characters (C0, DEL, C1), at most max bytes */
function printable(s: string, max: number): boolean {
  return !/[\u0000-\u001f\u007f-\u009f]/.test(s) && utf8Bytes(s) <= max
}

function ipv4Bytes(s: string): number[] | null {
  const parts = s.split('.')
  if (parts.length !== 4 || !parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255)) return null
  return parts.map(Number)
}

/** the 16 bytes of an IPv6 address, or null */
function ipv6Bytes(s: string): number[] | null {
  if (!/^[0-9A-Fa-f:.]+$/.test(s)) return null
  const halves = s.split('::')
  if (halves.length > 2) return null
  const toWords = (h: string): number[] | null => {
    if (h === '') return []
    const words: number[] = []
    const groups = h.split(':')
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i] ?? ''
      if (i === groups.length - 1 && g.includes('.')) {
        const b = ipv4Bytes(g)
        if (!b) return null
        words.push(((b[0] ?? 0) << 8) | (b[1] ?? 0), ((b[2] ?? 0) << 8) | (b[3] ?? 0))
      } else if (/^[0-9A-Fa-f]{1,4}$/.test(g)) {
        words.push(parseInt(g, 16))
      } else {
        return null
      }
    }
    return words
  }
  const head = toWords(halves[0] ?? '')
  const tail = halves.length === 2 ? toWords(halves[1] ?? '') : []
  if (!head || !tail) return null
  const n = head.length + tail.length
  if (halves.length === 2 ? n > 7 : n !== 8) return null
  const words = [...head, ...Array<number>(8 - n).fill(0), ...tail]
  return words.flatMap((w) => [w >> 8, w & 0xff])
}

export type CidrProblem = 'invalid' | 'host_bits'

/** What is wrong with a CIDR ("10.0.0.0/8", "2001:db8::/32"), or null: as Go's netip.ParsePrefix plus Masked. */
export function cidrProblem(s: string): CidrProblem | null {
  const slash = s.indexOf('/')
  if (slash < 0 || s.length > 64) return 'invalid'
  const addr = s.slice(0, slash)
  const bitsText = s.slice(slash + 1)
  const bytes = addr.includes(':') ? ipv6Bytes(addr) : ipv4Bytes(addr)
  if (!bytes || !/^(0|[1-9]\d{0,2})$/.test(bitsText)) return 'invalid'
  const bits = Number(bitsText)
  if (bits > bytes.length * 8) return 'invalid'
  for (let i = 0; i < bytes.length; i++) {
    const keep = Math.max(0, Math.min(8, bits - i * 8))
    const mask = keep === 0 ? 0 : (0xff << (8 - keep)) & 0xff
    if (((bytes[i] ?? 0) & ~mask & 0xff) !== 0) return 'host_bits'
  }
  return null
}

export function validCidr(s: string): boolean {
  return cidrProblem(s) === null
}

/** What is wrong with a path glob, or "" */
function globProblem(p: string): string {
  if (!p.startsWith('/')) return 'must start with /'
  if (p.length > MAX_PATH) return `must be at most ${MAX_PATH} bytes`
  if (!/^[\x21-\x7e]+$/.test(p) || /[?#]/.test(p)) return 'must be printable ASCII without spaces, ? or #'
  if (p.includes('***')) return 'allows * and ** only, never three asterisks in a row'
  return ''
}

function validTime(s: string | null | undefined): boolean {
  return s === undefined || s === null || (s.length <= 64 && RFC3339_RE.test(s) && parseTime(s) !== null)
}

function duplicate(l: readonly string[]): string | undefined {
  const seen = new Set<string>()
  for (const x of l) {
    const k = x.toLowerCase()
    if (seen.has(k)) return x
    seen.add(k)
  }
  return undefined
}

// the JSON type of each field of a rule body: what the API's strict decoding refuses as invalid_type
const RULE_TYPES: Record<string, 'string' | 'integer' | 'boolean' | 'object'> = {
  id: 'string', description: 'string', scope: 'string', user_key: 'string', match: 'object', algorithm: 'string',
  limit: 'integer', window_seconds: 'integer', burst: 'integer', unit: 'string', distribution: 'string',
  priority: 'integer', enabled: 'boolean', effective_from: 'string', effective_to: 'string', action: 'string',
  throttle_max_delay_ms: 'integer', created_at: 'integer', updated_at: 'integer', updated_by: 'string',
}
const MATCH_TYPES: Record<string, 'strings' | 'string' | 'map'> = {
  app_ids: 'strings', methods: 'strings', bucket: 'string', key_prefix: 'string', path: 'string', cidrs: 'strings',
  headers: 'map',
}

function typeOK(x: unknown, t: string): boolean {
  switch (t) {
    case 'integer': return isInt(x)
    case 'object': return typeof x === 'object' && !Array.isArray(x)
    case 'strings': return Array.isArray(x) && x.every((e) => typeof e === 'string')
    case 'map': return typeof x === 'object' && !Array.isArray(x) && Object.values(x as object).every((e) => typeof e === 'string')
    default: return typeof x === t
  }
}

/** The fields of a body (null = left out) whose JSON type is wrong, as the API's decoding finds the first. */
function typeViolation(r: Record<string, unknown>): Violation | undefined {
  for (const [k, x] of Object.entries(r)) {
    if (x !== null && RULE_TYPES[k] !== undefined && !typeOK(x, RULE_TYPES[k])) {
      return v(k, 'invalid_type', `${k} must be ${RULE_TYPES[k]}`)
    }
  }
  const m = r.match
  if (m !== null && typeof m === 'object') {
    for (const [k, x] of Object.entries(m)) {
      if (x !== null && MATCH_TYPES[k] !== undefined && !typeOK(x, MATCH_TYPES[k])) {
        return v(`match.${k}`, 'invalid_type', `match.${k} must be ${MATCH_TYPES[k]}`)
      }
    }
  }
  return undefined
}

/**
 * The API's checks of a rule body (fields left out or null take the API's defaults), as
 * violations with the API's field paths. testdata/rules/ is the corpus it shares with the API
 * and the gateway (corpus.test.ts).
 */
export function validateRule(body: RuleInput): Violation[] {
  const typeErr = typeViolation(body as unknown as Record<string, unknown>)
  if (typeErr) return [typeErr]
  const r = Object.fromEntries(Object.entries(body).filter(([, x]) => x !== null)) as RuleInput
  const out: Violation[] = []
  if (r.id === undefined) out.push(v('id', 'required', 'id is required'))
  else if (!ID_RE.test(r.id)) out.push(v('id', 'invalid_id', 'id must match ^[A-Za-z0-9_-]{1,128}$'))
  if (r.description !== undefined && !printable(r.description, MAX_DESCRIPTION)) {
    out.push(v('description', 'invalid_description', `description: printable text of at most ${MAX_DESCRIPTION} bytes`))
  }
  if (r.scope === undefined) out.push(v('scope', 'required', 'scope is required'))
  else if (!(RULE_SCOPES as readonly string[]).includes(r.scope)) {
    out.push(v('scope', 'invalid_scope', `scope must be one of ${RULE_SCOPES.join(', ')}`))
  }
  if (r.scope === 'user') {
    const k = r.user_key ?? ''
    if (k === '') out.push(v('user_key', 'required', 'scope user needs user_key "header:<Name>" or "s3_access_key"'))
    else if (k !== 's3_access_key' && !(k.startsWith('header:') && HEADER_RE.test(k.slice(7)))) {
      out.push(v('user_key', 'invalid_user_key', 'user_key must be "header:<Name>" (an HTTP header name) or "s3_access_key"'))
    }
  } else if (r.user_key !== undefined && r.user_key !== '') {
    out.push(v('user_key', 'user_key_not_allowed', 'user_key applies to scope user only'))
  }
  if (r.algorithm === undefined) out.push(v('algorithm', 'required', 'algorithm is required'))
  else if (!(RULE_ALGORITHMS as readonly string[]).includes(r.algorithm)) {
    out.push(v('algorithm', 'invalid_algorithm', `algorithm must be one of ${RULE_ALGORITHMS.join(', ')}`))
  }
  if (r.limit === undefined) out.push(v('limit', 'required', 'limit is required'))
  else if (!inRange(r.limit, 1, MAX_LIMIT)) out.push(v('limit', 'invalid_limit', `limit must be a whole number from 1 to ${MAX_LIMIT}`))
  if (r.window_seconds === undefined) out.push(v('window_seconds', 'required', 'window_seconds is required'))
  else if (!inRange(r.window_seconds, 1, MAX_WINDOW_SECONDS)) {
    out.push(v('window_seconds', 'invalid_window', `window_seconds must be a whole number from 1 to ${MAX_WINDOW_SECONDS}`))
  }
  if (r.burst !== undefined) {
    if (r.algorithm === 'sliding_window' || r.algorithm === 'fixed_window') {
      out.push(v('burst', 'burst_not_allowed', `burst applies to token_bucket only; leave it out for ${r.algorithm}`))
    } else if (r.algorithm !== 'token_bucket') {
      // an unknown algorithm is its own violation
    } else if (!inRange(r.burst, 1, MAX_LIMIT)) {
      out.push(v('burst', 'invalid_burst', `burst must be a whole number from 1 to ${MAX_LIMIT}`))
    }
  }
  if (r.unit !== undefined && !(RULE_UNITS as readonly string[]).includes(r.unit)) out.push(v('unit', 'invalid_unit', 'unit must be requests or cost'))
  if (r.distribution !== undefined && !(RULE_DISTRIBUTIONS as readonly string[]).includes(r.distribution)) {
    out.push(v('distribution', 'invalid_distribution', 'distribution must be node or global'))
  }
  if (r.priority !== undefined && !inRange(r.priority, 0, MAX_PRIORITY)) {
    out.push(v('priority', 'invalid_priority', `priority must be a whole number from 0 to ${MAX_PRIORITY}`))
  }
  if (!validTime(r.effective_from)) out.push(v('effective_from', 'invalid_time', 'effective_from must be an RFC 3339 time like 2026-11-21T00:00:00Z'))
  if (!validTime(r.effective_to)) out.push(v('effective_to', 'invalid_time', 'effective_to must be an RFC 3339 time like 2026-11-21T00:00:00Z'))
  const from = validTime(r.effective_from) ? parseTime(r.effective_from) : null
  const to = validTime(r.effective_to) ? parseTime(r.effective_to) : null
  if (from && to && to.getTime() <= from.getTime()) {
    out.push(v('effective_to', 'empty_interval', 'effective_to must be after effective_from'))
  }
  if (r.action !== undefined && !(RULE_ACTIONS as readonly string[]).includes(r.action)) {
    out.push(v('action', 'invalid_action', `action must be one of ${RULE_ACTIONS.join(', ')}`))
  }
  if (r.action === 'throttle') {
    const d = r.throttle_max_delay_ms
    if (d === undefined || d === null) out.push(v('throttle_max_delay_ms', 'required', 'throttle_max_delay_ms is required with action throttle'))
    else if (!inRange(d, 1, MAX_THROTTLE_DELAY_MS)) {
      out.push(v('throttle_max_delay_ms', 'invalid_throttle_delay', `throttle_max_delay_ms must be from 1 to ${MAX_THROTTLE_DELAY_MS}`))
    }
  } else if (r.throttle_max_delay_ms !== undefined && r.throttle_max_delay_ms !== null) {
    out.push(v('throttle_max_delay_ms', 'throttle_delay_not_allowed', 'throttle_max_delay_ms applies to action throttle only'))
  }
  out.push(...validateMatch(r))
  return out
}

/** a present list holds 1 … 100 entries, each once */
function checkList(out: Violation[], field: string, l: readonly string[] | undefined): boolean {
  if (l === undefined) return false
  if (l.length === 0) {
    out.push(v(field, 'empty_list', `${field} must not be empty (leave it out to match any)`))
    return false
  }
  if (l.length > MAX_LIST) {
    out.push(v(field, 'too_many', `${field} holds at most ${MAX_LIST} entries`))
    return false
  }
  return true
}

function validateMatch(r: RuleInput): Violation[] {
  const out: Violation[] = []
  const m = r.match ?? {}
  const dup = (field: string, l: readonly string[]) => {
    const d = duplicate(l)
    if (d !== undefined) out.push(v(field, 'duplicate', `${field} lists "${d}" twice`))
  }
  if (checkList(out, 'match.app_ids', m.app_ids)) {
    m.app_ids?.forEach((a, i) => {
      if (!ID_RE.test(a)) out.push(v(`match.app_ids[${i}]`, 'invalid_app_id', `app ids match ^[A-Za-z0-9_-]{1,128}$ ("${a}")`))
    })
    dup('match.app_ids', m.app_ids ?? [])
  }
  if (checkList(out, 'match.methods', m.methods)) {
    m.methods?.forEach((x, i) => {
      if (!(HTTP_METHODS as readonly string[]).includes(x)) {
        out.push(v(`match.methods[${i}]`, 'invalid_method', `match.methods[${i}] must be one of ${HTTP_METHODS.join(', ')}`))
      }
    })
    dup('match.methods', m.methods ?? [])
  }
  if (m.bucket !== undefined && !BUCKET_RE.test(m.bucket)) {
    out.push(v('match.bucket', 'invalid_bucket', 'bucket must be 1-255 characters of A-Z a-z 0-9 . _ -'))
  }
  if (m.key_prefix !== undefined && m.key_prefix === '') {
    out.push(v('match.key_prefix', 'invalid_key_prefix', 'key_prefix must not be empty (leave it out to match any key)'))
  } else if (m.key_prefix !== undefined && !printable(m.key_prefix, MAX_KEY_PREFIX)) {
    out.push(v('match.key_prefix', 'invalid_key_prefix', `key_prefix: printable text of at most ${MAX_KEY_PREFIX} bytes`))
  }
  if (m.path !== undefined) {
    const p = globProblem(m.path)
    if (p) out.push(v('match.path', 'invalid_path', `path ${p}`))
  }
  if (checkList(out, 'match.cidrs', m.cidrs)) {
    m.cidrs?.forEach((c, i) => {
      const p = cidrProblem(c)
      if (p === 'invalid') out.push(v(`match.cidrs[${i}]`, 'invalid_cidr', `"${c}" must be a CIDR like 10.0.0.0/8 or 2001:db8::/32`))
      if (p === 'host_bits') out.push(v(`match.cidrs[${i}]`, 'invalid_cidr', `"${c}" has host bits set`))
    })
    dup('match.cidrs', m.cidrs ?? [])
  }
  if (m.headers !== undefined) {
    const names = Object.keys(m.headers)
    if (names.length === 0) out.push(v('match.headers', 'empty_list', 'match.headers must not be empty (leave it out to match any)'))
    else if (names.length > MAX_HEADERS) out.push(v('match.headers', 'too_many', `match.headers holds at most ${MAX_HEADERS} entries`))
    else {
      const bad = names.find((h) => !HEADER_RE.test(h))
      if (bad !== undefined) out.push(v('match.headers', 'invalid_header', `"${bad}" is not an HTTP header name`))
      dup('match.headers', names)
      for (const n of names) {
        if (!printable(m.headers[n] ?? '', MAX_HEADER_VALUE)) {
          out.push(v(`match.headers.${n}`, 'invalid_header', `the value of ${n}: printable text of at most ${MAX_HEADER_VALUE} bytes`))
        }
      }
    }
  }
  if (r.scope === 'endpoint' && Object.values(m).every((x) => x === undefined || x === null)) {
    out.push(v('match', 'endpoint_needs_match', 'scope endpoint needs a match field to select the endpoint'))
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
