import { describe, expect, it } from 'vitest'
import { jwt } from '@/testing/fetch'
import { decodeClaims, isRole } from './auth'

describe('decodeClaims', () => {
  it('reads sub, role and exp', () => {
    expect(decodeClaims(jwt({ sub: 'alice', role: 'operator', exp: 1700000900, iat: 1700000000 })))
      .toEqual({ sub: 'alice', role: 'operator', exp: 1700000900, iat: 1700000000 })
  })

  it('handles base64url characters and missing padding', () => {
    const claims = { sub: 'svc_a', role: 'viewer', exp: 5, note: 'ü??>>~' } // encodes to "_" and "-"
    const payload = btoa(String.fromCharCode(...new TextEncoder().encode(JSON.stringify(claims))))
      .replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_')
    expect(payload).toMatch(/[-_]/)
    expect(decodeClaims(`h.${payload}.s`)).toMatchObject({ sub: 'svc_a', role: 'viewer', exp: 5 })
  })

  it('refuses tokens without the claims it needs', () => {
    expect(decodeClaims('garbage')).toBeNull()
    expect(decodeClaims('a.b.c')).toBeNull()
    expect(decodeClaims(jwt({ sub: 'x', role: 'root', exp: 1 }))).toBeNull()
    expect(decodeClaims(jwt({ sub: 'x', role: 'admin' }))).toBeNull()
  })

  it('knows the three roles', () => {
    expect(['viewer', 'operator', 'admin', 'root', 1].map(isRole)).toEqual([true, true, true, false, false])
  })
})
