// The config contract's corpus (testdata/config/, testdata/README.md): the console's checks
// accept every valid app, cluster and connection limit and refuse every invalid one with
// exactly the field and reason the API gives (controlplane/internal/api/config_corpus_test.go),
// the import and the scripts find, and the gateway's parser (t/lua/config_contract_spec.lua).
import { describe, expect, it } from 'vitest'
import { type ClusterState, validateApp, validateCluster, validateConnections } from './config'
import validApps from '../../../testdata/config/apps/valid.json'
import invalidApps from '../../../testdata/config/apps/invalid.json'
import validClusters from '../../../testdata/config/clusters/valid.json'
import invalidClusters from '../../../testdata/config/clusters/invalid.json'
import validConns from '../../../testdata/config/connections/valid.json'
import invalidConns from '../../../testdata/config/connections/invalid.json'

type Case = { name: string, field?: string, reason?: string }
const found = (vs: { field: string; code: string }[]) => vs.map((x) => ({ field: x.field, reason: x.code }))
/** the corpus' context: cluster "corpus", 1000 tokens/s, reserve 0.1, no app yet */
const clusters: Record<string, ClusterState> = { corpus: { capacity: 1000, reserved_ratio: 0.1, allocated: 0 } }
const app = (c: Case) => validateApp((c as unknown as { app: Record<string, unknown> }).app, clusters)
const cluster = (c: Case) => {
  const x = c as unknown as { cluster: Record<string, unknown>, allocated?: number }
  // a case with allocated: the cluster exists (1,000,000 tokens/s, no reserve) and its apps
  // are guaranteed that much
  const old = x.allocated ? { capacity: 1000000, reserved_ratio: 0, allocated: x.allocated } : undefined
  return validateCluster(x.cluster, old)
}
const conn = (c: Case) => {
  const x = c as unknown as { scope: 'app' | 'cluster', limits: Record<string, unknown> }
  return validateConnections(x.scope, x.limits)
}

describe('the config contract corpus', () => {
  it('holds cases', () => {
    expect(Math.min(validApps.length, invalidApps.length, validClusters.length, invalidClusters.length,
      validConns.length, invalidConns.length)).toBeGreaterThan(0)
  })
  for (const [kind, valid, invalid, check] of [
    ['app', validApps, invalidApps, app], ['cluster', validClusters, invalidClusters, cluster],
    ['connection limits', validConns, invalidConns, conn],
  ] as const) {
    it.each((valid as Case[]).map((c) => [c.name, c] as const))(`accepts the ${kind}: %s`, (_n, c) => {
      expect(check(c)).toEqual([])
    })
    it.each((invalid as Case[]).map((c) => [c.name, c] as const))(`refuses the ${kind}: %s`, (_n, c) => {
      expect(found(check(c))).toEqual([{ field: c.field, reason: c.reason }])
    })
  }
})
