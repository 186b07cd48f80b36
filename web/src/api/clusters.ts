import { http } from './http'
import type { ChangeResult, Cluster, ClusterConnLimitInput, ClusterInput, ValidationResult } from './types'

const path = (id: string) => `/api/v1/clusters/${encodeURIComponent(id)}`

export function list(): Promise<Cluster[]> {
  return http.get<Cluster[]>('/api/v1/clusters')
}

export async function updateDryRun(id: string, input: ClusterInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(path(id), input, { query: { dry_run: true } })).validation
}

export function update(id: string, input: ClusterInput): Promise<ChangeResult<Cluster>> {
  return http.put<ChangeResult<Cluster>>(path(id), input)
}

export async function connectionsDryRun(id: string, input: ClusterConnLimitInput): Promise<ValidationResult> {
  return (await http.put<ChangeResult>(`${path(id)}/connections`, input, { query: { dry_run: true } })).validation
}

export function updateConnections(id: string, input: ClusterConnLimitInput): Promise<ChangeResult<Cluster>> {
  return http.put<ChangeResult<Cluster>>(`${path(id)}/connections`, input)
}
