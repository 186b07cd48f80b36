import { http } from './http'
import type { AuditEntry, AuditPage, AuditQuery } from './types'

export async function query(q: AuditQuery, signal?: AbortSignal): Promise<AuditPage> {
  const env = await http.envelope<AuditEntry[]>('GET', '/api/v1/audit', { query: { ...q }, signal })
  return { entries: env.data ?? [], next_cursor: env.meta?.next_cursor || undefined }
}
