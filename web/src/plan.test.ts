import { describe, expect, it } from 'vitest';
import {
  attemptsLine,
  canApprove,
  canRetry,
  canSkip,
  checkLine,
  checksLine,
  count,
  graph,
  lastVerdict,
  layers,
  percent,
  planStatus,
  refreshesPlan,
  taskStatus,
  verdictLine,
  verdictTone,
  type AttemptView,
  type Verdict,
} from './plan';

const t = (id: string, depends_on: string[] = [], final = false) => ({ id, depends_on, final });

const verdict = (v: Verdict['verdict'], reason_code: Verdict['reason_code'] = 'ok'): Verdict => ({
  verdict: v,
  reason_code,
  confidence: 1,
  issues: [],
  missing: [],
  feedback: '',
});

const attempt = (n: number, v?: Verdict, stale = false): AttemptView => ({
  attempt: n,
  child_run_id: `00000000-0000-0000-0000-00000000000${n}`,
  plan_version: 1,
  checks: [],
  verdict: v ?? null,
  stale,
});

describe('plan layers', () => {
  it('puts each task one column right of its deepest dependency', () => {
    // a → b → d, a → c → d, e alone
    expect(layers([t('a'), t('b', ['a']), t('c', ['a']), t('d', ['b', 'c']), t('e')])).toEqual([['a', 'e'], ['b', 'c'], ['d']]);
    // a dependency two columns back does not pull a task left of a deeper one
    expect(layers([t('a'), t('b', ['a']), t('c', ['a', 'b'])])).toEqual([['a'], ['b'], ['c']]);
  });

  it('puts the final task alone after every other, even without dependencies', () => {
    expect(layers([t('report', [], true), t('a'), t('b', ['a'])])).toEqual([['a'], ['b'], ['report']]);
    expect(layers([t('only', [], true)])).toEqual([['only']]);
  });

  it('orders a column by the rows of its dependencies, ties in plan order', () => {
    // x depends on the second task of column 0, y on the first: y is drawn above x.
    expect(layers([t('a'), t('b'), t('x', ['b']), t('y', ['a']), t('z', ['a'])])).toEqual([
      ['a', 'b'],
      ['y', 'z', 'x'],
    ]);
  });

  it('ignores unknown dependencies and a dependency on itself, and cuts a cycle instead of looping', () => {
    expect(layers([t('a', ['ghost']), t('b', ['b', 'a'])])).toEqual([['a'], ['b']]);
    const cyc = layers([t('a', ['b']), t('b', ['a'])]);
    expect(cyc.flat().sort()).toEqual(['a', 'b']);
    expect(layers([])).toEqual([]);
  });
});

describe('plan graph', () => {
  const size = { width: 100, height: 50, colGap: 20, rowGap: 10 };

  it('places boxes by column and row and sizes the drawing to them', () => {
    const g = graph([t('a'), t('b'), t('c', ['a', 'b'])], size);
    expect(g.boxes).toEqual([
      { id: 'a', column: 0, row: 0, x: 0, y: 0 },
      { id: 'b', column: 0, row: 1, x: 0, y: 60 },
      { id: 'c', column: 1, row: 0, x: 120, y: 0 },
    ]);
    expect(g.width).toBe(220);
    expect(g.height).toBe(110);
  });

  it('draws each dependency once, from the right middle of one box to the left middle of the other', () => {
    const g = graph([t('a'), t('b', ['a', 'a', 'ghost'])], size);
    expect(g.edges).toEqual([{ from: 'a', to: 'b', path: 'M 100 25 C 110 25, 110 25, 120 25' }]);
    expect(graph([], size)).toEqual({ width: 0, height: 0, boxes: [], edges: [] });
  });
});

describe('statuses', () => {
  it('names every task status in words, with a tone', () => {
    expect(taskStatus('passed')).toEqual({ label: 'passed', glyph: '✓', tone: 'good' });
    expect(taskStatus('failed').tone).toBe('bad');
    expect(taskStatus('running').tone).toBe('live');
    expect(taskStatus('pending').label).toBe('pending');
    expect(taskStatus('skipped').label).toBe('skipped');
    expect(taskStatus('blocked')).toEqual({ label: 'blocked', glyph: '?', tone: 'idle' });
  });

  it('says a proposed plan waits for approval when its run is parked', () => {
    expect(planStatus('proposed', 'awaiting_input').label).toBe('proposed, awaiting approval');
    expect(planStatus('proposed', 'running').label).toBe('proposed');
    expect(planStatus('accepted').tone).toBe('good');
    expect(planStatus('superseded').label).toBe('superseded');
  });
});

describe('controls', () => {
  it('approves only a proposed plan of a parked run', () => {
    expect(canApprove({ status: 'proposed' }, 'awaiting_input')).toBe(true);
    expect(canApprove({ status: 'proposed' }, 'running')).toBe(false);
    expect(canApprove({ status: 'accepted' }, 'awaiting_input')).toBe(false);
  });

  it('retries a failed task and skips an unfinished or failed one, only while the run lives', () => {
    expect(canRetry({ status: 'failed' }, 'running')).toBe(true);
    expect(canRetry({ status: 'failed' }, 'failed')).toBe(false);
    expect(canRetry({ status: 'passed' }, 'running')).toBe(false);
    expect(canRetry({ status: 'pending' }, 'awaiting_input')).toBe(false);
    for (const s of ['pending', 'running', 'failed'] as const) expect(canSkip({ status: s }, 'awaiting_input')).toBe(true);
    expect(canSkip({ status: 'passed' }, 'running')).toBe(false);
    expect(canSkip({ status: 'skipped' }, 'running')).toBe(false);
    expect(canSkip({ status: 'pending' }, 'succeeded')).toBe(false);
    expect(canSkip({ status: 'pending' }, undefined)).toBe(false);
  });

  it('refreshes the plan on plan and task events and the run’s end, not on every event', () => {
    for (const k of [
      'plan_proposed',
      'plan_accepted',
      'plan_awaiting_approval',
      'plan_stalled',
      'task_started',
      'task_verified',
      'task_finished',
      'task_control',
      'outcome_stale',
      'replan_requested',
      'budget_exhausted',
      'run_finished',
    ]) {
      expect(refreshesPlan(k), k).toBe(true);
    }
    for (const k of ['text_delta', 'assistant_message', 'tool_call', 'usage', 'sub_run_started']) {
      expect(refreshesPlan(k), k).toBe(false);
    }
  });
});

describe('verdicts and checks', () => {
  it('says a verdict, its reason and its confidence', () => {
    expect(verdictLine(verdict('fail', 'check_failed'))).toBe('fail (check_failed)');
    expect(verdictTone(verdict('pass'))).toBe('good');
    expect(verdictTone(verdict('fail'))).toBe('bad');
    expect(verdictTone(verdict('inconclusive', 'split'))).toBe('warn');
    expect(percent(0.856)).toBe('86%');
    expect(percent(1)).toBe('100%');
    expect(percent(Number.NaN)).toBe('0%');
  });

  it('takes the newest verdict that is not stale', () => {
    expect(lastVerdict({ attempts: [] })).toBeNull();
    expect(lastVerdict({ attempts: [attempt(1, verdict('fail', 'missing')), attempt(2)] })).toEqual({
      attempt: 1,
      verdict: verdict('fail', 'missing'),
      stale: false,
    });
    const mixed = { attempts: [attempt(1, verdict('fail', 'missing')), attempt(2, verdict('pass'), true)] };
    expect(lastVerdict(mixed)?.attempt).toBe(1);
    expect(lastVerdict({ attempts: [attempt(1, verdict('pass'), true)] })?.stale).toBe(true);
  });

  it('says what each check reads and how many passed', () => {
    expect(checkLine({ check: 'exists', path: 'a.txt' })).toBe('exists a.txt');
    expect(checkLine({ check: 'parses', path: 'd.csv', format: 'csv' })).toBe('parses d.csv as csv');
    expect(checkLine({ check: 'not_matches', path: 'r.md', pattern: 'TODO' })).toBe('not_matches r.md /TODO/');
    expect(checkLine({ check: 'json_eq', path: 'o.json', pointer: '/n', value: 3 })).toBe('json_eq o.json /n = 3');
    expect(checkLine({ check: 'sha256', path: 'b', sha256: 'ab'.repeat(32) })).toBe('sha256 b abababababab…');
    expect(checksLine(undefined)).toBeNull();
    expect(checksLine([{ check: { check: 'exists', path: 'a' }, passed: true }])).toBe('1/1 check passed');
    expect(
      checksLine([
        { check: { check: 'exists', path: 'a' }, passed: true },
        { check: { check: 'non_empty', path: 'a' }, passed: false, message: 'a is empty' },
      ]),
    ).toBe('1/2 checks passed');
    expect(attemptsLine(0)).toBe('no attempts');
    expect(attemptsLine(1)).toBe('1 attempt');
    expect(attemptsLine(3)).toBe('3 attempts');
    expect(count(12345)).toBe('12,345');
  });
});
