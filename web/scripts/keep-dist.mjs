// vite empties dist/ on every build; put back the committed placeholder that lets the Go
// package embed dist/ on a fresh clone before the first build (see web/embed.go).
import { writeFileSync } from 'node:fs'

writeFileSync(new URL('../dist/.gitkeep', import.meta.url), '')
