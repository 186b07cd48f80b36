// Maps the validator's field paths to the names of a form's fields.
import type { Violation } from '@/api/types'

/**
 * "apps[demo-p1].burst_quota" -> "burst_quota", "cluster.capacity" -> "capacity",
 * "apps[x].connections.max_connections" -> "max_connections" (the API's flat field),
 * "clusters[default].guaranteed_quota" (over-allocation) -> "guaranteed_quota".
 */
export function formField(path: string): string {
  return path.replace(/^[a-z_]+\[[^\]]*\]\./i, '').replace(/^(cluster|app|user|connections)\./, '')
}

/** Messages by form field (the first one per field); unmatched ones under "". */
export function fieldErrors(vs: readonly Violation[], fields: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const v of vs) {
    const f = formField(v.field)
    const key = fields.includes(f) ? f : ''
    if (!(key in out)) out[key] = v.message
    else if (key === '') out[key] += `; ${v.message}`
  }
  return out
}
