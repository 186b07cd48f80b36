// S3 identity of apps: the access keys requests are charged by, and the bucket map that charges
// anonymous requests to a bucket's owner (docs/s3-clients.md).
import { http } from './http'

/** An access key id; has_secret: the gateways verify its signatures (the secret is never answered). */
export interface AccessKey { access_key_id: string; has_secret: boolean }
export interface BucketOwner { bucket: string; app_id: string }
export interface IdentityChange { written: boolean; config_version?: number }

const appPath = (id: string) => `/api/v1/apps/${encodeURIComponent(id)}`
const bucketPath = (b: string) => `/api/v1/buckets/${encodeURIComponent(b)}`

export async function accessKeys(appId: string): Promise<string[]> {
  return (await http.get<AccessKey[]>(`${appPath(appId)}/access-keys`)).map((k) => k.access_key_id)
}

/** The access keys of an app with whether each has a secret on file. */
export function accessKeyList(appId: string): Promise<AccessKey[]> {
  return http.get<AccessKey[]>(`${appPath(appId)}/access-keys`)
}

/** Give an app an access key; with a secret, the gateways verify the key's signatures. */
export function addAccessKey(appId: string, key: string, secret?: string): Promise<IdentityChange> {
  const body: Record<string, string> = { access_key_id: key }
  if (secret) body.secret_access_key = secret
  return http.post<IdentityChange>(`${appPath(appId)}/access-keys`, body)
}

/** Stop verifying a key's signatures at the gateways (its secret is deleted). */
export async function removeAccessKeySecret(appId: string, key: string): Promise<void> {
  await http.delete<unknown>(`${appPath(appId)}/access-keys/${encodeURIComponent(key)}/secret`)
}

export async function removeAccessKey(appId: string, key: string): Promise<void> {
  await http.delete<unknown>(`${appPath(appId)}/access-keys/${encodeURIComponent(key)}`)
}

export async function appBuckets(appId: string): Promise<string[]> {
  return (await http.get<BucketOwner[]>(`${appPath(appId)}/buckets`)).map((b) => b.bucket)
}

export function putBucket(bucket: string, appId: string): Promise<IdentityChange> {
  return http.put<IdentityChange>(bucketPath(bucket), { app_id: appId })
}

export async function removeBucket(bucket: string): Promise<void> {
  await http.delete<unknown>(bucketPath(bucket))
}
