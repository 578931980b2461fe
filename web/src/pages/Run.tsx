import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useParams } from 'react-router';
import { api, ApiError, ok } from '../api';
import { readRunStream } from '../sse';
import {
  apply,
  emptyTerminal,
  follow,
  header,
  isEnded,
  pretty,
  summary,
  tokens,
  type Line,
  type RunFacts,
  type Terminal,
} from '../terminal';
import { ErrorNote } from '../ErrorNote';
import { changeSummary } from '../diff';
import { UnifiedDiff } from '../UnifiedDiff';
import { RUN_VOLUME } from '../files';
import { refreshesPlan } from '../plan';
import { PlanPanel, useIsPlanRun } from './Plan';
import { RunStatusBadge } from '../Badges';
import { pauseNote, runPauseActions } from '../pause';

const saveKey = (runId: string) => `weft-run:${runId}`;

/** The terminal this tab showed for the run before a reload (sessionStorage: this tab only,
 * cleared on logout), without its unfinished live text. */
function restore(runId: string): Terminal {
  try {
    const t = JSON.parse(window.sessionStorage.getItem(saveKey(runId)) ?? 'null') as Terminal | null;
    if (t && Array.isArray(t.lines) && typeof t.lastSeq === 'number') {
      return { lines: t.lines.filter((l) => !(l.type === 'text' && l.live)), lastSeq: t.lastSeq };
    }
  } catch {
    /* nothing usable saved */
  }
  return emptyTerminal;
}

/** Streams a run's events into a terminal from the last seen seq: after a dropped connection,
 * after a reload (the terminal so far is kept in the tab's sessionStorage), and when `reattach`
 * is called. The events also say what the run's header shows (`facts`) the moment they arrive,
 * and `planSeq` is the seq of the newest event that changes a plan run's plan. */
function useRunStream(runId: string): {
  terminal: Terminal;
  facts: RunFacts;
  state: string;
  planSeq: number;
  reattach: () => void;
} {
  const [terminal, setTerminal] = useState<Terminal>(() => restore(runId));
  const [facts, setFacts] = useState<RunFacts>({});
  const [planSeq, setPlanSeq] = useState(0);
  const [state, setState] = useState('connecting');
  const [attach, setAttach] = useState(0);
  const last = useRef(0);
  const reattach = useCallback(() => setAttach((n) => n + 1), []);
  useEffect(() => {
    try {
      window.sessionStorage.setItem(saveKey(runId), JSON.stringify(terminal));
    } catch {
      /* over the storage quota: a reload replays from the start instead */
    }
  }, [runId, terminal]);
  useEffect(() => {
    const abort = new AbortController();
    const start = restore(runId);
    last.current = start.lastSeq;
    setTerminal(start);
    (async () => {
      let delay = 250;
      while (!abort.signal.aborted) {
        try {
          setState('live');
          await readRunStream(
            runId,
            last.current + 1,
            (e) => {
              if (e.kind !== 'text_delta') last.current = Math.max(last.current, e.seq);
              if (refreshesPlan(e.kind)) setPlanSeq(e.seq);
              setTerminal((t) => apply(t, e));
              setFacts((f) => {
                const next = follow(f, e);
                return next === f ? f : { ...next, at: Date.now() };
              });
            },
            abort.signal,
          );
          setState('ended');
          return;
        } catch (err) {
          if (abort.signal.aborted) return;
          if (err instanceof ApiError && err.status < 500 && err.status !== 429) {
            setState(`error: ${err.message}`);
            return;
          }
          setState('reconnecting');
          await new Promise((r) => setTimeout(r, delay));
          delay = Math.min(delay * 2, 5000);
        }
      }
    })();
    return () => abort.abort();
  }, [runId, attach]);
  return { terminal, facts, state, planSeq, reattach };
}

export function RunPage() {
  const { id = '' } = useParams();
  // One instance per run: a link to another run (a sub-run, the parent) starts afresh.
  return <RunOf key={id} id={id} />;
}

function RunOf({ id }: { id: string }) {
  const client = useQueryClient();
  const { terminal, facts, state, planSeq, reattach } = useRunStream(id);
  // A plan run parks only for its plan's approval, which the plan panel asks for: no reply box.
  const isPlanRun = useIsPlanRun(id);
  // The header used to come from polling the run alone, so it lagged the terminal by up to the
  // poll's interval, and a poll sent before the run ended could answer after the stream said so.
  // Now what the stream said is laid over the run as fetched, unless that fetch is newer
  // (`header`): the stream tells at once that the run waits, runs again or ended, with its final
  // usage.
  const streamEnded = isEnded(facts.status);
  const run = useQuery({
    queryKey: ['run', id],
    queryFn: async () => {
      const askedAt = Date.now();
      return { run: await ok(api.GET('/v1/runs/{id}', { params: { path: { id } } })), askedAt };
    },
    refetchInterval: (q) => (streamEnded || isEnded(q.state.data?.run.status) ? false : 1500),
  });
  const head = run.data ? header(run.data.run, run.data.askedAt, facts) : undefined;
  const [error, setError] = useState<string | null>(null);
  const done = head ? isEnded(head.status) : false;
  // Once the stream says the run ended, fetch it once more for the fields events do not carry.
  useEffect(() => {
    if (streamEnded) void client.invalidateQueries({ queryKey: ['run', id] });
  }, [streamEnded, client, id]);
  // A run can end without its live stream hearing it (a waiting run cancelled: the gateway ends
  // it in the database). Once the fetched run says it ended and the stream has still not, attach
  // again: the transcript replays what the stream missed, its end included. Once.
  const fetchedEnded = isEnded(run.data?.run.status);
  const reattached = useRef(false);
  useEffect(() => {
    if (!fetchedEnded || state !== 'live' || reattached.current) return;
    const t = window.setTimeout(() => {
      reattached.current = true;
      reattach();
    }, 1000);
    return () => window.clearTimeout(t);
  }, [fetchedEnded, state, reattach]);

  const act = async (what: () => Promise<unknown>) => {
    setError(null);
    try {
      await what();
      await client.invalidateQueries({ queryKey: ['run', id] });
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };
  const cancel = () =>
    act(() => ok(api.POST('/v1/runs/{id}/cancel', { params: { path: { id } }, body: { reason: 'cancelled from the UI' } })));
  // Both answer the run: it goes into the cache at once, so the badge and the buttons follow
  // without waiting for the next poll (a 503 `tenant_paused` shows its message).
  const pauseOrResume = (which: 'pause' | 'resume') =>
    act(async () => {
      const askedAt = Date.now();
      const r =
        which === 'pause'
          ? await ok(api.POST('/v1/runs/{id}/pause', { params: { path: { id } } }))
          : await ok(api.POST('/v1/runs/{id}/resume', { params: { path: { id } } }));
      client.setQueryData(['run', id], { run: r, askedAt });
    });
  const pauseActions = head ? runPauseActions(head) : { pause: false, resume: false };
  const note = head ? pauseNote(head) : null;

  // A failed poll keeps the last answer on screen; only a run never fetched is an error page.
  if (run.isError && !run.data) {
    return (
      <p className="error" role="alert">
        {run.error.message}. <Link to="/runs">Back to the runs</Link>
      </p>
    );
  }
  return (
    <section className="run">
      <p>
        <Link to="/runs">← Runs</Link>
      </p>
      <h1>
        Run <code>{id}</code>
      </h1>
      {head && (
        <dl className="facts">
          <dt>Agent</dt>
          <dd>{head.agent}</dd>
          <dt>Status</dt>
          <dd>
            <RunStatusBadge run={head} testId="run-status" />
            {head.stop_reason ? ` (${head.stop_reason})` : ''}
            {note && (
              <span className="t-muted" data-testid="run-pause-note">
                {' '}
                — {note}
              </span>
            )}
          </dd>
          <dt>Tokens in / out</dt>
          <dd data-testid="run-usage">
            {tokens(head.usage).prompt} / {tokens(head.usage).completion}
          </dd>
          {head.parent_run_id && (
            <>
              <dt>Parent</dt>
              <dd>
                <Link to={`/runs/${head.parent_run_id}`}>{head.parent_run_id}</Link>
              </dd>
            </>
          )}
          <dt>Stream</dt>
          <dd>{state}</dd>
        </dl>
      )}
      {head && !done && (
        <div className="row">
          <button type="button" onClick={cancel}>
            Cancel
          </button>
          {pauseActions.pause && (
            <button type="button" onClick={() => pauseOrResume('pause')} title="Park the run (and its sub-runs) at its next step boundary">
              Pause
            </button>
          )}
          {pauseActions.resume && (
            <button type="button" onClick={() => pauseOrResume('resume')}>
              Resume
            </button>
          )}
        </div>
      )}
      <ErrorNote error={error} />
      <PlanPanel runId={id} runStatus={head?.status} planSeq={planSeq} streamLive={state === 'live'} />
      <ol className="terminal" aria-live="polite" aria-label="Run transcript">
        {terminal.lines.map((l, i) => (
          <TerminalLine key={`${l.seq}-${i}`} line={l} runId={id} act={act} />
        ))}
      </ol>
      {head?.status === 'awaiting_input' && !head.pending_interrupt && !isPlanRun && (
        <InputBox
          label="Your reply"
          onSend={(text) => act(() => ok(api.POST('/v1/runs/{id}/input', { params: { path: { id } }, body: { text } })))}
        />
      )}
    </section>
  );
}

function TerminalLine({
  line,
  runId,
  act,
}: {
  line: Line;
  runId: string;
  act: (what: () => Promise<unknown>) => Promise<void>;
}) {
  switch (line.type) {
    case 'input':
      return <li className="t-input">› {line.text}</li>;
    case 'text':
      return <li className={line.live ? 't-text live' : 't-text'}>{line.text}</li>;
    case 'provider':
      return <li className="t-muted">{line.text}</li>;
    case 'tool':
      return (
        <li className={line.result?.isError ? 't-tool t-bad' : 't-tool'}>
          <details>
            <summary>
              ⚙ {line.name}({summary(line.input, 60)})
              {line.result ? ` → ${summary(line.result.content, 80)}` : ' …'}
            </summary>
            <pre aria-label="Input">{pretty(line.input)}</pre>
            {line.result && <pre aria-label="Result">{pretty(line.result.content)}</pre>}
          </details>
        </li>
      );
    case 'files':
      return (
        <li className="t-files">
          <details>
            <summary>
              ✎ {changeSummary(line.files)}
              {line.volume && line.volume !== RUN_VOLUME ? ` in ${line.volume}` : ''}
            </summary>
            {line.files.map((f, i) => (
              <div key={`${f.path}-${i}`}>
                {line.files.length > 1 && <p className="t-muted">{f.path}</p>}
                <UnifiedDiff diff={f.diff} label={`Diff of ${f.path}`} />
              </div>
            ))}
            {line.volume && line.volume !== RUN_VOLUME && (
              <p className="t-muted">
                <Link to={`/files/${encodeURIComponent(line.volume)}`}>Open {line.volume} in Files</Link>
              </p>
            )}
          </details>
        </li>
      );
    case 'subrun':
      return (
        <li className="t-muted">
          ↳ sub-run <Link to={`/runs/${line.runId}`}>{line.agent || line.runId}</Link> ({line.status})
        </li>
      );
    case 'interruption':
      return (
        <li className="t-interrupt">
          <p>? {line.question}</p>
          {!line.answered && (
            <InputBox
              label="Answer"
              onSend={(answer) =>
                act(() =>
                  ok(
                    api.POST('/v1/runs/{id}/interrupts/{interrupt_id}', {
                      params: { path: { id: runId, interrupt_id: line.id } },
                      body: { answer },
                    }),
                  ),
                )
              }
            />
          )}
        </li>
      );
    case 'notice':
      return (
        <li className="t-notice" role="status">
          ℹ {line.text}
        </li>
      );
    case 'compacted':
      return (
        <li className="t-muted">
          <details>
            <summary>
              ⇣ context compacted ({line.trigger}): ~{line.before} → ~{line.after} tokens, {line.turns} turns summarized
            </summary>
            <pre aria-label="Summary">{line.summary}</pre>
          </details>
        </li>
      );
    case 'awaiting':
      return <li className="t-muted">waiting for input ({line.reason})</li>;
    case 'pause':
      return (
        <li className="t-notice" role="status">
          {line.text}
        </li>
      );
    case 'error':
      return <li className="t-bad">{line.text}</li>;
    case 'finished':
      return (
        <li className="t-muted">
          run {line.status} ({line.stopReason})
        </li>
      );
  }
}

function InputBox({ label, onSend }: { label: string; onSend: (text: string) => Promise<void> }) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    if (!text.trim()) return;
    setBusy(true);
    await onSend(text);
    setBusy(false);
    setText('');
  };
  return (
    <form className="inputbox" onSubmit={submit}>
      <label>
        {label} <input value={text} onChange={(e) => setText(e.target.value)} disabled={busy} />
      </label>
      <button type="submit" disabled={busy || !text.trim()}>
        Send
      </button>
    </form>
  );
}
