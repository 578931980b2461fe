import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  api,
  ApiError,
  can,
  deleteVolumeFile,
  filePathSerializer,
  ok,
  readVolumeFile,
  setCsrfToken,
  writeVolumeFile,
  type Session,
} from './api';
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

describe('the files routes', () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    setCsrfToken(null);
  });
  const sha = 'ab'.repeat(32);

  it('encode each segment of a file path and keep the slashes between them', () => {
    expect(filePathSerializer('/v1/volumes/{name}/files/{path}', { name: 'n/x', path: 'src/a b/c#.py' })).toBe(
      '/v1/volumes/n%2Fx/files/src/a%20b/c%23.py',
    );
  });

  it('read a text file with its sha256, a binary one as bytes, an empty one as empty text', async () => {
    const seen: Request[] = [];
    const answers = [
      new Response('hi\n', { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8', etag: `"${sha}"` } }),
      new Response(new Uint8Array([0, 1, 2]), { status: 200, headers: { 'content-type': 'application/octet-stream', etag: `"${sha}"` } }),
      new Response(null, { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8', etag: `"${sha}"`, 'content-length': '0' } }),
    ];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (req: Request) => {
        seen.push(req);
        return answers.shift();
      }),
    );
    expect(await readVolumeFile('notes', 'src/a.py')).toEqual({ path: 'src/a.py', sha256: sha, size: 3, text: 'hi\n' });
    expect(new URL(seen[0].url).pathname).toBe('/v1/volumes/notes/files/src/a.py');
    expect(await readVolumeFile('notes', 'b.bin')).toEqual({ path: 'b.bin', sha256: sha, size: 3, text: null });
    expect(await readVolumeFile('notes', 'empty')).toEqual({ path: 'empty', sha256: sha, size: 0, text: '' });
  });

  it('write bytes with If-Match (or If-None-Match: *) and the CSRF token; a 412 is an ApiError', async () => {
    const seen: { req: Request; body: Uint8Array }[] = [];
    vi.stubGlobal(
      'fetch',
      vi.fn(async (req: Request) => {
        seen.push({ req, body: new Uint8Array(await req.arrayBuffer()) });
        return new Response('{"id":"c"}', { status: 200, headers: { 'content-type': 'application/json' } });
      }),
    );
    setCsrfToken('tok');
    expect(await writeVolumeFile('notes', 'a/é.txt', 'é\n', sha)).toEqual({ id: 'c' });
    const { req, body } = seen[0];
    expect(req.method).toBe('PUT');
    expect(new URL(req.url).pathname).toBe('/v1/volumes/notes/files/a/%C3%A9.txt');
    expect(req.headers.get('if-match')).toBe(sha);
    expect(req.headers.get('if-none-match')).toBeNull();
    expect(req.headers.get('content-type')).toBe('application/octet-stream');
    expect(req.headers.get('x-csrf-token')).toBe('tok');
    expect([...body]).toEqual([0xc3, 0xa9, 0x0a]);
    await writeVolumeFile('notes', 'new.txt', '', null);
    expect(seen[1].req.headers.get('if-none-match')).toBe('*');
    expect(seen[1].req.headers.get('if-match')).toBeNull();
    await deleteVolumeFile('notes', 'a/b', sha);
    expect(seen[2].req.method).toBe('DELETE');
    expect(seen[2].req.headers.get('if-match')).toBe(sha);

    vi.stubGlobal(
      'fetch',
      vi.fn(async () => new Response(JSON.stringify({ error: { code: 'precondition_failed', message: 'stale' } }), { status: 412 })),
    );
    await expect(writeVolumeFile('notes', 'a', 'x', sha)).rejects.toMatchObject({ status: 412, code: 'precondition_failed' });
  });
});
