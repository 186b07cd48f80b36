import { describe, expect, it } from 'vitest'
import type { Point } from '@/api/types'
import { above, below, outliers, THRESHOLDS, worst } from './anomaly'
import { byteRate, bytes, duration, num, value } from './format'
import { allows } from './permissions'
import { fieldErrors, formField } from './violations'

describe('anomaly', () => {
  it('classifies threshold breaches in both directions', () => {
    expect([80, 30, 10].map((v) => below(v, THRESHOLDS.l1Ratio))).toEqual(['normal', 'warning', 'critical'])
    expect([5, 30, 100].map((v) => above(v, THRESHOLDS.redisLatency))).toEqual(['normal', 'warning', 'critical'])
    expect(below(undefined, THRESHOLDS.l1Ratio)).toBe('normal')
    expect(worst('normal', 'warning')).toBe('warning')
    expect(worst('warning', 'critical', 'normal')).toBe('critical')
  })

  it('finds a spike in an otherwise steady series, and nothing in a flat or short one', () => {
    const pts: Point[] = Array.from({ length: 60 }, (_, i) => [i, 100 + (i % 3)])
    pts[40] = [40, 900]
    expect(outliers(pts)).toEqual([[40, 900]])
    expect(outliers(Array.from({ length: 30 }, (_, i) => [i, 5] as Point))).toEqual([])
    expect(outliers([[1, 1], [2, 100]])).toEqual([])
  })
})

describe('violations', () => {
  it('maps validator paths to form fields', () => {
    expect(formField('apps[demo-p1].burst_quota')).toBe('burst_quota')
    expect(formField('apps[x].connections.max_connections')).toBe('max_connections')
    expect(formField('clusters[default].guaranteed_quota')).toBe('guaranteed_quota')
    expect(formField('cluster.capacity')).toBe('capacity')
    expect(formField('priority')).toBe('priority')
  })

  it('groups messages by field and collects the rest', () => {
    expect(fieldErrors([
      { field: 'apps[a].burst_quota', code: 'x', message: 'burst too small' },
      { field: 'apps[a].burst_quota', code: 'y', message: 'second' },
      { field: 'cluster.capacity', code: 'over_allocation', message: 'over allocated' },
      { field: 'apps', code: 'z', message: 'too many' },
    ], ['burst_quota'])).toEqual({ burst_quota: 'burst too small', '': 'over allocated; too many' })
  })
})

describe('permissions', () => {
  it('grants by role rank', () => {
    expect(allows('viewer', 'read')).toBe(true)
    expect(allows('viewer', 'config:write')).toBe(false)
    expect(allows('operator', 'emergency:write')).toBe(true)
    expect(allows('operator', 'users:manage')).toBe(false)
    expect(allows('admin', 'audit:read')).toBe(true)
    expect(allows(null, 'read')).toBe(false)
  })
})

describe('format', () => {
  it('formats numbers, durations and diff values', () => {
    expect([num(1234.5), num(25000), num(undefined)]).toEqual(['1,234.5', '25K', '–'])
    expect([duration(45), duration(300), duration(5400)]).toEqual(['45s', '5m', '1h 30m'])
    expect([value(undefined), value('x'), value(3), value(true)]).toEqual(['∅', 'x', '3', 'true'])
  })
  it('formats bytes and bytes/s in powers of 1024', () => {
    expect([bytes(0), bytes(512), bytes(1023), bytes(1024), bytes(1536), bytes(10 * 1024 + 512)])
      .toEqual(['0 B', '512 B', '1023 B', '1.00 KiB', '1.50 KiB', '10.5 KiB'])
    expect([bytes(100 * 65536), bytes(3 * 1024 ** 3), bytes(2 * 1024 ** 5), bytes(-1), bytes(null)])
      .toEqual(['6.25 MiB', '3.00 GiB', '2048 TiB', '–', '–'])
    expect([byteRate(100 * 65536), byteRate(250), byteRate(undefined)]).toEqual(['6.25 MiB/s', '250 B/s', '–'])
  })
})
