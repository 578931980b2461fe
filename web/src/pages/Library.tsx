import { useMemo, useState, type FormEvent } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, NavLink, useNavigate, useParams } from 'react-router';
import { api, ApiError, can, ok, type Schemas, type Session } from '../api';
import { canonical, diffLines } from '../diff';
import { fromText, toText, type RawFormat } from '../rawtext';
import { ErrorNote } from '../ErrorNote';

/** The definition kinds the API serves, and their paths. */
export const KINDS = [
  { kind: 'agents', title: 'Agents', one: 'agent' },
  { kind: 'skills', title: 'Skills', one: 'skill' },
  { kind: 'mcp-servers', title: 'MCP servers', one: 'MCP server' },
  { kind: 'schedules', title: 'Schedules', one: 'schedule' },
  { kind: 'webhooks', title: 'Webhooks', one: 'webhook' },
  { kind: 'processes', title: 'Processes', one: 'process' },
  { kind: 'a2a-peers', title: 'A2A peers', one: 'A2A peer' },
] as const;
type Kind = (typeof KINDS)[number]['kind'];

/** The content of a definition of any kind (a `PUT /v1/<kind>/{name}` body). */
type DefContent =
  | Schemas['AgentContent']
  | Schemas['SkillContent']
  | Schemas['McpServerContent']
  | Schemas['ScheduleContent']
  | Schemas['WebhookContent']
  | Schemas['ProcessContent']
  | Schemas['A2aPeerContent'];

/** A version of a definition of any kind (`content` is the kind's). */
type Version =
  | Schemas['AgentVersion']
  | Schemas['SkillVersion']
  | Schemas['McpServerVersion']
  | Schemas['ScheduleVersion']
  | Schemas['WebhookVersion']
  | Schemas['ProcessVersion']
  | Schemas['A2aPeerVersion'];

function kindOf(k: string | undefined): (typeof KINDS)[number] {
  return KINDS.find((x) => x.kind === k) ?? KINDS[0];
}

const short = (hash: string) => hash.replace(/^sha256:/, '').slice(0, 10);

export function LibraryPage({ session }: { session: Session }) {
  const kind = kindOf(useParams().kind);
  const list = useQuery({
    queryKey: ['defs', kind.kind],
    queryFn: () => ok(api.GET(`/v1/${kind.kind}`)),
  });
  const navigate = useNavigate();
  const [newName, setNewName] = useState('');
  const rows = list.data?.data ?? [];
  return (
    <section>
      <h1>Library</h1>
      <nav className="tabs" aria-label="Definition kinds">
        {KINDS.map((k) => (
          <NavLink key={k.kind} to={`/library/${k.kind}`}>
            {k.title}
          </NavLink>
        ))}
      </nav>
      {can(session, 'tenant:admin') && (
        <form
          className="row"
          onSubmit={(e) => {
            e.preventDefault();
            if (newName) navigate(`/library/${kind.kind}/${encodeURIComponent(newName)}?new=1`);
          }}
        >
          <label>
            New {kind.one} named <input value={newName} onChange={(e) => setNewName(e.target.value.trim())} />
          </label>
          <button type="submit" disabled={!newName}>
            Create
          </button>
        </form>
      )}
      <ErrorNote error={list.error} />
      {list.isSuccess && rows.length === 0 && <p className="empty">No {kind.title.toLowerCase()} in this tenant yet.</p>}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid">
            <thead>
              <tr>
                <th>Name</th>
                <th>Description</th>
                <th>Versions</th>
                <th>Active</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.name}>
                  <td>
                    <Link to={`/library/${kind.kind}/${encodeURIComponent(r.name)}`}>{r.name}</Link>
                    {r.retired && <span className="t-muted"> (retired)</span>}
                  </td>
                  <td>{r.description}</td>
                  <td>{r.versions}</td>
                  <td>
                    <code>{short(r.active_version)}</code>
                  </td>
                  <td>{new Date(r.updated_at).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function DefinitionPage({ session }: { session: Session }) {
  const params = useParams();
  const kind = kindOf(params.kind);
  const name = params.name ?? '';
  const client = useQueryClient();
  const path = { path: { name } };
  const versions = useQuery({
    queryKey: ['defs', kind.kind, name, 'versions'],
    queryFn: async (): Promise<Version[]> => {
      try {
        return (await ok(api.GET(`/v1/${kind.kind}/{name}/versions`, { params: path }))).data;
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) return [];
        throw e;
      }
    },
  });
  const [error, setError] = useState<string | null>(null);
  // Kept here: a save makes a new active version, which gives the editor a new key.
  const [notice, setNotice] = useState<string | null>(null);
  const admin = can(session, 'tenant:admin');
  const list = versions.data ?? [];
  const active = list.find((v) => v.active) ?? list[list.length - 1];
  const byHash = useMemo(() => new Map(list.map((v) => [v.version, v])), [list]);
  const refresh = () => client.invalidateQueries({ queryKey: ['defs', kind.kind] });
  const act = async (what: () => Promise<unknown>) => {
    setError(null);
    try {
      await what();
      await refresh();
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };

  return (
    <section>
      <p>
        <Link to={`/library/${kind.kind}`}>← {kind.title}</Link>
      </p>
      <h1>
        {kind.one} <code>{name}</code>
        {active?.retired && <span className="t-muted"> (retired)</span>}
      </h1>
      <ErrorNote error={versions.error} />
      <ErrorNote error={error} />
      {list.length > 0 && (
        <>
          <h2>Versions</h2>
          <div className="scroll">
            <table className="grid" aria-label="Versions">
              <thead>
                <tr>
                  <th>#</th>
                  <th>Hash</th>
                  <th>From</th>
                  <th>Created</th>
                  <th>State</th>
                  <th />
                </tr>
              </thead>
              <tbody>
                {list.map((v) => (
                  <tr key={v.version}>
                    <td>{v.number}</td>
                    <td>
                      <code title={v.version}>{short(v.version)}</code>
                    </td>
                    <td>
                      {v.parent_version
                        ? byHash.has(v.parent_version)
                          ? `#${byHash.get(v.parent_version)?.number}`
                          : short(v.parent_version)
                        : '—'}
                    </td>
                    <td>{new Date(v.created_at).toLocaleString()}</td>
                    <td>{v.active ? 'active' : ''}</td>
                    <td>
                      {admin && !v.active && (
                        <button
                          type="button"
                          onClick={() =>
                            act(() =>
                              ok(api.POST(`/v1/${kind.kind}/{name}/activate`, { params: path, body: { version: v.version } })),
                            )
                          }
                        >
                          Activate #{v.number}
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          {list.length > 1 && <Diff versions={list} />}
        </>
      )}
      {/* Only once the versions are in: an editor opened on the empty form would be replaced
          (and an edit lost) when they arrive. */}
      {admin && versions.isSuccess && (
        <Editor
          key={active?.version ?? 'new'}
          kind={kind.kind}
          name={name}
          initial={active?.content ?? (kind.kind === 'agents' ? { model: 'mock-1', system_prompt: '', tools: [] } : {})}
          onSaved={async (message) => {
            setNotice(message);
            await refresh();
          }}
        />
      )}
      {notice && <p role="status">{notice}</p>}
      {admin && active && (
        <div className="row">
          <Fork kind={kind.kind} from={active} />
          {!active.retired && (
            <button type="button" onClick={() => act(() => ok(api.POST(`/v1/${kind.kind}/{name}/retire`, { params: path })))}>
              Retire
            </button>
          )}
        </div>
      )}
    </section>
  );
}

function Diff({ versions }: { versions: Version[] }) {
  const n = versions.length;
  const [a, setA] = useState(versions[n - 2].version);
  const [b, setB] = useState(versions[n - 1].version);
  const va = versions.find((v) => v.version === a);
  const vb = versions.find((v) => v.version === b);
  const lines = va && vb ? diffLines(canonical(va.content), canonical(vb.content)) : [];
  const pick = (value: string, set: (v: string) => void, label: string) => (
    <label>
      {label}{' '}
      <select value={value} onChange={(e) => set(e.target.value)}>
        {versions.map((v) => (
          <option key={v.version} value={v.version}>
            #{v.number}
          </option>
        ))}
      </select>
    </label>
  );
  return (
    <div className="panel">
      <h2>Diff</h2>
      <div className="row">
        {pick(a, setA, 'From')}
        {pick(b, setB, 'To')}
      </div>
      <pre className="diff" aria-label="Diff between versions">
        {lines.map((l, i) => (
          <div key={i} className={l.op === '+' ? 'add' : l.op === '-' ? 'del' : ''}>
            {l.op} {l.text}
          </div>
        ))}
      </pre>
    </div>
  );
}

const AGENT_FIELDS = ['description', 'model', 'tier', 'system_prompt', 'tools', 'max_iterations', 'max_tokens'] as const;

/** The top-level field a server error's `param` names (`tools[2]` → `tools`). */
export function fieldOf(param: string | undefined): string | null {
  if (!param) return null;
  const m = /^(?:changes\.)?([A-Za-z_]+)/.exec(param);
  return m ? m[1] : null;
}

function Editor({
  kind,
  name,
  initial,
  onSaved,
}: {
  kind: Kind;
  name: string;
  initial: Record<string, unknown>;
  onSaved: (message: string) => Promise<unknown>;
}) {
  const [content, setContent] = useState<Record<string, unknown>>(initial);
  // The structured form is for agents; every kind has the raw JSON and YAML views.
  const [view, setView] = useState<'form' | RawFormat>(kind === 'agents' ? 'form' : 'json');
  const [rawText, setRawText] = useState(kind === 'agents' ? '' : toText(initial, 'json'));
  const raw = view !== 'form';
  const [errors, setErrors] = useState<{ field: string | null; message: string } | null>(null);

  const set = (k: string, v: unknown) => setContent((c) => ({ ...c, [k]: v }));
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setErrors(null);
    let body: unknown = content;
    if (view !== 'form') {
      try {
        body = fromText(rawText, view);
      } catch (err) {
        setErrors({ field: null, message: `The ${view.toUpperCase()} does not parse: ${String(err)}` });
        return;
      }
    }
    try {
      // The content is what the user wrote, in whichever view: the gateway checks it against the
      // kind's schema and names the field it refuses (`param`).
      const v = await ok(api.PUT(`/v1/${kind}/{name}`, { params: { path: { name } }, body: body as DefContent }));
      await onSaved(v.created ? `Saved as version #${v.number}.` : `Unchanged: that is version #${v.number}, now active.`);
    } catch (err) {
      if (err instanceof ApiError) setErrors({ field: fieldOf(err.param), message: err.message });
      else setErrors({ field: null, message: String(err) });
    }
  };
  const fieldError = (f: string) =>
    errors && errors.field === f ? (
      <span className="error" role="alert">
        {errors.message}
      </span>
    ) : null;
  const text = (f: string) => (typeof content[f] === 'string' ? (content[f] as string) : '');
  const num = (f: string) => (typeof content[f] === 'number' ? String(content[f]) : '');

  return (
    <form className="panel editor" onSubmit={submit} aria-label="Edit">
      <h2>Edit</h2>
      <label>
        View{' '}
        <select
          value={view}
          onChange={(e) => {
            const next = e.target.value as 'form' | RawFormat;
            // Carry the content across: from the form or the other raw view.
            let current = content;
            if (view !== 'form') {
              try {
                current = fromText(rawText, view);
              } catch (err) {
                setErrors({ field: null, message: `Fix the ${view.toUpperCase()} first: ${String(err)}` });
                return;
              }
            }
            setErrors(null);
            setContent(current);
            if (next !== 'form') setRawText(toText(current, next));
            setView(next);
          }}
        >
          {kind === 'agents' && <option value="form">form</option>}
          <option value="json">JSON</option>
          <option value="yaml">YAML</option>
        </select>
      </label>
      {raw ? (
        <textarea
          className="code"
          rows={18}
          value={rawText}
          onChange={(e) => setRawText(e.target.value)}
          aria-label={`Raw ${view.toUpperCase()}`}
        />
      ) : (
        <div className="fields">
          {AGENT_FIELDS.map((f) => (
            <label key={f} className={f === 'system_prompt' ? 'wide' : ''}>
              <span>{f === 'system_prompt' ? 'System prompt' : f.replace('_', ' ')}</span>
              {f === 'system_prompt' ? (
                <textarea rows={8} value={text(f)} onChange={(e) => set(f, e.target.value)} />
              ) : f === 'tools' ? (
                <input
                  value={Array.isArray(content.tools) ? (content.tools as string[]).join(', ') : ''}
                  onChange={(e) =>
                    set(
                      'tools',
                      e.target.value
                        .split(',')
                        .map((t) => t.trim())
                        .filter(Boolean),
                    )
                  }
                  placeholder="Context, Interruption"
                />
              ) : f === 'max_iterations' || f === 'max_tokens' ? (
                <input
                  type="number"
                  value={num(f)}
                  onChange={(e) => set(f, e.target.value === '' ? undefined : Number(e.target.value))}
                />
              ) : (
                <input value={text(f)} onChange={(e) => set(f, e.target.value || undefined)} />
              )}
              {fieldError(f)}
            </label>
          ))}
        </div>
      )}
      {errors && (raw || !errors.field || !(AGENT_FIELDS as readonly string[]).includes(errors.field)) && (
        <p className="error" role="alert">
          {errors.message}
        </p>
      )}
      <button type="submit">Save new version</button>
    </form>
  );
}

function Fork({ kind, from }: { kind: Kind; from: Version }) {
  const navigate = useNavigate();
  const client = useQueryClient();
  const [name, setName] = useState('');
  const [error, setError] = useState<string | null>(null);
  const fork = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      await ok(api.POST(`/v1/${kind}/{name}/fork`, { params: { path: { name } }, body: { from_version: from.version, changes: {} } }));
      await client.invalidateQueries({ queryKey: ['defs', kind] });
      navigate(`/library/${kind}/${encodeURIComponent(name)}`);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };
  return (
    <form className="row" onSubmit={fork}>
      <label>
        Fork #{from.number} as <input value={name} onChange={(e) => setName(e.target.value.trim())} />
      </label>
      <button type="submit" disabled={!name}>
        Fork
      </button>
      {error && (
        <span className="error" role="alert">
          {error}
        </span>
      )}
    </form>
  );
}
