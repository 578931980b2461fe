// The UI's one door to the gateway: an `openapi-fetch` client typed by the gateway's OpenAPI
// document (`src/openapi.d.ts`, generated from shared/api/openapi.json by `npm run gen:api`), so
// a path, a parameter, a request body or a field read from an answer that the document does not
// have fails the typecheck. The session cookie (HttpOnly, SameSite=Strict) is sent by the
// browser; state-changing calls also carry the session's CSRF token in a header, which a page on
// another site cannot read or set.

import createClient, { type Middleware } from 'openapi-fetch';
import type { components, paths } from './openapi';

/** The document's schemas: `Schemas['Run']` is a run as every run route answers it. */
export type Schemas = components['schemas'];

/** A token scope (the names `POST /v1/tokens` takes). */
export type Scope = Schemas['CreateToken']['scopes'][number];

/** The browser's session (`GET /ui/api/session`). */
export type Session = Schemas['UiSession'];

/** An error the gateway answered with (`{"error":{"code","message","param"}}`). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly param?: string,
  ) {
    super(message);
  }
}

let csrfToken: string | null = null;

export function setCsrfToken(token: string | null) {
  csrfToken = token;
}

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

const csrf: Middleware = {
  onRequest({ request }) {
    if (!SAFE.has(request.method) && csrfToken) {
      request.headers.set('x-csrf-token', csrfToken);
    }
    return request;
  },
};

/**
 * The gateway's API. Paths are the document's (`/v1/runs/{id}`), with `params.path`,
 * `params.query` and `body` checked against it; answers are the `application/json` ones. A call
 * resolves to `{ data, error, response }`: wrap it in `ok` to get the data or an `ApiError`.
 */
export const api = createClient<paths, 'application/json'>({
  // Absolute, so a Request can be built outside a page too (tests); same origin as the page.
  baseUrl: globalThis.location?.origin ?? '',
  credentials: 'same-origin',
  // Looked up per call, not captured once.
  fetch: (req) => globalThis.fetch(req),
});
api.use(csrf);

/** What an `api` call resolves to. */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The data of a 2xx answer (undefined for a 204); throws `ApiError` on any other. */
export async function ok<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw apiError(response, error);
  return data as T;
}

/** The `ApiError` of a non-2xx answer, from its body (`error` as parsed, JSON or text). */
export function apiError(res: Response, body: unknown): ApiError {
  const e = body && typeof body === 'object' && 'error' in body ? (body as { error: unknown }).error : null;
  if (e && typeof e === 'object') {
    const { code, message, param } = e as Record<string, unknown>;
    return new ApiError(
      res.status,
      typeof code === 'string' ? code : 'error',
      typeof message === 'string' ? message : res.statusText,
      typeof param === 'string' ? param : undefined,
    );
  }
  return new ApiError(res.status, 'error', `${res.status} ${res.statusText}`);
}

/** The body of a streamed (`text/event-stream`) answer; throws `ApiError` on a non-2xx one. */
export async function stream(call: Promise<Answer<ReadableStream<Uint8Array> | null>>): Promise<ReadableStream<Uint8Array>> {
  const body = await ok(call);
  if (!body) throw new Error('the answer has no body');
  return body;
}

/** The current session, or null when the browser holds none (or it expired or was revoked). */
export async function currentSession(): Promise<Session | null> {
  try {
    const s = await ok(api.GET('/ui/api/session'));
    setCsrfToken(s.csrf_token);
    return s;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      setCsrfToken(null);
      return null;
    }
    throw e;
  }
}

/** Exchanges a `wft_` token for a session cookie. The token is not kept by the page. */
export async function login(token: string): Promise<Session> {
  const s = await ok(api.POST('/ui/api/session', { body: { token } }));
  setCsrfToken(s.csrf_token);
  return s;
}

export async function logout(): Promise<void> {
  await ok(api.DELETE('/ui/api/session'));
  setCsrfToken(null);
}

/** Whether the principal holds `scope` (admin implies all; tenant:admin all but admin). */
export function can(session: Pick<Session, 'scopes'>, scope: Scope): boolean {
  const s = session.scopes;
  if (s.includes('admin')) return true;
  if (s.includes('tenant:admin') && scope !== 'admin') return true;
  return s.includes(scope);
}

/** A change to a volume (`GET …/changes`, the answer of a write, an undo or a restore). */
export type VolumeChange = Schemas['VolumeChange'];

/**
 * The URL of a files route (`/v1/volumes/{name}/files/{path}`): the file's path with each
 * segment percent-encoded and the `/` between them kept, every other parameter encoded whole.
 */
export function filePathSerializer(pathname: string, params: Record<string, unknown>): string {
  return pathname.replace(/\{([^}]+)\}/g, (whole, name: string) => {
    const v = params[name];
    if (v === undefined || v === null) return whole;
    const s = String(v);
    return name === 'path' ? s.split('/').map(encodeURIComponent).join('/') : encodeURIComponent(s);
  });
}

/** The sha256 an `ETag` names (`"<hex>"`, possibly weak). */
export const etagSha = (tag: string | null): string => (tag ?? '').replace(/^W\//, '').replace(/"/g, '');

/** A file of a volume as read: its sha256 (the `ETag`), its size, and its text when the gateway
 * answers it as text (UTF-8 without NUL), null when it is binary. */
export interface VolumeFile {
  path: string;
  sha256: string;
  size: number;
  text: string | null;
}

/** Reads a file's bytes (`GET …/files/{path}`). */
export async function readVolumeFile(volume: string, path: string): Promise<VolumeFile> {
  const { data, error, response } = await api.GET('/v1/volumes/{name}/files/{path}', {
    params: { path: { name: volume, path } },
    parseAs: 'arrayBuffer',
    pathSerializer: filePathSerializer,
  });
  if (!response.ok) throw apiError(response, error);
  // An empty file has no body at all (openapi-fetch answers `undefined` for Content-Length: 0).
  const bytes = new Uint8Array(data ?? new ArrayBuffer(0));
  const type = response.headers.get('content-type') ?? '';
  return {
    path,
    sha256: etagSha(response.headers.get('etag')),
    size: bytes.byteLength,
    text: type.startsWith('text/') ? new TextDecoder().decode(bytes) : null,
  };
}

/**
 * Writes a file's bytes (`PUT …/files/{path}`) as a compare-and-set: `ifMatch` is the sha256
 * the file must still have (`If-Match`; a 412 when it changed elsewhere), null that it must not
 * exist yet (`If-None-Match: *`).
 */
export function writeVolumeFile(volume: string, path: string, content: string, ifMatch: string | null): Promise<VolumeChange> {
  return ok(
    api.PUT('/v1/volumes/{name}/files/{path}', {
      params: {
        path: { name: volume, path },
        header: ifMatch === null ? { 'If-None-Match': '*' } : { 'If-Match': ifMatch },
      },
      body: content,
      bodySerializer: (b: string) => new TextEncoder().encode(b),
      headers: { 'content-type': 'application/octet-stream' },
      pathSerializer: filePathSerializer,
    }),
  );
}

/** Deletes a file (`DELETE …/files/{path}`) if it still has the sha256 `ifMatch`. */
export function deleteVolumeFile(volume: string, path: string, ifMatch: string): Promise<VolumeChange> {
  return ok(
    api.DELETE('/v1/volumes/{name}/files/{path}', {
      params: { path: { name: volume, path }, header: { 'If-Match': ifMatch } },
      pathSerializer: filePathSerializer,
    }),
  );
}
