// A WebSocket that stays connected: exponential backoff with jitter between attempts, a fresh
// access token on every attempt, a token refresh when the server refuses the token, and a
// clean close when the owning component goes away.
import { getCurrentScope, onScopeDispose, readonly, ref, type Ref } from 'vue'

export type SocketStatus = 'idle' | 'connecting' | 'open' | 'closed'

export interface Backoff {
  initialMs: number
  maxMs: number
  factor: number
  /** 0..1: share of the delay that is random */
  jitter: number
}

export interface WebSocketOptions {
  url: () => string
  /** subprotocols for an attempt, e.g. carrying the access token; null: do not connect now */
  protocols?: () => string[] | null
  onMessage: (data: unknown) => void
  onOpen?: () => void
  /** a close the server gives as "token refused": resolve true to retry at once */
  onAuthRejected?: () => Promise<boolean>
  authCloseCodes?: readonly number[]
  backoff?: Partial<Backoff>
  /** for tests */
  WebSocketImpl?: typeof WebSocket
  random?: () => number
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 1000, maxMs: 30000, factor: 2, jitter: 0.3 }

/** The delay before reconnect attempt n (0-based). */
export function backoffDelay(n: number, b: Backoff = DEFAULT_BACKOFF, random = Math.random): number {
  const base = Math.min(b.maxMs, b.initialMs * b.factor ** n)
  return Math.round(base * (1 - b.jitter + b.jitter * random()))
}

export interface UseWebSocket {
  status: Readonly<Ref<SocketStatus>>
  attempts: Readonly<Ref<number>>
  lastMessageAt: Readonly<Ref<number>>
  connect: () => void
  close: () => void
}

export function useWebSocket(opts: WebSocketOptions): UseWebSocket {
  const b: Backoff = { ...DEFAULT_BACKOFF, ...opts.backoff }
  const Impl = opts.WebSocketImpl ?? globalThis.WebSocket
  const random = opts.random ?? Math.random
  const status = ref<SocketStatus>('idle')
  const attempts = ref(0)
  const lastMessageAt = ref(0)
  let ws: WebSocket | null = null
  let timer: ReturnType<typeof setTimeout> | null = null
  let wanted = false

  function clearTimer(): void {
    if (timer) clearTimeout(timer)
    timer = null
  }

  function schedule(): void {
    clearTimer()
    if (!wanted) return
    const delay = backoffDelay(attempts.value, b, random)
    attempts.value++
    timer = setTimeout(open, delay)
  }

  function open(): void {
    timer = null
    if (!wanted) return
    const protocols = opts.protocols ? opts.protocols() : []
    if (protocols === null) {
      status.value = 'closed'
      schedule()
      return
    }
    status.value = 'connecting'
    let sock: WebSocket
    try {
      sock = protocols.length ? new Impl(opts.url(), protocols) : new Impl(opts.url())
    } catch {
      status.value = 'closed'
      schedule()
      return
    }
    ws = sock
    sock.onopen = () => {
      if (ws !== sock) return
      status.value = 'open'
      attempts.value = 0
      opts.onOpen?.()
    }
    sock.onmessage = (ev: MessageEvent) => {
      if (ws !== sock) return
      lastMessageAt.value = Date.now()
      opts.onMessage(ev.data)
    }
    sock.onclose = (ev: CloseEvent) => {
      if (ws !== sock) return
      ws = null
      status.value = 'closed'
      if (!wanted) return
      const codes = opts.authCloseCodes ?? []
      if (opts.onAuthRejected && codes.includes(ev.code)) {
        void opts.onAuthRejected().then((ok) => {
          if (!wanted) return
          if (ok && attempts.value === 0) {
            attempts.value++
            open()
          } else if (ok) {
            schedule()
          } else {
            wanted = false
          }
        })
        return
      }
      schedule()
    }
    // errors are followed by a close event, which does the rest
    sock.onerror = () => {}
  }

  function connect(): void {
    if (wanted && (ws || timer)) return
    wanted = true
    attempts.value = 0
    clearTimer()
    open()
  }

  function close(): void {
    wanted = false
    clearTimer()
    const s = ws
    ws = null
    status.value = 'idle'
    if (s && s.readyState <= 1) s.close(1000, "bye") // CONNECTING or OPEN
  }

  if (getCurrentScope()) onScopeDispose(close)

  return { status: readonly(status), attempts: readonly(attempts),
    lastMessageAt: readonly(lastMessageAt), connect, close }
}
