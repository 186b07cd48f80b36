// Debian's Chromium through playwright-core (never a browser downloaded by npm): a fresh
// profile directory per browser, the flags of a quiet headless run, and screenshots saved as
// artefacts in e2e/artifacts/.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { chromium, type BrowserContext, type Page } from 'playwright-core'

export const ARTIFACTS = resolve(import.meta.dirname, 'artifacts')
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run']

export interface Browser {
  context: BrowserContext
  page: Page
  /** browser-side errors seen so far (uncaught exceptions, console errors) */
  errors: string[]
  close(): Promise<void>
}

export async function openBrowser(viewport = { width: 1366, height: 900 }): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'tollgate-e2e-chromium-'))
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: FLAGS, viewport,
  })
  const page = context.pages()[0] ?? await context.newPage()
  const errors: string[] = []
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`))
  page.on('console', (m) => {
    // failed HTTP answers are judged below by status (a 401 for a wrong password, a 404 from a
    // control plane without a Prometheus proxy, a 503 from the history proxy on a machine without
    // Prometheus are expected); any other console error is not
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(`console: ${m.text()}`)
  })
  page.on('response', (r) => {
    const absentProm = r.status() === 503 && r.url().includes('/api/v1/metrics/history')
    if (r.status() >= 500 && !absentProm) errors.push(`http ${r.status()}: ${r.request().method()} ${r.url()}`)
  })
  return {
    context, page, errors,
    async close() {
      await context.close()
      rmSync(profile, { recursive: true, force: true })
    },
  }
}

/** waits until no CSS transition or animation runs (drawers, dialogs, toasts sliding in) */
export async function settle(page: Page): Promise<void> {
  await page.waitForFunction(() => document.getAnimations().every((a) => a.playState !== 'running'),
    undefined, { timeout: 5000 }).catch(() => {})
}

export async function screenshot(page: Page, name: string): Promise<string> {
  await settle(page)
  mkdirSync(ARTIFACTS, { recursive: true })
  const path = join(ARTIFACTS, `${name}.png`)
  await page.screenshot({ path, fullPage: true })
  return path
}
