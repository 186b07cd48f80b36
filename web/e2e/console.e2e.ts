// The console end to end: Debian's Chromium against a real stack (redis-server, control plane
// serving the embedded build, nginx gateway with tollgate's Lua) started for this run. Steps run
// in order and build on each other, like an operator's session. Screenshots of every view land
// in e2e/artifacts/; the dashboard's render time is printed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, screenshot, type Browser } from './browser.ts'
import { AppDetailPage, AppFormPage, AppsPage, DashboardPage, EmergencyPage, LoginPage, Shell } from './pages/pages.ts'
import { byTest, choose, parseBytes, parseNumber, until } from './pages/ui.ts'
import { ADMIN, Api, redisCli, startStack, traffic, type Stack } from './stack.ts'

const APP = 'e2e-photos'
const VIEWER = { username: 'e2e-viewer', password: 'e2e-viewer-password-1' }

describe('admin console on a real stack', () => {
  let stack: Stack
  let api: Api
  let admin: Browser
  const timings: Record<string, number | null> = {}

  beforeAll(async () => {
    stack = await startStack()
    api = await new Api(stack.base).login(ADMIN.username, ADMIN.password)
    await api.call('POST', '/api/v1/users', { ...VIEWER, role: 'viewer' })
    admin = await openBrowser()
  })

  afterAll(async () => {
    await admin?.close()
    await stack?.stop()
    if (Object.keys(timings).length) {
      console.log('render times (ms from navigation start):')
      for (const [k, v] of Object.entries(timings)) console.log(`  ${k.padEnd(44)} ${v === null ? '–' : v.toFixed(0)}`)
    }
  })

  it('01 signs in and renders the dashboard', async () => {
    const { page } = admin
    const login = new LoginPage(page, stack.base)
    await page.goto(`${stack.base}/apps`) // a deep link while signed out
    await page.waitForURL((u) => u.pathname === '/login')
    await screenshot(page, '01-login')
    await login.login(ADMIN.username, 'wrong-password-123')
    await expect.poll(() => login.error().textContent()).toMatch(/wrong user name or password/i)
    await login.login(ADMIN.username, ADMIN.password)
    await page.waitForURL((u) => u.pathname === '/apps') // back where the link pointed
    const dash = new DashboardPage(page, stack.base)
    await dash.goto()
    const shell = new Shell(page)
    expect(await shell.role()).toBe('admin')
    // the footer names the control plane's build (make build links scripts/version.sh's version)
    const health = await (await fetch(`${stack.base}/health`)).json() as { version?: string }
    expect(health.version).toMatch(/^[A-Za-z0-9._+-]+$/)
    await until(async () => (await shell.buildVersion()) === `tollgate ${health.version}`, 'the footer to show the version')
    await until(async () => (await shell.liveStatus())?.trim() === 'live', 'the WebSocket to connect')
    expect(await dash.card('l1')).toMatch(/%$/)

    // reload of a signed-in tab: the session is restored from the refresh token
    await page.reload()
    await dash.ready()
    await dash.waitForChart()
    const warm = await dash.marks()
    timings['reload, signed-in tab (warm cache): cards'] = warm.cards
    timings['reload, signed-in tab (warm cache): chart'] = warm.chart
    await screenshot(page, '02-dashboard')
  })

  it('02 measures a cold load of the dashboard', async () => {
    // a fresh profile (empty cache) whose tab holds a session, as after a browser restart
    // with the tab restored
    const cold = await openBrowser()
    try {
      const r = await api.call<{ refresh_token: string }>('POST', '/api/v1/auth/login',
        { username: ADMIN.username, password: ADMIN.password }, false)
      await cold.context.addInitScript((tok) => { sessionStorage.setItem('tollgate.refresh', tok) }, r.refresh_token)
      const dash = new DashboardPage(cold.page, stack.base)
      await dash.goto()
      await dash.waitForChart()
      const m = await dash.marks()
      timings['cold cache, session restored: cards'] = m.cards
      timings['cold cache, session restored: chart'] = m.chart
      expect(m.cards).not.toBeNull()
      expect(cold.errors).toEqual([])
    } finally {
      await cold.close()
    }
  })

  it('03 creates an application, reviewing the diff before it is written', async () => {
    const { page } = admin
    const apps = new AppsPage(page, stack.base)
    await apps.goto()
    await apps.openNew()
    const form = new AppFormPage(page)
    await form.fill({ app_id: APP, guaranteed_quota: 1500, burst_quota: 6000, priority: 2, max_borrow: 500 })
    await screenshot(page, '03-app-form')
    const diff = await form.review()
    const rows = await diff.rows()
    expect(rows).toContainEqual([`apps[${APP}].guaranteed_quota`, '∅', '1500'])
    expect(rows).toContainEqual([`apps[${APP}].burst_quota`, '∅', '6000'])
    await screenshot(page, '04-app-create-diff')
    // nothing is written by the review
    expect((await api.raw('GET', `/api/v1/apps/${APP}`)).status).toBe(404)
    await diff.apply()
    await new AppDetailPage(page).ready(APP)
    const created = await api.call<{ burst_quota: number; priority: number }>('GET', `/api/v1/apps/${APP}`)
    expect(created).toMatchObject({ burst_quota: 6000, priority: 2 })
  })

  it('04 finds it in the list', async () => {
    const { page } = admin
    const apps = new AppsPage(page, stack.base)
    await apps.goto()
    await apps.search('E2E-pho') // an id prefix, case ignored
    await until(async () => {
      const ids = await apps.ids()
      return ids.length === 1 && ids[0] === APP
    }, `the search to show only ${APP}`)
    await screenshot(page, '05-apps-search')
    await apps.search('')
    await until(async () => (await apps.ids()).length === 5, 'the four demo apps and the new one')
    await screenshot(page, '06-apps')
  })

  it('05 edits it through the diff preview', async () => {
    const { page } = admin
    await page.goto(`${stack.base}/apps/${APP}`)
    const detail = new AppDetailPage(page)
    await detail.ready(APP)
    await detail.editButton().click()
    const form = new AppFormPage(page)
    await form.fill({ burst_quota: 9000, priority: 1 })
    const diff = await form.review()
    const rows = await diff.rows()
    expect(rows).toContainEqual([`apps[${APP}].burst_quota`, '6000', '9000'])
    expect(rows).toContainEqual([`apps[${APP}].priority`, '2', '1'])
    expect(rows.map((r) => r[0])).not.toContain(`apps[${APP}].guaranteed_quota`) // unchanged fields stay out
    await screenshot(page, '07-app-edit-diff')
    await diff.apply()
    await detail.ready(APP)
    expect(await detail.config('Burst')).toBe('9,000 tokens')
    expect(await api.call('GET', `/api/v1/apps/${APP}`)).toMatchObject({ burst_quota: 9000, priority: 1 })
    await screenshot(page, '08-app-detail')
  })

  it('06 shows the config contract\'s field-level messages before any dry run, and writes nothing invalid', async () => {
    const { page } = admin
    await page.goto(`${stack.base}/apps/${APP}/edit`)
    const form = new AppFormPage(page)
    // the config contract is checked in the form itself, before any dry run
    await form.fill({ burst_quota: 100 }) // below the guaranteed quota
    await byTest(page, 'app-review').click()
    await expect.poll(() => form.fieldError('Burst quota').textContent()).toMatch(/at least guaranteed_quota/)
    expect(await page.locator('.el-dialog:visible').count()).toBe(0)
    await screenshot(page, '10-app-field-error')
    expect(await api.call('GET', `/api/v1/apps/${APP}`)).toMatchObject({ burst_quota: 9000, guaranteed_quota: 1500 })
  })

  it('06b gives the app S3 access keys and a bucket, and takes them back', async () => {
    const { page } = admin
    await api.call('POST', '/api/v1/apps/demo-p1/access-keys', { access_key_id: 'AKIAE2EHELDBYDEMOP1' })
    await page.goto(`${stack.base}/apps/${APP}`)
    const detail = new AppDetailPage(page)
    await detail.ready(APP)
    expect(await detail.s3Tags('access-keys')).toEqual([])
    await detail.addS3('access-key', 'AKIAE2EPHOTOS0000001')
    await until(async () => (await detail.s3Tags('access-keys')).includes('AKIAE2EPHOTOS0000001'), 'the new key on the page')
    await detail.addS3('access-key', 'minio.e2e~user')
    await until(async () => (await detail.s3Tags('access-keys')).length === 2, 'the second key on the page')
    expect(await redisCli(stack, 'HGET', 'ratelimit:access_keys', 'AKIAE2EPHOTOS0000001')).toBe(APP)
    // a key another app holds: the API's 409, in words, and nothing written
    await detail.addS3('access-key', 'AKIAE2EHELDBYDEMOP1')
    await expect.poll(() => detail.s3Error('access-key').textContent()).toMatch(/another application holds/i)
    expect(await redisCli(stack, 'HGET', 'ratelimit:access_keys', 'AKIAE2EHELDBYDEMOP1')).toBe('demo-p1')
    // malformed: refused before it is sent
    await detail.addS3('access-key', 'has/slash')
    await expect.poll(() => detail.s3Error('access-key').textContent()).toMatch(/no '\/' or ','/)
    await detail.addS3('bucket', 'e2e-photos-public')
    await until(async () => (await detail.s3Tags('buckets')).includes('e2e-photos-public'), 'the bucket on the page')
    expect(await api.call('GET', '/api/v1/buckets/e2e-photos-public')).toMatchObject({ app_id: APP })
    await screenshot(page, '10b-app-s3-identity')
    await detail.removeS3('access-keys', 'minio.e2e~user')
    await until(async () => (await detail.s3Tags('access-keys')).length === 1, 'the removed key to leave the page')
    expect(await redisCli(stack, 'HEXISTS', 'ratelimit:access_keys', 'minio.e2e~user')).toBe('0')
    expect(await api.call('GET', `/api/v1/apps/${APP}/access-keys`)).toEqual([{ access_key_id: 'AKIAE2EPHOTOS0000001', has_secret: false }])
    // its secret: sealed in Redis, shown as verified, never answered; then forgotten
    await detail.addS3('access-key', 'AKIAE2EPHOTOS0000001', 'e2e-secret-0123456789abcdef')
    await until(async () => (await detail.s3Tags('access-keys')).some((t) => t.includes('verified')), 'the key shown as verified')
    const sealed = await redisCli(stack, 'HGET', 'ratelimit:access_key_secrets', 'AKIAE2EPHOTOS0000001')
    expect(sealed.startsWith('tgs1.') && !sealed.includes('e2e-secret')).toBe(true)
    expect(await api.call('GET', `/api/v1/apps/${APP}/access-keys`)).toEqual([{ access_key_id: 'AKIAE2EPHOTOS0000001', has_secret: true }])
    await screenshot(page, '10c-app-access-key-secret')
    await page.locator('[data-remove-secret="AKIAE2EPHOTOS0000001"]').click()
    await until(async () => !(await detail.s3Tags('access-keys')).some((t) => t.includes('verified')), 'the secret forgotten')
    expect(await redisCli(stack, 'HEXISTS', 'ratelimit:access_key_secrets', 'AKIAE2EPHOTOS0000001')).toBe('0')
  })

  it('07 activates and deactivates emergency mode', async () => {
    const { page } = admin
    const em = new EmergencyPage(page, stack.base)
    await em.goto()
    expect(await em.state()).toBe('normal')
    await em.activate('e2e: storage cluster overloaded')
    await until(async () => (await em.state()) === 'ACTIVE', 'emergency mode to show as active')
    await expect.poll(() => new Shell(page).emergencyBanner().isVisible()).toBe(true)
    const st = await api.call<{ emergency_mode: boolean }>('GET', '/api/v1/emergency')
    expect(st.emergency_mode).toBe(true)
    await screenshot(page, '11-emergency-active')
    await em.deactivateFirst()
    await until(async () => (await em.state()) === 'normal', 'emergency mode to end')
    expect((await api.call<{ emergency_mode: boolean }>('GET', '/api/v1/emergency')).emergency_mode).toBe(false)
    await until(async () => (await em.historyRows().count()) >= 2, 'the activation and its end in the history')
    await screenshot(page, '12-emergency-history')
  })

  it('08 shows live numbers moving while traffic flows through the gateway', async () => {
    const { page } = admin
    const dash = new DashboardPage(page, stack.base)
    await dash.goto()
    await page.evaluate(() => { (window as unknown as { e2eSamePage: boolean }).e2eSamePage = true })
    const before = await dash.requestsLastHour()
    const load = traffic(stack.gateway, 'demo-p1')
    try {
      const rate = await until(async () => {
        const r = parseNumber(await dash.card('requests'))
        return r > 0 ? r : 0
      }, 'a request rate above zero on the dashboard', 30_000)
      const first = await until(async () => {
        const n = await dash.requestsLastHour()
        return n > before ? n : 0
      }, 'the requests of the last hour to grow', 30_000)
      const second = await until(async () => {
        const n = await dash.requestsLastHour()
        return n > first ? n : 0
      }, 'the requests of the last hour to grow again', 30_000)
      const top = byTest(page, 'top-apps').locator('tr', { hasText: 'demo-p1' })
      expect(parseNumber(await top.locator('td').nth(1).textContent())).toBeGreaterThan(0)
      console.log(`live: ${rate} req/s on the card; requests 1h ${before} -> ${first} -> ${second}; gateway answers`,
        load.counts)
      expect(load.counts.ok).toBeGreaterThan(0)
      await screenshot(page, '13-dashboard-traffic')
    } finally {
      await load.stop()
    }
    // no reload happened: the numbers came over the WebSocket (or the 5 s poll)
    expect(await page.evaluate(() => (window as unknown as { e2eSamePage?: boolean }).e2eSamePage)).toBe(true)
    expect((await new Shell(page).liveStatus())?.trim()).toBe('live')
  })

  it('08b shows each app\'s bandwidth in bytes/s, in and out, on the dashboard and the app page', async () => {
    // uploads and downloads of 256 KiB objects as APP through the gateway, until stopped
    const size = 256 * 1024
    const body = 'b'.repeat(size)
    let running = true
    const moved = { in: 0, out: 0 }
    const load = (async () => {
      for (let i = 0; running; i++) {
        const key = `${stack.gateway}/e2e-bucket/bw-${i % 8}`
        const put = await fetch(key, { method: 'PUT', headers: { 'X-App-Id': APP }, body })
        await put.arrayBuffer()
        if (put.status === 200) moved.in += size
        const got = await fetch(key, { headers: { 'X-App-Id': APP } })
        moved.out += (await got.arrayBuffer()).byteLength
      }
    })()
    const { page } = admin
    try {
      const dash = new DashboardPage(page, stack.base)
      await dash.goto()
      // the app's row of the top applications: bytes/s in both directions, in byte units
      const row = await until(async () => {
        const r = await dash.topAppBandwidth(APP)
        return r && parseBytes(r.out) > 0 && parseBytes(r.in) > 0 ? r : null
      }, `${APP}'s bytes/s in and out in the top applications`, 30_000)
      expect(row.out).toMatch(/^\d+(\.\d+)? (B|KiB|MiB|GiB)\/s$/)
      expect(parseBytes(await dash.card('bytes-out'))).toBeGreaterThan(0)
      expect(parseBytes(await dash.card('bytes-in'))).toBeGreaterThan(0)
      await screenshot(page, '13b-dashboard-bandwidth')

      await page.goto(`${stack.base}/apps/${APP}`)
      const detail = new AppDetailPage(page)
      await detail.ready(APP)
      const out = await until(async () => {
        const c = await detail.bandwidth('out')
        return parseBytes(c.value) > 0 && parseBytes(c.sub) > 0 ? c : null
      }, 'the download figure and the last hour\'s bytes on the app page', 30_000)
      const inn = await until(async () => {
        const c = await detail.bandwidth('in')
        return parseBytes(c.value) > 0 && parseBytes(c.sub) > 0 ? c : null
      }, 'the upload figure on the app page', 30_000)
      expect(out.value).toMatch(/\/s$/)
      expect(out.sub).toMatch(/in the last hour$/)
      // the history chart draws the bandwidth
      await until(async () => (await detail.bandwidthChartPeak()) > 0, 'the bandwidth chart to draw bytes/s', 30_000)
      // never more than what moved: the last hour's bytes are bytes this run sent (with the
      // display's rounding, 1 %)
      expect(parseBytes(out.sub)).toBeLessThanOrEqual(moved.out * 1.01)
      expect(parseBytes(inn.sub)).toBeLessThanOrEqual(moved.in * 1.01)
      console.log(`bandwidth: dashboard ${row.out} out, ${row.in} in; app page ${out.value} out (${out.sub}), ` +
        `${inn.value} in (${inn.sub}); moved ${moved.out} B out, ${moved.in} B in`)
      await screenshot(page, '13c-app-bandwidth')
    } finally {
      running = false
      await load
    }
  })

  it('09 shows every other view', async () => {
    const { page } = admin
    const views: [string, string, string][] = [
      ['/clusters', 'clusters-table', '14-clusters'],
      ['/connections', 'connections-apps', '15-connections'],
      ['/settings', 'users-table', '16-settings-users'],
    ]
    for (const [path, table, shot] of views) {
      await page.goto(stack.base + path)
      await byTest(page, table).locator('.el-table__row').first().waitFor()
      await screenshot(page, shot)
    }
    await page.getByRole('tab', { name: 'Audit log' }).click()
    await byTest(page, 'audit-table').locator('.el-table__row').first().waitFor()
    expect(await byTest(page, 'audit-table').textContent()).toMatch(/app\.create|app\.update|emergency/)
    await screenshot(page, '17-settings-audit')
    // a request refused before sign-in lands in the anonymous stream, shown by the stream select
    expect(await page.evaluate(async () => (await fetch('/api/v1/apps')).status)).toBe(401)
    await until(async () => {
      await choose(page, 'audit-stream', 'refused before sign-in')
      await page.getByRole('button', { name: 'Filter' }).click()
      await byTest(page, 'audit-table').locator('.el-table__row').first().waitFor({ timeout: 2000 }).catch(() => {})
      return (await byTest(page, 'audit-table').textContent())?.includes('_anonymous')
    }, 'the anonymous refusal in the audit panel')
    await choose(page, 'audit-stream', 'signed-in users')
    await page.getByRole('tab', { name: 'Gateways' }).click()
    await byTest(page, 'nodes-table').locator('.el-table__row').first().waitFor()
    expect(await byTest(page, 'nodes-table').textContent()).toContain('gw-e2e')
    await screenshot(page, '18-settings-gateways')
  })

  it('10 lets a viewer look but not change anything', async () => {
    const viewer = await openBrowser()
    try {
      const { page } = viewer
      await new LoginPage(page, stack.base).goto()
      await new LoginPage(page, stack.base).login(VIEWER.username, VIEWER.password)
      await new DashboardPage(page, stack.base).ready()
      expect(await new Shell(page).role()).toBe('viewer')

      const apps = new AppsPage(page, stack.base)
      await apps.goto()
      expect(await apps.newButton().count()).toBe(0)
      expect(await apps.editButtons().count()).toBe(0)
      await screenshot(page, '19-viewer-apps')

      await page.goto(`${stack.base}/apps/${APP}`)
      await new AppDetailPage(page).ready(APP)
      expect(await new AppDetailPage(page).editButton().count()).toBe(0)

      await page.goto(`${stack.base}/apps/${APP}/edit`) // a route the role may not open
      await page.waitForURL((u) => u.pathname === '/')

      const em = new EmergencyPage(page, stack.base)
      await em.goto()
      expect(await em.activateButton().isDisabled()).toBe(true)
      await byTest(page, 'emergency-readonly').waitFor()
      await screenshot(page, '20-viewer-emergency')

      await page.goto(`${stack.base}/settings`)
      await byTest(page, 'nodes-table').waitFor()
      expect(await page.getByRole('tab', { name: 'Users' }).count()).toBe(0)
      expect(await page.getByRole('tab', { name: 'Audit log' }).count()).toBe(0)

      // and the API agrees
      const v = await new Api(stack.base).login(VIEWER.username, VIEWER.password)
      expect((await v.raw('PUT', `/api/v1/apps/${APP}`, { burst_quota: 1 })).status).toBe(403)
      expect(viewer.errors).toEqual([])
    } finally {
      await viewer.close()
    }
  })

  it('11 is usable at phone width', async () => {
    const phone = await openBrowser({ width: 390, height: 844 })
    try {
      const { page } = phone
      await new LoginPage(page, stack.base).goto()
      await new LoginPage(page, stack.base).login(ADMIN.username, ADMIN.password)
      const dash = new DashboardPage(page, stack.base)
      await dash.ready()
      await dash.waitForChart()
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
      expect(overflow).toBeLessThanOrEqual(0)
      await screenshot(page, '21-phone-dashboard')
      await byTest(page, 'menu-toggle').click()
      await page.locator('[data-test="nav-applications"]:visible').waitFor()
      await screenshot(page, '22-phone-menu')
      await page.locator('[data-test="nav-applications"]:visible').click()
      await byTest(page, 'apps-table').locator('.el-table__row').first().waitFor()
      await screenshot(page, '23-phone-apps')
      expect(phone.errors).toEqual([])
    } finally {
      await phone.close()
    }
  })

  it('11c lists and searches a store of many apps page by page', async () => {
    // TOLLGATE_E2E_APPS apps (10,000 by default) join the config through one import (the
    // store's write path: id and value indexes, version bumps), then the console shows a page
    // and its search finds one of them; the times are printed
    const n = Number(process.env.TOLLGATE_E2E_APPS ?? 10_000)
    const res = await api.raw('GET', '/api/v1/config/export')
    expect(res.status).toBe(200)
    const doc = await res.json() as { apps: Record<string, unknown>[] }
    for (let i = 0; i < n; i++) {
      doc.apps.push({ app_id: `scale-${String(i).padStart(6, '0')}`, cluster_id: 'default', guaranteed_quota: 1,
        burst_quota: 10, priority: i % 4, c_bw: 1, max_borrow: 0, enabled: true })
    }
    const t0 = performance.now()
    const imp = await api.raw('POST', '/api/v1/config/import?apply=true', doc)
    expect(imp.status, await imp.clone().text().then((t) => t.slice(0, 500))).toBe(200)
    timings[`import of ${n} apps (ms, not a render time)`] = performance.now() - t0
    const total = (await api.raw('GET', '/api/v1/apps?limit=1')).json() as Promise<{ meta: { total: number } }>
    expect((await total).meta.total).toBeGreaterThanOrEqual(n)

    const { page } = admin
    const apps = new AppsPage(page, stack.base)
    let t = performance.now()
    await apps.goto()
    timings[`apps list, ${n} apps: first page shown`] = performance.now() - t
    expect((await apps.ids()).length).toBeGreaterThan(0)
    await until(async () => ((await byTest(page, 'apps-pager').textContent()) ?? '').replace(/[\s,]/g, '')
      .includes(`Total${(await total).meta.total}`), 'the pager to show the number of apps')
    const want = `scale-${String(n - 3).padStart(6, '0')}`
    t = performance.now()
    await apps.search(want.toUpperCase())
    await until(async () => {
      const ids = await apps.ids()
      return ids.length === 1 && ids[0] === want
    }, `the search to show only ${want}`)
    timings[`apps search, ${n} apps: the one app shown`] = performance.now() - t
    await screenshot(page, '24-apps-many')
    await apps.search('')
    // the connection limits come a page at a time too, with the number of apps
    await page.goto(`${stack.base}/connections`)
    await until(async () => ((await byTest(page, 'connections-pager').textContent()) ?? '').replace(/[\s,]/g, '')
      .includes(`Total${(await total).meta.total}`), 'the connections pager to show the number of apps')
    expect(await byTest(page, 'connections-apps').locator('.el-table__row').count()).toBe(100)
  })

  it('12 saw no errors in the browser', () => {
    expect(admin.errors).toEqual([])
  })
})
