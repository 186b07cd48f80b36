/// <reference types="vitest/config" />
import { fileURLToPath, URL } from 'node:url'
import vue from '@vitejs/plugin-vue'
import ElementPlus from 'unplugin-element-plus/vite'
import { defineConfig } from 'vite'

// `npm run dev` proxies the API (and its WebSocket) to a running control plane.
const controlPlane = `http://${process.env.TOLLGATE_CP_ADDR ?? '127.0.0.1:9090'}`

export default defineConfig({
  // Components are imported explicitly (`import { ElButton } from 'element-plus'`); the plugin
  // adds the matching per-component stylesheet, so only what a view uses is shipped with it.
  plugins: [vue(), ElementPlus({})],
  resolve: {
    alias: { '@': fileURLToPath(new URL('./src', import.meta.url)) },
  },
  build: {
    target: 'es2022',
    sourcemap: false,
    // The Go binary embeds dist/; keep the bundle lean and the names hashed for caching.
    assetsInlineLimit: 4096,
    chunkSizeWarningLimit: 600,
    // dist/.vite/manifest.json: read by scripts/bundle-size.mjs (the Go handler never serves dot paths)
    manifest: true,
  },
  server: {
    proxy: {
      '/api': { target: controlPlane, ws: true, changeOrigin: false },
      '/health': { target: controlPlane },
    },
  },
  test: {
    environment: 'happy-dom',
    include: ['src/**/*.test.ts'],
    restoreMocks: true,
    unstubGlobals: true,
    pool: 'threads',
    maxWorkers: 2,
  },
})
