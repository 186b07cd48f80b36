// Everything a signed-in user loaded is dropped when the session ends.
import { useAppsStore } from './apps'
import { useMetricsStore } from './metrics'

export function resetSessionStores(): void {
  useAppsStore().reset()
  useMetricsStore().reset()
}
