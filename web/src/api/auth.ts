// Login, token refresh (with rotation) and logout. These calls never carry the access token and
// never trigger the refresh-and-retry of the client (a 401 here is the answer itself).
import { http } from './http'
import type { AccessClaims, LoginRequest, Role, TokenResponse } from './types'
import { ROLES } from './types'

const noAuth = { auth: false, retry: false } as const

export function login(req: LoginRequest): Promise<TokenResponse> {
  return http.post<TokenResponse>('/api/v1/auth/login', req, noAuth)
}

export function refresh(refreshToken: string): Promise<TokenResponse> {
  return http.post<TokenResponse>('/api/v1/auth/refresh', { refresh_token: refreshToken }, noAuth)
}

export function logout(refreshToken: string): Promise<void> {
  return http.post<void>('/api/v1/auth/logout', { refresh_token: refreshToken }, noAuth)
}

/** Reads (without verifying: the API does that) the claims of an access token. */
export function decodeClaims(token: string): AccessClaims | null {
  const part = token.split('.')[1]
  if (!part) return null
  try {
    const b64 = part.replace(/-/g, '+').replace(/_/g, '/')
    const json = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4))
    const c = JSON.parse(json) as Record<string, unknown>
    if (typeof c.sub !== 'string' || typeof c.exp !== 'number' || !isRole(c.role)) return null
    return { sub: c.sub, role: c.role, exp: c.exp, iat: typeof c.iat === 'number' ? c.iat : undefined }
  } catch {
    return null
  }
}

export function isRole(v: unknown): v is Role {
  return typeof v === 'string' && (ROLES as readonly string[]).includes(v)
}
