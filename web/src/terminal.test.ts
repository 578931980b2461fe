import { describe, expect, it } from 'vitest';
import { changeSummary } from './diff';
import { apply, emptyTerminal, follow, header, pretty, summary, tokens, type Line, type RunFacts, type Terminal } from './terminal';
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

  it('shows a notice and a compaction, each on its own line', () => {
    const t = run([
      ev(1, 'notice', { tool_use_id: 'tu_1', message: 'halfway there' }),
      ev(2, 'context_compacted', { summary: 'did A', before_tokens: 900, after_tokens: 300, first_kept_seq: 2, trigger: 'auto', folded_turns: 3 }),
    ]);
    expect(t.lines).toEqual([
      { type: 'notice', seq: 1, text: 'halfway there' },
      { type: 'compacted', seq: 2, trigger: 'auto', before: 900, after: 300, turns: 3, summary: 'did A' },
    ]);
  });

  it('links sub-runs and follows their status', () => {
    const t = run([
      ev(1, 'sub_run_started', { run_id: 'r2', agent: 'helper', tool_use_id: 'tu', index: 0 }),
      ev(2, 'sub_run_finished', { run_id: 'r2', status: 'succeeded', stop_reason: 'end_turn' }),
    ]);
    expect(t.lines).toEqual([{ type: 'subrun', seq: 1, runId: 'r2', agent: 'helper', status: 'succeeded' }]);
  });

  it('folds a file change to one line holding its files and their diffs, after its tool call', () => {
    const diff = '--- a/src/a.py\n+++ b/src/a.py\n@@ -1,2 +1,4 @@\n-x = 1\n+x = 2\n+y = 3\n+z = 4\n keep\n';
    const t = run([
      ev(1, 'tool_call', { id: 'tu_w', name: 'Edit', input: { path: 'src/a.py' } }),
      ev(2, 'file_changed', {
        volume: 'run',
        tool_use_id: 'tu_w',
        change_id: 'c1',
        files: [{ path: 'src/a.py', before_sha: 'aa', after_sha: 'bb', diff }],
      }),
      ev(3, 'tool_result', { tool_use_id: 'tu_w', content: '{"path":"src/a.py"}' }),
    ]);
    expect(t.lines.map((l) => l.type)).toEqual(['tool', 'files']);
    expect(t.lines[1]).toEqual({
      type: 'files',
      seq: 2,
      volume: 'run',
      toolUseId: 'tu_w',
      changeId: 'c1',
      files: [{ path: 'src/a.py', before: 'aa', after: 'bb', diff }],
    });
    const line = t.lines[1] as Extract<Line, { type: 'files' }>;
    expect(changeSummary(line.files)).toBe('changed src/a.py (+3 −1)');
    // The tool line still gets its result.
    expect(t.lines[0]).toMatchObject({ type: 'tool', result: { content: '{"path":"src/a.py"}' } });
  });

  it('reads a created file, a deleted one and a move from the shas; odd data makes no odd line', () => {
    const one = (files: unknown, seq = 1) => run([ev(seq, 'file_changed', { volume: 'notes', change_id: 'c', files })]).lines[0] as Extract<Line, { type: 'files' }>;
    expect(changeSummary(one([{ path: 'a.txt', before_sha: null, after_sha: 'ab', diff: '--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1 @@\n+hi\n' }]).files)).toBe(
      'created a.txt (+1 −0)',
    );
    expect(changeSummary(one([{ path: 'old.bin', before_sha: 'ab', after_sha: null, diff: '' }]).files)).toBe('deleted old.bin');
    expect(
      changeSummary(
        one([
          { path: 'a.txt', before_sha: 'ab', after_sha: null, diff: '' },
          { path: 'b/a.txt', before_sha: null, after_sha: 'ab', diff: '' },
        ]).files,
      ),
    ).toBe('moved a.txt → b/a.txt');
    expect(one('nonsense').files).toEqual([]);
    expect(one([{ path: 'x', diff: 42 }]).files).toEqual([{ path: 'x', before: null, after: null, diff: '' }]);
    // A replayed file change is not shown twice, and it says the run is working.
    const events = [ev(1, 'file_changed', { volume: 'run', change_id: 'c', files: [] })];
    expect(run([...events, ...events]).lines).toHaveLength(1);
    expect(follow({ status: 'queued' }, events[0])).toMatchObject({ status: 'running' });
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

describe('pretty', () => {
  it('indents a tool result that is a string holding JSON', () => {
    expect(pretty('{"now":"12:00","zone":{"name":"UTC"}}')).toBe('{\n  "now": "12:00",\n  "zone": {\n    "name": "UTC"\n  }\n}');
    expect(pretty(' [1, 2] ')).toBe('[\n  1,\n  2\n]');
  });

  it('indents an input that is a value', () => {
    expect(pretty({ op: 'time' })).toBe('{\n  "op": "time"\n}');
    expect(pretty(42)).toBe('42');
  });

  it('leaves other text as it is, unquoted', () => {
    expect(pretty('12:00')).toBe('12:00');
    expect(pretty('{not json}')).toBe('{not json}');
    expect(pretty('"quoted"')).toBe('"quoted"');
    expect(pretty(undefined)).toBe('');
  });
});

describe('the run header follows the stream', () => {
  const facts = (events: RunEvent[]): RunFacts => events.reduce(follow, {});

  it('takes the final status, stop reason and usage from run_finished', () => {
    const f = facts([
      ev(1, 'user_input', { text: 'hi' }),
      ev(2, 'provider_chosen', { provider: 'mock' }),
      ev(3, 'run_finished', { status: 'succeeded', stop_reason: 'end_turn', usage: { prompt_tokens: 7, completion_tokens: 3 } }),
    ]);
    expect(f).toEqual({
      status: 'succeeded',
      stop_reason: 'end_turn',
      usage: { prompt_tokens: 7, completion_tokens: 3 },
      pending_interrupt: null,
    });
    // Nothing moves a run that ended.
    expect(follow(f, ev(4, 'tool_call', {}))).toBe(f);
  });

  it('does not claim a queued run runs, and lays no usage over the fetched one when the event has none', () => {
    expect(facts([ev(1, 'user_input', { text: 'hi' })])).toEqual({});
    expect('usage' in facts([ev(1, 'run_finished', { status: 'cancelled', stop_reason: 'cancelled' })])).toBe(false);
  });

  it('waits, and runs again after a reply', () => {
    let f = facts([ev(1, 'tool_call', { id: 't' }), ev(2, 'awaiting_input', { reason: 'interruption', interrupt: { id: 'i1' } })]);
    expect(f).toMatchObject({ status: 'awaiting_input', pending_interrupt: { id: 'i1' } });
    f = follow(f, ev(3, 'tool_result', { tool_use_id: 't' }));
    expect(f).toMatchObject({ status: 'running', pending_interrupt: null });
    f = follow(f, ev(4, 'awaiting_input', { reason: 'end_turn' }));
    expect(f).toMatchObject({ status: 'awaiting_input', pending_interrupt: null });
    f = follow(f, ev(5, 'user_input', { text: 'more' }));
    expect(f.status).toBe('running');
    // Text deltas keep a running run the same object (no re-render).
    expect(follow(f, ev(5, 'text_delta', { text: 'x' }))).toBe(f);
  });
});

describe('the run header', () => {
  const fetched = { status: 'awaiting_input', usage: { prompt_tokens: 5, completion_tokens: 2 }, agent: 'a' };

  it('takes an end the stream heard over a fetch that has not, whenever that fetch was sent', () => {
    const h = header(fetched, 2000, { status: 'succeeded', stop_reason: 'end_turn', usage: { prompt_tokens: 9, completion_tokens: 4 }, at: 1000 });
    expect(h).toEqual({ status: 'succeeded', stop_reason: 'end_turn', usage: { prompt_tokens: 9, completion_tokens: 4 }, agent: 'a' });
  });

  it('takes the newer of the two otherwise', () => {
    expect(header(fetched, 1000, { status: 'running', at: 2000 }).status).toBe('running');
    expect(header({ ...fetched, status: 'running' }, 3000, { status: 'awaiting_input', at: 2000 }).status).toBe('running');
    expect(header(fetched, 1000, {})).toBe(fetched);
  });

  it('keeps a fetched end: the stream does not hear every end', () => {
    const cancelled = { ...fetched, status: 'cancelled' };
    expect(header(cancelled, 1000, { status: 'awaiting_input', at: 5000 })).toBe(cancelled);
  });
});

describe('tokens', () => {
  it("reads a run's usage, whatever JSON it is", () => {
    expect(tokens({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 })).toEqual({ prompt: 3, completion: 2 });
    expect(tokens({ prompt_tokens: 3 })).toEqual({ prompt: 3, completion: 0 });
    expect(tokens(null)).toEqual({ prompt: 0, completion: 0 });
    expect(tokens(undefined)).toEqual({ prompt: 0, completion: 0 });
    expect(tokens({ prompt_tokens: 'x' })).toEqual({ prompt: 0, completion: 0 });
  });
});
