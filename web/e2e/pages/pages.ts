// Page objects of the console: what a person does on each view, in the words of the view.
import type { Locator, Page } from 'playwright-core'
import { byTest, choose, confirm, fill, input, parseNumber, until } from './ui.ts'

export class LoginPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/login`)
    await input(this.page, 'login-username').waitFor()
  }

  async login(username: string, password: string): Promise<void> {
    await input(this.page, 'login-username').fill(username)
    await input(this.page, 'login-password').fill(password)
    await byTest(this.page, 'login-submit').click()
  }

  error(): Locator {
    return byTest(this.page, 'login-error')
  }
}

export class Shell {
  constructor(private readonly page: Page) {}

  liveStatus(): Promise<string | null> {
    return byTest(this.page, 'live-status').textContent()
  }

  async role(): Promise<string> {
    return (await byTest(this.page, 'role').textContent())?.trim() ?? ''
  }

  /** The footer's build line, "tollgate <version>". */
  async buildVersion(): Promise<string> {
    return (await byTest(this.page, 'build-version').textContent())?.trim() ?? ''
  }

  emergencyBanner(): Locator {
    return byTest(this.page, 'emergency-banner')
  }

  async navigate(label: string): Promise<void> {
    const toggle = byTest(this.page, 'menu-toggle')
    if (await toggle.isVisible()) await toggle.click()
    await this.page.locator(`[data-test="nav-${label}"]:visible`).click()
  }

  async logout(): Promise<void> {
    await byTest(this.page, 'user-menu').click()
    await this.page.locator('[data-test="logout"]:visible').click()
  }
}

export class DashboardPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/`)
    await this.ready()
  }

  async ready(): Promise<void> {
    await this.page.locator('[data-test="dashboard"][data-ready="true"]').waitFor({ timeout: 30_000 })
  }

  async card(name: 'requests' | 'cost' | 'bytes-out' | 'bytes-in' | 'l1' | 'connections' | 'redis' | 'emergency'): Promise<string> {
    return (await byTest(this.page, `card-${name}`).locator('.v').textContent())?.trim() ?? ''
  }

  async cardSub(name: string): Promise<string> {
    return (await byTest(this.page, `card-${name}`).locator('.s').textContent())?.trim() ?? ''
  }

  /** an app's row of the top applications: its bandwidth now, as shown ("1.50 MiB/s") */
  async topAppBandwidth(app: string): Promise<{ out: string; in: string } | null> {
    const row = byTest(this.page, 'top-apps').locator('tr', { hasText: app }).first()
    if (await row.count() === 0) return null
    const text = async (id: string) => (await row.locator(`[data-test="${id}"]`).textContent())?.trim() ?? ''
    return { out: await text('top-app-out'), in: await text('top-app-in') }
  }

  /** requests in the last hour, from the requests card */
  async requestsLastHour(): Promise<number> {
    return parseNumber(await this.cardSub('requests'))
  }

  /** ms from navigation start to the performance marks the dashboard sets */
  marks(): Promise<{ cards: number | null; chart: number | null }> {
    return this.page.evaluate(() => {
      const at = (n: string) => performance.getEntriesByName(n)[0]?.startTime ?? null
      return { cards: at('tollgate:dashboard-ready'), chart: at('tollgate:chart-ready') }
    })
  }

  async waitForChart(): Promise<void> {
    await until(async () => (await this.marks()).chart !== null, 'the first chart to be drawn')
  }
}

export class AppsPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/apps`)
    await this.table().locator('.el-table__row').first().waitFor()
  }

  table(): Locator {
    return byTest(this.page, 'apps-table')
  }

  async search(q: string): Promise<void> {
    await input(this.page, 'apps-search').fill(q)
  }

  async ids(): Promise<string[]> {
    return (await this.table().locator('[data-test="app-link"]').allTextContents()).map((s) => s.trim())
  }

  newButton(): Locator {
    return byTest(this.page, 'apps-new')
  }

  editButtons(): Locator {
    return this.table().locator('[data-test="app-edit"]')
  }

  async openNew(): Promise<void> {
    await this.newButton().click()
    await byTest(this.page, 'app-form').waitFor()
  }
}

export interface AppFields {
  app_id?: string
  guaranteed_quota?: number
  burst_quota?: number
  priority?: 0 | 1 | 2 | 3
  max_borrow?: number
}

export class AppFormPage {
  constructor(private readonly page: Page) {}

  async fill(f: AppFields): Promise<void> {
    await byTest(this.page, 'app-form').waitFor()
    if (f.app_id !== undefined) await fill(this.page, 'field-app_id', f.app_id)
    if (f.guaranteed_quota !== undefined) await fill(this.page, 'field-guaranteed_quota', f.guaranteed_quota)
    if (f.burst_quota !== undefined) await fill(this.page, 'field-burst_quota', f.burst_quota)
    if (f.max_borrow !== undefined) await fill(this.page, 'field-max_borrow', f.max_borrow)
    if (f.priority !== undefined) await choose(this.page, 'field-priority', `P${f.priority}`)
  }

  /** asks for the dry run and waits for its diff dialog */
  async review(): Promise<DiffDialog> {
    await byTest(this.page, 'app-review').click()
    const d = new DiffDialog(this.page)
    await d.root().waitFor()
    return d
  }

  /** the server's message under a field */
  fieldError(label: string): Locator {
    return this.page.locator('.el-form-item', { has: this.page.locator('label', { hasText: label }) })
      .locator('.el-form-item__error')
  }
}

export class DiffDialog {
  constructor(private readonly page: Page) {}

  root(): Locator {
    return this.page.locator('.el-dialog:visible', { has: this.page.locator('[data-test="diff-apply"]') })
  }

  /** rows of the diff: field, now, after */
  async rows(): Promise<string[][]> {
    const rows = this.root().locator('[data-test="diff-table"] .el-table__body tr')
    const out: string[][] = []
    for (const r of await rows.all()) out.push((await r.locator('td').allTextContents()).map((s) => s.trim()))
    return out
  }

  async violations(): Promise<string[]> {
    return (await this.root().locator('[data-test="violation"]').allTextContents()).map((s) => s.trim())
  }

  applyButton(): Locator {
    return this.root().locator('[data-test="diff-apply"]')
  }

  async apply(): Promise<void> {
    await this.applyButton().click()
    await this.root().waitFor({ state: 'hidden' })
  }

  async cancel(): Promise<void> {
    await this.root().getByRole('button', { name: 'Cancel' }).click()
    await this.root().waitFor({ state: 'hidden' })
  }
}

export class AppDetailPage {
  constructor(private readonly page: Page) {}

  async ready(id: string): Promise<void> {
    await this.page.waitForURL((u) => u.pathname === `/apps/${id}`)
    await byTest(this.page, 'app-config').waitFor()
  }

  async config(label: string): Promise<string> {
    const row = byTest(this.page, 'app-config').locator('tr', { hasText: label })
    return (await row.locator('td').last().textContent())?.trim() ?? ''
  }

  editButton(): Locator {
    return byTest(this.page, 'detail-edit')
  }

  /** a bandwidth card: its figure ("1.50 MiB/s") and its line below ("3.00 MiB in the last hour") */
  async bandwidth(direction: 'out' | 'in'): Promise<{ value: string; sub: string }> {
    const card = byTest(this.page, `app-card-bytes-${direction}`)
    return { value: (await card.locator('.v').textContent())?.trim() ?? '',
      sub: (await card.locator('.s').textContent())?.trim() ?? '' }
  }

  /** the highest bytes/s the bandwidth chart draws (0 when it draws nothing) */
  async bandwidthChartPeak(): Promise<number> {
    return Number(await byTest(this.page, 'app-chart-bandwidth').locator('[data-peak]').getAttribute('data-peak'))
  }

  /** The S3 identity card: access keys and buckets. */
  async s3Tags(kind: 'access-keys' | 'buckets'): Promise<string[]> {
    const tags = byTest(this.page, kind).locator('.el-tag')
    return (await tags.allTextContents()).map((t) => t.trim())
  }

  async addS3(kind: 'access-key' | 'bucket', value: string, secret?: string): Promise<void> {
    await input(this.page, `${kind}-input`).fill(value)
    if (secret !== undefined) await input(this.page, 'access-key-secret-input').fill(secret)
    await byTest(this.page, `${kind}-add`).click()
  }

  s3Error(kind: 'access-key' | 'bucket'): Locator {
    return byTest(this.page, `${kind}-error`)
  }

  async removeS3(kind: 'access-keys' | 'buckets', value: string): Promise<void> {
    const attr = kind === 'access-keys' ? 'data-key' : 'data-bucket'
    await byTest(this.page, kind).locator(`[${attr}="${value}"] .el-tag__close`).click()
  }
}

export class EmergencyPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/emergency`)
    await byTest(this.page, 'emergency-clusters').locator('.el-table__row').first().waitFor()
  }

  async state(): Promise<string> {
    return (await byTest(this.page, 'emergency-state').textContent())?.trim() ?? ''
  }

  activateButton(): Locator {
    return byTest(this.page, 'emergency-activate')
  }

  async activate(reason: string): Promise<void> {
    await input(this.page, 'emergency-reason').fill(reason)
    await this.activateButton().click()
    await confirm(this.page, 'Activate')
  }

  async deactivateFirst(): Promise<void> {
    await byTest(this.page, 'emergency-deactivate').first().click()
    await confirm(this.page, 'Deactivate')
  }

  historyRows(): Locator {
    return byTest(this.page, 'emergency-history').locator('.el-table__row')
  }
}
