// The one HTTP client of the console: JSON in and out, the API's envelope unwrapped, every
// failure turned into an ApiError. It never shows anything to the user (views decide) and
// knows nothing of stores: the auth store plugs in a token source and a refresh function.
import type { Envelope, ErrorBody, Violation } from './types'

export type Query = Record<string, string | number | boolean | undefined | null>

export interface RequestOptions {
  query?: Query
  body?: unknown
  signal?: AbortSignal
  /** send the access token (default true) */
  auth?: boolean
  /** on 401, refresh the token once and retry (default: same as auth) */
  retry?: boolean
  timeoutMs?: number
}

/** A failed call: HTTP status (0 when the server was not reached), a code and a message. */
export class ApiError extends Error {
  readonly status: number
  readonly code: string
  readonly violations: Violation[]
  readonly details: unknown
  readonly requestId?: string

  constructor(status: number, code: string, message: string,
    extra: { violations?: Violation[]; details?: unknown; requestId?: string } = {}) {
    super(message)
    this.name = 'ApiError'
    this.status = status
    this.code = code
    this.violations = extra.violations ?? []
    this.details = extra.details
    this.requestId = extra.requestId
  }

  get unauthorized(): boolean { return this.status === 401 }
  get forbidden(): boolean { return this.status === 403 }
  get notFound(): boolean { return this.status === 404 }
  get network(): boolean { return this.status === 0 }
  get validation(): boolean { return this.violations.length > 0 }
}

export interface AuthHooks {
  /** the current access token, or null */
  token(): string | null
  /** get a new access token; resolves false when the session is over */
  refresh(): Promise<boolean>
}

export interface HttpClientOptions {
  baseUrl?: string
  fetch?: typeof fetch
  timeoutMs?: number
}

const DEFAULT_TIMEOUT = 15000

export function isEnvelope(v: unknown): v is Envelope<unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && ('data' in v || 'meta' in v)
}

/** Turns an error answer (any of the API's forms) into an ApiError. */
export function toApiError(status: number, body: unknown, statusText = ''): ApiError {
  const fallback = statusText || `HTTP ${status}`
  if (typeof body !== 'object' || body === null || !('error' in body)) {
    return new ApiError(status, status >= 500 ? 'server_error' : 'http_' + status, fallback)
  }
  const b = body as ErrorBody
  const nested = typeof b.error === 'object' && b.error !== null ? b.error : undefined
  const code = nested ? nested.code : String(b.error)
  const message = nested?.message ?? b.message ?? humanize(code) ?? fallback
  const violations = violationsOf(nested?.details ?? b.details)
  // a refusal about one field (e.g. invalid_rule: {"details": {"field": "window_seconds"}}) is
  // a violation of that field, so that forms show it under the field
  const field = fieldOf(nested?.details ?? b.details) ?? fieldOf(nested)
  if (violations.length === 0 && field !== undefined) violations.push({ field, code, message })
  return new ApiError(status, code, message, {
    violations, details: nested?.details ?? b.details, requestId: b.request_id,
  })
}

function violationsOf(details: unknown): Violation[] {
  if (Array.isArray(details)) {
    return details.filter((d): d is Violation =>
      typeof d === 'object' && d !== null && 'field' in d && 'message' in d)
  }
  if (typeof details === 'object' && details !== null && 'violations' in details) {
    return violationsOf((details as { violations: unknown }).violations)
  }
  return []
}

function fieldOf(details: unknown): string | undefined {
  if (typeof details !== 'object' || details === null || Array.isArray(details)) return undefined
  const f = (details as { field?: unknown }).field
  return typeof f === 'string' && f !== '' ? f : undefined
}

function humanize(code: string): string | undefined {
  if (!code) return undefined
  const s = code.replace(/_/g, ' ')
  return s.charAt(0).toUpperCase() + s.slice(1)
}

function buildUrl(base: string, path: string, query?: Query): string {
  let url = base + path
  if (query) {
    const params = new URLSearchParams()
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined && v !== null && v !== '') params.set(k, String(v))
    }
    const qs = params.toString()
    if (qs) url += (url.includes('?') ? '&' : '?') + qs
  }
  return url
}

export class HttpClient {
  private readonly baseUrl: string
  private readonly fetchImpl: typeof fetch
  private readonly timeoutMs: number
  private hooks: AuthHooks | null = null

  constructor(opts: HttpClientOptions = {}) {
    this.baseUrl = opts.baseUrl ?? ''
    this.fetchImpl = opts.fetch ?? ((input, init) => globalThis.fetch(input, init))
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT
  }

  /** Plugs in the auth store (or nothing, to log out). */
  setAuth(hooks: AuthHooks | null): void {
    this.hooks = hooks
  }

  /** The whole envelope, for lists that carry totals beside the data. */
  async envelope<T>(method: string, path: string, opts: RequestOptions = {}): Promise<Envelope<T>> {
    const auth = opts.auth ?? true
    let res = await this.send(method, path, opts, auth)
    if (res.status === 401 && auth && (opts.retry ?? true) && this.hooks) {
      if (await this.hooks.refresh()) res = await this.send(method, path, opts, auth)
    }
    const body = await readBody(res)
    if (!res.ok) throw toApiError(res.status, body, res.statusText)
    if (isEnvelope(body)) return body as Envelope<T>
    return { data: body as T }
  }

  /** The payload of an answer (the envelope's `data`). */
  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return (await this.envelope<T>(method, path, opts)).data
  }

  get<T>(path: string, opts?: RequestOptions): Promise<T> { return this.request<T>('GET', path, opts) }
  post<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.request<T>('POST', path, { ...opts, body })
  }
  put<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.request<T>('PUT', path, { ...opts, body })
  }
  patch<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.request<T>('PATCH', path, { ...opts, body })
  }
  delete<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.request<T>('DELETE', path, opts)
  }

  private async send(method: string, path: string, opts: RequestOptions, auth: boolean): Promise<Response> {
    const headers: Record<string, string> = { Accept: 'application/json' }
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json'
    const token = auth ? this.hooks?.token() : null
    if (token) headers.Authorization = `Bearer ${token}`
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.timeoutMs)
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout
    try {
      return await this.fetchImpl(buildUrl(this.baseUrl, path, opts.query), {
        method, headers, signal, credentials: 'same-origin',
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      })
    } catch (e) {
      if (opts.signal?.aborted) throw new ApiError(0, 'aborted', 'Request cancelled')
      if (timeout.aborted) throw new ApiError(0, 'timeout', 'The control plane did not answer in time')
      throw new ApiError(0, 'network', 'Cannot reach the control plane', { details: String(e) })
    }
  }
}

async function readBody(res: Response): Promise<unknown> {
  if (res.status === 204) return undefined
  const text = await res.text()
  if (!text) return undefined
  try {
    return JSON.parse(text) as unknown
  } catch {
    return res.ok ? text : { error: 'http_' + res.status, message: text.slice(0, 200) }
  }
}

/** The client every API module uses. */
export const http = new HttpClient()
