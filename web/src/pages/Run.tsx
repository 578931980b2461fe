import { useEffect, useRef, useState, type FormEvent } from 'react';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useParams } from 'react-router';
import { ApiError, getJson, sendJson } from '../api';
import { readRunStream } from '../sse';
import { apply, emptyTerminal, summary, type Line, type Terminal } from '../terminal';
import type { Run } from './Runs';
import { ErrorNote } from '../ErrorNote';

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);

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
 * and after a reload (the terminal so far is kept in the tab's sessionStorage). */
function useRunStream(runId: string): { terminal: Terminal; state: string } {
  const [terminal, setTerminal] = useState<Terminal>(() => restore(runId));
  const [state, setState] = useState('connecting');
  const last = useRef(0);
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
              setTerminal((t) => apply(t, e));
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
  }, [runId]);
  return { terminal, state };
}

export function RunPage() {
  const { id = '' } = useParams();
  const client = useQueryClient();
  const run = useQuery({
    queryKey: ['run', id],
    queryFn: () => getJson<Run & { pending_interrupt: unknown }>(`/v1/runs/${encodeURIComponent(id)}`),
    refetchInterval: (q) => (q.state.data && ENDED.has(q.state.data.status) ? false : 1500),
  });
  const { terminal, state } = useRunStream(id);
  const [error, setError] = useState<string | null>(null);
  const ended = run.data ? ENDED.has(run.data.status) : false;

  const act = async (what: () => Promise<unknown>) => {
    setError(null);
    try {
      await what();
      await client.invalidateQueries({ queryKey: ['run', id] });
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };
  const cancel = () => act(() => sendJson('POST', `/v1/runs/${id}/cancel`, { reason: 'cancelled from the UI' }));

  if (run.isError) {
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
      {run.data && (
        <dl className="facts">
          <dt>Agent</dt>
          <dd>{run.data.agent}</dd>
          <dt>Status</dt>
          <dd>
            <span className={`status status-${run.data.status}`} data-testid="run-status">
              {run.data.status}
            </span>
            {run.data.stop_reason ? ` (${run.data.stop_reason})` : ''}
          </dd>
          <dt>Tokens in / out</dt>
          <dd data-testid="run-usage">
            {run.data.usage?.prompt_tokens ?? 0} / {run.data.usage?.completion_tokens ?? 0}
          </dd>
          {run.data.parent_run_id && (
            <>
              <dt>Parent</dt>
              <dd>
                <Link to={`/runs/${run.data.parent_run_id}`}>{run.data.parent_run_id}</Link>
              </dd>
            </>
          )}
          <dt>Stream</dt>
          <dd>{state}</dd>
        </dl>
      )}
      {!ended && (
        <button type="button" onClick={cancel}>
          Cancel
        </button>
      )}
      <ErrorNote error={error} />
      <ol className="terminal" aria-live="polite" aria-label="Run transcript">
        {terminal.lines.map((l, i) => (
          <TerminalLine key={`${l.seq}-${i}`} line={l} runId={id} act={act} />
        ))}
      </ol>
      {run.data?.status === 'awaiting_input' && !run.data.pending_interrupt && (
        <InputBox
          label="Your reply"
          onSend={(text) => act(() => sendJson('POST', `/v1/runs/${id}/input`, { text }))}
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
            <pre>{JSON.stringify(line.input, null, 2)}</pre>
            {line.result && <pre>{JSON.stringify(line.result.content, null, 2)}</pre>}
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
                  sendJson('POST', `/v1/runs/${runId}/interrupts/${encodeURIComponent(line.id)}`, { answer }),
                )
              }
            />
          )}
        </li>
      );
    case 'awaiting':
      return <li className="t-muted">waiting for input ({line.reason})</li>;
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
