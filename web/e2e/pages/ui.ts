// Element Plus seen from a test: data-test attributes land on the native <input> of an ElInput
// and on the root of most other components; dropdowns and message boxes are teleported to body.
import type { Locator, Page } from 'playwright-core'

export const byTest = (page: Page | Locator, id: string): Locator => page.locator(`[data-test="${id}"]`)

/** the native input of an ElInput / ElInputNumber marked data-test=id */
export function input(page: Page, id: string): Locator {
  return page.locator(`input[data-test="${id}"], [data-test="${id}"] input`).first()
}

export async function fill(page: Page, id: string, value: string | number): Promise<void> {
  const el = input(page, id)
  await el.fill(String(value))
  await el.blur()
}

/** opens the ElSelect marked data-test=id and picks the option with that text */
export async function choose(page: Page, id: string, option: string): Promise<void> {
  await byTest(page, id).click()
  await page.locator('.el-select-dropdown__item:visible', { hasText: option }).first().click()
}

/** clicks a button of the open ElMessageBox */
export async function confirm(page: Page, button: string): Promise<void> {
  const box = page.locator('.el-message-box:visible')
  await box.waitFor()
  await box.getByRole('button', { name: button }).click()
  await box.waitFor({ state: 'hidden' })
}

/** text of the newest ElMessage toast */
export async function toast(page: Page): Promise<string> {
  const m = page.locator('.el-message').last()
  await m.waitFor()
  return (await m.textContent())?.trim() ?? ''
}

/** polls fn until it returns a truthy value (a state, never a sleep) */
export async function until<T>(fn: () => Promise<T>, what: string, timeoutMs = 20_000): Promise<NonNullable<T>> {
  const end = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await fn()
      if (v) return v as NonNullable<T> // truthy: neither null nor undefined
      last = v
    } catch (e) {
      last = e
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`)
    await new Promise((r) => setTimeout(r, 250))
  }
}

/** "1,234" / "25K" / "1.2M" as a number */
export function parseNumber(text: string | null): number {
  const m = (text ?? '').replace(/,/g, '').match(/(-?[\d.]+)\s*([KMBT])?/i)
  if (!m || m[1] === undefined) return NaN
  const mult = { K: 1e3, M: 1e6, B: 1e9, T: 1e12 }[(m[2] ?? '').toUpperCase() as 'K'] ?? 1
  return Number(m[1]) * mult
}

/** "512 B/s" / "1.50 KiB/s" / "6.25 MiB" (the console's powers of 1024) as bytes; NaN without a unit */
export function parseBytes(text: string | null): number {
  const m = (text ?? '').replace(/,/g, '').match(/(-?[\d.]+)\s*(B|KiB|MiB|GiB|TiB)\b/)
  if (!m || m[1] === undefined || m[2] === undefined) return NaN
  return Number(m[1]) * 1024 ** ['B', 'KiB', 'MiB', 'GiB', 'TiB'].indexOf(m[2])
}
