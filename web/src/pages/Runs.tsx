import { useState, type FormEvent } from 'react';
import { useInfiniteQuery, useQuery } from '@tanstack/react-query';
import { Link, useNavigate, useSearchParams } from 'react-router';
import { api, ok, type Schemas } from '../api';
import { ErrorNote } from '../ErrorNote';
import { RunStatusBadge } from '../Badges';
import { tokens } from '../terminal';
import type { paths } from '../openapi';

export type Run = Schemas['Run'];
type RunStatus = Run['status'];

/** Every run status, in the order of a run's life (the filter's options). */
export const STATUSES = [
  'queued',
  'running',
  'awaiting_input',
  'paused',
  'succeeded',
  'failed',
  'cancelled',
] as const satisfies readonly RunStatus[];

const isStatus = (s: string): s is RunStatus => (STATUSES as readonly string[]).includes(s);

/** How far back the list reaches: `since` is now minus this many hours (0: no bound). */
export const SINCE = [
  { key: '', label: 'any time', hours: 0 },
  { key: '1h', label: 'the last hour', hours: 1 },
  { key: '24h', label: 'the last 24 hours', hours: 24 },
  { key: '7d', label: 'the last 7 days', hours: 24 * 7 },
] as const;

type RunsQuery = NonNullable<paths['/v1/runs']['get']['parameters']['query']>;

/** The query of `GET /v1/runs` for these filters and page cursor (a status that is none is no
 * filter). */
export function runsQuery(agent: string, status: string, cursor: string | null, since: Date | null = null): RunsQuery {
  const q: RunsQuery = { limit: 50 };
  if (agent) q.agent = agent;
  if (isStatus(status)) q.status = status;
  if (since) q.since = since.toISOString();
  if (cursor) q.cursor = cursor;
  return q;
}

export function RunsPage() {
  const [params, setParams] = useSearchParams();
  const agent = params.get('agent') ?? '';
  const status = params.get('status') ?? '';
  const span = SINCE.find((w) => w.key === (params.get('since') ?? '')) ?? SINCE[0];
  const runs = useInfiniteQuery({
    queryKey: ['runs', agent, status, span.key],
    queryFn: ({ pageParam }) =>
      ok(
        api.GET('/v1/runs', {
          params: {
            query: runsQuery(agent, status, pageParam, span.hours ? new Date(Date.now() - span.hours * 3600_000) : null),
          },
        }),
      ),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next_cursor,
    refetchInterval: 5000,
  });
  const set = (key: string, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    setParams(next, { replace: true });
  };
  const rows = runs.data?.pages.flatMap((p) => p.data) ?? [];

  return (
    <section>
      <h1>Runs</h1>
      <Launcher />
      <form className="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Filter by agent <input value={agent} onChange={(e) => set('agent', e.target.value)} />
        </label>
        <label>
          Filter by status{' '}
          <select value={status} onChange={(e) => set('status', e.target.value)}>
            <option value="">any</option>
            {STATUSES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Created in{' '}
          <select value={span.key} onChange={(e) => set('since', e.target.value)}>
            {SINCE.map((w) => (
              <option key={w.key} value={w.key}>
                {w.label}
              </option>
            ))}
          </select>
        </label>
      </form>
      <ErrorNote error={runs.error} />
      {runs.isSuccess && rows.length === 0 && (
        <p className="empty">
          No runs{agent || status || span.hours ? ' match these filters' : ' yet'}. Start one above, or with{' '}
          <code>POST /v1/runs</code>.
        </p>
      )}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid">
            <thead>
              <tr>
                <th>Run</th>
                <th>Agent</th>
                <th>Status</th>
                <th>Tokens in / out</th>
                <th>Created</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.run_id}>
                  <td>
                    <Link to={`/runs/${r.run_id}`}>
                      <code>{r.run_id}</code>
                    </Link>
                  </td>
                  <td>{r.agent}</td>
                  <td>
                    <RunStatusBadge run={r} />
                    {r.stop_reason ? ` (${r.stop_reason})` : ''}
                  </td>
                  <td>
                    {tokens(r.usage).prompt} / {tokens(r.usage).completion}
                  </td>
                  <td>
                    <time dateTime={r.created_at}>{new Date(r.created_at).toLocaleString()}</time>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {runs.hasNextPage && (
        <button type="button" onClick={() => runs.fetchNextPage()} disabled={runs.isFetchingNextPage}>
          More
        </button>
      )}
    </section>
  );
}

/** The hint's example: a `#mock` line that scripts the mock model's tool calls and answer. */
const MOCK_EXAMPLE = '#mock {"turns": [[{"name": "Context", "input": {"op": "time"}}]], "reply": "done"}';

/** Starts a run of any agent of the tenant, then opens its page. */
function Launcher() {
  const navigate = useNavigate();
  const agents = useQuery({
    queryKey: ['agents'],
    queryFn: () => ok(api.GET('/v1/agents')),
  });
  const [agent, setAgent] = useState('');
  const [input, setInput] = useState('');
  const [interactive, setInteractive] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const live = (agents.data?.data ?? []).filter((a) => !a.retired);
  const chosen = agent || live[0]?.name || '';

  const start = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      const run = await ok(
        api.POST('/v1/runs', {
          body: {
            agent: chosen,
            ...(input ? { input } : {}),
            interactive,
          },
        }),
      );
      navigate(`/runs/${run.run_id}`);
    } catch (err) {
      setError(err instanceof Error ? err.message : String(err));
    }
  };

  if (agents.isSuccess && live.length === 0) {
    return <p className="empty">No agents yet: define one (PUT /v1/agents/&lt;name&gt;) to start runs here.</p>;
  }
  return (
    <form className="launcher" onSubmit={start} aria-label="Start a run">
      <label>
        Agent to run{' '}
        <select value={chosen} onChange={(e) => setAgent(e.target.value)}>
          {live.map((a) => (
            <option key={a.name}>{a.name}</option>
          ))}
        </select>
      </label>
      <label className="grow">
        Input{' '}
        <input
          value={input}
          onChange={(e) => setInput(e.target.value)}
          placeholder="What should it do?"
          aria-describedby="launcher-hint"
        />
      </label>
      <label>
        <input type="checkbox" checked={interactive} onChange={(e) => setInteractive(e.target.checked)} />{' '}
        interactive
      </label>
      <button type="submit" disabled={!chosen}>
        Start run
      </button>
      <p className="hint" id="launcher-hint">
        Without a script, <code>mock-1</code> calls the agent&apos;s first tool and reports its result; script it
        with a line <code>{MOCK_EXAMPLE}</code> in the input (docs/providers.md, &ldquo;mock&rdquo;).
      </p>
      <ErrorNote error={error} />
    </form>
  );
}
