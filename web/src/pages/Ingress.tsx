import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link } from 'react-router';
import { getJson, sendJson } from '../api';
import { ErrorNote } from '../ErrorNote';

interface Summary {
  name: string;
  description: string;
  retired: boolean;
  versions: number;
}

interface ScheduleState {
  name: string;
  enabled: boolean;
  paused: boolean;
  retired: boolean;
  retired_why: string | null;
  next_fire_at: string | null;
  last_fire_at: string | null;
  last_run_id: string | null;
  last_run_status: string | null;
  fire_count: number;
  skipped: number;
  fires: { fire_id: string; kind: string; fire_at: string; status: string; run_id: string | null; error: string | null }[];
}

interface Delivery {
  verdict: string;
  at: string;
  delivery_id: string | null;
  run_id?: string;
  reason?: string;
}

const when = (t: string | null) => (t ? new Date(t).toLocaleString() : '—');

export function SchedulesPage() {
  const list = useQuery({ queryKey: ['defs', 'schedules'], queryFn: () => getJson<{ data: Summary[] }>('/v1/schedules') });
  const rows = list.data?.data ?? [];
  return (
    <section>
      <h1>Schedules</h1>
      <p className="hint">
        A schedule starts runs of an agent on a cron. Define one in the <Link to="/library/schedules">library</Link> (docs/ingress.md).
      </p>
      <ErrorNote error={list.error} />
      {list.isSuccess && rows.length === 0 && <p className="empty">No schedules in this tenant.</p>}
      {rows.map((s) => (
        <Schedule key={s.name} name={s.name} description={s.description} />
      ))}
    </section>
  );
}

function Schedule({ name, description }: { name: string; description: string }) {
  const client = useQueryClient();
  const path = `/v1/schedules/${encodeURIComponent(name)}`;
  const state = useQuery({
    queryKey: ['schedule', name],
    queryFn: () => getJson<ScheduleState>(`${path}/state`),
    refetchInterval: 5000,
  });
  const [error, setError] = useState<string | null>(null);
  const act = async (what: string) => {
    setError(null);
    try {
      await sendJson('POST', `${path}/${what}`);
      await client.invalidateQueries({ queryKey: ['schedule', name] });
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };
  const s = state.data;
  return (
    <article className="panel" aria-label={`Schedule ${name}`}>
      <h2>
        <Link to={`/library/schedules/${encodeURIComponent(name)}`}>{name}</Link>{' '}
        <span className="t-muted">{description}</span>
      </h2>
      <ErrorNote error={state.error} />
      {s && (
        <>
          <dl className="facts">
            <dt>State</dt>
            <dd data-testid="schedule-state">{s.retired ? `retired (${s.retired_why ?? ''})` : s.paused ? 'paused' : 'active'}</dd>
            <dt>Next fire</dt>
            <dd>{s.paused || s.retired ? '—' : when(s.next_fire_at)}</dd>
            <dt>Last fire</dt>
            <dd>
              {when(s.last_fire_at)}
              {s.last_run_id && (
                <>
                  {' '}
                  → <Link to={`/runs/${s.last_run_id}`}>run</Link> {s.last_run_status ?? ''}
                </>
              )}
            </dd>
            <dt>Fires</dt>
            <dd>
              {s.fire_count} ({s.skipped} skipped)
            </dd>
          </dl>
          {!s.retired && (
            <div className="row">
              <button type="button" onClick={() => act('run-now')}>
                Run now
              </button>
              <button type="button" onClick={() => act(s.paused ? 'resume' : 'pause')}>
                {s.paused ? 'Resume' : 'Pause'}
              </button>
            </div>
          )}
          {s.fires.length > 0 && (
            <table className="grid" aria-label={`Recent fires of ${name}`}>
              <thead>
                <tr>
                  <th>At</th>
                  <th>Kind</th>
                  <th>Status</th>
                  <th>Run</th>
                </tr>
              </thead>
              <tbody>
                {s.fires.map((f) => (
                  <tr key={f.fire_id}>
                    <td>{when(f.fire_at)}</td>
                    <td>{f.kind}</td>
                    <td>{f.error ? `${f.status}: ${f.error}` : f.status}</td>
                    <td>{f.run_id ? <Link to={`/runs/${f.run_id}`}>{f.run_id}</Link> : '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
      <ErrorNote error={error} />
    </article>
  );
}

export function WebhooksPage() {
  const list = useQuery({ queryKey: ['defs', 'webhooks'], queryFn: () => getJson<{ data: Summary[] }>('/v1/webhooks') });
  const rows = list.data?.data ?? [];
  return (
    <section>
      <h1>Webhooks</h1>
      <p className="hint">
        A webhook starts a run for each signed delivery to <code>/v1/_webhooks/&lt;tenant&gt;/&lt;name&gt;</code>. Define one
        in the <Link to="/library/webhooks">library</Link> (docs/ingress.md).
      </p>
      <ErrorNote error={list.error} />
      {list.isSuccess && rows.length === 0 && <p className="empty">No webhooks in this tenant.</p>}
      {rows.map((w) => (
        <Webhook key={w.name} name={w.name} description={w.description} />
      ))}
    </section>
  );
}

function Webhook({ name, description }: { name: string; description: string }) {
  const deliveries = useQuery({
    queryKey: ['webhook', name],
    queryFn: () => getJson<{ data: Delivery[] }>(`/v1/webhooks/${encodeURIComponent(name)}/deliveries`),
    refetchInterval: 5000,
  });
  const rows = deliveries.data?.data ?? [];
  return (
    <article className="panel" aria-label={`Webhook ${name}`}>
      <h2>
        <Link to={`/library/webhooks/${encodeURIComponent(name)}`}>{name}</Link>{' '}
        <span className="t-muted">{description}</span>
      </h2>
      <ErrorNote error={deliveries.error} />
      {deliveries.isSuccess && rows.length === 0 && <p className="empty">No deliveries yet.</p>}
      {rows.length > 0 && (
        <table className="grid" aria-label={`Recent deliveries of ${name}`}>
          <thead>
            <tr>
              <th>At</th>
              <th>Verdict</th>
              <th>Delivery id</th>
              <th>Run</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((d, i) => (
              <tr key={i}>
                <td>{when(d.at)}</td>
                <td>
                  {d.verdict}
                  {d.reason ? ` (${d.reason})` : ''}
                </td>
                <td>{d.delivery_id ?? '—'}</td>
                <td>{d.run_id ? <Link to={`/runs/${d.run_id}`}>{d.run_id}</Link> : '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </article>
  );
}
