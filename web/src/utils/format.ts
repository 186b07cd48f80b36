// Number and time formatting for people.
const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 })
const plain = new Intl.NumberFormat('en', { maximumFractionDigits: 2 })

export function num(v: number | undefined | null): string {
  if (v === undefined || v === null || Number.isNaN(v)) return '–'
  return Math.abs(v) >= 10000 ? compact.format(v) : plain.format(v)
}

export function pct(v: number | undefined | null, digits = 1): string {
  if (v === undefined || v === null || Number.isNaN(v)) return '–'
  return `${v.toFixed(digits)} %`
}

/** ratio 0..1 as percent */
export function ratio(v: number | undefined | null, digits = 1): string {
  return v === undefined || v === null ? '–' : pct(v * 100, digits)
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB']

/** Bytes in powers of 1024 ("1.50 MiB"): the gateway prices bandwidth in 64 KiB units, so an app
 *  paced to 100 tokens/s at C_bw 1 reads 6.25 MiB/s. */
export function bytes(v: number | undefined | null): string {
  if (v === undefined || v === null || Number.isNaN(v) || v < 0) return '–'
  let u = 0
  while (v >= 1024 && u < BYTE_UNITS.length - 1) {
    v /= 1024
    u++
  }
  const digits = u === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2
  return `${v.toFixed(digits)} ${BYTE_UNITS[u]}`
}

/** Bytes per second: "512 B/s", "1.25 MiB/s". */
export function byteRate(v: number | undefined | null): string {
  const b = bytes(v)
  return b === '–' ? b : `${b}/s`
}

export function ms(v: number | undefined | null): string {
  if (v === undefined || v === null || Number.isNaN(v)) return '–'
  return v < 10 ? `${v.toFixed(2)} ms` : `${Math.round(v)} ms`
}

/** Unix seconds or ms (values above 1e12 are ms) as local date-time. */
export function time(ts: number | undefined | null): string {
  if (!ts) return '–'
  const d = new Date(ts > 1e12 ? ts : ts * 1000)
  return d.toLocaleString('en-GB', { dateStyle: 'short', timeStyle: 'medium' })
}

/** Seconds as "5m", "1h 30m". */
export function duration(s: number | undefined | null): string {
  if (s === undefined || s === null || s < 0) return '–'
  if (s < 60) return `${Math.round(s)}s`
  const h = Math.floor(s / 3600)
  const m = Math.round((s % 3600) / 60)
  return h ? `${h}h${m ? ` ${m}m` : ''}` : `${m}m`
}

/** "3 s ago" from Unix seconds or ms. */
export function ago(ts: number | undefined | null, now = Date.now()): string {
  if (!ts) return '–'
  const t = ts > 1e12 ? ts : ts * 1000
  return `${duration(Math.max(0, (now - t) / 1000))} ago`
}

/** A diff value for display. */
export function value(v: unknown): string {
  if (v === undefined) return '∅'
  if (typeof v === 'string') return v
  return JSON.stringify(v)
}
