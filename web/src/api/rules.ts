// Rules (docs/rules-contract.md §8): list in priority order with their counters, one rule,
// create / replace (each with a dry run) and delete.
import { http } from './http'
import type { ChangeResult, Rule, RuleInput, ValidationResult } from './types'

const base = '/api/v1/rules'
const path = (id: string) => `${base}/${encodeURIComponent(id)}`

export async function list(signal?: AbortSignal): Promise<Rule[]> {
  return (await http.get<Rule[] | null>(base, { signal })) ?? []
}

export function get(id: string): Promise<Rule> {
  return http.get<Rule>(path(id))
}

/** Validates and returns the diff without writing. */
export async function createDryRun(input: RuleInput): Promise<ValidationResult> {
  return (await http.post<ChangeResult>(base, input, { query: { dry_run: true } })).validation
}

export function create(input: RuleInput): Promise<ChangeResult<Rule>> {
  return http.post<ChangeResult<Rule>>(base, input)
}

export async function updateDryRun(id: string, input: RuleInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(id), input, { query: { dry_run: true } })).validation
}

export function update(id: string, input: RuleInput): Promise<ChangeResult<Rule>> {
  return http.put<ChangeResult<Rule>>(path(id), input)
}

export function remove(id: string): Promise<ChangeResult> {
  return http.delete<ChangeResult>(path(id))
}
