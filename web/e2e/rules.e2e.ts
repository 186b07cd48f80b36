// Rules, circuit breakers, alerts and events in the console, end to end: Debian's Chromium
// against a real stack (redis-server, control plane with the embedded build, nginx gateway).
// Steps build on each other like an operator's session. What a gateway writes (rule counters,
// sampled events; docs/rules-contract.md §1, §5) is seeded into the stack's Redis with the
// gateway's own commands. Screenshots land in e2e/artifacts/.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openBrowser, screenshot, type Browser } from './browser.ts'
import { LoginPage } from './pages/pages.ts'
import { AlertsPage, BreakersPage, EventsPage, RulesPage } from './pages/rules.ts'
import { byTest, until } from './pages/ui.ts'
import { ADMIN, Api, redisCli, startStack, type Stack } from './stack.ts'

const RULE = 'e2e-puts'
const BREAKER = 'e2e-backend'
const VIEWER = { username: 'e2e-viewer', password: 'e2e-viewer-password-1' }

interface ApiRule { id: string; limit: number; action: string; enabled: boolean; throttle_max_delay_ms?: number;
  match: { app_ids?: string[]; methods?: string[] }; stats: { hits: number; blocked: number } }
interface ApiAlert { id: string; kind: string; active: boolean; acknowledged: boolean; acknowledged_by?: string }

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

  it('03 shows the counters the gateways report, without a reload', async () => {
    const { page } = admin
    const rules = new RulesPage(page, stack.base)
    await rules.goto()
    expect(await rules.cell(RULE, 'hits')).toBe('0')
    await page.evaluate(() => { (window as unknown as { e2eSamePage: boolean }).e2eSamePage = true })
    // what a gateway's flush does every second (contract §1: HINCRBY of its deltas)
    await redisCli(stack, 'HINCRBY', 'ratelimit:rules:stats', `${RULE}:hits`, '1234')
    await redisCli(stack, 'HINCRBY', 'ratelimit:rules:stats', `${RULE}:blocked`, '56')
    await until(async () => (await rules.cell(RULE, 'hits')) === '1,234', 'the hits to show 1,234', 30_000)
    expect(await rules.cell(RULE, 'blocked')).toBe('56')
    expect(await rules.cell(RULE, 'fail_open')).toBe('0')
    expect(await page.evaluate(() => (window as unknown as { e2eSamePage?: boolean }).e2eSamePage)).toBe(true)
    expect((await api.call<ApiRule>('GET', `/api/v1/rules/${RULE}`)).stats).toMatchObject({ hits: 1234, blocked: 56 })
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
    expect(await rules.cell(RULE, 'hits')).toBe('1,234')
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

  it('06 shows sampled events, filtered by rule', async () => {
    const { page } = admin
    const now = Date.now()
    // what a gateway's event flush appends (contract §5)
    await redisCli(stack, 'XADD', 'ratelimit:events', 'MAXLEN', '~', '100000', '*', 'event_type', 'rule_triggered',
      'severity', 'warning', 'app_id', 'demo-p1', 'rule_id', RULE, 'rule_type', 'sliding_window',
      'action_taken', 'throttled', 'http_method', 'PUT', 'endpoint', '/e2e-bucket/a', 'response_code', '200',
      'node_id', 'gw-e2e', 'sampled', '3', 'created_at', String(now - 1000))
    await redisCli(stack, 'XADD', 'ratelimit:events', '*', 'event_type', 'request_blocked', 'severity', 'info',
      'app_id', 'demo-p2', 'rule_type', 'tier', 'action_taken', 'blocked', 'response_code', '429',
      'node_id', 'gw-e2e', 'created_at', String(now))
    const events = new EventsPage(page, stack.base)
    await events.goto()
    await until(async () => (await events.rows().count()) === 2, 'both events in the table')
    expect(await events.rows().first().textContent()).toContain('request_blocked') // newest first
    await events.filterRule(RULE)
    await until(async () => (await events.rows().count()) === 1, 'only the rule\'s event')
    const row = await events.rows().first().textContent()
    expect(row).toContain('rule_triggered')
    expect(row).toContain('×3')
    expect(row).toContain('PUT /e2e-bucket/a')
    await screenshot(page, 'r07-events')
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

  it('08 creates a circuit breaker through the diff and shows it with its state', async () => {
    const { page } = admin
    const breakers = new BreakersPage(page, stack.base)
    await breakers.goto()
    await screenshot(page, 'r08-breakers-before')
    const diff = await breakers.create(BREAKER, { failure_threshold: 7, open_timeout_ms: 15000 })
    const rows = await diff.rows()
    expect(rows).toContainEqual([`breakers[${BREAKER}].failure_threshold`, '∅', '7'])
    expect(rows).toContainEqual([`breakers[${BREAKER}].open_timeout_ms`, '∅', '15000'])
    expect((await api.raw('GET', '/api/v1/breakers')).ok).toBe(true)
    expect((await api.call<{ name: string }[]>('GET', '/api/v1/breakers')).map((b) => b.name)).not.toContain(BREAKER)
    await diff.apply()
    await breakers.card(BREAKER).waitFor()
    expect(await breakers.state(BREAKER)).toBe('closed') // no node has seen a failure
    expect(await breakers.card(BREAKER).textContent()).toMatch(/trips at ≥ 7 failures/)
    const listed = await api.call<{ name: string; failure_threshold: number }[]>('GET', '/api/v1/breakers')
    expect(listed.find((b) => b.name === BREAKER)).toMatchObject({ failure_threshold: 7 })

    // a second node's report (contract §6) with the breaker open and, per app, half-open
    const t = Math.floor(Date.now() / 1000)
    await redisCli(stack, 'HSET', 'ratelimit:gateways', 'gw-e2e-b', JSON.stringify({ node_id: 'gw-e2e-b',
      last_seen: t, config_version: 1, breakers: {
        [BREAKER]: { state: 'open', failures: 9, requests: 12, opened_at: t, retry_at: t + 600 },
        [`${BREAKER}/demo-p1`]: { state: 'half_open', failures: 0, requests: 1, opened_at: t - 30, retry_at: t },
      } }))
    try {
      await until(async () => (await breakers.state(BREAKER)) === 'open', 'the breaker to show as open', 30_000)
      const card = breakers.card(BREAKER)
      expect(await card.locator('[data-test="breaker-state"]').getAttribute('class')).toContain('el-tag--danger')
      const nodes = card.locator('[data-test="breaker-nodes"] .el-table__row')
      expect(await nodes.count()).toBe(2)
      const whole = nodes.filter({ hasNotText: `${BREAKER}/demo-p1` })
      const perApp = nodes.filter({ hasText: `${BREAKER}/demo-p1` })
      expect(await whole.textContent()).toMatch(/gw-e2e-b\s*e2e-backend\s*open\s*9 \/ 12\s*in (9|10)m/)
      expect(await perApp.textContent()).toMatch(/half-open\s*0 \/ 1/)
      expect(await whole.locator('[data-test="node-state"]').getAttribute('class')).toContain('el-tag--danger')
      expect(await perApp.locator('[data-test="node-state"]').getAttribute('class')).toContain('el-tag--warning')
      await screenshot(page, 'r09-breakers')
    } finally {
      await redisCli(stack, 'HDEL', 'ratelimit:gateways', 'gw-e2e-b')
    }
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
