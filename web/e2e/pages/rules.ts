// Page objects of the issue-7 views: rules (list and form), circuit breakers, alerts, events.
import type { Locator, Page } from 'playwright-core'
import { DiffDialog } from './pages.ts'
import { byTest, confirm, fill, input } from './ui.ts'

export class RulesPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/rules`)
    await this.table().waitFor()
  }

  table(): Locator {
    return byTest(this.page, 'rules-table')
  }

  row(id: string): Locator {
    return this.table().locator('.el-table__row', { has: this.page.locator(`[data-test="rule-id"]`, { hasText: id }) })
  }

  async ids(): Promise<string[]> {
    return (await this.table().locator('[data-test="rule-id"]').allTextContents()).map((s) => s.trim())
  }

  async cell(id: string, name: 'hits' | 'blocked' | 'throttled' | 'shadowed' | 'fail_open' | 'match' | 'limit' | 'status'): Promise<string> {
    return (await this.row(id).locator(`[data-test="rule-${name}"]`).textContent())?.trim() ?? ''
  }

  newButton(): Locator {
    return byTest(this.page, 'rules-new')
  }

  editButtons(): Locator {
    return this.table().locator('[data-test="rule-edit"]')
  }

  enabledSwitch(id: string): Locator {
    return this.row(id).locator('[data-test="rule-enabled"]')
  }

  async openNew(): Promise<RuleFormPage> {
    await this.newButton().click()
    await byTest(this.page, 'rule-form').waitFor()
    return new RuleFormPage(this.page)
  }

  async edit(id: string): Promise<RuleFormPage> {
    await this.row(id).locator('[data-test="rule-edit"]').click()
    await byTest(this.page, 'rule-form').waitFor()
    return new RuleFormPage(this.page)
  }

  /** flips the enabled switch: the dry run's diff opens */
  async toggle(id: string): Promise<DiffDialog> {
    await this.enabledSwitch(id).click()
    const d = new DiffDialog(this.page)
    await d.root().waitFor()
    return d
  }

  async remove(id: string): Promise<void> {
    await this.row(id).locator('[data-test="rule-delete"]').click()
    await confirm(this.page, 'Delete')
  }
}

export interface RuleFields {
  id?: string
  description?: string
  app_ids?: string[]
  methods?: string[]
  cidrs?: string[]
  limit?: number
  window_seconds?: number
  action?: 'reject' | 'throttle' | 'shadow'
  throttle_max_delay_ms?: number
}

export class RuleFormPage {
  constructor(private readonly page: Page) {}

  /** types each value into a multi-select that allows new entries, as a person does: key by key,
   *  then Enter once the dropdown offers it */
  private async tags(id: string, values: string[]): Promise<void> {
    const box = byTest(this.page, id)
    const field = box.locator('input').first()
    for (const v of values) {
      await box.click()
      await field.pressSequentially(v)
      await this.page.locator('.el-select-dropdown__item:visible', { hasText: v }).first().waitFor()
      await field.press('Enter')
      await box.locator('.el-select__tags-text', { hasText: v }).first().waitFor()
    }
    await this.page.keyboard.press('Escape')
  }

  async fill(f: RuleFields): Promise<void> {
    await byTest(this.page, 'rule-form').waitFor()
    if (f.id !== undefined) await fill(this.page, 'field-id', f.id)
    if (f.description !== undefined) await fill(this.page, 'field-description', f.description)
    if (f.app_ids) await this.tags('field-app_ids', f.app_ids)
    if (f.methods) await this.tags('field-methods', f.methods)
    if (f.cidrs) await this.tags('field-cidrs', f.cidrs)
    if (f.limit !== undefined) await fill(this.page, 'field-limit', f.limit)
    if (f.window_seconds !== undefined) await fill(this.page, 'field-window_seconds', f.window_seconds)
    if (f.action !== undefined) await byTest(this.page, 'field-action').getByText(f.action, { exact: true }).click()
    if (f.throttle_max_delay_ms !== undefined) await fill(this.page, 'field-throttle_max_delay_ms', f.throttle_max_delay_ms)
  }

  /** asks for the dry run and waits for its diff dialog */
  async review(): Promise<DiffDialog> {
    await byTest(this.page, 'rule-review').click()
    const d = new DiffDialog(this.page)
    await d.root().waitFor()
    return d
  }

  /** asks for the dry run when the console itself refuses: no dialog, the form's error */
  async reviewRefused(): Promise<string> {
    await byTest(this.page, 'rule-review').click()
    const err = byTest(this.page, 'form-error')
    await err.waitFor()
    return (await err.textContent())?.trim() ?? ''
  }

  fieldError(label: string): Locator {
    return this.page.locator('.el-form-item', { has: this.page.locator('label', { hasText: label }) })
      .locator('.el-form-item__error')
  }

  async clearTags(id: string): Promise<void> {
    const closes = byTest(this.page, id).locator('.el-tag__close')
    while (await closes.count()) await closes.first().click()
  }
}

export class BreakersPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/breakers`)
    await this.page.locator('[data-test="breakers"], [data-test="breakers-empty"]').first().waitFor()
  }

  card(name: string): Locator {
    return byTest(this.page, `breaker-${name}`)
  }

  async state(name: string): Promise<string> {
    return (await this.card(name).locator('[data-test="breaker-state"]').textContent())?.trim() ?? ''
  }

  newButton(): Locator {
    return byTest(this.page, 'breakers-new')
  }

  async create(name: string, f: { failure_threshold?: number; open_timeout_ms?: number }): Promise<DiffDialog> {
    await this.newButton().click()
    await byTest(this.page, 'breaker-form').waitFor()
    await fill(this.page, 'field-name', name)
    if (f.failure_threshold !== undefined) await fill(this.page, 'field-failure_threshold', f.failure_threshold)
    if (f.open_timeout_ms !== undefined) await fill(this.page, 'field-open_timeout_ms', f.open_timeout_ms)
    await byTest(this.page, 'breaker-review').click()
    const d = new DiffDialog(this.page)
    await d.root().waitFor()
    return d
  }

  async remove(name: string): Promise<void> {
    await this.card(name).locator('[data-test="breaker-delete"]').click()
    await confirm(this.page, 'Delete')
  }
}

export class AlertsPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(): Promise<void> {
    await this.page.goto(`${this.base}/alerts`)
    await byTest(this.page, 'alerts-table').waitFor()
  }

  /** the active row of an alert kind (its label) */
  activeRow(label: string): Locator {
    return byTest(this.page, 'alerts-table').locator('.el-table__row', { hasText: label })
      .filter({ has: this.page.locator('[data-test="alert-status"]', { hasText: 'active' }) })
  }

  ackButtons(): Locator {
    return byTest(this.page, 'alerts-table').locator('[data-test="alert-ack"]')
  }
}

export class EventsPage {
  constructor(private readonly page: Page, private readonly base: string) {}

  async goto(query = ''): Promise<void> {
    await this.page.goto(`${this.base}/events${query}`)
    await byTest(this.page, 'events-table').waitFor()
  }

  rows(): Locator {
    return byTest(this.page, 'events-table').locator('.el-table__row')
  }

  async filterRule(id: string): Promise<void> {
    await input(this.page, 'events-rule').fill(id)
    await byTest(this.page, 'events-apply').click()
  }

  /** filters by rule and waits for the server's answer (the table shows it on the next render) */
  async showRule(id: string): Promise<void> {
    const answered = this.page.waitForResponse((r) => r.url().includes('/api/v1/events') &&
      new URL(r.url()).searchParams.get('rule_id') === id)
    await this.filterRule(id)
    await answered
  }

  /** the event types of the rows, newest first */
  async types(): Promise<string[]> {
    return (await this.rows().locator('[data-test="event-type"]').allTextContents()).map((t) => t.trim())
  }

  /** how many occurrences the rows stand for (an entry shows ×n when it stands for n > 1) */
  async occurrences(): Promise<number> {
    const cells = await this.rows().locator('td', { has: this.page.locator('[data-test="event-type"]') }).allTextContents()
    return cells.reduce((n, t) => n + Number(t.match(/×(\d+)/)?.[1] ?? 1), 0)
  }
}
