// The WebSocket's updates for whoever is on screen: useLive publishes every message here; a view
// or store subscribes (and is unsubscribed with its scope) without the shell importing it, so a
// lazily loaded view stays out of the shell's chunk.
import { getCurrentScope, onScopeDispose } from 'vue'
import type { RealtimeUpdate } from '@/api/types'

export type LiveListener = (u: RealtimeUpdate) => void

const listeners = new Set<LiveListener>()

export function publishLive(u: RealtimeUpdate): void {
  for (const l of [...listeners]) {
    try {
      l(u)
    } catch (e) {
      console.warn('live listener failed', e)
    }
  }
}

/** Calls fn with every update until the returned function is called or the scope ends. */
export function onLive(fn: LiveListener): () => void {
  listeners.add(fn)
  const off = () => { listeners.delete(fn) }
  if (getCurrentScope()) onScopeDispose(off)
  return off
}

/** for tests */
export function liveListeners(): number {
  return listeners.size
}
