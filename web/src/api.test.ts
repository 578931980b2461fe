import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError, can, listOf, request, setCsrfToken, type Session } from './api';
import { runsQuery } from './pages/Runs';

const session = (scopes: Session['scopes']): Session => ({
  tenant: 't',
  subject: 's',
  scopes,
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

describe('request', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    setCsrfToken(null);
  });

  it('sends the CSRF token on state-changing calls only', async () => {
    const seen: Headers[] = [];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (_path: string, init: RequestInit) => {
        seen.push(new Headers(init.headers));
        return new Response('{}', { status: 200 });
      }),
    );
    setCsrfToken('tok');
    await request('/v1/runs');
    await request('/v1/runs/x/cancel', { method: 'POST', body: '{}' });
    expect(seen[0].get('x-csrf-token')).toBeNull();
    expect(seen[1].get('x-csrf-token')).toBe('tok');
    expect(seen[1].get('content-type')).toBe('application/json');
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
    const err = await request('/v1/runs').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 400, code: 'invalid_request', param: 'limit' });
  });
});

describe('runsQuery', () => {
  it('keeps only the filters that are set', () => {
    expect(runsQuery('', '', null)).toBe('/v1/runs?limit=50');
    expect(runsQuery('helper', 'running', 'abc')).toBe(
      '/v1/runs?limit=50&agent=helper&status=running&cursor=abc',
    );
    expect(runsQuery('', '', null, new Date('2026-11-28T09:00:00Z'))).toBe(
      '/v1/runs?limit=50&since=2026-11-28T09%3A00%3A00.000Z',
    );
  });
});

describe('listOf', () => {
  it('reads the envelope: data and next_cursor', () => {
    expect(listOf({ data: [1, 2], next_cursor: 'c2', runs: [9] }, 'runs')).toMatchObject({ data: [1, 2], next_cursor: 'c2' });
  });

  it("falls back to the route's old key, from a backend without the envelope", () => {
    expect(listOf({ runs: [{ run_id: 'r' }], next_cursor: null }, 'runs')).toMatchObject({ data: [{ run_id: 'r' }], next_cursor: null });
    expect(listOf({ messages: [1] }, 'messages')).toMatchObject({ data: [1], next_cursor: null });
  });

  it('keeps the answer’s other fields, and reads nothing from what is no list', () => {
    expect(listOf<number, { truncated: boolean }>({ data: [], truncated: true }).truncated).toBe(true);
    expect(listOf({ runs: 'no' }, 'runs').data).toEqual([]);
    expect(listOf(null).data).toEqual([]);
    expect(listOf({ data: [], next_cursor: '' }).next_cursor).toBeNull();
  });
});
