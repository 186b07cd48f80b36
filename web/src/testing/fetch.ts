// A scripted fetch for unit tests: each call is recorded and answered by the next handler.
import { vi } from 'vitest'

export interface Call {
  url: string
  method: string
  headers: Record<string, string>
  body: unknown
}

export type Reply = { status?: number; body?: unknown; text?: string } | Error

export function json(status: number, body: unknown): Reply {
  return { status, body }
}

export function mockFetch(...replies: (Reply | ((c: Call) => Reply))[]) {
  const calls: Call[] = []
  const queue = [...replies]
  const fn = vi.fn(async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const call: Call = {
      url: String(input),
      method: init?.method ?? 'GET',
      headers: { ...(init?.headers as Record<string, string> | undefined) },
      body: typeof init?.body === 'string' ? JSON.parse(init.body) : undefined,
    }
    calls.push(call)
    const next = queue.shift()
    if (next === undefined) throw new Error(`unexpected fetch ${call.method} ${call.url}`)
    const r = typeof next === 'function' ? next(call) : next
    if (r instanceof Error) throw r
    const text = r.text ?? (r.body === undefined ? '' : JSON.stringify(r.body))
    return new Response(r.status === 204 ? null : text, { status: r.status ?? 200,
      headers: { 'Content-Type': 'application/json' } })
  })
  vi.stubGlobal('fetch', fn)
  return { calls, fn, pending: () => queue.length }
}

/** An unsigned JWT with the given claims (the console only reads them). */
export function jwt(claims: Record<string, unknown>): string {
  const b64 = (o: unknown) => btoa(JSON.stringify(o)).replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_')
  return `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}.sig`
}
