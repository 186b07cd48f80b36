import type { Point, TimePoint } from '@/api/types'

/** The API's {timestamp, value} points as the charts' [t, v] pairs. */
export function toPoints(tp: readonly TimePoint[] | null | undefined): Point[] {
  return (tp ?? []).map((p) => [p.timestamp, p.value])
}
