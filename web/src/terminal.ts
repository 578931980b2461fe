import type { RunEvent } from './sse';

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
  | {
      type: 'interruption';
      seq: number;
      id: string;
      toolUseId: string;
      question: string;
      answered: boolean;
    }
  | { type: 'awaiting'; seq: number; reason: string }
  | { type: 'error'; seq: number; text: string }
  | { type: 'finished'; seq: number; status: string; stopReason: string };

export interface Terminal {
  lines: Line[];
  /** The highest durable seq applied (text deltas carry the seq of the event they follow). */
  lastSeq: number;
}

export const emptyTerminal: Terminal = { lines: [], lastSeq: 0 };

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

/**
 * Applies one stream frame. Durable events already applied (a replay after a reconnect) are
 * ignored; live text accumulates into one line that the turn's `assistant_message` replaces.
 */
export function apply(t: Terminal, e: RunEvent): Terminal {
  if (e.kind === 'text_delta') {
    const lines = [...t.lines];
    const last = lines[lines.length - 1];
    const text = str(e.data.text);
    if (last && last.type === 'text' && last.live) {
      lines[lines.length - 1] = { ...last, text: last.text + text };
    } else {
      lines.push({ type: 'text', seq: e.seq, text, live: true });
    }
    return { ...t, lines };
  }
  if (e.seq <= t.lastSeq) return t;
  const d = e.data;
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
    case 'awaiting_input':
      lines.push({ type: 'awaiting', seq: e.seq, reason: str(d.reason) });
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

/** A one-line summary of a tool's input or result. */
export function summary(v: unknown, max = 100): string {
  const s = str(v).replace(/\s+/g, ' ');
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}
