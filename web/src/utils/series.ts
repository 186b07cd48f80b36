import type { Point, TimePoint, TimeRange } from '@/api/types'

/** The API's {timestamp, value} points as the charts' [t, v] pairs. */
export function toPoints(tp: readonly TimePoint[] | null | undefined): Point[] {
  return (tp ?? []).map((p) => [p.timestamp, p.value])
}

/** seconds in a time range */
export const RANGE_SECONDS: Record<TimeRange, number> = { '1h': 3600, '6h': 21600, '24h': 86400, '7d': 604800 }
