import { defineConfig } from 'vitest/config';
import react from '@vitejs/plugin-react';

// Served by the gateway at /ui (web/dist is embedded in the gateway binary at compile time).
export default defineConfig({
  base: '/ui/',
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // Hashed file names under assets/ are served with immutable caching.
    assetsDir: 'assets',
    sourcemap: false,
  },
  server: {
    // `npm run dev` against a local fleet: the API and the session routes go to the gateway.
    // The Host header is kept (the string shorthand would rewrite it to the gateway's): a login
    // is refused unless its Origin is the host it was sent to.
    proxy: {
      '/v1': { target: 'http://127.0.0.1:8787', changeOrigin: false },
      '/ui/api': { target: 'http://127.0.0.1:8787', changeOrigin: false },
    },
  },
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.{ts,tsx}'],
  },
});
