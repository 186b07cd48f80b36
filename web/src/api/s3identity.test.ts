// The S3 identity module calls the access-key and bucket routes with escaped ids; the client-side
// rules match the API's.
import { describe, expect, it } from 'vitest'
import { json, mockFetch } from '@/testing/fetch'
import { accessKeyProblem, bucketProblem, secretProblem } from '@/utils/s3ident'
import * as s3 from './s3identity'

describe('S3 identity API', () => {
  it('lists, adds and removes access keys of an app', async () => {
    const f = mockFetch(json(200, { data: [{ access_key_id: 'AKIAX' }, { access_key_id: 'k~2' }], meta: { total: 2 } }),
      json(201, { data: { app_id: 'a b', access_key_id: 'k=1', written: true, config_version: 7 } }),
      { status: 204 })
    expect(await s3.accessKeys('a b')).toEqual(['AKIAX', 'k~2'])
    expect(await s3.addAccessKey('a b', 'k=1')).toMatchObject({ written: true, config_version: 7 })
    await s3.removeAccessKey('a b', 'k=1?#')
    expect(f.calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ['GET', '/api/v1/apps/a%20b/access-keys', undefined],
      ['POST', '/api/v1/apps/a%20b/access-keys', { access_key_id: 'k=1' }],
      ['DELETE', '/api/v1/apps/a%20b/access-keys/k%3D1%3F%23', undefined]])
  })

  it('sends a secret only when given, reads has_secret, and deletes a secret', async () => {
    const f = mockFetch(json(201, { data: { app_id: 'a', access_key_id: 'k1', has_secret: true, written: true } }),
      json(200, { data: [{ access_key_id: 'k1', has_secret: true }] }), { status: 204 })
    await s3.addAccessKey('a', 'k1', 'wJalrXUtnFEMI/K7MDENG')
    expect(await s3.accessKeyList('a')).toEqual([{ access_key_id: 'k1', has_secret: true }])
    await s3.removeAccessKeySecret('a', 'k1/x')
    expect(f.calls.map((c) => [c.method, c.url, c.body])).toEqual([
      ['POST', '/api/v1/apps/a/access-keys', { access_key_id: 'k1', secret_access_key: 'wJalrXUtnFEMI/K7MDENG' }],
      ['GET', '/api/v1/apps/a/access-keys', undefined],
      ['DELETE', '/api/v1/apps/a/access-keys/k1%2Fx/secret', undefined]])
  })

  it('maps buckets to an app and reads an app’s buckets', async () => {
    const f = mockFetch(json(201, { data: { bucket: 'photos', app_id: 'p', written: true } }),
      json(200, { data: [{ bucket: 'photos', app_id: 'p' }] }), { status: 204 })
    await s3.putBucket('photos', 'p')
    expect(await s3.appBuckets('p')).toEqual(['photos'])
    await s3.removeBucket('photos')
    expect(f.calls.map((c) => `${c.method} ${c.url} ${JSON.stringify(c.body ?? null)}`)).toEqual([
      'PUT /api/v1/buckets/photos {"app_id":"p"}', 'GET /api/v1/apps/p/buckets null', 'DELETE /api/v1/buckets/photos null'])
  })

  it('surfaces the API’s refusal of a key another app holds', async () => {
    mockFetch(json(409, { error: { code: 'access_key_in_use', message: 'access key id belongs to another app' } }))
    await expect(s3.addAccessKey('a', 'AKIAIOSFODNN7EXAMPLE')).rejects.toMatchObject({ status: 409, code: 'access_key_in_use' })
  })
})

describe('S3 identity rules', () => {
  it('accepts AWS- and MinIO-style keys and refuses the rest', () => {
    for (const ok of ['AKIAIOSFODNN7EXAMPLE', 'minio-user_01.x~!', 'abc', 'A'.repeat(128)]) expect(accessKeyProblem(ok)).toBeNull()
    for (const bad of ['ab', 'A'.repeat(129), 'a b', 'a/b', 'a,b', 'abcé', 'tab\tkey']) expect(accessKeyProblem(bad)).not.toBeNull()
  })

  it('checks a secret access key as the API does', () => {
    for (const ok of ['wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', 'minio-secret-123']) expect(secretProblem(ok)).toBeNull()
    for (const bad of ['short', 'x'.repeat(129), 'has a space in it', 'tab\there-long-enough']) expect(secretProblem(bad)).not.toBeNull()
  })

  it('follows S3’s bucket naming rules', () => {
    for (const ok of ['photos', 'my.bucket-1', 'a1b']) expect(bucketProblem(ok)).toBeNull()
    for (const bad of ['ab', 'Photos', 'a_b', '-abc', 'abc-', 'a..b', '192.168.1.1', 'xn--abc', 'x-s3alias', 'a'.repeat(64)]) {
      expect(bucketProblem(bad)).not.toBeNull()
    }
  })
})
