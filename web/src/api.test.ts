import { afterEach, describe, expect, it, vi } from 'vitest';
import { api, ApiError, can, ok, setCsrfToken, type Session } from './api';
import { runsQuery } from './pages/Runs';
import { readRunStream, type RunEvent } from './sse';

const session = (scopes: Session['scopes']): Session => ({
  tenant: 't',
  subject: 's',
  scopes,
  token_name: 'n',
  csrf_token: 'c',
  expires_at: '2030-01-01T00:00:00Z',
});

describe('can', () => {
  it('admin holds every scope', () => {
    expect(can(session(['admin']), 'memory:write')).toBe(true);
  });
  it('tenant:admin holds all but admin', () => {
    expect(can(session(['tenant:admin']), 'runs:create')).toBe(true);
    expect(can(session(['tenant:admin']), 'admin')).toBe(false);
  });
  it('a plain scope is only itself', () => {
    expect(can(session(['runs:read']), 'runs:read')).toBe(true);
    expect(can(session(['runs:read']), 'runs:create')).toBe(false);
  });
});

describe('the api client', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    setCsrfToken(null);
  });

  it('sends the session cookie, and the CSRF token on state-changing calls only', async () => {
    const seen: Request[] = [];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (req: Request) => {
        seen.push(req);
        return new Response('{}', { status: 200, headers: { 'content-type': 'application/json' } });
      }),
    );
    setCsrfToken('tok');
    await ok(api.GET('/v1/runs'));
    await ok(api.POST('/v1/runs/{id}/cancel', { params: { path: { id: 'x' } }, body: {} }));
    expect(seen[0].headers.get('x-csrf-token')).toBeNull();
    expect(seen[0].credentials).toBe('same-origin');
    expect(new URL(seen[0].url).pathname).toBe('/v1/runs');
    expect(seen[1].method).toBe('POST');
    expect(new URL(seen[1].url).pathname).toBe('/v1/runs/x/cancel');
    expect(seen[1].headers.get('x-csrf-token')).toBe('tok');
    expect(seen[1].headers.get('content-type')).toBe('application/json');
  });

  it('turns the gateway error body into an ApiError', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(
        async () =>
          new Response(
            JSON.stringify({ error: { code: 'invalid_request', message: 'bad', param: 'limit' } }),
            { status: 400 },
          ),
      ),
    );
    const err = await ok(api.GET('/v1/runs')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 400, code: 'invalid_request', message: 'bad', param: 'limit' });
  });

  it('makes an ApiError of an answer that is not the error shape', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response('upstream down', { status: 502, statusText: 'Bad Gateway' })));
    const err = await ok(api.GET('/v1/runs')).catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 502, code: 'error', message: '502 Bad Gateway' });
  });
});

describe('runsQuery', () => {
  it('keeps only the filters that are set', () => {
    expect(runsQuery('', '', null)).toEqual({ limit: 50 });
    expect(runsQuery('helper', 'running', 'abc')).toEqual({ limit: 50, agent: 'helper', status: 'running', cursor: 'abc' });
    expect(runsQuery('', 'nonsense', null)).toEqual({ limit: 50 });
    expect(runsQuery('', '', null, new Date('2026-11-28T09:00:00Z'))).toEqual({ limit: 50, since: '2026-11-28T09:00:00.000Z' });
  });
});

describe('readRunStream', () => {
  afterEach(() => vi.unstubAllGlobals());

  it('asks for the stream from a seq and reads its frames; an error answer is an ApiError', async () => {
    const seen: Request[] = [];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (req: Request) => {
        seen.push(req);
        return new Response('id: 3\nevent: user_input\ndata: {"seq":3,"kind":"user_input","data":{"text":"hi"}}\n\n', {
          status: 200,
          headers: { 'content-type': 'text/event-stream' },
        });
      }),
    );
    const events: RunEvent[] = [];
    await readRunStream('r/1', 3, (e) => events.push(e), new AbortController().signal);
    const url = new URL(seen[0].url);
    expect(url.pathname).toBe('/v1/runs/r%2F1/stream');
    expect(url.searchParams.get('from_seq')).toBe('3');
    expect(seen[0].headers.get('accept')).toBe('text/event-stream');
    expect(events).toEqual([{ seq: 3, kind: 'user_input', data: { text: 'hi' } }]);

    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ error: { code: 'not_found', message: 'no run' } }), { status: 404 })));
    await expect(readRunStream('r', 1, () => {}, new AbortController().signal)).rejects.toMatchObject({ status: 404, code: 'not_found' });
  });
});
