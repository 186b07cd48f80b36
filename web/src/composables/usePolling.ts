// Calls fn every intervalMs while the component lives and the page is visible (and once at
// once); skipped while the previous call is still running.
import { getCurrentScope, onScopeDispose } from 'vue'

export function usePolling(fn: () => Promise<unknown>, intervalMs: number,
  opts: { immediate?: boolean; when?: () => boolean } = {}): { stop: () => void; tick: () => Promise<void> } {
  let running = false
  let stopped = false
  async function tick(): Promise<void> {
    if (running || stopped) return
    if (typeof document !== 'undefined' && document.visibilityState === 'hidden') return
    if (opts.when && !opts.when()) return
    running = true
    try {
      await fn()
    } catch {
      // the caller's fn records its own errors
    } finally {
      running = false
    }
  }
  const id = setInterval(() => { void tick() }, intervalMs)
  function stop(): void {
    stopped = true
    clearInterval(id)
  }
  if (getCurrentScope()) onScopeDispose(stop)
  if (opts.immediate ?? true) void tick()
  return { stop, tick }
}
