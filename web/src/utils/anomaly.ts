// Thresholds and anomaly detection of the dashboard (Req 23.9): what counts as a breach is
// decided here, once, and every card, row and chart colours itself from these functions.
import type { Health, Point } from '@/api/types'

export const THRESHOLDS = {
  /** L1 tokens available, percent of capacity */
  l1Ratio: { warning: 35, critical: 15 },
  /** mean L2 bucket fill, percent */
  l2Fill: { warning: 20, critical: 5 },
  /** Redis p99 latency, ms (the gateway's Redis timeout is 100 ms) */
  redisLatency: { warning: 20, critical: 80 },
  /** L3 hit ratio, 0..1 (the design target is 0.99) */
  l3Hit: { warning: 0.97, critical: 0.9 },
  /** connections in use, share of the limit */
  connections: { warning: 0.8, critical: 0.95 },
  /** rejected share of requests */
  rejected: { warning: 0.01, critical: 0.05 },
  /** gateway degradation level (0 normal) */
  degradation: { warning: 1, critical: 2 },
  /** a point this many standard deviations from the window's mean is an anomaly */
  zScore: 3,
} as const

/** Lower is worse. */
export function below(v: number | undefined | null, t: { warning: number; critical: number }): Health {
  if (v === undefined || v === null || Number.isNaN(v)) return 'normal'
  return v <= t.critical ? 'critical' : v <= t.warning ? 'warning' : 'normal'
}

/** Higher is worse. */
export function above(v: number | undefined | null, t: { warning: number; critical: number }): Health {
  if (v === undefined || v === null || Number.isNaN(v)) return 'normal'
  return v >= t.critical ? 'critical' : v >= t.warning ? 'warning' : 'normal'
}

export function worst(...hs: Health[]): Health {
  return hs.includes('critical') ? 'critical' : hs.includes('warning') ? 'warning' : 'normal'
}

/**
 * Points further than THRESHOLDS.zScore standard deviations from the mean of the series (at
 * least 8 points, and a series that is not flat), e.g. a sudden spike of the request rate.
 */
export function outliers(points: readonly Point[], z: number = THRESHOLDS.zScore): Point[] {
  if (points.length < 8) return []
  const vals = points.map((p) => p[1])
  const mean = vals.reduce((a, b) => a + b, 0) / vals.length
  const sd = Math.sqrt(vals.reduce((a, b) => a + (b - mean) ** 2, 0) / vals.length)
  if (sd === 0 || sd < Math.abs(mean) * 1e-6) return []
  return points.filter((p) => Math.abs(p[1] - mean) / sd > z)
}

/** Element Plus tag / text type of a health state. */
export function tagType(h: Health | undefined): 'success' | 'warning' | 'danger' {
  return h === 'critical' ? 'danger' : h === 'warning' ? 'warning' : 'success'
}
