import { beforeEach, describe, expect, it, vi } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import { ApiError, HttpClient, toApiError } from './http'

describe('HttpClient', () => {
  let client: HttpClient
  beforeEach(() => {
    client = new HttpClient()
  })

  it('unwraps the envelope and keeps list metadata', async () => {
    const f = mockFetch(json(200, { data: [{ app_id: 'a' }], meta: { total: 41, page: 3 }, request_id: 'r' }))
    const env = await client.envelope<{ app_id: string }[]>('GET', '/api/v1/apps', { query: { page: 3, search: '', x: undefined } })
    expect(env).toEqual({ data: [{ app_id: 'a' }], meta: { total: 41, page: 3 }, request_id: 'r' })
    expect(f.calls[0]?.url).toBe('/api/v1/apps?page=3') // empty and undefined parameters dropped
  })

  it('returns bodies without an envelope as they are', async () => {
    mockFetch(json(200, { status: 'ok' }))
    expect(await client.get('/health', { auth: false })).toEqual({ status: 'ok' })
  })

  it('sends JSON bodies and the bearer token, and no token when auth is false', async () => {
    const f = mockFetch(json(201, { data: { ok: true } }), json(200, { data: 1 }))
    client.setAuth({ token: () => 'T', refresh: async () => false })
    await client.post('/api/v1/apps', { app_id: 'x' })
    await client.post('/api/v1/auth/login', { u: 1 }, { auth: false })
    expect(f.calls[0]?.headers.Authorization).toBe('Bearer T')
    expect(f.calls[0]?.headers['Content-Type']).toBe('application/json')
    expect(f.calls[0]?.body).toEqual({ app_id: 'x' })
    expect(f.calls[1]?.headers.Authorization).toBeUndefined()
  })

  it('answers an empty 204 with undefined data', async () => {
    mockFetch({ status: 204 })
    await expect(client.delete('/api/v1/apps/x')).resolves.toBeUndefined()
  })

  it('refreshes once on 401 and retries with the new token', async () => {
    let token = 'old'
    const refresh = vi.fn(async () => { token = 'new'; return true })
    client.setAuth({ token: () => token, refresh })
    const f = mockFetch(json(401, { error: { code: 'token_expired', message: 'token expired' } }), json(200, { data: 'ok' }))
    await expect(client.get('/api/v1/apps')).resolves.toBe('ok')
    expect(refresh).toHaveBeenCalledTimes(1)
    expect(f.calls.map((c) => c.headers.Authorization)).toEqual(['Bearer old', 'Bearer new'])
  })

  it('gives up after one refresh: a second 401 is the answer', async () => {
    const refresh = vi.fn(async () => true)
    client.setAuth({ token: () => 't', refresh })
    mockFetch(json(401, { error: 'invalid_token' }), json(401, { error: 'invalid_token' }))
    const err = await client.get('/api/v1/apps').catch((e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).unauthorized).toBe(true)
    expect(refresh).toHaveBeenCalledTimes(1)
  })

  it('does not retry when the refresh fails', async () => {
    client.setAuth({ token: () => 't', refresh: async () => false })
    const f = mockFetch(json(401, { error: 'invalid_token' }))
    await expect(client.get('/api/v1/apps')).rejects.toMatchObject({ status: 401, code: 'invalid_token' })
    expect(f.calls).toHaveLength(1)
  })

  it('never refreshes for calls that opt out (login, refresh)', async () => {
    const refresh = vi.fn(async () => true)
    client.setAuth({ token: () => 't', refresh })
    mockFetch(json(401, { error: 'invalid_credentials' }))
    await expect(client.post('/api/v1/auth/login', {}, { auth: false })).rejects.toMatchObject({ status: 401 })
    expect(refresh).not.toHaveBeenCalled()
  })

  it('turns a failed connection into status 0', async () => {
    mockFetch(new TypeError('Failed to fetch'))
    await expect(client.get('/x')).rejects.toMatchObject({ status: 0, code: 'network', network: true })
  })

  it('reports a cancelled request as aborted', async () => {
    const ac = new AbortController()
    ac.abort()
    mockFetch(new DOMException('aborted', 'AbortError'))
    await expect(client.get('/x', { signal: ac.signal })).rejects.toMatchObject({ status: 0, code: 'aborted' })
  })

  it('keeps a non-JSON error body as the message', async () => {
    mockFetch({ status: 502, text: 'Bad Gateway' })
    await expect(client.get('/x')).rejects.toMatchObject({ status: 502, message: 'Bad Gateway' })
  })
})

describe('toApiError', () => {
  it("reads the API's error envelope with the violations of a rejected change", () => {
    const e = toApiError(400, { error: { code: 'config_validation_failed', message: 'nothing was written',
      details: { violations: [{ field: 'apps[a].burst_quota', code: 'burst_below_guaranteed',
        message: 'burst must be ≥ guaranteed' }], diff: [] } }, request_id: 'req-1' })
    expect(e).toMatchObject({ status: 400, code: 'config_validation_failed', message: 'nothing was written',
      validation: true, requestId: 'req-1' })
    expect(e.violations[0]?.field).toBe('apps[a].burst_quota')
  })

  it('reads a flat error code and violations given as a list', () => {
    const e = toApiError(400, { error: 'bad', details: [{ field: 'capacity', code: 'c', message: 'too small' }, { x: 1 }] })
    expect(e).toMatchObject({ code: 'bad', message: 'Bad' })
    expect(e.violations).toHaveLength(1)
  })

  it('humanises a bare code and falls back to the status', () => {
    expect(toApiError(404, { error: 'not_found' }).message).toBe('Not found')
    expect(toApiError(500, null, 'Internal Server Error')).toMatchObject({ code: 'server_error', message: 'Internal Server Error' })
    expect(toApiError(418, 'teapot')).toMatchObject({ code: 'http_418', message: 'HTTP 418' })
  })
})
