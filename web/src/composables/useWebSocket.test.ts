import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { effectScope } from 'vue'
import { FakeSocket, FakeWebSocket } from '@/testing/websocket'
import { backoffDelay, useWebSocket, type WebSocketOptions } from './useWebSocket'

const B = { initialMs: 1000, maxMs: 8000, factor: 2, jitter: 0 }

function setup(over: Partial<WebSocketOptions> = {}) {
  const messages: unknown[] = []
  let token: string | null = 't1'
  const scope = effectScope()
  const ws = scope.run(() => useWebSocket({
    url: () => 'ws://cp/api/v1/ws',
    protocols: () => (token ? ['tollgate.v1', `bearer.${token}`] : null),
    onMessage: (d) => messages.push(d),
    backoff: B,
    WebSocketImpl: FakeWebSocket,
    ...over,
  }))
  if (!ws) throw new Error('no scope')
  return { ws, scope, messages, setToken: (t: string | null) => { token = t } }
}

describe('backoffDelay', () => {
  it('doubles up to the cap, with jitter below the base', () => {
    expect([0, 1, 2, 3, 4, 10].map((n) => backoffDelay(n, B))).toEqual([1000, 2000, 4000, 8000, 8000, 8000])
    const j = { ...B, jitter: 0.5 }
    expect(backoffDelay(1, j, () => 0)).toBe(1000)
    expect(backoffDelay(1, j, () => 0.999999)).toBe(2000)
  })
})

describe('useWebSocket', () => {
  beforeEach(() => {
    vi.useFakeTimers()
    FakeSocket.reset()
  })
  afterEach(() => {
    vi.useRealTimers()
  })

  it('connects with the token of the moment and delivers messages', () => {
    const { ws, messages } = setup()
    ws.connect()
    const s = FakeSocket.last()
    expect(s.url).toBe('ws://cp/api/v1/ws')
    expect(s.protocols).toEqual(['tollgate.v1', 'bearer.t1'])
    expect(ws.status.value).toBe('connecting')
    s.open()
    expect(ws.status.value).toBe('open')
    s.message({ type: 'metrics' })
    expect(messages).toEqual(['{"type":"metrics"}'])
    expect(ws.lastMessageAt.value).toBeGreaterThan(0)
  })

  it('reconnects with exponential backoff and a fresh token, and resets the backoff once open', () => {
    const { ws, setToken } = setup()
    ws.connect()
    FakeSocket.last().drop()
    expect(ws.status.value).toBe('closed')
    vi.advanceTimersByTime(999)
    expect(FakeSocket.instances).toHaveLength(1)
    vi.advanceTimersByTime(1)
    expect(FakeSocket.instances).toHaveLength(2)
    setToken('t2')
    FakeSocket.last().drop()
    vi.advanceTimersByTime(1999)
    expect(FakeSocket.instances).toHaveLength(2)
    vi.advanceTimersByTime(1)
    expect(FakeSocket.instances).toHaveLength(3)
    expect(FakeSocket.last().protocols).toContain('bearer.t2')
    FakeSocket.last().open()
    expect(ws.attempts.value).toBe(0)
    FakeSocket.last().drop()
    vi.advanceTimersByTime(1000)
    expect(FakeSocket.instances).toHaveLength(4)
  })

  it('waits without a token and connects once there is one', () => {
    const { ws, setToken } = setup()
    setToken(null)
    ws.connect()
    expect(FakeSocket.instances).toHaveLength(0)
    setToken('late')
    vi.advanceTimersByTime(1000)
    expect(FakeSocket.last().protocols).toContain('bearer.late')
  })

  it('refreshes the token when the server refuses it, then reconnects at once', async () => {
    const refreshed = vi.fn(async () => true)
    const { ws } = setup({ authCloseCodes: [4401], onAuthRejected: refreshed })
    ws.connect()
    FakeSocket.last().drop(4401)
    await vi.advanceTimersByTimeAsync(0)
    expect(refreshed).toHaveBeenCalledTimes(1)
    expect(FakeSocket.instances).toHaveLength(2)
    // refused again: back to the backoff, no tight loop
    FakeSocket.last().drop(4401)
    await vi.advanceTimersByTimeAsync(0)
    expect(FakeSocket.instances).toHaveLength(2)
    await vi.advanceTimersByTimeAsync(2000)
    expect(FakeSocket.instances).toHaveLength(3)
  })

  it('stops when the refresh fails (the session is over)', async () => {
    const { ws } = setup({ authCloseCodes: [4401], onAuthRejected: async () => false })
    ws.connect()
    FakeSocket.last().drop(4401)
    await vi.advanceTimersByTimeAsync(60000)
    expect(FakeSocket.instances).toHaveLength(1)
  })

  it('closes cleanly and does not reconnect; disposing the scope closes too', () => {
    const { ws, scope } = setup()
    ws.connect()
    const s = FakeSocket.last()
    s.open()
    ws.close()
    expect(s.closedWith).toEqual({ code: 1000, reason: 'bye' })
    expect(ws.status.value).toBe('idle')
    s.drop(1000)
    vi.advanceTimersByTime(60000)
    expect(FakeSocket.instances).toHaveLength(1)

    ws.connect()
    const s2 = FakeSocket.last()
    scope.stop()
    expect(s2.closedWith?.code).toBe(1000)
  })

  it('ignores a second connect while connected', () => {
    const { ws } = setup()
    ws.connect()
    ws.connect()
    expect(FakeSocket.instances).toHaveLength(1)
  })
})
