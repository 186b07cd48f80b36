import { mount } from '@vue/test-utils'
import { describe, expect, it, vi } from 'vitest'
import { defineComponent, h, nextTick, ref } from 'vue'
import { useChart, type ChartLike } from './useChart'

function fakeChart() {
  return { setOption: vi.fn(), resize: vi.fn(), dispose: vi.fn() } satisfies ChartLike
}

describe('useChart', () => {
  it('creates the chart on mount, follows the option, resizes with its box, disposes on unmount', async () => {
    const chart = fakeChart()
    const init = vi.fn(() => chart)
    let observed: ResizeObserverCallback | null = null
    vi.stubGlobal('ResizeObserver', class {
      constructor(cb: ResizeObserverCallback) { observed = cb }
      observe() {}
      disconnect() { observed = null }
    })
    vi.stubGlobal('requestAnimationFrame', (cb: FrameRequestCallback) => { cb(0); return 1 })
    const value = ref(1)
    let rendered = 0
    const C = defineComponent({
      setup() {
        const el = ref<HTMLElement | null>(null)
        useChart(el, () => ({ series: [{ data: [value.value] }] }), { init, onFirstRender: () => { rendered++ } })
        return () => h('div', { ref: el })
      },
    })
    const w = mount(C)
    await nextTick()
    await nextTick()
    expect(init).toHaveBeenCalledWith(w.element)
    expect(chart.setOption).toHaveBeenLastCalledWith({ series: [{ data: [1] }] }, { notMerge: true, lazyUpdate: true })
    value.value = 2
    await nextTick()
    expect(chart.setOption).toHaveBeenLastCalledWith({ series: [{ data: [2] }] }, expect.anything())
    expect(rendered).toBe(1)
    expect(observed).not.toBeNull()
    ;(observed as unknown as ResizeObserverCallback)([], {} as ResizeObserver)
    expect(chart.resize).toHaveBeenCalledTimes(1)
    w.unmount()
    expect(chart.dispose).toHaveBeenCalledTimes(1)
    expect(observed).toBeNull()
  })

  it('disposes a chart that finished loading after the component was gone', async () => {
    const chart = fakeChart()
    let resolve: (c: ChartLike) => void = () => {}
    const init = () => new Promise<ChartLike>((r) => { resolve = r })
    const C = defineComponent({
      setup() {
        const el = ref<HTMLElement | null>(null)
        useChart(el, () => ({}), { init })
        return () => h('div', { ref: el })
      },
    })
    const w = mount(C)
    await nextTick()
    w.unmount()
    resolve(chart)
    await nextTick()
    await nextTick()
    expect(chart.dispose).toHaveBeenCalledTimes(1)
    expect(chart.setOption).not.toHaveBeenCalled()
  })
})
