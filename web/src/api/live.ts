// How the console reaches the WebSocket: the URL and how the access token travels. Browsers
// cannot set an Authorization header on a WebSocket, so the token goes in the subprotocol list
// ("tollgate.bearer.<token>" next to "tollgate.v1"; never in the URL, which ends up in logs).
import type { RealtimeUpdate } from './types'

export const LIVE_PATH = '/api/v1/ws'
export const LIVE_PROTOCOL = 'tollgate.v1'

export function liveUrl(loc: Pick<Location, 'protocol' | 'host'> = window.location): string {
  return `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}${LIVE_PATH}`
}

export function liveProtocols(token: string): string[] {
  return [LIVE_PROTOCOL, `tollgate.bearer.${token}`]
}

/** Close codes with which the server ends a socket whose token expired or was refused. */
export const AUTH_CLOSE_CODES: readonly number[] = [4001, 4401, 4403]

const TYPES = new Set(['metrics', 'alert', 'config_change', 'emergency'])

/** Parses a message; anything that is not a known update is dropped. */
export function parseUpdate(raw: unknown): RealtimeUpdate | null {
  if (typeof raw !== 'string') return null
  try {
    const m = JSON.parse(raw) as { type?: unknown; data?: unknown; timestamp?: unknown }
    if (typeof m.type !== 'string' || !TYPES.has(m.type) || typeof m.data !== 'object' || m.data === null) {
      return null
    }
    const ts = typeof m.timestamp === 'number' ? m.timestamp : Math.floor(Date.now() / 1000)
    return { ...m, timestamp: ts } as RealtimeUpdate
  } catch {
    return null
  }
}
