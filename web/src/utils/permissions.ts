// What each role may do in the console, mirroring the route table of the API
// (controlplane/internal/api/routes.go): a viewer reads; an operator also changes limits and
// emergency mode and reads the audit log; an admin also manages users.
// The UI hides or disables what the role cannot do (Req 22.9); the API enforces it regardless.
import type { Role } from '@/api/types'

export type Permission = 'read' | 'config:write' | 'emergency:write' | 'users:manage' | 'audit:read'

const RANK: Record<Role, number> = { viewer: 1, operator: 2, admin: 3 }

const NEEDS: Record<Permission, Role> = {
  'read': 'viewer',
  'config:write': 'operator',
  'emergency:write': 'operator',
  'users:manage': 'admin',
  'audit:read': 'operator',
}

export function allows(role: Role | null | undefined, p: Permission): boolean {
  return role != null && RANK[role] >= RANK[NEEDS[p]]
}

export function minimumRole(p: Permission): Role {
  return NEEDS[p]
}
