import type { FileDiff } from './diff';
import type { RunEvent } from './sse';
import { pauseEventText } from './pause';

/** One line of the live terminal. */
export type Line =
  | { type: 'input'; seq: number; text: string }
  | { type: 'text'; seq: number; text: string; live: boolean }
  | { type: 'provider'; seq: number; text: string }
  | {
      type: 'tool';
      seq: number;
      id: string;
      name: string;
      input: unknown;
      result?: { content: unknown; isError: boolean };
    }
  | { type: 'subrun'; seq: number; runId: string; agent: string; status: string }
  /** A file tool call's change to a volume (`file_changed`): one folded line, its diffs inside. */
  | { type: 'files'; seq: number; volume: string; toolUseId: string; changeId: string; files: FileDiff[] }
  | {
      type: 'interruption';
      seq: number;
      id: string;
      toolUseId: string;
      question: string;
      answered: boolean;
    }
  /** `Interruption {op: notify}`: a notice from the run; it goes on. */
  | { type: 'notice'; seq: number; text: string }
  /** `context_compacted`: earlier turns became a summary (the transcript keeps them whole). */
  | { type: 'compacted'; seq: number; trigger: string; before: number; after: number; turns: number; summary: string }
  | { type: 'awaiting'; seq: number; reason: string }
  /** `run_paused` / `run_resumed`: the run parked at a step boundary, or went on. */
  | { type: 'pause'; seq: number; paused: boolean; text: string }
  | { type: 'error'; seq: number; text: string }
  | { type: 'finished'; seq: number; status: string; stopReason: string };

export interface Terminal {
  lines: Line[];
  /** The highest durable seq applied (text deltas carry the seq of the event they follow). */
  lastSeq: number;
}

export const emptyTerminal: Terminal = { lines: [], lastSeq: 0 };

/** The fields of an event's `data` (any JSON in the document): none when it is no object. */
const fields = (v: unknown): Record<string, unknown> =>
  v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

const str = (v: unknown): string => (typeof v === 'string' ? v : v == null ? '' : JSON.stringify(v));

/** The text of an assistant message's content blocks. */
function messageText(message: unknown): string {
  const content = (message as { content?: unknown })?.content;
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .filter((b) => b && (b as { type?: string }).type === 'text')
    .map((b) => str((b as { text?: unknown }).text))
    .join('');
}

const sha = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);

/** The files of a `file_changed` event (`[{path, before_sha, after_sha, diff}]`). */
function changedFiles(v: unknown): FileDiff[] {
  if (!Array.isArray(v)) return [];
  return v.map((f) => {
    const x = fields(f);
    return {
      path: str(x.path),
      before: sha(x.before_sha),
      after: sha(x.after_sha),
      diff: typeof x.diff === 'string' ? x.diff : '',
    };
  });
}

/**
 * Applies one stream frame. Durable events already applied (a replay after a reconnect) are
 * ignored; live text accumulates into one line that the turn's `assistant_message` replaces.
 */
export function apply(t: Terminal, e: RunEvent): Terminal {
  if (e.kind === 'text_delta') {
    const lines = [...t.lines];
    const last = lines[lines.length - 1];
    const text = str(fields(e.data).text);
    if (last && last.type === 'text' && last.live) {
      lines[lines.length - 1] = { ...last, text: last.text + text };
    } else {
      lines.push({ type: 'text', seq: e.seq, text, live: true });
    }
    return { ...t, lines };
  }
  if (e.seq <= t.lastSeq) return t;
  const d = fields(e.data);
  const lines = t.lines.filter((l) => !(l.type === 'text' && l.live && e.kind === 'assistant_message'));
  switch (e.kind) {
    case 'user_input':
      lines.push({ type: 'input', seq: e.seq, text: str(d.text ?? d.messages) });
      break;
    case 'provider_chosen':
      lines.push({ type: 'provider', seq: e.seq, text: `${str(d.model)} via ${str(d.provider)}` });
      break;
    case 'assistant_message': {
      const text = messageText(d.message);
      if (text) lines.push({ type: 'text', seq: e.seq, text, live: false });
      break;
    }
    case 'tool_call':
      lines.push({ type: 'tool', seq: e.seq, id: str(d.id), name: str(d.name), input: d.input });
      break;
    case 'tool_result': {
      const i = lines.findIndex((l) => l.type === 'tool' && l.id === str(d.tool_use_id));
      const result = { content: d.content, isError: d.is_error === true };
      if (i >= 0) {
        lines[i] = { ...(lines[i] as Extract<Line, { type: 'tool' }>), result };
      } else {
        lines.push({ type: 'tool', seq: e.seq, id: str(d.tool_use_id), name: str(d.name), input: undefined, result });
      }
      break;
    }
    case 'file_changed':
      lines.push({
        type: 'files',
        seq: e.seq,
        volume: str(d.volume),
        toolUseId: str(d.tool_use_id),
        changeId: str(d.change_id),
        files: changedFiles(d.files),
      });
      break;
    case 'sub_run_started':
      lines.push({ type: 'subrun', seq: e.seq, runId: str(d.run_id), agent: str(d.agent), status: 'running' });
      break;
    case 'sub_run_finished': {
      const i = lines.findIndex((l) => l.type === 'subrun' && l.runId === str(d.run_id));
      if (i >= 0) lines[i] = { ...(lines[i] as Extract<Line, { type: 'subrun' }>), status: str(d.status) };
      break;
    }
    case 'interruption':
      lines.push({
        type: 'interruption',
        seq: e.seq,
        id: str(d.id),
        toolUseId: str(d.tool_use_id),
        question: str(d.question),
        answered: false,
      });
      break;
    case 'notice':
      lines.push({ type: 'notice', seq: e.seq, text: str(d.message) });
      break;
    case 'context_compacted':
      lines.push({
        type: 'compacted',
        seq: e.seq,
        trigger: str(d.trigger),
        before: typeof d.before_tokens === 'number' ? d.before_tokens : 0,
        after: typeof d.after_tokens === 'number' ? d.after_tokens : 0,
        turns: typeof d.folded_turns === 'number' ? d.folded_turns : 0,
        summary: str(d.summary),
      });
      break;
    case 'awaiting_input':
      lines.push({ type: 'awaiting', seq: e.seq, reason: str(d.reason) });
      break;
    case 'run_paused':
    case 'run_resumed':
      lines.push({ type: 'pause', seq: e.seq, paused: e.kind === 'run_paused', text: pauseEventText(e.kind, d) ?? e.kind });
      break;
    case 'error':
      lines.push({ type: 'error', seq: e.seq, text: `${str(d.code)}: ${str(d.message)}` });
      break;
    case 'run_finished':
      lines.push({ type: 'finished', seq: e.seq, status: str(d.status), stopReason: str(d.stop_reason) });
      break;
    default:
      break;
  }
  // An interruption is answered once its tool call has a result, or the run has ended.
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (
      l.type === 'interruption' &&
      !l.answered &&
      (e.kind === 'run_finished' || (e.kind === 'tool_result' && str(d.tool_use_id) === l.toolUseId))
    ) {
      lines[i] = { ...l, answered: true };
    }
  }
  return { lines, lastSeq: e.seq };
}

/** A run's token counts from its `usage` (any JSON in the document; the executor writes
 * `prompt_tokens` and `completion_tokens`), 0 for a count it lacks. */
export function tokens(usage: unknown): { prompt: number; completion: number } {
  const u = fields(usage);
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  return { prompt: n(u.prompt_tokens), completion: n(u.completion_tokens) };
}

/** A one-line summary of a tool's input or result. */
export function summary(v: unknown, max = 100): string {
  const s = str(v).replace(/\s+/g, ' ');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/**
 * A tool's input or result as text to read: JSON — a value, or a string holding an object or an
 * array, as tool results usually are — indented; any other text as it is.
 */
export function pretty(v: unknown): string {
  if (v === undefined) return '';
  if (typeof v === 'string') {
    const t = v.trim();
    if ((t.startsWith('{') && t.endsWith('}')) || (t.startsWith('[') && t.endsWith(']'))) {
      try {
        return JSON.stringify(JSON.parse(t), null, 2);
      } catch {
        /* text that only looks like JSON */
      }
    }
    return v;
  }
  return JSON.stringify(v, null, 2) ?? String(v);
}

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);

/** Whether a run status is final. */
export const isEnded = (status: string | undefined): boolean => status !== undefined && ENDED.has(status);

/** What the run stream has said about the run's header: its status, stop reason, usage and
 * pending interruption, as of the newest event (each stream event is committed before it is
 * sent, so it is never older than `GET /v1/runs/{id}`). */
export interface RunFacts {
  status?: string;
  stop_reason?: string | null;
  usage?: unknown;
  pending_interrupt?: unknown;
  /** Who asked the run to pause (`run_paused` says; `run_resumed` clears it). */
  paused_by?: string | null;
  /** When the newest of these facts arrived (`Date.now()`), set by the page. */
  at?: number;
}

// Events only an executor working on the run writes.
const WORKING = new Set([
  'run_started',
  'usage',
  'provider_chosen',
  'provider_fallback',
  'text_delta',
  'assistant_message',
  'tool_call',
  'tool_result',
  'file_changed',
  'sub_run_started',
  'sub_run_finished',
]);

/** Folds one stream event into the facts; the same object when it changes nothing. */
export function follow(f: RunFacts, e: RunEvent): RunFacts {
  if (isEnded(f.status)) return f;
  const d = fields(e.data);
  switch (e.kind) {
    case 'run_finished': {
      const ended: RunFacts = {
        status: str(d.status),
        stop_reason: d.stop_reason == null ? null : str(d.stop_reason),
        pending_interrupt: null,
      };
      // Facts are laid over the fetched run: a key is set only when the event says it.
      if (d.usage && typeof d.usage === 'object') ended.usage = d.usage;
      return ended;
    }
    case 'awaiting_input':
      return { ...f, status: 'awaiting_input', pending_interrupt: d.interrupt ?? null };
    case 'run_paused':
      return { ...f, status: 'paused', paused_by: typeof d.by === 'string' && d.by ? d.by : 'run' };
    case 'run_resumed':
      // Queued again; its first working event says it runs.
      return { ...f, status: 'queued', paused_by: null };
    case 'user_input':
      // Also the first event of a queued run: only a reply to a waiting run makes it run.
      return f.status === 'awaiting_input' ? { ...f, status: 'running', pending_interrupt: null } : f;
    default:
      return WORKING.has(e.kind) && f.status !== 'running' ? { ...f, status: 'running', pending_interrupt: null } : f;
  }
}

/**
 * The run's header: the run as fetched, with the stream's facts laid over it when they are the
 * newer — they say the run ended, or arrived after the fetch was sent (an event is committed
 * before it is sent, so a fetch sent after it sees at least as much). A fetched run that ended
 * is final: the stream may not hear every end (a waiting run cancelled is ended by the gateway).
 */
export function header<R extends { status: string }>(run: R, askedAt: number, facts: RunFacts): R {
  const { at, ...said } = facts;
  if (isEnded(run.status) || said.status === undefined) return run;
  return isEnded(said.status) || (at ?? -Infinity) >= askedAt ? { ...run, ...said } : run;
}
