// End-to-end run: the specs of e2e/ drive Debian's Chromium (playwright-core) against a real
// stack (redis-server, control plane, gateway) that they start themselves. `npm run e2e`.
import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['e2e/**/*.e2e.ts'],
    environment: 'node',
    testTimeout: 120_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    pool: 'forks',
    maxWorkers: 1,
    sequence: { concurrent: false },
    reporters: ['verbose'],
  },
})
