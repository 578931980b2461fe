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
  // The result, a string holding JSON, is shown as indented JSON rather than one quoted line.
  await expect(terminal.getByLabel('Result')).toHaveText(/^\{\n {2}"time": "[^"]+"\n\}$/);
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
  // The list envelope `{data, next_cursor}` without the old `runs` key (a backend after the alias
  // is dropped) lists the same runs.
  await page.route(
    (url) => url.pathname === '/v1/runs',
    async (route) => {
      const res = await route.fetch();
      const body = await res.json();
      const data = body.data ?? body.runs;
      expect(Array.isArray(data)).toBe(true);
      await route.fulfill({ response: res, json: { data, next_cursor: body.next_cursor ?? null } });
    },
  );
  await page.reload();
  await expect(page.getByRole('table')).toContainText('ui-helper');
});

test("the README's agent, first run from the launcher without a script: its tool, then a sensible answer", async ({
  page,
  request,
}) => {
  // README.md, "Agent runs": `PUT /v1/agents/helper {"model":"mock-1","tools":["Context"]}`, under a
  // name of its own so the test can run again on the same fleet.
  const name = `readme-helper-${Date.now().toString(36)}`;
  await api(request, 'PUT', `/v1/agents/${name}`, TOKEN, { model: 'mock-1', tools: ['Context'] });
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  // The launcher says how to script the mock model.
  const launcher = page.getByRole('form', { name: 'Start a run' });
  await expect(launcher.locator('#launcher-hint')).toContainText('#mock {"turns": [[');
  await expect(launcher.locator('#launcher-hint')).toContainText('"reply"');
  await page.getByLabel('Agent to run').selectOption(name);
  await page.getByLabel('Input', { exact: true }).fill('what time is it?');
  await page.getByRole('button', { name: 'Start run' }).click();
  await expect(page).toHaveURL(/\/ui\/runs\/[0-9a-f-]+$/);
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  // The mock called Context with arguments built from its schema (`op`'s first value)…
  await terminal.getByText(/Context\(/).click();
  await expect(terminal.getByLabel('Input')).toContainText('"op": "time"');
  // …and answered with the tool's result.
  await expect(terminal.locator('li.t-text').last()).toHaveText(/^the tool returned: \{"time":"[^"]+"\}$/);
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

test('a run that ends while its page is open: the header catches up at once, without a reload', async ({
  page,
  request,
}) => {
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  const script =
    '#mock {"turns": [[{"name": "Interruption", "input": {"op": "ask", "question": "Finish now?"}}]], "reply": "finished it"}';
  await page.getByLabel('Agent to run').selectOption('ui-helper');
  await page.getByLabel('Input', { exact: true }).fill(script);
  await page.getByRole('button', { name: 'Start run' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await expect(page.getByRole('button', { name: 'Cancel' })).toBeVisible();
  const id = new URL(page.url()).pathname.split('/').pop() ?? '';
  // From here on the run's GET answers what it said while the run waited — a poll that lags as
  // far as it may — so only the run's stream can tell the header that the run ended.
  const waiting = await api(request, 'GET', `/v1/runs/${id}`, TOKEN);
  expect(waiting.status).toBe('awaiting_input');
  let polls = 0;
  await page.route(
    (url) => url.pathname === `/v1/runs/${id}`,
    (route) => {
      polls += 1;
      return route.fulfill({ json: waiting });
    },
  );
  let loads = 0;
  page.on('load', () => (loads += 1));
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  await terminal.getByLabel('Answer').fill('yes');
  await terminal.getByRole('button', { name: 'Send' }).click();
  await expect(terminal.getByText('finished it', { exact: true })).toBeVisible();
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  const done = await api(request, 'GET', `/v1/runs/${id}`, TOKEN);
  expect(done.status).toBe('succeeded');
  expect(done.usage.completion_tokens).toBeGreaterThan(waiting.usage?.completion_tokens ?? 0);
  await expect(page.getByTestId('run-usage')).toHaveText(`${done.usage.prompt_tokens} / ${done.usage.completion_tokens}`);
  await expect(page.getByRole('button', { name: 'Cancel' })).toHaveCount(0);
  expect(polls, 'the page did ask for the run again (and was answered the stale run)').toBeGreaterThan(0);
  expect(loads, 'no reload').toBe(0);
});

test('the theme follows the system until one is chosen; the choice sticks', async ({ page }) => {
  const html = page.locator('html');
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.goto('/ui/');
  await expect(html).toHaveAttribute('data-theme', 'dark');
  expect(await background()).toBe('rgb(17, 20, 24)');
  await login(page, TOKEN);
  await page.emulateMedia({ colorScheme: 'light' });
  await expect(html).toHaveAttribute('data-theme', 'light');
  expect(await background()).toBe('rgb(255, 255, 255)');
  await page.emulateMedia({ colorScheme: 'dark' });
  await expect(html).toHaveAttribute('data-theme', 'dark');
  // An explicit choice wins over the system's, across its changes and a reload.
  await page.getByLabel('Theme').selectOption('light');
  await expect(html).toHaveAttribute('data-theme', 'light');
  await page.emulateMedia({ colorScheme: 'light' });
  await page.getByLabel('Theme').selectOption('dark');
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await page.reload();
  await expect(page.getByRole('navigation', { name: 'Main' })).toBeVisible();
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await expect(page.getByLabel('Theme')).toHaveValue('dark');
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.emulateMedia({ colorScheme: 'light' });
  await expect(html).toHaveAttribute('data-theme', 'dark');
  // Back to the system's: light now, and following it again.
  await page.getByLabel('Theme').selectOption('system');
  await expect(html).toHaveAttribute('data-theme', 'light');
  await page.emulateMedia({ colorScheme: 'dark' });
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await page.reload();
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await expect(page.getByLabel('Theme')).toHaveValue('system');
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
  // The end reaches the transcript too, even where the live stream did not carry it.
  await expect(page.getByRole('list', { name: 'Run transcript' }).getByText(/^run cancelled/)).toBeVisible();
});

test('pause a run that waits for input: a reply wakes it into paused, Resume takes the reply', async ({ page }) => {
  await login(page, TOKEN);
  await page.goto('/ui/runs');
  await page.getByLabel('Agent to run').selectOption('ui-helper');
  await page.getByLabel('Input', { exact: true }).fill('hello there');
  await page.getByLabel('interactive').check();
  await page.getByRole('button', { name: 'Start run' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await page.getByRole('button', { name: 'Pause' }).click();
  // Asked while parked for input: it stays waiting until woken.
  await expect(page.getByTestId('run-pause-note')).toContainText('pause asked');
  await expect(page.getByRole('button', { name: 'Resume' })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Pause' })).toHaveCount(0);
  await page.getByLabel('Your reply').fill('and again');
  await page.getByRole('button', { name: 'Send' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('paused');
  await expect(page.getByTestId('run-pause-note')).toHaveText(/held by a pause of this run/);
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  await expect(terminal.getByText(/^⏸ run paused/)).toBeVisible();
  await page.getByRole('button', { name: 'Resume' }).click();
  await expect(terminal.getByText(/^▶ run resumed/)).toBeVisible();
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await expect(page.getByRole('button', { name: 'Pause' })).toBeVisible();
  await page.getByRole('button', { name: 'Cancel' }).click();
  await expect(page.getByTestId('run-status')).toHaveText('cancelled');
});

test('operations: drain the tenant until drained (a waiting run cannot be resumed alone meanwhile), then resume it; the fleet maintenance offered to admin', async ({
  page,
  request,
}) => {
  const waiting = await api(request, 'POST', '/v1/runs', TOKEN, { agent: 'ui-helper', input: 'hello', interactive: true });
  await login(page, TOKEN);
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Operations' }).click();
  const tenant = page.getByTestId('tenant-drain');
  await expect(page.getByTestId('tenant-drain-state')).toHaveText('not draining');
  await expect(page.getByTestId('tenant-drain-counts')).toContainText('running');
  await expect(page.getByTestId('fleet-drain-state')).toHaveText('not draining');
  await expect(page.getByTestId('fleet-drain').getByRole('button', { name: 'Drain' })).toBeVisible();
  page.once('dialog', (d) => void d.accept());
  await tenant.getByRole('button', { name: 'Drain' }).click();
  // Nothing of the tenant is left running (the waiting run stays parked): drained once polled.
  await expect(page.getByTestId('tenant-drain-state')).toHaveText('drained');
  await expect(tenant.getByText(/^Draining since/)).toBeVisible();
  await expect(tenant.getByRole('table')).toContainText('drain');
  // The waiting run is held by the drain: its own Resume is refused, and the page says why.
  await page.goto(`/ui/runs/${waiting.run_id}`);
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  await expect(page.getByTestId('run-pause-note')).toContainText('its tenant drains');
  await page.getByRole('button', { name: 'Resume' }).click();
  await expect(page.getByRole('alert')).toContainText('is draining');
  await page.goto('/ui/operations');
  await tenant.getByRole('button', { name: 'Resume' }).click();
  await expect(page.getByTestId('tenant-drain-state')).toHaveText('not draining');
  await expect(tenant.getByRole('table').locator('tbody tr').first()).toContainText('resume');
  await expect(tenant.getByRole('button', { name: 'Drain' })).toBeVisible();
  await api(request, 'POST', `/v1/runs/${waiting.run_id}/cancel`, TOKEN, {});
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

test('a schedule: cron, agent, state, run now, pause; a webhook: URL, agent, health, deliveries', async ({
  page,
  request,
  context,
}) => {
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
    secret_env: 'WEFT_WEBHOOK_DEFAULT__UI_E2E',
  });
  // An unsigned delivery is refused, and its verdict is kept for triage.
  const refused = await request.post('/v1/_webhooks/default/ui-hook', { data: { hello: 1 } });
  expect(refused.status()).toBe(401);

  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Schedules' }).click();
  const card = page.getByRole('article', { name: 'Schedule ui-nightly' });
  await expect(card.getByTestId('schedule-state')).toHaveText('active');
  await expect(card.getByTestId('schedule-cron')).toHaveText('0 2 * * * in UTC');
  await expect(card.getByTestId('schedule-agent')).toHaveText('ui-helper');
  await expect(card.getByTestId('schedule-next')).not.toHaveText('—');
  await card.getByRole('button', { name: 'Run now' }).click();
  await expect(card.getByRole('table', { name: 'Recent fires of ui-nightly' })).toContainText('run_now');
  await expect(card.getByTestId('schedule-health')).toHaveText(/^last run /);
  await card.getByRole('button', { name: 'Pause' }).click();
  await expect(card.getByTestId('schedule-state')).toHaveText('paused');
  await card.getByRole('button', { name: 'Resume' }).click();
  await expect(card.getByTestId('schedule-state')).toHaveText('active');
  await shot(page, 'schedules');

  // A definition's `warnings` (what it refers to that is not there yet: here the secret variable,
  // which nobody set) show as badges.
  await page.getByRole('link', { name: 'Webhooks' }).click();
  const hook = page.getByRole('article', { name: 'Webhook ui-hook' });
  await expect(hook.getByRole('table', { name: 'Recent deliveries of ui-hook' })).toContainText('unauthorized');
  await expect(hook.getByRole('note').first()).toContainText('WEFT_WEBHOOK_DEFAULT__UI_E2E');
  await expect(hook.getByTestId('webhook-target')).toHaveText('ui-helper');
  await expect(hook.getByTestId('webhook-health')).toHaveText('last delivery unauthorized');
  await expect(hook.getByTestId('webhook-last-rejected')).toContainText('unauthorized');
  await expect(hook.getByTestId('webhook-last-accepted')).toHaveText('never');
  const url = `${new URL(page.url()).origin}/v1/_webhooks/default/ui-hook`;
  await expect(hook.getByTestId('webhook-url')).toHaveText(url);
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await hook.getByRole('button', { name: 'Copy the URL of ui-hook' }).click();
  await expect(hook.getByRole('button', { name: 'Copy the URL of ui-hook' })).toHaveText('Copied');
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(url);
  // The URL shown is the receiver's: a delivery posted to it is judged (and refused, unsigned).
  expect((await request.post(url, { data: { hello: 2 } })).status()).toBe(401);
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

test('files: a volume tree and a file, edit and save, the change and its diff, undo, snapshots; a run shows its file change folded', async ({
  page,
  request,
}) => {
  const vol = 'ui-files';
  const auth = { authorization: `Bearer ${TOKEN}` };
  // A fresh volume each time (the test may run again on the same fleet).
  await request.delete(`/v1/volumes/${vol}`, { headers: auth });
  await api(request, 'POST', '/v1/volumes', TOKEN, { name: vol, description: 'the UI tests' });
  // Files travel as raw bytes.
  const put = async (path: string, data: string | Buffer) => {
    const res = await request.fetch(`/v1/volumes/${vol}/files/${path}`, {
      method: 'PUT',
      headers: { ...auth, 'content-type': 'application/octet-stream' },
      data,
    });
    expect(res.ok(), `PUT ${path}: ${res.status()} ${await res.text()}`).toBeTruthy();
  };
  const read = async (path: string) => (await request.get(`/v1/volumes/${vol}/files/${path}`, { headers: auth })).text();
  await put('src/app.py', 'def main():\n    return 1\n');
  await put('README.md', '# notes\n');
  await put('logo.bin', Buffer.from([0, 1, 2, 255]));

  await login(page, TOKEN);
  await page.getByRole('link', { name: 'Files' }).click();
  await page.getByRole('table', { name: 'Volumes' }).getByRole('link', { name: vol }).click();
  await expect(page.getByTestId('volume-files')).toHaveText('3');
  const tree = page.getByRole('list', { name: 'Tree' });
  await expect(tree.getByRole('button', { name: 'README.md' })).toBeVisible();
  // Folders start folded.
  await expect(tree.getByRole('button', { name: 'app.py' })).toHaveCount(0);
  const file = page.getByRole('region', { name: 'File' });
  // A binary file is described, not shown.
  await tree.getByRole('button', { name: 'logo.bin' }).click();
  await expect(file.getByTestId('file-binary')).toContainText('A binary file of 4 bytes, sha256');
  await tree.getByRole('button', { name: 'src/' }).click();
  await tree.getByRole('button', { name: 'app.py' }).click();
  const content = file.getByLabel('Content');
  await expect(content).toContainText('def main():');
  await expect(content.locator('.ln')).toHaveText(['1', '2']);

  // Edit and save (a compare-and-set on the sha256 shown).
  await file.getByRole('button', { name: 'Edit' }).click();
  await file.getByLabel('File text').fill('def main():\n    return 2\n');
  await file.getByRole('button', { name: 'Save' }).click();
  await expect(content).toContainText('return 2');
  expect(await read('src/app.py')).toBe('def main():\n    return 2\n');

  // The change, newest first, its diff folded.
  const changes = page.getByRole('list', { name: 'Changes' });
  const edit = changes.getByRole('listitem', { name: 'Change #4' });
  await expect(changes.getByRole('listitem').first()).toHaveAccessibleName('Change #4');
  await expect(edit).toContainText('changed src/app.py (+1 −1)');
  await expect(edit).toContainText('http');
  const diff = edit.getByLabel('Diff of src/app.py in change #4');
  await expect(diff).toBeHidden();
  await edit.getByText('changed src/app.py (+1 −1)').click();
  await expect(diff.locator('.del')).toHaveText(['-    return 1']);
  await expect(diff.locator('.add')).toHaveText(['+    return 2']);
  await shot(page, 'files');

  // Undo it: the file is as it was, the change is marked undone, the undo is a change.
  await edit.getByRole('button', { name: 'Undo #4' }).click();
  await expect(content).toContainText('return 1');
  expect(await read('src/app.py')).toBe('def main():\n    return 1\n');
  await expect(edit).toContainText('undone');
  await expect(changes.getByRole('listitem').first()).toContainText('undo of #4');

  // An undo over a later edit is refused, naming the file.
  await put('README.md', '# notes, edited elsewhere\n');
  const readme = changes.getByRole('listitem', { name: 'Change #2' });
  await readme.getByRole('button', { name: 'Undo #2' }).click();
  await expect(readme.getByRole('alert')).toContainText('README.md');
  expect(await read('README.md')).toBe('# notes, edited elsewhere\n');

  // A save over a version changed elsewhere is refused (412), then reloaded.
  await file.getByRole('button', { name: 'Edit' }).click();
  await put('src/app.py', 'def main():\n    return 3\n');
  await file.getByLabel('File text').fill('def main():\n    return 4\n');
  await file.getByRole('button', { name: 'Save' }).click();
  await expect(file.getByRole('alert')).toContainText('changed elsewhere');
  expect(await read('src/app.py')).toBe('def main():\n    return 3\n');
  await file.getByRole('button', { name: 'Reload' }).click();
  await expect(file.getByLabel('File text')).toHaveValue('def main():\n    return 3\n');
  await file.getByRole('button', { name: 'Discard' }).click();

  // Snapshots: take one, add a file elsewhere (the page follows), restore after a confirmation.
  await page.getByRole('form', { name: 'Take a snapshot' }).getByLabel('Label').fill('before extra');
  await page.getByRole('button', { name: 'Take snapshot' }).click();
  const snaps = page.getByRole('table', { name: 'Snapshots' });
  await expect(snaps).toContainText('before extra');
  await put('extra.txt', 'more\n');
  await expect(tree.getByRole('button', { name: 'extra.txt' })).toBeVisible();
  page.once('dialog', (d) => d.accept());
  await snaps.getByRole('button', { name: 'Restore before extra' }).click();
  await expect(tree.getByRole('button', { name: 'extra.txt' })).toHaveCount(0);
  await expect(changes.getByRole('listitem').first()).toContainText('restore');
  expect((await request.get(`/v1/volumes/${vol}/files/extra.txt`, { headers: auth })).status()).toBe(404);

  // A run of an agent bound to the volume: its Write shows in the terminal as one folded line
  // that unfolds to the diff.
  await api(request, 'PUT', '/v1/agents/ui-writer', TOKEN, { model: 'mock-1', tools: ['Write'], volumes: [{ name: vol }] });
  const started = await api(request, 'POST', '/v1/runs', TOKEN, {
    agent: 'ui-writer',
    input: '#mock {"turns": [[{"name": "Write", "input": {"path": "a.txt", "content": "hi\\n"}}]], "reply": "done"}',
  });
  const runId = started.run_id;
  await page.goto(`/ui/runs/${runId}`);
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  const terminal = page.getByRole('list', { name: 'Run transcript' });
  const changed = terminal.getByText(`✎ created a.txt (+1 −0) in ${vol}`);
  await expect(changed).toBeVisible();
  const runDiff = terminal.getByLabel('Diff of a.txt');
  await expect(runDiff).toBeHidden();
  await changed.click();
  await expect(runDiff.locator('.add')).toHaveText(['+hi']);
  // The change is in the volume's changelog, with its run.
  await terminal.getByRole('link', { name: `Open ${vol} in Files` }).click();
  const byRun = page.getByRole('list', { name: 'Changes' }).getByRole('listitem').first();
  await expect(byRun).toContainText('created a.txt (+1 −0)');
  await expect(byRun).toContainText('Write');
  await expect(byRun.getByRole('link', { name: /^run / })).toHaveAttribute('href', `/ui/runs/${runId}`);
});

test('nothing is cut off at 420 px wide: every page fits, tables scroll inside themselves', async ({ page, request }) => {
  await page.setViewportSize({ width: 420, height: 900 });
  const fits = async (what: string) => {
    await expect
      .poll(() => page.evaluate(() => (document.scrollingElement?.scrollWidth ?? 0) - window.innerWidth), {
        message: `${what} is no wider than the viewport`,
      })
      .toBeLessThanOrEqual(0);
  };
  await page.goto('/ui/');
  await expect(page.getByLabel('API token')).toBeVisible();
  await fits('the sign-in page');
  await login(page, TOKEN);
  // Every link of the main navigation is on screen.
  for (const link of await page.getByRole('navigation', { name: 'Main' }).getByRole('link').all()) {
    const box = await link.boundingBox();
    expect(box && box.x >= 0 && box.x + box.width <= 420, `${await link.textContent()} is on screen`).toBe(true);
  }
  const list = await api(request, 'GET', '/v1/runs?limit=50&agent=ui-helper', TOKEN);
  const withTool = (list.data ?? list.runs).at(-1).run_id;
  await api(request, 'PUT', '/v1/memory/tenant/default/ui-narrow', TOKEN, {
    value: { note: 'a value long enough to need wrapping: '.repeat(4), list: [1, 2, 3] },
  });
  const pages: [string, (p: Page) => ReturnType<Page['locator']>][] = [
    ['/ui/runs', (p) => p.getByRole('table')],
    [`/ui/runs/${withTool}`, (p) => p.getByRole('list', { name: 'Run transcript' }).locator('li').first()],
    ['/ui/library/agents', (p) => p.getByRole('table')],
    ['/ui/library/agents/ui-helper', (p) => p.getByLabel('Diff between versions')],
    ['/ui/library/schedules/ui-nightly', (p) => p.getByRole('table', { name: 'Versions' })],
    ['/ui/memory', (p) => p.getByRole('table', { name: 'Keys' })],
    ['/ui/files/ui-files?path=src/app.py', (p) => p.getByLabel('Content')],
    ['/ui/channels', (p) => p.getByRole('table', { name: 'Channels' })],
    ['/ui/schedules', (p) => p.getByRole('table', { name: 'Recent fires of ui-nightly' })],
    ['/ui/webhooks', (p) => p.getByRole('table', { name: 'Recent deliveries of ui-hook' })],
    ['/ui/tokens', (p) => p.getByRole('table')],
    ['/ui/usage', (p) => p.getByRole('table', { name: 'Usage by group' })],
    ['/ui/playground', (p) => p.getByRole('list', { name: 'Conversation' })],
    ['/ui/operations', (p) => p.getByTestId('fleet-drain-state')],
  ];
  for (const [path, ready] of pages) {
    await page.goto(path);
    await expect(ready(page)).toBeVisible();
    await fits(path);
  }
  // Opened parts too: a tool call unfolded, a memory value, a channel's messages.
  await page.goto(`/ui/runs/${withTool}`);
  await page.getByRole('list', { name: 'Run transcript' }).getByText(/Context\(/).click();
  await expect(page.getByLabel('Result')).toBeVisible();
  await fits('a run with a tool call unfolded');
  await page.goto('/ui/memory');
  await page.getByRole('button', { name: 'ui-narrow' }).click();
  await expect(page.getByLabel('JSON value')).toBeVisible();
  await fits('a memory value');
  await page.goto('/ui/channels');
  await page.getByRole('button', { name: 'ui-news' }).click();
  await expect(page.getByRole('table', { name: 'Newest messages' })).toBeVisible();
  await fits('a channel peek');
  await api(request, 'DELETE', '/v1/memory/tenant/default/ui-narrow', TOKEN);
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

test('a plan run: its task graph, approval (a stale version reloads), the tasks passing, an attempt with its checks and verdict', async ({
  page,
  request,
}) => {
  await api(request, 'PUT', '/v1/agents/ui-plan-lead', TOKEN, {
    description: 'does the tasks of the UI tests plan runs',
    model: 'mock-1',
    tools: ['Write', 'Read', 'List'],
    volumes: [{ name: 'run' }],
  });
  const write = (path: string) =>
    `Write ${path}.\n#mock {"turns": [[{"name": "Write", "input": {"path": "${path}", "content": "A"}}]], "reply": "done"}`;
  const started = await api(request, 'POST', '/v1/runs', TOKEN, {
    agent: 'ui-plan-lead',
    mode: 'plan',
    input: 'Write a.txt, then b.txt',
    plan: {
      approval: 'before_execute',
      tasks: [
        { id: 'a', description: write('a.txt'), checks: [{ check: 'exists', path: 'a.txt' }] },
        { id: 'b', description: write('b.txt'), depends_on: ['a'], checks: [{ check: 'exists', path: 'b.txt' }] },
      ],
    },
  });
  const runId: string = started.run_id;
  await login(page, TOKEN);
  await page.goto(`/ui/runs/${runId}`);
  const plan = page.getByRole('region', { name: 'Plan' });
  await expect(plan.getByTestId('plan-task-a')).toBeVisible();
  await expect(plan.getByTestId('plan-task-status-a')).toHaveText(/pending/);
  await expect(plan.getByTestId('plan-task-a')).toContainText('no attempts');
  // b depends on a: it is drawn in the next column, an edge between them.
  const [boxA, boxB] = [await plan.getByTestId('plan-task-a').boundingBox(), await plan.getByTestId('plan-task-b').boundingBox()];
  expect(boxB!.x).toBeGreaterThan(boxA!.x + boxA!.width);
  await expect(plan.locator('svg.plan-edges > path')).toHaveCount(1);
  await expect(plan.getByTestId('plan-version')).toHaveText('1');
  await expect(plan.getByTestId('plan-status')).toHaveText(/proposed, awaiting approval/);
  await expect(page.getByTestId('run-status')).toHaveText('awaiting_input');
  // A plan run parks only for its approval: no free-text reply box.
  await expect(page.getByLabel('Your reply')).toHaveCount(0);
  await expect(plan.getByRole('button', { name: 'Retry a' })).toBeDisabled();
  await expect(plan.getByRole('button', { name: 'Skip a' })).toBeEnabled();

  // Approving a version that is no longer the plan's (the gateway's 412) says so and reloads it.
  const planUrl = (url: URL) => url.pathname === `/v1/runs/${runId}/plan`;
  await page.route(planUrl, async (route) => {
    if (route.request().method() !== 'PUT') return route.fallback();
    expect(route.request().headers()['if-match']).toBe('"1"');
    await route.fulfill({
      status: 412,
      json: { error: { code: 'precondition_failed', message: 'If-Match names version 1, but the current version is 2' } },
    });
  });
  const reloaded = page.waitForRequest((r) => r.method() === 'GET' && planUrl(new URL(r.url())));
  await plan.getByRole('button', { name: 'Approve' }).click();
  await expect(plan.getByRole('alert')).toHaveText('the plan changed — reloaded');
  await reloaded;
  await page.unroute(planUrl);

  // Approved for real: the task runs, its check passes, the run succeeds.
  await plan.getByRole('button', { name: 'Approve' }).click();
  await expect(plan.getByTestId('plan-task-status-a')).toHaveText(/passed/);
  await expect(plan.getByTestId('plan-task-status-b')).toHaveText(/passed/);
  await expect(plan.getByTestId('plan-status')).toHaveText(/accepted/);
  await expect(plan.getByRole('button', { name: 'Approve' })).toHaveCount(0);
  await expect(plan.getByTestId('plan-task-a')).toContainText('1 attempt');
  await expect(plan.getByTestId('plan-task-a')).toContainText('pass (ok)');
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  await expect(plan.getByRole('button', { name: 'Skip a' })).toBeDisabled();

  // The task unfolds to its attempt: the sub-run, the check passed, the verdict.
  await plan.getByRole('button', { name: 'Task a', exact: true }).click();
  const attempts = plan.getByRole('list', { name: 'Attempts of a' });
  await expect(attempts).toContainText('Attempt 1');
  await expect(attempts.getByRole('list', { name: 'Checks of attempt 1' })).toHaveText('pass exists a.txt');
  await expect(attempts).toContainText('pass (ok)');
  await expect(attempts).toContainText('confidence 100%');
  await shot(page, 'plan');
  const child = attempts.getByRole('link');
  await expect(child).toHaveAttribute('href', /^\/ui\/runs\/[0-9a-f-]{36}$/);
  // At 420 px wide the graph scrolls inside itself and the unfolded attempt wraps: the page fits.
  await page.setViewportSize({ width: 420, height: 900 });
  await expect
    .poll(() => page.evaluate(() => (document.scrollingElement?.scrollWidth ?? 0) - window.innerWidth))
    .toBeLessThanOrEqual(0);
  // The sub-run is an ordinary run: its page has no plan.
  await child.click();
  await expect(page.getByTestId('run-status')).toHaveText('succeeded');
  await expect(page.getByRole('list', { name: 'Run transcript' }).getByText('done', { exact: true })).toBeVisible();
  await expect(page.getByRole('region', { name: 'Plan' })).toHaveCount(0);
});
