import { http } from './http'
import type { User, UserCreate, UserPatch } from './types'

const path = (name: string) => `/api/v1/users/${encodeURIComponent(name)}`

export function list(): Promise<User[]> {
  return http.get<User[]>('/api/v1/users')
}

export function create(u: UserCreate): Promise<User> {
  return http.post<User>('/api/v1/users', u)
}

export function update(name: string, p: UserPatch): Promise<User> {
  return http.put<User>(path(name), p)
}

export function remove(name: string): Promise<void> {
  return http.delete<void>(path(name))
}
