import { expect, test, type APIRequestContext, type Page } from '@playwright/test';

const TOKEN = process.env.WEFT_TOKEN ?? '';
const SHOTS = process.env.WEFT_UI_SCREENSHOTS; // docs/ui.md's screenshots, when set

async function api(request: APIRequestContext, method: string, path: string, token: string, data?: unknown) {
  const res = await request.fetch(path, {
    method,
    headers: { authorization: `Bearer ${token}` },
    data,
  });
  expect(res.ok(), `${method} ${path}: ${res.status()} ${await res.text()}`).toBeTruthy();
  return res.status() === 204 ? null : res.json();
}

async function login(page: Page, token: string) {
  await page.goto('/ui/');
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('navigation', { name: 'Main' })).toBeVisible();
}

async function shot(page: Page, name: string) {
  if (SHOTS) await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
}

test.beforeAll(async ({ request }) => {
  expect(TOKEN, 'WEFT_TOKEN is set').toMatch(/^wft_/);
  await api(request, 'PUT', '/v1/agents/ui-helper', TOKEN, {
    description: 'the UI end-to-end tests',
    model: 'mock-1',
    tools: ['Context', 'Interruption'],
  });
});

test('log in, and the session cookie is HttpOnly and the token is kept nowhere', async ({ page, context }) => {
  await page.goto('/ui/');
  await shot(page, 'login');
  await login(page, TOKEN);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'weft_session');
  expect(session?.httpOnly).toBe(true);
  expect(session?.sameSite).toBe('Strict');
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
  expect(stored).not.toContain('wft_');
  expect(page.url()).not.toContain('wft_');
});

test('start a run and watch its text and tool calls appear live', async ({ page }) => {
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  const script = '#mock {"turns": [[{"name": "Context", "input": {"op": "time"}}]], "reply": "all done here"}';
  await page.getByLabel('Agent to run').selectOption('ui-helper');
  await page.getByLabel('Input', { exact: true }).fill(script);
  await page.getByRole('button', { name: 'Start run' }).click();
  await expect(page).toHaveURL(/\/ui\/runs\/[0-9a-f-]+$/);
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  await expect(terminal.getByText(/Context\(/)).toBeVisible();
  await expect(terminal.getByText('all done here', { exact: true })).toBeVisible();
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  await expect(page.getByTestId('run-usage')).toHaveText(/^[1-9]\d* \/ [1-9]\d*$/);
  // The tool call unfolds to its input.
  await terminal.getByText(/Context\(/).click();
  await expect(terminal.locator('pre').first()).toContainText('"op": "time"');
  await shot(page, 'run');
  // After a reload the page re-attaches from the last seen seq: the same transcript, once.
  const streamed = page.waitForRequest((r) => r.url().includes('/stream?from_seq='));
  await page.reload();
  const from = Number(new URL((await streamed).url()).searchParams.get('from_seq'));
  expect(from, 'the stream resumes after the last seq seen before the reload').toBeGreaterThan(1);
  const again = page.getByRole('list', { name: 'Run transcript' });
  await expect(again.getByText('all done here', { exact: true })).toHaveCount(1);
  await expect(again.getByText(/Context\(/)).toHaveCount(1);
  await expect(page.getByText('Stream')).toBeVisible();
  await page.goto('/ui/runs');
  await expect(page.getByRole('table')).toContainText('ui-helper');
  await page.getByLabel('Created in').selectOption('1h');
  await expect(page.getByRole('table')).toContainText('ui-helper');
  await shot(page, 'runs');
});

test('answer an interruption inline', async ({ page }) => {
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  const script =
    '#mock {"turns": [[{"name": "Interruption", "input": {"op": "ask", "question": "Proceed with the plan?"}}]], "reply": "went ahead"}';
  await page.getByLabel('Agent to run').selectOption('ui-helper');
  await page.getByLabel('Input', { exact: true }).fill(script);
  await page.getByRole('button', { name: 'Start run' }).click();
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  await expect(terminal.getByText('? Proceed with the plan?', { exact: true })).toBeVisible();
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await terminal.getByLabel('Answer').fill('yes, go');
  await terminal.getByRole('button', { name: 'Send' }).click();
  await expect(terminal.getByText('went ahead', { exact: true })).toBeVisible();
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
});

test('cancel a run that waits for input', async ({ page }) => {
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  await page.getByLabel('Agent to run').selectOption('ui-helper');
  await page.getByLabel('Input', { exact: true }).fill('hello there');
  await page.getByLabel('interactive').check();
  await page.getByRole('button', { name: 'Start run' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await page.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('cancelled');
  await expect(page.getByRole('button', { name: 'Cancel' })).toHaveCount(0);
});

test('a tenant B session sees none of tenant A runs', async ({ page, request }) => {
  const minted = await api(request, 'POST', '/v1/tokens', TOKEN, {
    name: 'ui-e2e-beta',
    tenant: 'beta-ui',
    subject: 'beta-admin',
    scopes: ['tenant:admin'],
  });
  await login(page, minted.token);
  await page.goto('/ui/runs');
  await expect(page.getByText(/No runs yet|No agents yet/).first()).toBeVisible();
  await expect(page.locator('body')).not.toContainText('ui-helper');
  await page.goto('/ui/library/agents');
  await expect(page.getByText('No agents in this tenant yet.')).toBeVisible();
  await page.goto('/ui/usage');
  await expect(page.getByText('No model calls in this range.')).toBeVisible();
  await page.goto('/ui/tokens');
  await expect(page.getByRole('table')).toContainText('beta-admin');
  await expect(page.getByRole('table')).not.toContainText('bootstrap');
});

test('edit an agent: a bad field is shown on the field, then version 2 and its diff', async ({ page }) => {
  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Library' }).click();
  await page.getByRole('link', { name: 'ui-helper' }).click();
  const editor = page.getByRole('form', { name: 'Edit' });
  await editor.getByLabel('max iterations').fill('5000');
  await editor.getByRole('button', { name: 'Save new version' }).click();
  await expect(editor.getByRole('alert')).toContainText('max_iterations');
  await editor.getByLabel('max iterations').fill('12');
  await editor.getByLabel('System prompt').fill('You help the UI tests, briefly.');
  await editor.getByRole('button', { name: 'Save new version' }).click();
  await expect(page.getByRole('status')).toContainText('Saved as version #2');
  const versions = page.getByRole('table', { name: 'Versions' });
  await expect(versions.getByRole('row')).toHaveCount(3);
  const diff = page.getByLabel('Diff between versions');
  await expect(diff).toContainText('+   "system_prompt": "You help the UI tests, briefly."');
  await expect(diff).toContainText('+   "max_iterations": 12');
  await expect(diff.locator('.del')).not.toHaveCount(0);
  await shot(page, 'library');
  // The raw YAML view edits the same content.
  await editor.getByLabel('View').selectOption('yaml');
  const yaml = editor.getByLabel('Raw YAML');
  await expect(yaml).toHaveValue(/max_iterations: 12\n/);
  await yaml.fill((await yaml.inputValue()).replace('max_iterations: 12', 'max_iterations: 13'));
  await editor.getByRole('button', { name: 'Save new version' }).click();
  await expect(page.getByRole('status')).toContainText('Saved as version #3');
});

test('mint a token, use it, revoke it and see it refused', async ({ page, request }) => {
  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Tokens' }).click();
  const form = page.getByRole('form', { name: 'Mint a token' });
  await form.getByLabel('Name').fill('ui-e2e-minted');
  await form.getByLabel('Subject').fill('ui-e2e-robot');
  await form.getByLabel('runs:read', { exact: true }).check();
  await form.getByRole('button', { name: 'Mint' }).click();
  const secret = (await page.getByTestId('minted-token').textContent()) ?? '';
  expect(secret).toMatch(/^wft_/);
  await shot(page, 'tokens');
  const me = await request.get('/v1/me', { headers: { authorization: `Bearer ${secret}` } });
  expect(me.status()).toBe(200);
  expect((await me.json()).subject).toBe('ui-e2e-robot');
  page.once('dialog', (d) => d.accept());
  await page.getByRole('button', { name: 'Revoke ui-e2e-minted' }).click();
  await expect(page.getByRole('row', { name: /ui-e2e-minted/ })).toContainText('revoked');
  const refused = await request.get('/v1/me', { headers: { authorization: `Bearer ${secret}` } });
  expect(refused.status()).toBe(401);
});

test('the usage chart renders the tenant calls', async ({ page }) => {
  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Usage' }).click();
  await expect(page.getByTestId('usage-chart').locator('canvas')).toBeVisible();
  const table = page.getByRole('table', { name: 'Usage by group' });
  await expect(table).toContainText('mock-1');
  await page.getByLabel('Group by').selectOption('provider');
  await expect(table).toContainText('mock');
  await shot(page, 'usage');
});

test('the playground streams an answer and shows the provider chosen', async ({ page }) => {
  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Playground' }).click();
  await page.getByLabel('Model').fill('mock-1');
  await page.getByLabel('Message').fill('hello playground');
  await page.getByRole('button', { name: 'Send' }).click();
  const talk = page.getByRole('list', { name: 'Conversation' });
  await expect(talk.getByText('echo: hello playground', { exact: true })).toBeVisible();
  await expect(talk.getByTestId('chosen')).toContainText('→ mock/mock-1');
  await shot(page, 'playground');
});

test('a schedule: state, run now, pause; a webhook: its recent deliveries', async ({ page, request }) => {
  await api(request, 'PUT', '/v1/schedules/ui-nightly', TOKEN, {
    description: 'the UI tests',
    cron: '0 2 * * *',
    agent: 'ui-helper',
    input: 'nightly',
  });
  await api(request, 'PUT', '/v1/webhooks/ui-hook', TOKEN, {
    description: 'the UI tests',
    agent: 'ui-helper',
    signature: 'github',
    secret_env: 'WEFT_WEBHOOK_UI_E2E',
  });
  // An unsigned delivery is refused, and its verdict is kept for triage.
  const refused = await request.post('/v1/_webhooks/default/ui-hook', { data: { hello: 1 } });
  expect(refused.status()).toBe(401);

  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Schedules' }).click();
  const card = page.getByRole('article', { name: 'Schedule ui-nightly' });
  await expect(card.getByTestId('schedule-state')).toHaveText('active');
  await card.getByRole('button', { name: 'Run now' }).click();
  await expect(card.getByRole('table', { name: 'Recent fires of ui-nightly' })).toContainText('run_now');
  await card.getByRole('button', { name: 'Pause' }).click();
  await expect(card.getByTestId('schedule-state')).toHaveText('paused');
  await card.getByRole('button', { name: 'Resume' }).click();
  await expect(card.getByTestId('schedule-state')).toHaveText('active');
  await shot(page, 'schedules');

  await page.getByRole('link', { name: 'Webhooks' }).click();
  const hook = page.getByRole('article', { name: 'Webhook ui-hook' });
  await expect(hook.getByRole('table', { name: 'Recent deliveries of ui-hook' })).toContainText('unauthorized');
});

test('memory: write a key, change it, delete it; channels: peek the newest messages', async ({ page, request }) => {
  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Memory' }).click();
  await page.getByRole('button', { name: 'New key' }).click();
  const editor = page.getByRole('form', { name: 'Value' });
  await editor.getByLabel('Key', { exact: true }).fill('ui-note');
  await editor.getByLabel('JSON value').fill('{"mood": "sunny"}');
  await editor.getByRole('button', { name: 'Save' }).click();
  const keys = page.getByRole('table', { name: 'Keys' });
  await expect(keys.getByRole('row', { name: /ui-note/ })).toContainText('1');
  await editor.getByLabel('JSON value').fill('{"mood": "rainy"}');
  await editor.getByRole('button', { name: 'Save' }).click();
  await expect(editor).toContainText('version 2');
  const stored = await api(request, 'GET', '/v1/memory/tenant/default/ui-note', TOKEN);
  expect(stored.value).toEqual({ mood: 'rainy' });
  await shot(page, 'memory');
  await editor.getByRole('button', { name: 'Delete' }).click();
  await expect(page.getByText('No keys in this scope.')).toBeVisible();

  await api(request, 'PUT', '/v1/channels/ui-news', TOKEN, { scope: 'tenant' });
  await api(request, 'POST', '/v1/channels/ui-news/publish', TOKEN, { payload: { headline: 'first' } });
  await api(request, 'POST', '/v1/channels/ui-news/publish', TOKEN, { payload: { headline: 'second' } });
  await page.getByRole('link', { name: 'Channels' }).click();
  await page.getByRole('button', { name: 'ui-news' }).click();
  await expect(page.getByTestId('channel-stats')).toContainText('Newest seq 2');
  await expect(page.getByRole('table', { name: 'Newest messages' })).toContainText('"headline":"second"');
});

test('log out ends the session', async ({ page, context }) => {
  await login(page, TOKEN);
  await page.getByRole('button', { name: 'Log out' }).click();
  await expect(page.getByLabel('API token')).toBeVisible();
  expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
  expect((await context.cookies()).find((c) => c.name === 'weft_session')).toBeUndefined();
  await page.reload();
  await expect(page.getByLabel('API token')).toBeVisible();
});
