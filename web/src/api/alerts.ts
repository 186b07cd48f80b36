import { http } from './http'
import type { Alert } from './types'

/** Active alerts; with active=false, also the resolved ones of the last day. */
export async function list(active = true, signal?: AbortSignal): Promise<Alert[]> {
  return (await http.get<Alert[] | null>('/api/v1/alerts', { query: { active }, signal })) ?? []
}

export function acknowledge(id: string): Promise<Alert> {
  return http.post<Alert>(`/api/v1/alerts/${encodeURIComponent(id)}/ack`)
}
