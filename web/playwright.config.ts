import { defineConfig } from '@playwright/test';

// End-to-end tests in Debian's Chromium (no browser download) against a running fleet:
// WEFT_UI_URL (the gateway's base URL) and WEFT_TOKEN (an admin token) come from test.sh.
export default defineConfig({
  testDir: 'e2e',
  outputDir: '../target/ui-e2e/results',
  timeout: 60_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [['list'], ['junit', { outputFile: '../target/ui-e2e/junit.xml' }]],
  use: {
    baseURL: process.env.WEFT_UI_URL ?? 'http://127.0.0.1:8787',
    screenshot: 'only-on-failure',
    trace: 'off',
    launchOptions: {
      executablePath: process.env.WEFT_CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox'],
    },
  },
});
