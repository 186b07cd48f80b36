// Bundle budget of the console, from dist/.vite/manifest.json (gzip -9 sizes):
//   initial JS    what index.html loads before anything renders (entry + its static imports)
//   dashboard JS  what the first signed-in page needs: initial + shell + dashboard view + ECharts
// Both must stay under BUDGET_KB. Prints a table; exits 1 over budget.
import { readFileSync } from 'node:fs'
import { gzipSync } from 'node:zlib'

const BUDGET_KB = Number(process.env.BUNDLE_BUDGET_KB ?? 500)
const dist = new URL('../dist/', import.meta.url)
let manifest
try {
  manifest = JSON.parse(readFileSync(new URL('.vite/manifest.json', dist), 'utf8'))
} catch (e) {
  console.error(`bundle-size: no dist/.vite/manifest.json (run npm run build first): ${e.message}`)
  process.exit(1)
}

const gz = new Map()
function size(file) {
  if (!gz.has(file)) gz.set(file, gzipSync(readFileSync(new URL(file, dist)), { level: 9 }).length)
  return gz.get(file)
}

/** the JS files of chunk key and its static imports */
function closure(key, out = new Set()) {
  const c = manifest[key]
  if (!c || out.has(c.file)) return out
  out.add(c.file)
  for (const i of c.imports ?? []) closure(i, out)
  return out
}
function find(pred, what) {
  const key = Object.keys(manifest).find(pred)
  if (!key) {
    console.error(`bundle-size: no chunk for ${what} in the manifest`)
    process.exit(1)
  }
  return key
}

const entry = find((k) => manifest[k].isEntry, 'the entry')
const initial = closure(entry)
const dashboard = new Set(initial)
for (const k of [find((k) => k.endsWith('AppShell.vue'), 'AppShell.vue'),
  find((k) => k.endsWith('DashboardView.vue'), 'DashboardView.vue'),
  find((k) => k.endsWith('charts/echarts.ts'), 'charts/echarts.ts')]) closure(k, dashboard)

const sum = (files) => [...files].filter((f) => f.endsWith('.js')).reduce((n, f) => n + size(f), 0)
const kb = (n) => (n / 1024).toFixed(1)
const rows = [['initial JS', sum(initial), initial.size], ['dashboard JS', sum(dashboard), dashboard.size]]
const all = Object.values(manifest).map((c) => c.file).filter((f) => f.endsWith('.js'))
console.log(`bundle-size (gzip -9, budget ${BUDGET_KB} kB each)`)
for (const [name, bytes, n] of rows) console.log(`  ${name.padEnd(13)} ${kb(bytes).padStart(7)} kB in ${n} files`)
const largest = all.map((f) => [f, size(f)]).sort((a, b) => b[1] - a[1])[0]
console.log(`  all JS        ${kb(sum(new Set(all))).padStart(7)} kB in ${all.length} files; largest ${largest[0]} ${kb(largest[1])} kB`)
const over = rows.filter(([, bytes]) => bytes > BUDGET_KB * 1024)
if (over.length) {
  console.error(`bundle-size: over budget: ${over.map(([n]) => n).join(', ')}`)
  process.exit(1)
}
