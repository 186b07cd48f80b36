// The real stack for the end-to-end run: scripts/stack.sh (redis-server, demo storage backend,
// control plane with the embedded console, nginx gateway, Prometheus) on free loopback ports in a private
// run directory, an admin password set for the run, and an API client to seed data with.
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)
export const REPO = resolve(import.meta.dirname, '../..')
export const ADMIN = { username: 'admin', password: 'e2e-admin-password-1' }

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer()
    s.once('error', fail)
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address()
      s.close(() => (typeof addr === 'object' && addr ? ok(addr.port) : fail(new Error('no port'))))
    })
  })
}

export interface Stack {
  /** the control plane: API and console */
  base: string
  gateway: string
  /** the gateway's /health and /metrics (a listener of their own) */
  gatewayMetrics: string
  /** the demo storage backend behind the gateway */
  backend: string
  /** the demo backend's failure switch: its own loopback listener, never behind the gateway */
  backendAdmin: string
  /** host:port of the stack's redis-server */
  redis: string
  runDir: string
  stop(): Promise<void>
}

export async function startStack(): Promise<Stack> {
  const [gw, cp, redis, backend, prom, gwMetrics, backendAdmin] = await Promise.all([freePort(), freePort(),
    freePort(), freePort(), freePort(), freePort(), freePort()])
  const runDir = mkdtempSync(join(tmpdir(), 'tollgate-e2e-'))
  const env = {
    ...process.env,
    TOLLGATE_GATEWAY_ADDR: `127.0.0.1:${gw}`,
    TOLLGATE_METRICS_ADDR: `127.0.0.1:${gwMetrics}`,
    TOLLGATE_CP_ADDR: `127.0.0.1:${cp}`,
    TOLLGATE_REDIS_ADDR: `127.0.0.1:${redis}`,
    TOLLGATE_BACKEND_ADDR: `127.0.0.1:${backend}`,
    // the demo backend (scripts/stack.sh's default is versitygw): the rules spec makes it fail
    // on command to open a breaker, and the traffic writes to a bucket it creates on first use
    TOLLGATE_BACKEND: 'demo',
    TOLLGATE_BACKEND_ADMIN_ADDR: `127.0.0.1:${backendAdmin}`,
    TOLLGATE_PROMETHEUS_ADDR: `127.0.0.1:${prom}`,
    TOLLGATE_RUN_DIR: runDir,
    TOLLGATE_NODE_ID: 'gw-e2e',
    TOLLGATE_WORKERS: '1',
    TOLLGATE_ADMIN_USER: ADMIN.username,
    TOLLGATE_ADMIN_PASSWORD: ADMIN.password,
    TOLLGATE_LIVE_INTERVAL: '1s',
  }
  const stack = join(REPO, 'scripts/stack.sh')
  try {
    await run(stack, ['up'], { env, timeout: 90_000 })
  } catch (e) {
    await run(stack, ['down'], { env }).catch(() => {})
    throw new Error(`stack.sh up failed (is bin/ built? run make build): ${String(e)}`)
  }
  return {
    base: `http://127.0.0.1:${cp}`,
    gateway: `http://127.0.0.1:${gw}`,
    gatewayMetrics: `http://127.0.0.1:${gwMetrics}`,
    backend: `http://127.0.0.1:${backend}`,
    backendAdmin: `http://127.0.0.1:${backendAdmin}`,
    redis: `127.0.0.1:${redis}`,
    runDir,
    async stop() {
      await run(stack, ['down'], { env, timeout: 60_000 }).catch((e: unknown) => console.error('stack.sh down:', e))
      rmSync(runDir, { recursive: true, force: true })
    },
  }
}

/** A command to the stack's Redis (as its default user, whose password stack.sh generated into the
 * run directory), for reading what the parts wrote there. */
export async function redisCli(stack: Pick<Stack, 'redis' | 'runDir'>, ...args: string[]): Promise<string> {
  const [host = '127.0.0.1', port = '6379'] = stack.redis.split(':')
  const password = readFileSync(join(stack.runDir, 'redis', 'default.password'), 'utf8').trim()
  const { stdout } = await run('redis-cli', ['-h', host, '-p', port, ...args],
    { timeout: 10_000, env: { ...process.env, REDISCLI_AUTH: password } })
  return stdout.trim()
}

/** A small client of the admin API for seeding and checking (not what the console uses). */
export class Api {
  private token = ''
  constructor(private readonly base: string) {}

  async login(username: string, password: string): Promise<this> {
    const r = await this.call<{ access_token: string }>('POST', '/api/v1/auth/login', { username, password }, false)
    this.token = r.access_token
    return this
  }

  async call<T>(method: string, path: string, body?: unknown, auth = true): Promise<T> {
    const res = await this.raw(method, path, body, auth)
    const text = await res.text()
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`)
    return (JSON.parse(text) as { data: T }).data
  }

  raw(method: string, path: string, body?: unknown, auth = true): Promise<Response> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' }
    if (auth) headers.Authorization = `Bearer ${this.token}`
    return fetch(this.base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
  }
}

/** The gateway's answer to one request: its status and, for a refusal, the body's reason fields. */
export interface Answer {
  status: number
  /** `reason` of a JSON refusal (rule_limited, circuit_open, …); absent for the backend's own answers */
  reason?: string
  rule_id?: string
  backend?: string
  retryAfter: string | null
}

/** One request through the gateway as app appId (sequential callers see the gateway's decisions
 *  one by one). */
export async function send(gateway: string, appId: string, method: string, path: string, body?: string): Promise<Answer> {
  const res = await fetch(gateway + path, { method, headers: { 'X-App-Id': appId }, body })
  const text = await res.text()
  const answer: Answer = { status: res.status, retryAfter: res.headers.get('retry-after') }
  if ((res.headers.get('content-type') ?? '').includes('json')) {
    try {
      const j = JSON.parse(text) as { reason?: string; rule_id?: string; backend?: string }
      Object.assign(answer, { reason: j.reason, rule_id: j.rule_id, backend: j.backend })
    } catch { /* not a refusal of the gateway */ }
  }
  return answer
}

/** The config version the gateway enforces (its /metrics), or NaN before its first load. */
export async function gatewayConfigVersion(stack: Pick<Stack, 'gatewayMetrics'>): Promise<number> {
  const text = await (await fetch(`${stack.gatewayMetrics}/metrics`)).text()
  const m = text.match(/^ratelimit_config_version (\d+)/m)
  return m?.[1] === undefined ? NaN : Number(m[1])
}

/** The demo backend's failure switch (README "Circuit breaker"): `fail?status=503`, `heal`. */
export async function demoBackend(stack: Pick<Stack, 'backendAdmin'>, command: string): Promise<void> {
  const res = await fetch(`${stack.backendAdmin}/_demo/${command}`, { method: 'POST' })
  if (!res.ok) throw new Error(`POST /_demo/${command}: ${res.status} ${await res.text()}`)
}

/** Requests through the gateway until stopped: small PUTs and GETs as one app. */
export function traffic(gateway: string, appId: string, concurrency = 4) {
  let running = true
  const counts = { ok: 0, limited: 0, failed: 0 }
  const body = 'x'.repeat(2048)
  async function worker(w: number): Promise<void> {
    for (let i = 0; running; i++) {
      const key = `${gateway}/e2e-bucket/w${w}-${i % 50}`
      try {
        const put = await fetch(key, { method: 'PUT', headers: { 'X-App-Id': appId }, body })
        await put.arrayBuffer()
        const get = await fetch(key, { headers: { 'X-App-Id': appId } })
        await get.arrayBuffer()
        for (const s of [put.status, get.status]) {
          if (s < 300) counts.ok++
          else if (s === 429 || s === 503) counts.limited++
          else counts.failed++
        }
      } catch {
        counts.failed++
        await new Promise((r) => setTimeout(r, 100))
      }
    }
  }
  const workers = Array.from({ length: concurrency }, (_, w) => worker(w))
  return {
    counts,
    async stop() {
      running = false
      await Promise.all(workers)
    },
  }
}
