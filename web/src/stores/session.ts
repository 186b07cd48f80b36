// Everything a signed-in user loaded is dropped when the session ends. The stores of lazily
// loaded views register their reset here (onSessionEnd) instead of being imported, so that
// they stay in their views' chunks.
import { useAppsStore } from './apps'
import { useMetricsStore } from './metrics'

const resets = new Set<() => void>()

export function onSessionEnd(reset: () => void): void {
  resets.add(reset)
}

export function resetSessionStores(): void {
  useAppsStore().reset()
  useMetricsStore().reset()
  for (const r of resets) r()
}
