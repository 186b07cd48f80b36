// One ECharts instance owned by a component: created when the element mounts, updated when the
// option changes, resized with its container (ResizeObserver), disposed on unmount.
import { onBeforeUnmount, onMounted, shallowRef, watch, type Ref, type ShallowRef } from 'vue'

/** What useChart needs of an ECharts instance (an interface so tests need no canvas). */
export interface ChartLike {
  setOption(option: object, opts?: { notMerge?: boolean; lazyUpdate?: boolean }): void
  resize(): void
  dispose(): void
  isDisposed?(): boolean
}

export interface UseChartOptions {
  /** creates the chart; defaults to the registered echarts/core slice (loaded on demand) */
  init?: (el: HTMLElement) => ChartLike | Promise<ChartLike>
  /** replace the whole option on change instead of merging (default true: series come and go) */
  notMerge?: boolean
  /** called once, after the first option was drawn */
  onFirstRender?: () => void
}

async function defaultInit(el: HTMLElement): Promise<ChartLike> {
  const { initChart } = await import('@/charts/echarts')
  return initChart(el)
}

export function useChart(el: Ref<HTMLElement | null>, option: () => object | null,
  opts: UseChartOptions = {}): { chart: ShallowRef<ChartLike | null> } {
  const chart = shallowRef<ChartLike | null>(null)
  let observer: ResizeObserver | null = null
  let disposed = false
  let frame = 0
  let drawn = false

  function render(): void {
    const c = chart.value
    const o = option()
    if (!c || !o) return
    c.setOption(o, { notMerge: opts.notMerge ?? true, lazyUpdate: true })
    if (!drawn) {
      drawn = true
      opts.onFirstRender?.()
    }
  }

  onMounted(async () => {
    const node = el.value
    if (!node) return
    const c = await (opts.init ?? defaultInit)(node)
    if (disposed) {
      c.dispose()
      return
    }
    chart.value = c
    render()
    if (typeof ResizeObserver !== 'undefined') {
      observer = new ResizeObserver(() => {
        cancelAnimationFrame(frame)
        frame = requestAnimationFrame(() => chart.value?.resize())
      })
      observer.observe(node)
    }
  })

  watch(option, render)

  onBeforeUnmount(() => {
    disposed = true
    cancelAnimationFrame(frame)
    observer?.disconnect()
    observer = null
    chart.value?.dispose()
    chart.value = null
  })

  return { chart }
}
