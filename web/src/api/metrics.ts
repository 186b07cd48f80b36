import { http } from './http'
import type { AppMetrics, ConnectionUsage, DashboardData, HistorySeries, MetricsHistory,
  TimeRange } from './types'

export function overall(range: TimeRange, signal?: AbortSignal): Promise<DashboardData> {
  return http.get<DashboardData>('/api/v1/metrics', { query: { range }, signal })
}

export function app(id: string, range: TimeRange, signal?: AbortSignal): Promise<AppMetrics> {
  return http.get<AppMetrics>(`/api/v1/metrics/apps/${encodeURIComponent(id)}`, { query: { range }, signal })
}

export function connections(signal?: AbortSignal): Promise<ConnectionUsage> {
  return http.get<ConnectionUsage>('/api/v1/metrics/connections', { signal })
}

/**
 * A range query the control plane answers from Prometheus. Without a Prometheus it answers 503
 * with a prometheus_* code (see isPrometheusAbsent).
 */
export function history(series: HistorySeries, range: TimeRange,
  opts: { appId?: string; signal?: AbortSignal } = {}): Promise<MetricsHistory> {
  return http.get<MetricsHistory>('/api/v1/metrics/history', {
    query: { series, range, app_id: opts.appId }, signal: opts.signal,
  })
}

/**
 * The control plane has no Prometheus to ask: a 503 with a prometheus_* code, or a 404 from a
 * control plane that has no history endpoint at all.
 */
export function isPrometheusAbsent(e: unknown): boolean {
  if (typeof e !== 'object' || e === null || !('code' in e) || !('status' in e)) return false
  const { code, status } = e as { code: unknown; status: unknown }
  return typeof code === 'string' && ((status === 503 && code.startsWith('prometheus')) ||
    (status === 404 && code === 'not_found'))
}
