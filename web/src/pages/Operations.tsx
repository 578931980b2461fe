import { useState, type FormEvent } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { api, ok, type Session } from '../api';
import { HealthBadge } from '../Badges';
import { ErrorNote } from '../ErrorNote';
import { drainPollMs, drainView, operationsAccess, type DrainStatus } from '../pause';

/** A tenant's drain and the fleet's maintenance (docs/operations.md): where the runs of the
 * scope are, and Drain / Resume for the principal that may. */
export function OperationsPage({ session }: { session: Session }) {
  const access = operationsAccess(session);
  const [tenant, setTenant] = useState(session.tenant);
  const [draft, setDraft] = useState(session.tenant);
  const pick = (e: FormEvent) => {
    e.preventDefault();
    if (draft.trim()) setTenant(draft.trim());
  };
  if (!access.tenant) {
    return <p className="empty">Draining a tenant needs the tenant:admin scope; the fleet's maintenance needs admin.</p>;
  }
  return (
    <section>
      <h1>Operations</h1>
      <p className="hint">
        A drain admits no new run (503 <code>tenant_paused</code>) and parks every run at its next step boundary
        (status <code>paused</code>); Resume admits runs again and queues the runs it paused. A run's own pause is on
        its page.
      </p>
      {access.anyTenant && (
        <form className="row" onSubmit={pick}>
          <label>
            Tenant <input value={draft} onChange={(e) => setDraft(e.target.value)} />
          </label>
          <button type="submit" disabled={!draft.trim() || draft.trim() === tenant}>
            Show
          </button>
        </form>
      )}
      <DrainPanel
        key={tenant}
        title={`Tenant ${tenant}`}
        testId="tenant-drain"
        queryKey={['drain', 'tenant', tenant]}
        confirmDrain={`Drain tenant ${tenant}? New runs are refused and every run of it parks at its next step boundary, until Resume.`}
        get={() => ok(api.GET('/v1/tenants/{tenant}/drain', { params: { path: { tenant } } }))}
        drain={() => ok(api.POST('/v1/tenants/{tenant}/drain', { params: { path: { tenant } } }))}
        resume={() => ok(api.POST('/v1/tenants/{tenant}/resume', { params: { path: { tenant } } }))}
      />
      {access.fleet && (
        <DrainPanel
          title="Fleet maintenance"
          testId="fleet-drain"
          queryKey={['drain', 'fleet']}
          confirmDrain="Put the fleet in maintenance? Every tenant drains, schedules hold their fires and signed webhooks answer 503, until Resume."
          get={() => ok(api.GET('/v1/fleet/drain'))}
          drain={() => ok(api.POST('/v1/fleet/drain'))}
          resume={() => ok(api.POST('/v1/fleet/resume'))}
        />
      )}
    </section>
  );
}

function DrainPanel({
  title,
  testId,
  queryKey,
  confirmDrain,
  get,
  drain,
  resume,
}: {
  title: string;
  testId: string;
  queryKey: string[];
  confirmDrain: string;
  get: () => Promise<DrainStatus>;
  drain: () => Promise<DrainStatus>;
  resume: () => Promise<DrainStatus>;
}) {
  const client = useQueryClient();
  const status = useQuery({ queryKey, queryFn: get, refetchInterval: (q) => drainPollMs(q.state.data) });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const act = async (what: () => Promise<DrainStatus>) => {
    setError(null);
    setBusy(true);
    try {
      client.setQueryData(queryKey, await what());
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  const v = status.data ? drainView(status.data) : null;
  return (
    <div className="panel" data-testid={testId}>
      <h2>
        {title} {v && <HealthBadge health={{ tone: v.tone, text: v.state }} testId={`${testId}-state`} />}
      </h2>
      <ErrorNote error={status.error} />
      {v && (
        <>
          <dl className="facts">
            <dt>Runs not ended</dt>
            <dd data-testid={`${testId}-counts`}>{v.counts.map((c) => `${c.n} ${c.label}`).join(' · ')}</dd>
            {v.since && (
              <>
                <dt>Draining since</dt>
                <dd>
                  {new Date(v.since).toLocaleString()}
                  {v.by ? `, by ${v.by}` : ''}
                </dd>
              </>
            )}
            {v.state === 'draining…' && (
              <>
                <dt>Progress</dt>
                <dd role="status">
                  {v.toPark} run{v.toPark === 1 ? '' : 's'} still to park
                </dd>
              </>
            )}
            {v.state === 'drained' && (
              <>
                <dt>Progress</dt>
                <dd role="status">complete: no run is running or queued</dd>
              </>
            )}
          </dl>
          <div className="row">
            {v.canDrain && (
              <button type="button" disabled={busy} onClick={() => window.confirm(confirmDrain) && act(drain)}>
                Drain
              </button>
            )}
            {v.canResume && (
              <button type="button" disabled={busy} onClick={() => act(resume)}>
                Resume
              </button>
            )}
          </div>
          {v.transitions.length > 0 && (
            <div className="scroll">
              <table className="grid" aria-label={`${title}: drains and resumes`}>
                <thead>
                  <tr>
                    <th>When</th>
                    <th>What</th>
                    <th>Who</th>
                  </tr>
                </thead>
                <tbody>
                  {v.transitions.slice(0, 10).map((t, i) => (
                    <tr key={`${t.at}-${i}`}>
                      <td>{new Date(t.at).toLocaleString()}</td>
                      <td>{t.action}</td>
                      <td>
                        {t.subject} · {t.tenant}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
      <ErrorNote error={error} />
    </div>
  );
}
