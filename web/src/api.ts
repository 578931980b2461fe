// The UI's one door to the gateway. The session cookie (HttpOnly, SameSite=Strict) is sent by
// the browser; state-changing calls also carry the session's CSRF token in a header, which a
// page on another site cannot read or set.

export type Scope =
  | 'admin'
  | 'tenant:admin'
  | 'runs:create'
  | 'runs:read'
  | 'memory:read'
  | 'memory:write'
  | 'channels:publish'
  | 'channels:read'
  | 'llm:call';

export interface Session {
  tenant: string;
  subject: string;
  scopes: Scope[];
  csrf_token: string;
  expires_at: string;
}

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

/** Sends a request with the session's credentials; throws `ApiError` on a non-2xx answer. */
export async function request(path: string, init: RequestInit = {}): Promise<Response> {
  const method = (init.method ?? 'GET').toUpperCase();
  const headers = new Headers(init.headers);
  if (init.body !== undefined && !headers.has('content-type')) {
    headers.set('content-type', 'application/json');
  }
  if (!SAFE.has(method) && csrfToken) {
    headers.set('x-csrf-token', csrfToken);
  }
  const res = await fetch(path, { ...init, method, headers, credentials: 'same-origin' });
  if (!res.ok) {
    throw await toError(res);
  }
  return res;
}

export async function getJson<T>(path: string): Promise<T> {
  return (await request(path)).json() as Promise<T>;
}

/**
 * One page of a list route. List routes answer `{"data": [...], "next_cursor": ...}`; before
 * that envelope each route had its own key (`runs`, `messages`, …), kept for one release as an
 * alias, so the UI reads `data` first and falls back to the route's old key: it works against
 * both. The answer's other fields (`truncated`, …) are kept.
 */
export type ListPage<T, Extra = object> = { data: T[]; next_cursor: string | null } & Partial<Extra>;

/** Reads a list answer: `data`, else the route's old key, else no items. */
export function listOf<T, Extra = object>(body: unknown, legacyKey?: string): ListPage<T, Extra> {
  const b = body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
  const items = Array.isArray(b.data) ? b.data : legacyKey && Array.isArray(b[legacyKey]) ? b[legacyKey] : [];
  const cursor = typeof b.next_cursor === 'string' && b.next_cursor !== '' ? b.next_cursor : null;
  return { ...b, data: items as T[], next_cursor: cursor } as ListPage<T, Extra>;
}

/** GETs a list route (see `listOf`). */
export async function getList<T, Extra = object>(path: string, legacyKey?: string): Promise<ListPage<T, Extra>> {
  return listOf<T, Extra>(await getJson<unknown>(path), legacyKey);
}

export async function sendJson<T>(method: string, path: string, body?: unknown): Promise<T> {
  const res = await request(path, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 204) {
    return undefined as T;
  }
  return res.json() as Promise<T>;
}

export async function toError(res: Response): Promise<ApiError> {
  try {
    const body = await res.json();
    const e = body?.error ?? {};
    return new ApiError(
      res.status,
      String(e.code ?? 'error'),
      String(e.message ?? res.statusText),
      e.param ?? undefined,
    );
  } catch {
    return new ApiError(res.status, 'error', `${res.status} ${res.statusText}`);
  }
}

/** The current session, or null when the browser holds none (or it expired or was revoked). */
export async function currentSession(): Promise<Session | null> {
  try {
    const s = await getJson<Session>('/ui/api/session');
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
  const s = await sendJson<Session>('POST', '/ui/api/session', { token });
  setCsrfToken(s.csrf_token);
  return s;
}

export async function logout(): Promise<void> {
  await sendJson<void>('DELETE', '/ui/api/session');
  setCsrfToken(null);
}

/** Whether the principal holds `scope` (admin implies all; tenant:admin all but admin). */
export function can(session: Session, scope: Scope): boolean {
  const s = session.scopes;
  if (s.includes('admin')) return true;
  if (s.includes('tenant:admin') && scope !== 'admin') return true;
  return s.includes(scope);
}
