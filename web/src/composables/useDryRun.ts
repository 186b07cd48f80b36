// The two steps of every config change (Req 22.10): a dry run whose diff the user reviews, then
// the write. Holds the preview, the busy flags and the server's violations.
import { ref } from 'vue'
import { ApiError } from '@/api/http'
import type { ValidationResult, Violation } from '@/api/types'

export function useDryRun() {
  const preview = ref<ValidationResult | null>(null)
  const open = ref(false)
  const checking = ref(false)
  const applying = ref(false)
  const violations = ref<Violation[]>([])
  const failure = ref<string | null>(null)
  /** the machine-readable reason of the last refusal (e.g. invalid_rule) */
  const code = ref<string | null>(null)

  function fail(e: unknown): void {
    code.value = e instanceof ApiError ? e.code : null
    if (e instanceof ApiError && e.validation) {
      violations.value = e.violations
      failure.value = e.violations.map((v) => v.message).join('; ')
    } else {
      failure.value = e instanceof ApiError ? e.message : String(e)
    }
  }

  async function review(check: () => Promise<ValidationResult>): Promise<void> {
    violations.value = []
    failure.value = null
    code.value = null
    checking.value = true
    try {
      preview.value = await check()
      violations.value = preview.value.violations
      open.value = true
    } catch (e) {
      fail(e)
    } finally {
      checking.value = false
    }
  }

  /** Runs the write; resolves true when it succeeded (and closes the preview). */
  async function apply(write: () => Promise<unknown>): Promise<boolean> {
    applying.value = true
    try {
      await write()
      open.value = false
      return true
    } catch (e) {
      open.value = false
      fail(e)
      return false
    } finally {
      applying.value = false
    }
  }

  function clear(): void {
    preview.value = null
    open.value = false
    violations.value = []
    failure.value = null
    code.value = null
  }

  /** Refuses before asking the server (the client's own checks found these). */
  function refuse(vs: Violation[], message = 'Some fields need attention.'): void {
    violations.value = vs
    failure.value = message
    code.value = null
    open.value = false
  }

  return { preview, open, checking, applying, violations, failure, code, review, apply, clear, refuse }
}
