// Names of the alert kinds for people (controlplane/internal/live/alerts.go and
// docs/rules-contract.md §9); a kind this list does not know is shown from its code.
import type { Alert } from '@/api/types'

export const ALERT_KINDS: Record<string, string> = {
  emergency: 'Emergency mode',
  l1_exhausted: 'Cluster tokens exhausted',
  node_stale: 'Gateway not reporting',
  node_degraded: 'Gateway degraded',
  drift_high: 'Lease drift high',
  connections_rejected: 'Connections rejected',
  redis_slow: 'Redis slow',
  block_rate_high: 'Block rate high',
  traffic_spike: 'Traffic spike',
  circuit_open: 'Circuit breaker open',
  connections_high: 'Connections near the limit',
  connections_leaked: 'Connection slots leaked',
  cleanup_stalled: 'Connection cleanup stalled',
  config_store_lost: 'Config store lost (restore a snapshot)',
}

export function alertKindLabel(kind: string | undefined): string {
  if (!kind) return 'Alert'
  const known = ALERT_KINDS[kind]
  if (known) return known
  const s = kind.replace(/_/g, ' ')
  return s.charAt(0).toUpperCase() + s.slice(1)
}

export const SEVERITY_TAG = { info: 'info', warning: 'warning', critical: 'danger' } as const

export function severityTag(s: Alert['severity'] | string): 'info' | 'warning' | 'danger' {
  return SEVERITY_TAG[s as Alert['severity']] ?? 'info'
}

/** Newest first; active before resolved. */
export function byRecency(a: Alert, b: Alert): number {
  return Number(b.active !== false) - Number(a.active !== false) || b.timestamp - a.timestamp
}
