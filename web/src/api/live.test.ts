import { describe, expect, it } from 'vitest'
import { liveProtocols, liveUrl, parseUpdate } from './live'

describe('live', () => {
  it('builds ws and wss URLs from the page location', () => {
    expect(liveUrl({ protocol: 'http:', host: '127.0.0.1:9090' })).toBe('ws://127.0.0.1:9090/api/v1/ws')
    expect(liveUrl({ protocol: 'https:', host: 'console.example' })).toBe('wss://console.example/api/v1/ws')
  })

  it('carries the token in the subprotocols, not the URL', () => {
    expect(liveProtocols('a.b.c')).toEqual(['tollgate.v1', 'tollgate.bearer.a.b.c'])
  })

  it('parses known updates and drops everything else', () => {
    expect(parseUpdate('{"type":"alert","data":{"id":"1"},"timestamp":5}'))
      .toEqual({ type: 'alert', data: { id: '1' }, timestamp: 5 })
    expect(parseUpdate('{"type":"emergency","data":{"active":true}}')?.timestamp).toBeGreaterThan(0)
    for (const bad of ['nope', '{"type":"other","data":{}}', '{"type":"metrics"}', '{"type":"metrics","data":3}', 42]) {
      expect(parseUpdate(bad)).toBeNull()
    }
  })
})
