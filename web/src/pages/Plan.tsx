// A plan run's plan on its run page (docs/harness.md): the version, its status and approval, the
// tasks as a graph in columns by dependency depth with each one's status, attempts and last
// verdict, a task's attempts unfolded (sub-run, checks, verdict), and the person's controls —
// approve a proposed plan, retry a failed task, skip one that has not passed.

import { useEffect, useState } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link } from 'react-router';
import { api, ApiError, ok } from '../api';
import { ErrorNote } from '../ErrorNote';
import {
  BOX,
  attemptsLine,
  canApprove,
  canRetry,
  canSkip,
  checkLine,
  checksLine,
  count,
  graph,
  isLive,
  lastVerdict,
  percent,
  planStatus,
  taskStatus,
  verdictLine,
  verdictTone,
  type AttemptView,
  type PlanView,
  type StatusLabel,
  type TaskView,
  type Verdict,
} from '../plan';

const planKey = (runId: string) => ['plan', runId] as const;

/** The run's current plan, or null when it has none: a 404 is a run that is not a plan run, or
 * one whose planner has not written a valid plan yet. */
async function fetchPlan(runId: string): Promise<PlanView | null> {
  try {
    return await ok(api.GET('/v1/runs/{id}/plan', { params: { path: { id: runId } } }));
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/** Whether the run is a plan run with a plan, as the panel last fetched it (this fetches
 * nothing itself: it reads what `PlanPanel` keeps). */
export function useIsPlanRun(runId: string): boolean {
  const q = useQuery({ queryKey: planKey(runId), queryFn: () => fetchPlan(runId), enabled: false });
  return q.data != null;
}

function StatusBadge({ status, testId }: { status: StatusLabel; testId?: string }) {
  return (
    <span className={`badge badge-${status.tone}`} data-testid={testId}>
      <span aria-hidden="true">{status.glyph} </span>
      {status.label}
    </span>
  );
}

/**
 * A plan run's plan, or nothing for a run without one. It is fetched again when the run's
 * stream brings a plan or task event (`planSeq`, the seq of the newest one), and every 2 s while
 * the stream is not live and the run has not ended.
 */
export function PlanPanel({
  runId,
  runStatus,
  planSeq,
  streamLive,
}: {
  runId: string;
  /** The run's status as the page shows it (the stream's, when newer than the fetched run). */
  runStatus: string | undefined;
  planSeq: number;
  streamLive: boolean;
}) {
  const client = useQueryClient();
  const plan = useQuery({
    queryKey: planKey(runId),
    queryFn: () => fetchPlan(runId),
    refetchInterval: () => (!streamLive && isLive(runStatus) ? 2000 : false),
  });
  useEffect(() => {
    if (planSeq > 0) void client.invalidateQueries({ queryKey: planKey(runId) });
  }, [planSeq, client, runId]);
  const [open, setOpen] = useState<string | null>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [note, setNote] = useState<string | null>(null);

  const p = plan.data;
  if (!p) return plan.isError ? <ErrorNote error={plan.error} /> : null;
  const status = runStatus ?? p.run_status;

  const refresh = async () => {
    await client.invalidateQueries({ queryKey: planKey(runId) });
    void client.invalidateQueries({ queryKey: ['run', runId] });
  };
  const approve = async () => {
    setBusy('approve');
    setError(null);
    setNote(null);
    try {
      const approved = await ok(
        api.PUT('/v1/runs/{id}/plan', {
          params: { path: { id: runId }, header: { 'If-Match': `"${p.version}"` } },
          body: {},
        }),
      );
      client.setQueryData(planKey(runId), approved);
      setNote(`version ${approved.version} approved`);
    } catch (e) {
      setError(e instanceof ApiError && e.status === 412 ? 'the plan changed — reloaded' : e);
    }
    await refresh();
    setBusy(null);
  };
  const control = async (task: string, action: 'retry' | 'skip') => {
    setBusy(`${action}:${task}`);
    setError(null);
    setNote(null);
    try {
      const params = { params: { path: { id: runId, task } } };
      await ok(
        action === 'retry'
          ? api.POST('/v1/runs/{id}/plan/tasks/{task}/retry', params)
          : api.POST('/v1/runs/{id}/plan/tasks/{task}/skip', params),
      );
      setNote(`${action} of ${task} queued: the run takes it between batches`);
    } catch (e) {
      setError(`${action} of ${task}: ${e instanceof Error ? e.message : String(e)}`);
    }
    await refresh();
    setBusy(null);
  };

  const g = graph(p.tasks);
  const byId = new Map(p.tasks.map((t) => [t.id, t]));
  const shown = open ? byId.get(open) : undefined;
  return (
    <section className="panel plan" aria-labelledby="plan-title">
      <h2 id="plan-title">Plan</h2>
      <dl className="facts">
        <dt>Version</dt>
        <dd data-testid="plan-version">{p.version}</dd>
        <dt>Status</dt>
        <dd>
          <StatusBadge status={planStatus(p.status, status)} testId="plan-status" />
        </dd>
        <dt>Approved by</dt>
        <dd>{p.approved_by ?? '—'}</dd>
        <dt>Replans</dt>
        <dd>{p.replans}</dd>
        <dt>Tokens</dt>
        <dd data-testid="plan-tokens">{count(p.tokens)}</dd>
        {p.process && (
          <>
            <dt>Process</dt>
            <dd data-testid="plan-process" title={p.process_version ?? undefined}>
              {p.process}
              {p.process_version && ` (${p.process_version.replace(/^sha256:/, '').slice(0, 12)})`}
            </dd>
          </>
        )}
      </dl>
      {canApprove(p, status) && (
        <p className="row">
          <span>The run waits for this plan to be approved.</span>
          <button type="button" onClick={approve} disabled={busy !== null}>
            Approve
          </button>
        </p>
      )}
      <ErrorNote error={error} />
      {note && (
        <p className="hint" role="status">
          {note}
        </p>
      )}
      <div className="scroll plan-scroll">
        <div className="plan-graph" style={{ width: g.width, height: g.height }}>
          <svg className="plan-edges" width={g.width} height={g.height} aria-hidden="true" focusable="false">
            <defs>
              <marker id="plan-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
                <path d="M 0 0 L 10 5 L 0 10 z" />
              </marker>
            </defs>
            {g.edges.map((e) => {
              const done = ['passed', 'skipped'].includes(byId.get(e.from)?.status ?? '');
              return <path key={`${e.from}->${e.to}`} d={e.path} className={done ? 'done' : undefined} markerEnd="url(#plan-arrow)" />;
            })}
          </svg>
          <ul className="plan-tasks" aria-label="Tasks">
            {g.boxes.map((b) => {
              const t = byId.get(b.id);
              if (!t) return null;
              return (
                <TaskBox
                  key={b.id}
                  task={t}
                  x={b.x}
                  y={b.y}
                  open={open === b.id}
                  onToggle={() => setOpen(open === b.id ? null : b.id)}
                  retry={canRetry(t, status) && busy === null ? () => control(t.id, 'retry') : undefined}
                  skip={canSkip(t, status) && busy === null ? () => control(t.id, 'skip') : undefined}
                />
              );
            })}
          </ul>
        </div>
      </div>
      {shown && <TaskDetail task={shown} />}
    </section>
  );
}

function TaskBox({
  task,
  x,
  y,
  open,
  onToggle,
  retry,
  skip,
}: {
  task: TaskView;
  x: number;
  y: number;
  open: boolean;
  onToggle: () => void;
  retry?: () => void;
  skip?: () => void;
}) {
  const s = taskStatus(task.status);
  const last = lastVerdict(task);
  const deps = task.depends_on ?? [];
  return (
    <li
      className={`plan-task plan-tone-${s.tone}${open ? ' open' : ''}`}
      style={{ left: x, top: y, width: BOX.width, height: BOX.height }}
      data-testid={`plan-task-${task.id}`}
    >
      <div className="plan-task-head">
        <button
          type="button"
          className="link plan-task-id"
          aria-expanded={open}
          aria-controls="plan-task-detail"
          aria-label={`Task ${task.id}`}
          title={task.id}
          onClick={onToggle}
        >
          {task.id}
        </button>
        {task.final && <span className="badge badge-idle">final</span>}
        {task.critical && <span className="badge badge-idle">critical</span>}
      </div>
      <div className="plan-task-line">
        <StatusBadge status={s} testId={`plan-task-status-${task.id}`} />{' '}
        <span className="t-muted">{attemptsLine(task.attempts.length)}</span>
      </div>
      <div className="plan-task-line" title={last ? verdictLine(last.verdict) : undefined}>
        {last ? (
          <>
            <span className="t-muted">last verdict </span>
            <span className={`plan-verdict-${verdictTone(last.verdict)}`}>{verdictLine(last.verdict)}</span>
          </>
        ) : (
          <span className="t-muted">no verdict yet</span>
        )}
      </div>
      {deps.length > 0 && <span className="sr-only">depends on {deps.join(', ')}</span>}
      <div className="plan-task-actions">
        <button type="button" onClick={retry} disabled={!retry} aria-label={`Retry ${task.id}`}>
          Retry
        </button>
        <button type="button" onClick={skip} disabled={!skip} aria-label={`Skip ${task.id}`}>
          Skip
        </button>
      </div>
    </li>
  );
}

function TaskDetail({ task }: { task: TaskView }) {
  const deps = task.depends_on ?? [];
  const newest = task.attempts[task.attempts.length - 1];
  return (
    <section id="plan-task-detail" className="plan-detail" aria-label={`Task ${task.id}`}>
      <h3>
        Task <code>{task.id}</code> <StatusBadge status={taskStatus(task.status)} />
      </h3>
      <dl className="facts">
        <dt>Depends on</dt>
        <dd>{deps.length ? deps.join(', ') : '—'}</dd>
        <dt>Agent</dt>
        <dd>{task.agent ?? "the run's"}</dd>
        <dt>Verified by</dt>
        <dd>
          {task.verify ?? 'checks'}
          {task.verify === 'vote' ? ` of ${task.votes ?? 3}` : ''}
        </dd>
        {task.writes && task.writes.length > 0 && (
          <>
            <dt>Writes</dt>
            <dd>{task.writes.join(', ')}</dd>
          </>
        )}
        {task.checks && task.checks.length > 0 && (
          <>
            <dt>Checks</dt>
            <dd>{task.checks.map(checkLine).join('; ')}</dd>
          </>
        )}
      </dl>
      <details>
        <summary>Description</summary>
        <pre className="plan-text">{task.description}</pre>
      </details>
      {task.acceptance && (
        <details>
          <summary>Acceptance</summary>
          <pre className="plan-text">{task.acceptance}</pre>
        </details>
      )}
      {task.attempts.length === 0 ? (
        <p className="empty">No attempts yet.</p>
      ) : (
        <ol className="plan-attempts" aria-label={`Attempts of ${task.id}`}>
          {task.attempts.map((a) => (
            <li key={`${a.attempt}-${a.child_run_id}`}>
              <Attempt attempt={a} underWay={a === newest && task.status === 'running'} />
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}

function Attempt({ attempt: a, underWay }: { attempt: AttemptView; underWay: boolean }) {
  const checks = a.checks ?? [];
  const summary = checksLine(checks);
  return (
    <>
      <h4>
        Attempt {a.attempt}
        {a.stale && (
          <>
            {' '}
            <span className="badge badge-warn">stale — ignored</span>
          </>
        )}
      </h4>
      <p>
        Sub-run <Link to={`/runs/${a.child_run_id}`}>{a.child_run_id}</Link>{' '}
        <span className="t-muted">(plan version {a.plan_version})</span>
      </p>
      {summary ? (
        <>
          <p className="t-muted">{summary}</p>
          <ul className="plan-checks" aria-label={`Checks of attempt ${a.attempt}`}>
            {checks.map((c, i) => (
              <li key={i}>
                <span className={`badge badge-${c.passed ? 'good' : 'bad'}`}>{c.passed ? 'pass' : 'fail'}</span>{' '}
                <code>{checkLine(c.check)}</code>
                {c.message ? ` — ${c.message}` : ''}
              </li>
            ))}
          </ul>
        </>
      ) : (
        <p className="t-muted">{underWay ? 'running…' : 'not checked yet'}</p>
      )}
      {a.verdict ? <VerdictView verdict={a.verdict} /> : summary && <p className="t-muted">no verdict yet</p>}
    </>
  );
}

function VerdictView({ verdict: v }: { verdict: Verdict }) {
  const issues = v.issues ?? [];
  const missing = v.missing ?? [];
  return (
    <div className="plan-verdict">
      <p>
        Verdict <span className={`badge badge-${verdictTone(v)}`}>{verdictLine(v)}</span>{' '}
        <span className="t-muted">confidence {percent(v.confidence)}</span>
      </p>
      {issues.length > 0 && (
        <ul aria-label="Issues">
          {issues.map((i, n) => (
            <li key={n}>
              {i.path && <code>{i.path}</code>}
              {i.check && <span className="t-muted"> ({i.check})</span>}
              {i.path || i.check ? ': ' : ''}
              {i.message}
            </li>
          ))}
        </ul>
      )}
      {missing.length > 0 && <p>Missing: {missing.join(', ')}</p>}
      {v.feedback && <p>Feedback: {v.feedback}</p>}
    </div>
  );
}
