// The conformance corpus of testdata/ (testdata/README.md): the console's checks accept every
// valid rule and breaker config and refuse every invalid one with exactly the field and reason
// the API gives (controlplane/internal/api/corpus_test.go) and the gateway's parser finds
// (t/lua/rules_spec.lua, breaker_config_spec.lua).
import { describe, expect, it } from 'vitest'
import type { BreakerConfig, RuleInput } from '@/api/types'
import { defaultBreaker, validateBreaker } from './breakers'
import { validateRule } from './rules'
import validRules from '../../../testdata/rules/valid.json'
import invalidRules from '../../../testdata/rules/invalid.json'
import validBreakers from '../../../testdata/breakers/valid.json'
import invalidBreakers from '../../../testdata/breakers/invalid.json'

const found = (vs: { field: string; code: string }[]) => vs.map((x) => ({ field: x.field, reason: x.code }))
const breaker = (name: string, config: object) => validateBreaker({ ...defaultBreaker(name), ...config } as BreakerConfig, name)

describe('the conformance corpus', () => {
  it('holds cases', () => {
    expect(validRules.length * invalidRules.length * validBreakers.length * invalidBreakers.length).toBeGreaterThan(0)
  })

  it.each(validRules.map((c) => [c.name, c] as const))('accepts the rule: %s', (_n, c) => {
    expect(validateRule(c.rule as unknown as RuleInput)).toEqual([])
  })

  it.each(invalidRules.map((c) => [c.name, c] as const))('refuses the rule: %s', (_n, c) => {
    expect(found(validateRule(c.rule as unknown as RuleInput))).toEqual([{ field: c.field, reason: c.reason }])
  })

  it.each(validBreakers.map((c) => [c.name, c] as const))('accepts the breaker: %s', (_n, c) => {
    expect(breaker(c.breaker, c.config)).toEqual([])
  })

  it.each(invalidBreakers.map((c) => [c.name, c] as const))('refuses the breaker: %s', (_n, c) => {
    expect(found(breaker(c.breaker, c.config))).toEqual([{ field: c.field, reason: c.reason }])
  })
})
