import { createPinia, setActivePinia } from 'pinia'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import * as appsApi from '@/api/apps'
import { json, jwt, mockFetch, type Call } from '@/testing/fetch'
import { REFRESH_KEY, REFRESH_MARGIN_MS, useAuthStore } from './auth'

const NOW = 1_700_000_000_000

function tokens(user: string, role: string, ttlS = 900, n = 1) {
  const exp = Math.floor(Date.now() / 1000) + ttlS
  return { access_token: jwt({ sub: user, role, exp, iat: exp - ttlS, n }), refresh_token: `r${n}`, expires_in: ttlS }
}

describe('auth store', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: NOW })
    sessionStorage.clear()
    setActivePinia(createPinia())
  })
  afterEach(() => {
    useAuthStore().reset()
    vi.useRealTimers()
  })

  it('logs in: access token in memory, refresh token in sessionStorage, role from the token', async () => {
    const f = mockFetch(json(200, { data: tokens('alice', 'operator') }))
    const auth = useAuthStore()
    await auth.login('alice', 'secret-password')
    expect(f.calls[0]).toMatchObject({ method: 'POST', url: '/api/v1/auth/login',
      body: { username: 'alice', password: 'secret-password' } })
    expect(f.calls[0]?.headers.Authorization).toBeUndefined()
    expect(auth.loggedIn).toBe(true)
    expect(auth.username).toBe('alice')
    expect(auth.role).toBe('operator')
    expect(auth.expiresAt).toBe(NOW + 900_000)
    expect(sessionStorage.getItem(REFRESH_KEY)).toBe('r1')
    expect(JSON.stringify(sessionStorage)).not.toContain(auth.accessToken ?? 'none')
    expect(localStorage.length).toBe(0)
  })

  it('maps roles to permissions', async () => {
    mockFetch(json(200, { data: tokens('v', 'viewer') }))
    const auth = useAuthStore()
    expect(auth.can('read')).toBe(false) // signed out
    await auth.login('v', 'p')
    expect([auth.can('read'), auth.can('config:write'), auth.can('users:manage')]).toEqual([true, false, false])
  })

  it('refreshes the access token a minute before it expires, rotating the refresh token', async () => {
    const calls: Call[] = []
    mockFetch(json(200, { data: tokens('a', 'admin') }), (c) => {
      calls.push(c)
      return json(200, { data: tokens('a', 'admin', 900, 2) })
    })
    const auth = useAuthStore()
    await auth.login('a', 'p')
    const first = auth.accessToken
    await vi.advanceTimersByTimeAsync(900_000 - REFRESH_MARGIN_MS - 1000)
    expect(calls).toHaveLength(0)
    await vi.advanceTimersByTimeAsync(2000)
    expect(calls[0]).toMatchObject({ url: '/api/v1/auth/refresh', body: { refresh_token: 'r1' } })
    expect(auth.accessToken).not.toBe(first)
    expect(sessionStorage.getItem(REFRESH_KEY)).toBe('r2')
  })

  it('refreshes once on a 401 and retries the call', async () => {
    const f = mockFetch(
      json(200, { data: tokens('a', 'operator') }),
      json(401, { error: 'token_expired' }),
      json(200, { data: tokens('a', 'operator', 900, 2) }),
      json(200, { data: { app_id: 'x' } }),
    )
    const auth = useAuthStore()
    await auth.login('a', 'p')
    const first = auth.accessToken
    await expect(appsApi.get('x')).resolves.toEqual({ app_id: 'x' })
    expect(f.calls.map((c) => c.url)).toEqual(['/api/v1/auth/login', '/api/v1/apps/x', '/api/v1/auth/refresh', '/api/v1/apps/x'])
    expect(f.calls[1]?.headers.Authorization).toBe(`Bearer ${first}`)
    expect(f.calls[3]?.headers.Authorization).toBe(`Bearer ${auth.accessToken}`)
  })

  it('shares one refresh between concurrent callers', async () => {
    const f = mockFetch(json(200, { data: tokens('a', 'admin') }), json(200, { data: tokens('a', 'admin', 900, 2) }))
    const auth = useAuthStore()
    await auth.login('a', 'p')
    const results = await Promise.all([auth.refresh(), auth.refresh(), auth.refresh()])
    expect(results).toEqual([true, true, true])
    expect(f.calls.filter((c) => c.url.endsWith('/refresh'))).toHaveLength(1)
  })

  it('logs out when the refresh is refused (e.g. a reused refresh token)', async () => {
    mockFetch(json(200, { data: tokens('a', 'admin') }), json(401, { error: 'refresh_reused' }))
    const auth = useAuthStore()
    await auth.login('a', 'p')
    expect(await auth.refresh()).toBe(false)
    expect(auth.loggedIn).toBe(false)
    expect(auth.role).toBeNull()
    expect(sessionStorage.getItem(REFRESH_KEY)).toBeNull()
    expect(auth.endReason).toMatch(/session ended/)
  })

  it('keeps the session through a network error while the access token is still valid', async () => {
    mockFetch(json(200, { data: tokens('a', 'admin') }), new TypeError('Failed to fetch'))
    const auth = useAuthStore()
    await auth.login('a', 'p')
    expect(await auth.refresh()).toBe(true)
    expect(auth.loggedIn).toBe(true)
  })

  it('restores the session of the tab from the refresh token', async () => {
    sessionStorage.setItem(REFRESH_KEY, 'r0')
    const f = mockFetch(json(200, { data: tokens('bob', 'viewer') }))
    const auth = useAuthStore()
    expect(await auth.restore()).toBe(true)
    expect(f.calls[0]?.body).toEqual({ refresh_token: 'r0' })
    expect(auth.username).toBe('bob')
  })

  it('does not call the API to restore without a refresh token', async () => {
    const f = mockFetch()
    expect(await useAuthStore().restore()).toBe(false)
    expect(f.calls).toHaveLength(0)
  })

  it('logs out: revokes the session on the server and forgets everything', async () => {
    const f = mockFetch(json(200, { data: tokens('a', 'admin') }), { status: 204 })
    const auth = useAuthStore()
    await auth.login('a', 'p')
    await auth.logout()
    expect(f.calls[1]).toMatchObject({ url: '/api/v1/auth/logout', body: { refresh_token: 'r1' } })
    expect(auth.loggedIn).toBe(false)
    expect(sessionStorage.getItem(REFRESH_KEY)).toBeNull()
    // no timer left that would refresh a dead session
    await vi.advanceTimersByTimeAsync(3_600_000)
    expect(f.calls).toHaveLength(2)
  })

  it('logs out locally even when the server cannot be reached', async () => {
    mockFetch(json(200, { data: tokens('a', 'admin') }), new TypeError('offline'))
    const auth = useAuthStore()
    await auth.login('a', 'p')
    await auth.logout()
    expect(auth.loggedIn).toBe(false)
  })
})
