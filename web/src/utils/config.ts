// The config contract in the console: what makes an app, a cluster and a connection limit
// valid, with the fields and reason codes of the control plane's validator
// (controlplane/internal/validate/contract.go, docs/config-contract.md). The forms run these
// before the dry run (the server's answer is shown regardless); the corpus testdata/config/
// holds the cases every checker runs (config.test.ts).
import type { Violation } from '@/api/types'
import { ID_RE } from './rules'

/** 2^53: integers beyond lose precision in the gateway's Lua and the Redis scripts */
export const MAX_INT = 2 ** 53
/** a new cluster's reserved ratio */
export const DEFAULT_RESERVED_RATIO = 0.1

/** The one allocation cap: floor((1 - reserved_ratio) x capacity) tokens/s. */
export function allocatable(capacity: number, reservedRatio: number): number {
  return Math.floor(capacity * (1 - reservedRatio) + 1e-6)
}

/** A cluster as the checks see it: its config and the sum its apps are guaranteed now. */
export interface ClusterState {
  capacity: number
  reserved_ratio: number
  allocated: number
}

type Input = Record<string, unknown>

const absent = (v: unknown): boolean => v === undefined || v === null

function v(field: string, code: string, message: string): Violation {
  return { field, code, message }
}

/** an integer field: its violation (invalid_type for a non-integer, code when out of [lo, 2^53)) */
function int(out: Violation[], x: Input, field: string, lo: number, code: string, required: boolean): boolean {
  const n = x[field]
  if (absent(n)) {
    if (required) out.push(v(field, 'required', `${field} is required`))
    return false
  }
  if (typeof n !== 'number' || !Number.isInteger(n)) {
    out.push(v(field, 'invalid_type', `${field} must be an integer`))
    return false
  }
  if (n < lo || n >= MAX_INT) {
    out.push(v(field, code, `${field} must be an integer from ${lo} below 2^53`))
    return false
  }
  return true
}

function ratio(out: Violation[], x: Input, field: string): boolean {
  const r = x[field]
  if (absent(r)) return true
  if (typeof r !== 'number' || Number.isNaN(r)) {
    out.push(v(field, 'invalid_type', `${field} must be a number`))
    return false
  }
  if (r < 0 || r >= 1) {
    out.push(v(field, 'invalid_reserved_ratio', `${field} must be in [0, 1)`))
    return false
  }
  return true
}

/**
 * An app (the API's body: max_connections / burst_connections flat). With clusters, the cluster
 * it names must be one and the allocation cap hold; oldGuaranteed is the app's quota now (an
 * update): a change that does not raise it never adds to an excess.
 */
export function validateApp(a: Input, clusters?: Record<string, ClusterState>, oldGuaranteed = 0): Violation[] {
  const out: Violation[] = []
  for (const f of ['app_id', 'cluster_id']) {
    if (absent(a[f])) out.push(v(f, 'required', `${f} is required`))
    else if (typeof a[f] !== 'string' || !ID_RE.test(a[f] as string)) {
      out.push(v(f, 'invalid_id', `${f} must match ^[A-Za-z0-9_-]{1,128}$`))
    } else if (f === 'app_id' && (a[f] as string).startsWith('_')) {
      out.push(v(f, 'reserved_id', "app ids beginning with _ are reserved for the gateway's labels"))
    }
  }
  const g = int(out, a, 'guaranteed_quota', 1, 'invalid_guaranteed_quota', true)
  if (int(out, a, 'burst_quota', 1, 'invalid_burst_quota', true) && g &&
      (a.burst_quota as number) < (a.guaranteed_quota as number)) {
    out.push(v('burst_quota', 'burst_below_guaranteed', 'burst_quota must be at least guaranteed_quota'))
  }
  if (int(out, a, 'priority', 0, 'invalid_priority', true) && (a.priority as number) > 3) {
    out.push(v('priority', 'invalid_priority', 'priority must be 0, 1, 2 or 3'))
  }
  int(out, a, 'c_bw', 0, 'invalid_c_bw', false)
  int(out, a, 'max_borrow', 0, 'invalid_max_borrow', false)
  if (!absent(a.enabled) && typeof a.enabled !== 'boolean') out.push(v('enabled', 'invalid_type', 'enabled must be true or false'))
  if (!absent(a.max_connections) || !absent(a.burst_connections)) {
    out.push(...validateConnections('app', { max_connections: a.max_connections, burst_connections: a.burst_connections }))
  }
  const cid = a.cluster_id
  if (clusters && typeof cid === 'string' && ID_RE.test(cid)) {
    const c = clusters[cid]
    if (!c) out.push(v('cluster_id', 'unknown_cluster', `cluster ${cid} does not exist`))
    else if (g) {
      const ng = a.guaranteed_quota as number
      const sum = c.allocated - oldGuaranteed + ng
      const cap = allocatable(c.capacity, c.reserved_ratio)
      if (sum > cap && ng > oldGuaranteed) {
        out.push(v('guaranteed_quota', 'over_allocation',
          `the cluster's guaranteed quotas would sum to ${sum}, above (1 - reserved_ratio) x capacity = ${cap}`))
      }
    }
  }
  return out
}

/**
 * A cluster (id, capacity, reserved_ratio: left out, the default or the value it has). old is
 * the cluster as it is (an update): its apps guarantee old.allocated, and a change that does not
 * lower its cap never adds to an excess.
 */
export function validateCluster(c: Input, old?: ClusterState): Violation[] {
  const out: Violation[] = []
  if (!absent(c.id) && (typeof c.id !== 'string' || !ID_RE.test(c.id))) {
    out.push(v('id', 'invalid_id', 'cluster id must match ^[A-Za-z0-9_-]{1,128}$'))
  }
  const capOk = int(out, c, 'capacity', 1, 'invalid_capacity', !old)
  const ratioOk = ratio(out, c, 'reserved_ratio')
  if (old && capOk && ratioOk) {
    const capacity = absent(c.capacity) ? old.capacity : c.capacity as number
    const r = absent(c.reserved_ratio) ? old.reserved_ratio : c.reserved_ratio as number
    const cap = allocatable(capacity, r)
    if (old.allocated > cap && cap < allocatable(old.capacity, old.reserved_ratio)) {
      out.push(v('guaranteed_quota', 'over_allocation',
        `its apps are guaranteed ${old.allocated}, above (1 - reserved_ratio) x capacity = ${cap}`))
    }
  }
  return out
}

/** An app's connection limits (burst left out: max) or a cluster's (reserve left out: 0.1). */
export function validateConnections(scope: 'app' | 'cluster', l: Input): Violation[] {
  const out: Violation[] = []
  const maxOk = int(out, l, 'max_connections', 1, 'invalid_max_connections', true)
  if (scope === 'cluster') {
    ratio(out, l, 'reserved_ratio')
    return out
  }
  if (int(out, l, 'burst_connections', 1, 'invalid_burst_connections', false) && maxOk &&
      (l.burst_connections as number) < (l.max_connections as number)) {
    out.push(v('burst_connections', 'burst_below_max_connections', 'burst_connections must be at least max_connections'))
  }
  return out
}
