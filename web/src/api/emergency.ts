import { http } from './http'
import type { EmergencyActivate, EmergencyEvent, EmergencyResult, EmergencyStatus } from './types'

const base = '/api/v1/emergency'

export function status(): Promise<EmergencyStatus> {
  return http.get<EmergencyStatus>(base)
}

export function activate(req: EmergencyActivate): Promise<EmergencyResult> {
  return http.post<EmergencyResult>(`${base}/activate`, req)
}

/** Ends emergency mode of one cluster, or of every cluster without one. */
export function deactivate(clusterId?: string, reason?: string): Promise<EmergencyResult> {
  return http.post<EmergencyResult>(`${base}/deactivate`, { cluster_id: clusterId, reason })
}

export function history(limit = 50, clusterId?: string): Promise<EmergencyEvent[]> {
  return http.get<EmergencyEvent[]>(`${base}/history`, { query: { limit, cluster_id: clusterId } })
}
