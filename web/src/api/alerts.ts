import { http } from './http'
import type { Alert } from './types'

/** Active alerts (all, with active=false). */
export function list(active = true): Promise<Alert[]> {
  return http.get<Alert[]>('/api/v1/alerts', { query: { active } })
}

export function acknowledge(id: string): Promise<Alert> {
  return http.post<Alert>(`/api/v1/alerts/${encodeURIComponent(id)}/ack`)
}
