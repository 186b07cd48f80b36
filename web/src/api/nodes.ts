import { http } from './http'
import type { GatewayNode } from './types'

export function list(): Promise<GatewayNode[]> {
  return http.get<GatewayNode[]>('/api/v1/nodes')
}
