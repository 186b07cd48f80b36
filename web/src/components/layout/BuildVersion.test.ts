import { flushPromises, mount } from '@vue/test-utils'
import { describe, expect, it } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import BuildVersion from './BuildVersion.vue'

describe('BuildVersion', () => {
  it('shows the control plane version from /health, asked without a token', async () => {
    const f = mockFetch(json(200, { status: 'ok', redis: 'ok', version: 'v1.4.0-3-g1a2b3c4' }))
    const w = mount(BuildVersion)
    await flushPromises()
    expect(w.get('[data-test="build-version"]').text()).toBe('tollgate v1.4.0-3-g1a2b3c4')
    expect(f.calls[0]?.url).toBe('/health')
    expect(f.calls[0]?.headers.Authorization).toBeUndefined()
  })

  it('says unknown when /health fails or has no version', async () => {
    mockFetch(json(503, { status: 'unavailable', redis: 'timeout' }))
    const w = mount(BuildVersion)
    await flushPromises()
    expect(w.get('[data-test="build-version"]').text()).toBe('tollgate unknown')
    mockFetch(json(200, { status: 'ok' }))
    const w2 = mount(BuildVersion)
    await flushPromises()
    expect(w2.get('[data-test="build-version"]').text()).toBe('tollgate unknown')
  })
})
