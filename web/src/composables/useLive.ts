// Live updates for the signed-in console: the WebSocket feeds the metrics store and the live bus
// (for the views that listen), carrying the access token of the moment; a refused token
// triggers one refresh. Returns the socket state for the header's indicator.
import { watch } from 'vue'
import { AUTH_CLOSE_CODES, liveProtocols, liveUrl, parseUpdate } from '@/api/live'
import { useAuthStore } from '@/stores/auth'
import { useMetricsStore } from '@/stores/metrics'
import { publishLive } from './liveBus'
import { useWebSocket } from './useWebSocket'

export function useLive() {
  const auth = useAuthStore()
  const metrics = useMetricsStore()
  const ws = useWebSocket({
    url: () => liveUrl(),
    protocols: () => (auth.accessToken ? liveProtocols(auth.accessToken) : null),
    onMessage: (raw) => {
      const u = parseUpdate(raw)
      if (!u) return
      metrics.onUpdate(u)
      publishLive(u)
    },
    authCloseCodes: AUTH_CLOSE_CODES,
    onAuthRejected: () => auth.refresh(),
  })
  watch(() => auth.loggedIn, (on) => (on ? ws.connect() : ws.close()), { immediate: true })
  return ws
}
