import { useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link } from 'react-router';
import { api, ApiError, ok, type Schemas, type Session } from '../api';
import { HealthBadge, Warnings } from '../Badges';
import { CopyButton } from '../CopyButton';
import { ErrorNote } from '../ErrorNote';
import {
  scheduleHealth,
  verdictText,
  webhookHealth,
  webhookUrl,
  deliveryRows,
} from '../ingress';

type Summary = Schemas['DefSummary'];

const when = (t: string | null | undefined) => (t ? new Date(t).toLocaleString() : '—');

/** What a call answers, or null when it is a 404 (the definition is gone). */
async function orGone<T>(call: Promise<T>): Promise<T | null> {
  try {
    return await call;
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/** The active version of a schedule: its content, and what it points at that is not there yet
 * (`warnings`); null once the schedule is gone. Under ['defs', kind], so an edit in the library
 * refreshes it. */
function useActiveSchedule(name: string) {
  return useQuery({
    queryKey: ['defs', 'schedules', name, 'active'],
    queryFn: () => orGone(ok(api.GET('/v1/schedules/{name}', { params: { path: { name } } }))),
  });
}

/** The active version of a webhook, as `useActiveSchedule`. */
function useActiveWebhook(name: string) {
  return useQuery({
    queryKey: ['defs', 'webhooks', name, 'active'],
    queryFn: () => orGone(ok(api.GET('/v1/webhooks/{name}', { params: { path: { name } } }))),
  });
}

export function SchedulesPage() {
  const list = useQuery({ queryKey: ['defs', 'schedules'], queryFn: () => ok(api.GET('/v1/schedules')) });
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
        <Schedule key={s.name} summary={s} />
      ))}
    </section>
  );
}

function Schedule({ summary }: { summary: Summary }) {
  const { name, description } = summary;
  const client = useQueryClient();
  const path = { path: { name } };
  const active = useActiveSchedule(name);
  const state = useQuery({
    queryKey: ['schedule', name],
    queryFn: () => ok(api.GET('/v1/schedules/{name}/state', { params: path })),
    refetchInterval: 5000,
  });
  const [error, setError] = useState<string | null>(null);
  const act = async (what: 'run-now' | 'pause' | 'resume') => {
    setError(null);
    try {
      await ok(api.POST(`/v1/schedules/{name}/${what}`, { params: path }));
      await client.invalidateQueries({ queryKey: ['schedule', name] });
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };
  const s = state.data;
  const c = active.data?.content;
  const warnings = active.data?.warnings ?? [];
  return (
    <article className="panel" aria-label={`Schedule ${name}`}>
      <h2>
        <Link to={`/library/schedules/${encodeURIComponent(name)}`}>{name}</Link>{' '}
        {s && <HealthBadge health={scheduleHealth(s)} testId="schedule-health" />}{' '}
        <Warnings warnings={warnings} /> <span className="t-muted">{description}</span>
      </h2>
      <ErrorNote error={active.error} />
      <ErrorNote error={state.error} />
      <dl className="facts">
        {c && (
          <>
            <dt>Cron</dt>
            <dd data-testid="schedule-cron">
              <code>{c.cron}</code> in {c.timezone || 'UTC'}
            </dd>
            <dt>Agent</dt>
            <dd data-testid="schedule-agent">
              {c.agent ? <Link to={`/library/agents/${encodeURIComponent(c.agent)}`}>{c.agent}</Link> : '—'}
            </dd>
          </>
        )}
        {s && (
          <>
            <dt>State</dt>
            <dd data-testid="schedule-state">
              {s.retired ? `retired (${s.retired_why ?? ''})` : s.paused ? 'paused' : s.enabled === false ? 'disabled' : 'active'}
            </dd>
            <dt>Next fire</dt>
            <dd data-testid="schedule-next">{s.paused || s.retired ? '—' : when(s.next_fire_at)}</dd>
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
          </>
        )}
      </dl>
      {s && !s.retired && (
        <div className="row">
          <button type="button" onClick={() => act('run-now')}>
            Run now
          </button>
          <button type="button" onClick={() => act(s.paused ? 'resume' : 'pause')}>
            {s.paused ? 'Resume' : 'Pause'}
          </button>
        </div>
      )}
      {s && s.fires.length > 0 && (
        <div className="scroll">
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
                  <td>
                    {f.run_id ? <Link to={`/runs/${f.run_id}`}>{f.run_id}</Link> : '—'}
                    {f.run_status ? ` (${f.run_status})` : ''}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <ErrorNote error={error} />
    </article>
  );
}

export function WebhooksPage({ session }: { session: Session }) {
  const list = useQuery({ queryKey: ['defs', 'webhooks'], queryFn: () => ok(api.GET('/v1/webhooks')) });
  const rows = list.data?.data ?? [];
  return (
    <section>
      <h1>Webhooks</h1>
      <p className="hint">
        A webhook starts a run (or publishes to a channel) for each signed delivery to its URL. Define one in the{' '}
        <Link to="/library/webhooks">library</Link> (docs/ingress.md).
      </p>
      <ErrorNote error={list.error} />
      {list.isSuccess && rows.length === 0 && <p className="empty">No webhooks in this tenant.</p>}
      {rows.map((w) => (
        <Webhook key={w.name} summary={w} tenant={session.tenant} />
      ))}
    </section>
  );
}

function Webhook({ summary, tenant }: { summary: Summary; tenant: string }) {
  const { name, description } = summary;
  const active = useActiveWebhook(name);
  const deliveries = useQuery({
    queryKey: ['webhook', name],
    queryFn: () => ok(api.GET('/v1/webhooks/{name}/deliveries', { params: { path: { name } } })),
    refetchInterval: 5000,
  });
  const rows = deliveries.data ? deliveryRows(deliveries.data) : [];
  const { health, lastAccepted, lastRejected } = webhookHealth(rows);
  const url = webhookUrl(window.location.origin, tenant, name);
  const c = active.data?.content;
  const warnings = active.data?.warnings ?? [];
  return (
    <article className="panel" aria-label={`Webhook ${name}`}>
      <h2>
        <Link to={`/library/webhooks/${encodeURIComponent(name)}`}>{name}</Link>{' '}
        {deliveries.isSuccess && <HealthBadge health={health} testId="webhook-health" />}{' '}
        <Warnings warnings={warnings} /> <span className="t-muted">{description}</span>
      </h2>
      <ErrorNote error={active.error} />
      <ErrorNote error={deliveries.error} />
      <dl className="facts">
        <dt>URL</dt>
        <dd className="url">
          <code data-testid="webhook-url">{url}</code> <CopyButton text={url} label={`Copy the URL of ${name}`} />
        </dd>
        {c && (
          <>
            <dt>{c.channel && !c.agent ? 'Channel' : 'Agent'}</dt>
            <dd data-testid="webhook-target">
              {c.agent ? (
                <Link to={`/library/agents/${encodeURIComponent(c.agent)}`}>{c.agent}</Link>
              ) : c.channel ? (
                <>channel {c.channel}</>
              ) : (
                '—'
              )}
            </dd>
            <dt>Signed</dt>
            <dd>
              {c.signature ?? '—'}
              {c.secret_env ? (
                <>
                  , secret in <code>{c.secret_env}</code>
                </>
              ) : null}
              {c.enabled === false ? ' (disabled: deliveries are answered 404)' : ''}
            </dd>
          </>
        )}
        {deliveries.isSuccess && (
          <>
            <dt>Last accepted</dt>
            <dd data-testid="webhook-last-accepted">
              {lastAccepted ? (
                <>
                  {when(lastAccepted.at)}
                  {lastAccepted.run_id && (
                    <>
                      {' '}
                      → <Link to={`/runs/${lastAccepted.run_id}`}>run</Link>
                    </>
                  )}
                </>
              ) : (
                'never'
              )}
            </dd>
            <dt>Last rejected</dt>
            <dd data-testid="webhook-last-rejected">
              {lastRejected ? `${when(lastRejected.at)}: ${verdictText(lastRejected)}` : 'never'}
            </dd>
          </>
        )}
      </dl>
      {deliveries.isSuccess && rows.length === 0 && <p className="empty">No deliveries yet.</p>}
      {rows.length > 0 && (
        <div className="scroll">
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
                  <td>{verdictText(d)}</td>
                  <td>{d.delivery_id ?? '—'}</td>
                  <td>{d.run_id ? <Link to={`/runs/${d.run_id}`}>{d.run_id}</Link> : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </article>
  );
}
