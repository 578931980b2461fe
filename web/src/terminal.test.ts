import { describe, expect, it } from 'vitest';
import { apply, emptyTerminal, summary, type Terminal } from './terminal';
import type { RunEvent } from './sse';
import { pump } from './sse';

const ev = (seq: number, kind: string, data: Record<string, unknown> = {}): RunEvent => ({ seq, kind, data });
const run = (events: RunEvent[]): Terminal => events.reduce(apply, emptyTerminal);

describe('the live terminal', () => {
  it('streams text, then keeps the turn message in its place', () => {
    let t = run([ev(1, 'user_input', { text: 'hi' }), ev(2, 'provider_chosen', { provider: 'mock', model: 'mock-1' })]);
    t = apply(t, ev(2, 'text_delta', { text: 'Hel' }));
    t = apply(t, ev(2, 'text_delta', { text: 'lo' }));
    expect(t.lines.at(-1)).toMatchObject({ type: 'text', text: 'Hello', live: true });
    t = apply(t, ev(3, 'assistant_message', { message: { content: [{ type: 'text', text: 'Hello' }] } }));
    expect(t.lines.filter((l) => l.type === 'text')).toEqual([{ type: 'text', seq: 3, text: 'Hello', live: false }]);
    expect(t.lines[1]).toMatchObject({ type: 'provider', text: 'mock-1 via mock' });
  });

  it('folds a tool call and its result into one line', () => {
    const t = run([
      ev(1, 'tool_call', { id: 'tu_1', name: 'Context', input: { op: 'time' } }),
      ev(2, 'tool_result', { tool_use_id: 'tu_1', name: 'Context', content: '12:00', is_error: false }),
    ]);
    expect(t.lines).toHaveLength(1);
    expect(t.lines[0]).toMatchObject({ type: 'tool', name: 'Context', result: { content: '12:00', isError: false } });
  });

  it('ignores durable events replayed after a reconnect', () => {
    const events = [ev(1, 'user_input', { text: 'a' }), ev(2, 'run_finished', { status: 'succeeded', stop_reason: 'end_turn' })];
    const once = run(events);
    expect(run([...events, ...events])).toEqual(once);
    expect(once.lastSeq).toBe(2);
  });

  it('marks an interruption answered when its tool call gets a result', () => {
    let t = run([ev(1, 'tool_call', { id: 'tu_9', name: 'Ask', input: {} }), ev(2, 'interruption', { id: 'int_tu_9', tool_use_id: 'tu_9', question: 'Sure?' })]);
    expect(t.lines[1]).toMatchObject({ type: 'interruption', answered: false, question: 'Sure?' });
    t = apply(t, ev(3, 'tool_result', { tool_use_id: 'tu_9', content: 'yes' }));
    expect(t.lines[1]).toMatchObject({ answered: true });
  });

  it('links sub-runs and follows their status', () => {
    const t = run([
      ev(1, 'sub_run_started', { run_id: 'r2', agent: 'helper', tool_use_id: 'tu', index: 0 }),
      ev(2, 'sub_run_finished', { run_id: 'r2', status: 'succeeded', stop_reason: 'end_turn' }),
    ]);
    expect(t.lines).toEqual([{ type: 'subrun', seq: 1, runId: 'r2', agent: 'helper', status: 'succeeded' }]);
  });

  it('summarises long values on one line', () => {
    expect(summary({ a: 'x'.repeat(200) }, 20)).toHaveLength(20);
    expect(summary('a\n  b')).toBe('a b');
  });
});

describe('the SSE reader', () => {
  it('parses frames split anywhere across chunks', async () => {
    const text =
      'id: 1\nevent: user_input\ndata: {"seq":1,"kind":"user_input","data":{"text":"hi"}}\n\n' +
      ': keepalive\n\nid: 2\nevent: run_finished\ndata: {"seq":2,"kind":"run_finished","data":{}}\n\n';
    const bytes = new TextEncoder().encode(text);
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < bytes.length; i += 7) c.enqueue(bytes.slice(i, i + 7));
        c.close();
      },
    });
    const seen: RunEvent[] = [];
    await pump(body, (e) => seen.push(e));
    expect(seen.map((e) => [e.seq, e.kind])).toEqual([
      [1, 'user_input'],
      [2, 'run_finished'],
    ]);
  });
});
