import { useState, type FormEvent } from 'react';
import { useInfiniteQuery, useQueryClient } from '@tanstack/react-query';
import { api, can, ok, type Schemas, type Session } from '../api';
import { canonical } from '../diff';
import { ErrorNote } from '../ErrorNote';
import type { paths } from '../openapi';

type Entry = Schemas['MemoryEntry'];
type Hit = Schemas['MemorySearchResult']['data'][number];

const SCOPES = ['tenant', 'user', 'agent', 'run'] as const satisfies readonly Schemas['MemorySearch']['scope'][];
type MemScope = (typeof SCOPES)[number];

/** Where entries live: the path parameters of the memory routes. */
type Place = paths['/v1/memory/{scope}/{scope_id}']['get']['parameters']['path'];

/** The scope id a scope starts with: the tenant's own, the principal's subject, or none. */
export function defaultScopeId(scope: MemScope, session: Pick<Session, 'tenant' | 'subject'>): string {
  return scope === 'tenant' ? session.tenant : scope === 'user' ? session.subject : '';
}

export function MemoryPage({ session }: { session: Session }) {
  const client = useQueryClient();
  const [scope, setScope] = useState<MemScope>('tenant');
  const [scopeId, setScopeId] = useState(defaultScopeId('tenant', session));
  const [prefix, setPrefix] = useState('');
  const [open, setOpen] = useState<Entry | 'new' | null>(null);
  const [query, setQuery] = useState('');
  const [hits, setHits] = useState<Hit[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const place: Place = { scope, scope_id: scopeId };
  const keys = useInfiniteQuery({
    queryKey: ['memory', scope, scopeId, prefix],
    enabled: scopeId !== '',
    queryFn: ({ pageParam }) =>
      ok(
        api.GET('/v1/memory/{scope}/{scope_id}', {
          params: {
            path: place,
            query: { limit: 100, ...(prefix ? { prefix } : {}), ...(pageParam ? { cursor: pageParam } : {}) },
          },
        }),
      ),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next_cursor ?? null,
  });
  const rows = keys.data?.pages.flatMap((p) => p.data) ?? [];
  const writable = can(session, 'memory:write');

  const search = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      const r = await ok(api.POST('/v1/memory/search', { body: { scope, scope_id: scopeId, query } }));
      setHits(r.data);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };

  return (
    <section>
      <h1>Memory</h1>
      <form className="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Scope{' '}
          <select
            value={scope}
            onChange={(e) => {
              const s = e.target.value as MemScope;
              setScope(s);
              setScopeId(defaultScopeId(s, session));
              setOpen(null);
              setHits(null);
            }}
          >
            {SCOPES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Scope id{' '}
          <input
            value={scopeId}
            onChange={(e) => setScopeId(e.target.value.trim())}
            placeholder={scope === 'agent' ? 'an agent name' : scope === 'run' ? 'a run id' : ''}
          />
        </label>
        <label>
          Key prefix <input value={prefix} onChange={(e) => setPrefix(e.target.value)} />
        </label>
        {writable && scopeId && (
          <button type="button" onClick={() => setOpen('new')}>
            New key
          </button>
        )}
      </form>
      {scopeId === '' && <p className="empty">Name the {scope} whose memory to browse.</p>}
      <ErrorNote error={keys.error} />
      {keys.isSuccess && rows.length === 0 && <p className="empty">No keys{prefix ? ' with this prefix' : ''} in this scope.</p>}
      <div className="split">
        {rows.length > 0 && (
          <div className="scroll">
            <table className="grid" aria-label="Keys">
              <thead>
                <tr>
                  <th>Key</th>
                  <th>Version</th>
                  <th>Updated</th>
                  <th>Expires</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((r) => (
                  <tr key={r.key}>
                    <td>
                      <button type="button" className="link" onClick={() => setOpen(r)}>
                        {r.key}
                      </button>
                    </td>
                    <td>{r.version}</td>
                    <td>{new Date(r.updated_at).toLocaleString()}</td>
                    <td>{r.expires_at ? new Date(r.expires_at).toLocaleString() : 'never'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        {open && (
          <ValueEditor
            key={open === 'new' ? 'new' : `${open.key}@${open.version}`}
            place={place}
            entry={open === 'new' ? null : open}
            writable={writable}
            onDone={async (next) => {
              setOpen(next);
              await client.invalidateQueries({ queryKey: ['memory', scope, scopeId] });
            }}
          />
        )}
      </div>
      {keys.hasNextPage && (
        <button type="button" onClick={() => keys.fetchNextPage()}>
          More keys
        </button>
      )}
      {scopeId && (
        <form className="row" onSubmit={search}>
          <label>
            Search <input value={query} onChange={(e) => setQuery(e.target.value)} placeholder="words or a phrase" />
          </label>
          <button type="submit" disabled={!query}>
            Search
          </button>
        </form>
      )}
      <ErrorNote error={error} />
      {hits && (
        <ol aria-label="Search results">
          {hits.length === 0 && <li className="empty">Nothing matches.</li>}
          {hits.map((h) => (
            <li key={h.key}>
              <button type="button" className="link" onClick={() => setOpen(h)}>
                {h.key}
              </button>{' '}
              <span className="t-muted">{h.score.toFixed(3)}</span>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}

function ValueEditor({
  place,
  entry,
  writable,
  onDone,
}: {
  place: Place;
  entry: Entry | null;
  writable: boolean;
  onDone: (next: Entry | null) => Promise<void>;
}) {
  const [key, setKey] = useState(entry?.key ?? '');
  const [text, setText] = useState(entry ? canonical(entry.value) : '""');
  const [ttl, setTtl] = useState('');
  const [error, setError] = useState<string | null>(null);
  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      setError(`The value is not JSON: ${String(err)}`);
      return;
    }
    try {
      // Compare-and-set: a write over someone else's newer version is a 409, not a lost update.
      const written = await ok(
        api.PUT('/v1/memory/{scope}/{scope_id}/{key}', {
          params: { path: { ...place, key } },
          body: {
            value,
            if_version: entry ? entry.version : 0,
            ...(ttl ? { ttl_seconds: Number(ttl) } : {}),
          },
        }),
      );
      await onDone(written);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  const remove = async () => {
    if (!entry) return;
    setError(null);
    try {
      await ok(
        api.DELETE('/v1/memory/{scope}/{scope_id}/{key}', {
          params: { path: { ...place, key: entry.key }, query: { if_version: entry.version } },
        }),
      );
      await onDone(null);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  return (
    <form className="panel editor" onSubmit={save} aria-label="Value">
      <h2>{entry ? <code>{entry.key}</code> : 'New key'}</h2>
      {!entry && (
        <label>
          Key <input value={key} onChange={(e) => setKey(e.target.value)} required />
        </label>
      )}
      {entry && <p className="t-muted">version {entry.version}</p>}
      <textarea className="code" rows={10} value={text} onChange={(e) => setText(e.target.value)} readOnly={!writable} aria-label="JSON value" />
      {writable && (
        <div className="row">
          <label>
            TTL (s) <input type="number" min={1} value={ttl} onChange={(e) => setTtl(e.target.value)} placeholder="never" />
          </label>
          <button type="submit" disabled={!key}>
            Save
          </button>
          {entry && (
            <button type="button" onClick={remove}>
              Delete
            </button>
          )}
        </div>
      )}
      <ErrorNote error={error} />
    </form>
  );
}
