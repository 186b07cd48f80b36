// The session: the access token lives in memory only; the refresh token (rotated on every use)
// lives in sessionStorage so a reload of the tab keeps the session and closing the tab ends it.
// The access token is refreshed shortly before it expires and once on a 401; when refreshing
// fails the user is logged out.
import { defineStore } from 'pinia'
import { computed, ref } from 'vue'
import * as authApi from '@/api/auth'
import { ApiError, http } from '@/api/http'
import type { Role, TokenResponse } from '@/api/types'
import { allows, type Permission } from '@/utils/permissions'

export const REFRESH_KEY = 'tollgate.refresh'
/** refresh this long before the access token expires */
export const REFRESH_MARGIN_MS = 60_000
const MIN_DELAY_MS = 5_000

export const useAuthStore = defineStore('auth', () => {
  const accessToken = ref<string | null>(null)
  const expiresAt = ref(0) // ms
  const username = ref<string | null>(null)
  const role = ref<Role | null>(null)
  /** why the last session ended, shown on the login page */
  const endReason = ref<string | null>(null)

  let timer: ReturnType<typeof setTimeout> | null = null
  let inflight: Promise<boolean> | null = null

  const loggedIn = computed(() => accessToken.value !== null)
  function can(p: Permission): boolean {
    return allows(role.value, p)
  }

  function storedRefresh(): string | null {
    try {
      return sessionStorage.getItem(REFRESH_KEY)
    } catch {
      return null
    }
  }
  function storeRefresh(tok: string | null): void {
    try {
      if (tok) sessionStorage.setItem(REFRESH_KEY, tok)
      else sessionStorage.removeItem(REFRESH_KEY)
    } catch { /* storage disabled: the session lasts as long as the page */ }
  }

  function accept(t: TokenResponse): void {
    const claims = authApi.decodeClaims(t.access_token)
    const now = Date.now()
    const exp = t.expires_at ? t.expires_at * 1000
      : t.expires_in ? now + t.expires_in * 1000
        : claims ? claims.exp * 1000 : now + 15 * 60_000
    accessToken.value = t.access_token
    expiresAt.value = exp
    username.value = t.user?.username ?? claims?.sub ?? null
    role.value = t.user?.role ?? claims?.role ?? null
    endReason.value = null
    storeRefresh(t.refresh_token)
    schedule()
  }

  function schedule(): void {
    if (timer) clearTimeout(timer)
    const delay = Math.max(MIN_DELAY_MS, expiresAt.value - Date.now() - REFRESH_MARGIN_MS)
    timer = setTimeout(() => { void refresh() }, delay)
  }

  async function login(user: string, password: string): Promise<void> {
    const t = await authApi.login({ username: user, password })
    accept(t)
  }

  /** Gets a new access token; concurrent callers share one request. */
  function refresh(): Promise<boolean> {
    if (inflight) return inflight
    const tok = storedRefresh()
    if (!tok) return Promise.resolve(false)
    inflight = authApi.refresh(tok)
      .then((t) => { accept(t); return true })
      .catch((e: unknown) => {
        // A network error keeps the session: the token may still be good when the API is back.
        if (e instanceof ApiError && e.network && accessToken.value && Date.now() < expiresAt.value) {
          timer = setTimeout(() => { void refresh() }, MIN_DELAY_MS)
          return true
        }
        end(e instanceof ApiError && e.code ? 'Your session ended; please sign in again.' : null)
        return false
      })
      .finally(() => { inflight = null })
    return inflight
  }

  /** Restores the session of this tab after a reload. */
  async function restore(): Promise<boolean> {
    if (accessToken.value) return true
    if (!storedRefresh()) return false
    return refresh()
  }

  async function logout(): Promise<void> {
    const tok = storedRefresh()
    end(null)
    if (tok) {
      try { await authApi.logout(tok) } catch { /* the session is gone locally either way */ }
    }
  }

  function end(reason: string | null): void {
    reset()
    endReason.value = reason
  }

  function reset(): void {
    if (timer) clearTimeout(timer)
    timer = null
    accessToken.value = null
    expiresAt.value = 0
    username.value = null
    role.value = null
    endReason.value = null
    storeRefresh(null)
  }

  // The HTTP client asks this store for the token and for a refresh after a 401.
  http.setAuth({ token: () => accessToken.value, refresh })

  return { accessToken, expiresAt, username, role, endReason, loggedIn, can, login, refresh,
    restore, logout, reset }
})
