// Rules, circuit breakers, alerts and events in the console, end to end: Debian's Chromium
// against a real stack (redis-server, control plane with the embedded build, nginx gateway).
// Steps build on each other like an operator's session. What the console shows of the gateway
// (rule counters, sampled events, breaker states; docs/rules-contract.md §1, §5, §6) comes from
// requests sent through the stack's gateway, one by one, and from its demo backend failing on
// command; nothing of it is written into Redis by the test. Screenshots land in e2e/artifacts/.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, screenshot, type Browser } from './browser.ts'
import { LoginPage } from './pages/pages.ts'
import { AlertsPage, BreakersPage, EventsPage, RulesPage } from './pages/rules.ts'
import { byTest, until } from './pages/ui.ts'
import { ADMIN, Api, demoBackend, gatewayConfigVersion, redisCli, send, startStack, type Answer,
  type Stack } from './stack.ts'

const RULE = 'e2e-puts'
// the stack's gateway location sets no $tollgate_backend: its backend is "default"
// (nginx/gateway.conf.tmpl, docs/rules-contract.md §3)
const BREAKER = 'default'
const VIEWER = { username: 'e2e-viewer', password: 'e2e-viewer-password-1' }

interface ApiRule { id: string; limit: number; action: string; enabled: boolean; throttle_max_delay_ms?: number;
  match: { app_ids?: string[]; methods?: string[] }; stats: { hits: number; blocked: number } }
interface ApiBreaker { name: string; failure_threshold: number; open_timeout_ms: number
  nodes: { node_id: string; key: string; state: string; opened_at: number; retry_at: number }[] }
interface ApiAlert { id: string; kind: string; active: boolean; acknowledged: boolean; acknowledged_by?: string }

/** waits until the gateway enforces the config version Redis holds now (the console's last write) */
async function gatewayCaughtUp(stack: Stack): Promise<void> {
  const want = Number(await redisCli(stack, 'GET', 'ratelimit:config:version'))
  await until(async () => (await gatewayConfigVersion(stack)) >= want, `the gateway to load config version ${want}`, 30_000)
}

/** the backend's failure answers (S3 XML errors) versus the gateway's own refusals (JSON reasons) */
const fromBackend = (a: Answer): boolean => a.reason === undefined

async function signIn(b: Browser, base: string, who: { username: string; password: string }): Promise<void> {
  const login = new LoginPage(b.page, base)
  await login.goto()
  await login.login(who.username, who.password)
  await b.page.waitForURL((u) => u.pathname === '/')
}

describe('rules, breakers, alerts and events on a real stack', () => {
  let stack: Stack
  let api: Api
  let admin: Browser
  // what step 03 sent through the gateway and saw refused by the rule
  let hits = 0
  let blocked = 0

  beforeAll(async () => {
    stack = await startStack()
    api = await new Api(stack.base).login(ADMIN.username, ADMIN.password)
    await api.call('POST', '/api/v1/users', { ...VIEWER, role: 'viewer' })
    admin = await openBrowser()
    await signIn(admin, stack.base, ADMIN)
  })

  afterAll(async () => {
    await admin?.close()
    await stack?.stop()
  })

  it('01 refuses a broken rule in the console, and shows the server refusal under its field', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    const form = await rules.openNew()
    // the console's own check: a CIDR with host bits never reaches the server
    await form.fill({ id: RULE, cidrs: ['10.0.0.1/8'] })
    const requests: string[] = []
    const seen = (r: { url(): string }) => { if (r.url().includes('/api/v1/rules')) requests.push(r.url()) }
    page.on('request', seen)
    expect(await form.reviewRefused()).toMatch(/match\.cidrs\[0\].*host bits/)
    page.off('request', seen)
    expect(requests).toEqual([])
    await form.clearTags('field-cidrs')
    // the server's check: an app that does not exist (only the control plane knows)
    await form.fill({ app_ids: ['no-such-app'] })
    const diff = await form.review()
    expect((await diff.violations()).join(' ')).toMatch(/match\.app_ids\[0\].*no app "no-such-app"/)
    expect(await diff.applyButton().isDisabled()).toBe(true)
    await screenshot(page, 'r01-rule-server-refusal')
    await diff.cancel()
    await expect.poll(() => form.fieldError('Applications').textContent()).toMatch(/no app "no-such-app"/)
    expect((await api.raw('GET', `/api/v1/rules/${RULE}`)).status).toBe(404)
  })

  it('02 creates a rule through the dry-run diff and lists it', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    const form = await rules.openNew()
    await form.fill({ id: RULE, description: 'e2e: PUTs of demo-p1', app_ids: ['demo-p1'], methods: ['PUT'],
      limit: 50, window_seconds: 10 })
    await screenshot(page, 'r02-rule-form')
    const diff = await form.review()
    const rows = await diff.rows()
    expect(rows).toContainEqual([`rules[${RULE}].limit`, '∅', '50'])
    expect(rows).toContainEqual([`rules[${RULE}].window_seconds`, '∅', '10'])
    expect(rows).toContainEqual([`rules[${RULE}].match.app_ids`, '∅', '["demo-p1"]'])
    expect(rows).toContainEqual([`rules[${RULE}].match.methods`, '∅', '["PUT"]'])
    expect(rows).toContainEqual([`rules[${RULE}].algorithm`, '∅', 'sliding_window'])
    await screenshot(page, 'r03-rule-create-diff')
    expect((await api.raw('GET', `/api/v1/rules/${RULE}`)).status).toBe(404) // the review wrote nothing
    await diff.apply()
    await page.waitForURL((u) => u.pathname === '/rules')
    await until(async () => (await rules.ids()).includes(RULE), `${RULE} in the list`)
    expect(await rules.cell(RULE, 'match')).toBe('app demo-p1 · PUT')
    expect(await rules.cell(RULE, 'limit')).toBe('50 / 10s req')
    expect(await rules.cell(RULE, 'status')).toBe('active')
    const created = await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`)
    expect(created).toMatchObject({ limit: 50, action: 'reject', enabled: true,
      match: { app_ids: ['demo-p1'], methods: ['PUT'] } })
  })

  it('03 counts the requests the rule matched and blocked, without a reload', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    expect(await rules.cell(RULE, 'hits')).toBe('0')
    await page.evaluate(() => { (window as unknown as { e2eSamePage: boolean }).e2eSamePage = true })
    await gatewayCaughtUp(stack)
    // requests the rule does not match (a GET of demo-p1, PUTs of demo-p2) are not its hits
    for (let i = 0; i < 3; i++) {
      expect((await send(stack.gateway, 'demo-p1', 'GET', `/e2e-bucket/none-${i}`)).status).toBe(404)
      expect((await send(stack.gateway, 'demo-p2', 'PUT', `/e2e-bucket/p2-${i}`, 'x'.repeat(64))).status).toBe(200)
    }
    // 60 PUTs of demo-p1, one after another: 50 fit the 10 s window, the rest are refused by the rule
    const answers: Answer[] = []
    for (let i = 0; i < 60; i++) {
      answers.push(await send(stack.gateway, 'demo-p1', 'PUT', `/e2e-bucket/r${i}`, 'x'.repeat(64)))
    }
    const refused = answers.filter((a) => a.status === 429)
    expect(refused.map((a) => `${a.reason} ${a.rule_id}`)).toEqual(refused.map(() => `rule_limited ${RULE}`))
    expect(answers.filter((a) => a.status !== 429).map((a) => a.status)).toEqual(
      answers.filter((a) => a.status !== 429).map(() => 200))
    // the first 50 are admitted; a sliding window may admit more only as 10 s pass
    expect(answers.slice(0, 50).every((a) => a.status === 200)).toBe(true)
    expect(refused.length).toBeGreaterThan(0)
    hits = answers.length
    blocked = refused.length
    console.log(`rule ${RULE}: ${hits} PUTs matched, ${hits - blocked} admitted, ${blocked} refused (429 rule_limited)`)
    // the gateway pushes its counters about every second; the list polls them
    await until(async () => (await rules.cell(RULE, 'hits')) === String(hits), `the hits to show ${hits}`, 30_000)
    await until(async () => (await rules.cell(RULE, 'blocked')) === String(blocked), `the blocked to show ${blocked}`)
    expect(await rules.cell(RULE, 'throttled')).toBe('0')
    expect(await rules.cell(RULE, 'fail_open')).toBe('0')
    expect(await page.evaluate(() => (window as unknown as { e2eSamePage?: boolean }).e2eSamePage)).toBe(true)
    expect((await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`)).stats).toMatchObject({ hits, blocked })
    await screenshot(page, 'r04-rules-counters')
  })

  it('04 edits the rule through the diff: only what changed is listed', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    const form = await rules.edit(RULE)
    await form.fill({ limit: 80, action: 'throttle', throttle_max_delay_ms: 300 })
    const diff = await form.review()
    const rows = await diff.rows()
    expect(rows).toContainEqual([`rules[${RULE}].limit`, '50', '80'])
    expect(rows).toContainEqual([`rules[${RULE}].action`, 'reject', 'throttle'])
    expect(rows).toContainEqual([`rules[${RULE}].throttle_max_delay_ms`, '∅', '300'])
    expect(rows.map((r) => r[0])).not.toContain(`rules[${RULE}].window_seconds`)
    expect(rows.map((r) => r[0])).not.toContain(`rules[${RULE}].description`)
    await screenshot(page, 'r05-rule-edit-diff')
    await diff.apply()
    await page.waitForURL((u) => u.pathname === '/rules')
    await until(async () => (await rules.cell(RULE, 'limit')) === '80 / 10s req', 'the new limit in the list')
    expect(await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`))
      .toMatchObject({ limit: 80, action: 'throttle', throttle_max_delay_ms: 300 })
    // the counters survive an edit
    expect(await rules.cell(RULE, 'hits')).toBe(String(hits))
  })

  it('05 disables and enables it from the list, each through the diff', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    let diff = await rules.toggle(RULE)
    expect(await diff.rows()).toEqual([[`rules[${RULE}].enabled`, 'true', 'false']])
    await diff.apply()
    await until(async () => (await rules.cell(RULE, 'status')) === 'disabled', 'the rule to show as disabled')
    expect((await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`)).enabled).toBe(false)
    await screenshot(page, 'r06-rule-disabled')
    diff = await rules.toggle(RULE)
    await diff.apply()
    await until(async () => (await rules.cell(RULE, 'status')) === 'active', 'the rule to show as active again')
    expect((await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`)).enabled).toBe(true)
  })

  it('06 shows the events of the rule\'s refusals, filtered by rule', async () => {
    const { page } = admin
    const events = new EventsPage(page, stack.base)
    await events.goto()
    // the gateway flushes its events about every second; "Show" asks again
    await until(async () => {
      await events.showRule(RULE)
      return (await events.occurrences()) === blocked
    }, `events standing for the ${blocked} refusals`, 30_000)
    // one entry per refusal at most (their `sampled` counts add up to the refusals)
    const rows = await events.rows().allTextContents()
    expect(rows.length).toBeGreaterThan(0)
    expect(rows.length).toBeLessThanOrEqual(blocked)
    for (const row of rows) {
      expect(row).toContain('rule_triggered')
      expect(row).toMatch(new RegExp(`demo-p1\\s*${RULE}\\s*sliding_window\\s*blocked\\s*PUT /e2e-bucket/r\\d+\\s*429`))
      expect(row).toContain('gw-e2e')
    }
    await screenshot(page, 'r07-events')
    // the filter is the server's: another rule id lists nothing
    await events.showRule('e2e-no-such-rule')
    await until(async () => (await events.rows().count()) === 0, 'no events for another rule')
  })

  it('07 deletes the rule and its counters', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    await rules.remove(RULE)
    await until(async () => !(await rules.ids()).includes(RULE), `${RULE} to leave the list`)
    expect((await api.raw('GET', `/api/v1/rules/${RULE}`)).status).toBe(404)
    expect(await redisCli(stack, 'HEXISTS', 'ratelimit:rules:stats', `${RULE}:hits`)).toBe('0')
  })

  it('08 creates a circuit breaker for the backend and follows it open, half-open and closed', async () => {
    const { page } = admin
    const breakers = new BreakersPage(page, stack.base)
    await breakers.goto()
    await screenshot(page, 'r08-breakers-before')
    // defaults: ≥ 10 requests in 10 s, ≥ 50 % failed; 3 successful probes close it
    const diff = await breakers.create(BREAKER, { failure_threshold: 5, open_timeout_ms: 2000 })
    const rows = await diff.rows()
    expect(rows).toContainEqual([`breakers[${BREAKER}].failure_threshold`, '∅', '5'])
    expect(rows).toContainEqual([`breakers[${BREAKER}].open_timeout_ms`, '∅', '2000'])
    expect((await api.call<{ name: string }[]>('GET', '/api/v1/breakers')).map((b) => b.name)).not.toContain(BREAKER)
    await diff.apply()
    const card = breakers.card(BREAKER)
    await card.waitFor()
    expect(await breakers.state(BREAKER)).toBe('closed') // no node has seen a failure
    expect(await card.textContent()).toMatch(/trips at ≥ 5 failures/)
    const listed = await api.call<ApiBreaker[]>('GET', '/api/v1/breakers')
    expect(listed.find((b) => b.name === BREAKER)).toMatchObject({ failure_threshold: 5, open_timeout_ms: 2000 })
    await gatewayCaughtUp(stack)

    const node = card.locator('[data-test="breaker-nodes"] .el-table__row', { hasText: 'gw-e2e' })
    const nodeState = async () => (await node.locator('[data-test="node-state"]').textContent())?.trim()
    const get = () => send(stack.gateway, 'demo-p2', 'GET', '/e2e-bucket/p2-0')
    await demoBackend(stack, 'fail?status=503')
    try {
      // every request fails at the backend until the breaker opens; then the gateway refuses
      const seen: Answer[] = []
      for (let i = 0; i < 40 && !seen.some((a) => a.reason === 'circuit_open'); i++) seen.push(await get())
      const failed = seen.filter(fromBackend)
      expect(failed.map((a) => a.status)).toEqual(failed.map(() => 503))
      // min_requests: never open on fewer (exactly 10 unless the machine stalled past the 2 s
      // open timeout and a failed probe re-opened it)
      expect(failed.length).toBeGreaterThanOrEqual(10)
      const refusal = seen.at(-1)
      console.log(`breaker ${BREAKER}: opened after ${failed.length} backend 503s`)
      expect(refusal).toMatchObject({ status: 503, reason: 'circuit_open', backend: BREAKER })
      expect(Number(refusal?.retryAfter)).toBeGreaterThanOrEqual(1)

      // open stays open without traffic (the node moves to half-open on the first request after
      // the timeout), so the node report shows it however slowly the page follows
      await until(async () => (await breakers.state(BREAKER)) === 'open', 'the breaker to show as open', 30_000)
      expect(await card.locator('[data-test="breaker-state"]').getAttribute('class')).toContain('el-tag--danger')
      expect(await nodeState()).toBe('open')
      expect(await node.locator('[data-test="node-state"]').getAttribute('class')).toContain('el-tag--danger')
      // the window at the trip: 10 requests, all failed (a failed probe keeps it)
      expect(await node.textContent()).toMatch(/gw-e2e\s*default\s*open\s*10 \/ 10/)
      const reported = (await api.call<ApiBreaker[]>('GET', '/api/v1/breakers'))
        .find((b) => b.name === BREAKER)?.nodes.find((n) => n.node_id === 'gw-e2e')
      expect(reported?.state).toBe('open')
      const retryAt = reported?.retry_at ?? 0
      expect(retryAt - (reported?.opened_at ?? 0)).toBeGreaterThanOrEqual(2) // open_timeout_ms 2000
      expect(retryAt - (reported?.opened_at ?? 0)).toBeLessThanOrEqual(3)
      // the retry time: "in …" until it passes, then "now"; its exact time in the tooltip
      const retry = node.locator('td').nth(4).locator('span')
      expect((await retry.textContent())?.trim()).toMatch(/^(in \d+s|now)$/)
      const shown = await page.evaluate((t) => new Date(t * 1000).toLocaleString('en-GB',
        { dateStyle: 'short', timeStyle: 'medium' }), retryAt)
      expect(await retry.getAttribute('title')).toBe(shown)
      await screenshot(page, 'r09-breaker-open')

      await demoBackend(stack, 'heal')
      // refused (never sent to the backend) until open_timeout_ms has passed; then one probe
      // goes through, succeeds, and leaves the breaker half-open (1 of 3 successes) until the
      // next probe: with no further request it stays half-open, so the report catches it
      const probe = await until(async () => {
        const a = await get()
        return a.reason === 'circuit_open' ? null : a
      }, 'a probe to pass the breaker', 30_000)
      expect(probe?.status).toBe(200)
      await until(async () => (await breakers.state(BREAKER)) === 'half-open', 'the breaker to show as half-open', 30_000)
      expect(await card.locator('[data-test="breaker-state"]').getAttribute('class')).toContain('el-tag--warning')
      expect(await nodeState()).toBe('half-open')
      expect(await node.locator('[data-test="node-state"]').getAttribute('class')).toContain('el-tag--warning')
      await screenshot(page, 'r09b-breaker-half-open')

      // two more successful probes close it
      for (let i = 0; i < 2; i++) expect((await get()).status).toBe(200)
      await until(async () => (await breakers.state(BREAKER)) === 'closed' && (await nodeState()) === 'closed',
        'the breaker to show as closed', 30_000)
      expect(await node.locator('[data-test="node-state"]').getAttribute('class')).toContain('el-tag--success')
      expect(await node.locator('td').nth(4).textContent()).toContain('–')
      await screenshot(page, 'r09c-breaker-closed')
    } finally {
      await demoBackend(stack, 'heal')
    }

    // its transitions are events of the breaker
    const events = new EventsPage(page, stack.base)
    await events.goto()
    await until(async () => {
      await events.showRule(BREAKER)
      const types = await events.types()
      return types.includes('circuit_opened') && types.includes('circuit_closed')
    }, 'the circuit_opened and circuit_closed events', 30_000)
    const types = await events.types()
    expect(types.indexOf('circuit_closed')).toBeLessThan(types.lastIndexOf('circuit_opened')) // newest first

    await breakers.goto()
    await breakers.remove(BREAKER)
    await breakers.card(BREAKER).waitFor({ state: 'detached' })
    expect((await api.call<{ name: string }[]>('GET', '/api/v1/breakers')).map((b) => b.name)).not.toContain(BREAKER)
  })

  it('09 receives an alert live and acknowledges it', async () => {
    const { page } = admin
    const alerts = new AlertsPage(page, stack.base)
    await alerts.goto()
    expect(await alerts.activeRow('Emergency mode').count()).toBe(0)
    await api.call('POST', '/api/v1/emergency/activate', { reason: 'e2e: provoke an alert', duration: 300 })
    try {
      const row = alerts.activeRow('Emergency mode')
      await row.waitFor({ timeout: 30_000 })
      // arrived over the WebSocket (the page polls only every 15 s): marked as new
      expect(await row.evaluate((el) => el.classList.contains('fresh'))).toBe(true)
      await screenshot(page, 'r10-alert-live')
      await row.locator('[data-test="alert-ack"]').click()
      await until(async () => (await row.locator('[data-test="alert-acked"]').textContent())?.includes('admin'),
        'the alert to show as acknowledged by admin')
      const listed = await api.call<ApiAlert[]>('GET', '/api/v1/alerts?active=true')
      expect(listed.find((a) => a.kind === 'emergency')).toMatchObject({ acknowledged: true, acknowledged_by: 'admin' })
      await screenshot(page, 'r11-alert-acked')
    } finally {
      const st = await api.call<{ clusters: { cluster_id: string; active: boolean }[] }>('GET', '/api/v1/emergency')
      for (const c of st.clusters.filter((x) => x.active)) {
        await api.call('POST', '/api/v1/emergency/deactivate', { cluster_id: c.cluster_id })
      }
    }
  })

  it('10 lets a viewer see rules, breakers and alerts but change nothing', async () => {
    await api.call('PUT', `/api/v1/breakers/${BREAKER}`, { enabled: true })
    await api.call('POST', '/api/v1/rules', { id: 'e2e-viewer-sees', scope: 'global', algorithm: 'fixed_window',
      limit: 10, window_seconds: 60 })
    await api.call('POST', '/api/v1/emergency/activate', { reason: 'e2e: an alert for the viewer', duration: 300 })
    const viewer = await openBrowser()
    try {
      const { page } = viewer
      await signIn(viewer, stack.base, VIEWER)
      const rules = new RulesPage(page, stack.base)
      await rules.goto()
      await until(async () => (await rules.ids()).includes('e2e-viewer-sees'), 'the rule in the viewer\'s list')
      expect(await rules.newButton().count()).toBe(0)
      expect(await rules.editButtons().count()).toBe(0)
      expect(await rules.enabledSwitch('e2e-viewer-sees').locator('input').isDisabled()).toBe(true)
      await screenshot(page, 'r12-viewer-rules')
      await page.goto(`${stack.base}/rules/new`) // a route the role may not open
      await page.waitForURL((u) => u.pathname === '/')

      const breakers = new BreakersPage(page, stack.base)
      await breakers.goto()
      await breakers.card(BREAKER).waitFor()
      expect(await breakers.newButton().count()).toBe(0)
      expect(await breakers.card(BREAKER).locator('[data-test="breaker-edit"]').count()).toBe(0)

      const alerts = new AlertsPage(page, stack.base)
      await alerts.goto()
      await alerts.activeRow('Emergency mode').waitFor({ timeout: 30_000 })
      expect(await alerts.ackButtons().count()).toBe(0)
      expect(viewer.errors).toEqual([])
    } finally {
      await viewer.close()
      const st = await api.call<{ clusters: { cluster_id: string; active: boolean }[] }>('GET', '/api/v1/emergency')
      for (const c of st.clusters.filter((x) => x.active)) {
        await api.call('POST', '/api/v1/emergency/deactivate', { cluster_id: c.cluster_id })
      }
    }
  })

  it('11 keeps the new views usable at phone width', async () => {
    const phone = await openBrowser({ width: 390, height: 844 })
    try {
      const { page } = phone
      await signIn(phone, stack.base, ADMIN)
      for (const [path, ready, shot] of [['/rules', 'rules-table', 'r13-phone-rules'],
        ['/rules/new', 'rule-form', 'r14-phone-rule-form'], ['/breakers', 'breakers', 'r15-phone-breakers'],
        ['/alerts', 'alerts-table', 'r16-phone-alerts'], ['/events', 'events-table', 'r17-phone-events']] as const) {
        await page.goto(stack.base + path)
        await byTest(page, ready).waitFor()
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
        expect(overflow, `horizontal overflow on ${path}`).toBeLessThanOrEqual(0)
        await screenshot(page, shot)
      }
      expect(phone.errors).toEqual([])
    } finally {
      await phone.close()
    }
  })

  it('12 saw no errors in the browser', () => {
    expect(admin.errors).toEqual([])
  })
})
