import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { effectScope } from 'vue'
import { usePolling } from './usePolling'

describe('usePolling', () => {
  beforeEach(() => { vi.useFakeTimers() })
  afterEach(() => { vi.useRealTimers() })

  it('calls at once and every interval, skips overlapping calls, stops with its scope', async () => {
    let release: () => void = () => {}
    const fn = vi.fn(() => new Promise<void>((r) => { release = r }))
    const scope = effectScope()
    scope.run(() => usePolling(fn, 5000))
    expect(fn).toHaveBeenCalledTimes(1)
    await vi.advanceTimersByTimeAsync(5000) // still running: skipped
    expect(fn).toHaveBeenCalledTimes(1)
    release()
    await vi.advanceTimersByTimeAsync(5000)
    expect(fn).toHaveBeenCalledTimes(2)
    release()
    scope.stop()
    await vi.advanceTimersByTimeAsync(20000)
    expect(fn).toHaveBeenCalledTimes(2)
  })

  it('respects the when() guard', async () => {
    const fn = vi.fn(async () => {})
    let on = false
    const scope = effectScope()
    scope.run(() => usePolling(fn, 1000, { when: () => on }))
    await vi.advanceTimersByTimeAsync(3000)
    expect(fn).not.toHaveBeenCalled()
    on = true
    await vi.advanceTimersByTimeAsync(1000)
    expect(fn).toHaveBeenCalledTimes(1)
    scope.stop()
  })
})
