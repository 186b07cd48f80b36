import { describe, expect, it } from 'vitest'
import type { BreakerNodeState } from '@/api/types'
import { alertKindLabel, byRecency } from './alerts'
import { breakerField, configOf, defaultBreaker, stateLabel, stateTag, validateBreaker, worstState } from './breakers'

const node = (state: BreakerNodeState['state']): BreakerNodeState =>
  ({ node_id: 'n', key: 'demo', state, failures: 0, requests: 0 })

describe('breakers', () => {
  it('accepts the contract defaults and refuses broken fields under their names', () => {
    expect(validateBreaker(defaultBreaker('demo'))).toEqual([])
    const f = (patch: object) => validateBreaker({ ...defaultBreaker('demo'), ...patch }).map((v) => v.field)
    expect(f({ name: '' })).toEqual(['name'])
    expect(f({ name: 'a/b' })).toEqual(['name'])
    expect(f({ window_ms: 99 })).toEqual(['window_ms'])
    expect(f({ window_ms: 100 })).toEqual([])
    expect(f({ open_timeout_ms: 3600001 })).toEqual(['open_timeout_ms'])
    expect(f({ min_requests: 0 })).toEqual(['min_requests'])
    expect(f({ failure_threshold: 1000001 })).toEqual(['failure_threshold'])
    expect(f({ failure_ratio: 0 })).toEqual(['failure_ratio'])
    expect(f({ failure_ratio: 1 })).toEqual([])
    expect(f({ failure_ratio: 1.5 })).toEqual(['failure_ratio'])
    expect(f({ half_open_max_inflight: 0.5 })).toEqual(['half_open_max_inflight'])
    expect(f({ failure_statuses: [] })).toEqual(['failure_statuses'])
    expect(f({ failure_statuses: [502, 404] })).toEqual(['failure_statuses[1]'])
    expect(f({ failure_statuses: [502, 502] })).toEqual(['failure_statuses[1]'])
  })

  it('shows the worst state over the nodes', () => {
    expect(worstState(undefined)).toBe('closed')
    expect(worstState([node('closed'), node('half_open')])).toBe('half_open')
    expect(worstState([node('open'), node('half_open'), node('closed')])).toBe('open')
    expect([stateTag('open'), stateTag('half_open'), stateTag('closed'), stateTag('weird')])
      .toEqual(['danger', 'warning', 'success', 'info'])
    expect(stateLabel('half_open')).toBe('half-open')
  })

  it('puts the config without the node states', () => {
    const b = { ...defaultBreaker('demo'), nodes: [node('open')] }
    expect(configOf(b)).toEqual(defaultBreaker('demo'))
    expect(breakerField('breakers[demo].failure_statuses[1]')).toBe('failure_statuses')
    expect(breakerField('breaker.window_ms')).toBe('window_ms')
  })
})

describe('alert kinds', () => {
  it('names every kind of contract §9 and falls back to the code', () => {
    for (const k of ['block_rate_high', 'traffic_spike', 'circuit_open', 'connections_high', 'connections_leaked',
      'cleanup_stalled', 'drift_high', 'node_degraded', 'emergency', 'config_store_lost']) {
      expect(alertKindLabel(k), k).not.toMatch(/_/)
      expect(alertKindLabel(k)).not.toBe(k)
    }
    expect(alertKindLabel('new_kind_x')).toBe('New kind x')
    expect(alertKindLabel(undefined)).toBe('Alert')
  })

  it('lists active alerts first, newest first', () => {
    const a = (id: string, timestamp: number, active: boolean) => ({ id, timestamp, active, severity: 'info' as const,
      message: '', acknowledged: false })
    expect([a('old', 1, true), a('res', 9, false), a('new', 5, true)].sort(byRecency).map((x) => x.id))
      .toEqual(['new', 'old', 'res'])
  })
})
