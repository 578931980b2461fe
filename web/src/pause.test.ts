import { describe, expect, it } from 'vitest';
import {
  drainPollMs,
  drainView,
  operationsAccess,
  pauseEventText,
  pauseNote,
  runPauseActions,
  statusClass,
  statusLabel,
  type DrainStatus,
} from './pause';
import { apply, emptyTerminal, follow, header, type RunFacts } from './terminal';
import type { RunEvent } from './sse';
import type { Schemas } from './api';

const drain = (more: Partial<DrainStatus> = {}): DrainStatus => ({
  scope: 'acme',
  draining: false,
  complete: false,
  since: null,
  by: null,
  runs: { running: 0, queued: 0, paused: 0, awaiting_input: 0 },
  transitions: [],
  ...more,
});

describe("a run's status badge", () => {
  it('says the status, and pausing… while a pause is asked of a run still running or queued', () => {
    expect(statusLabel({ status: 'running' })).toBe('running');
    expect(statusLabel({ status: 'running', paused_by: null })).toBe('running');
    expect(statusLabel({ status: 'running', paused_by: 'run' })).toBe('pausing…');
    expect(statusLabel({ status: 'queued', paused_by: 'tenant' })).toBe('pausing…');
    expect(statusLabel({ status: 'paused', paused_by: 'run' })).toBe('paused');
    expect(statusLabel({ status: 'paused' })).toBe('paused');
    // A waiting interactive run stays parked: it is still waiting, the note says a pause is asked.
    expect(statusLabel({ status: 'awaiting_input', paused_by: 'run' })).toBe('awaiting_input');
    expect(statusClass({ status: 'running', paused_by: 'fleet' })).toBe('status status-paused');
    expect(statusClass({ status: 'succeeded' })).toBe('status status-succeeded');
  });

  it('notes who paused the run, or asked it to', () => {
    expect(pauseNote({ status: 'running' })).toBeNull();
    expect(pauseNote({ status: 'succeeded', paused_by: null })).toBeNull();
    expect(pauseNote({ status: 'paused', paused_by: 'run' })).toBe('held by a pause of this run');
    expect(pauseNote({ status: 'paused', paused_by: 'tenant' })).toBe("held by its tenant's drain");
    expect(pauseNote({ status: 'paused', paused_by: 'fleet' })).toBe("held by the fleet's maintenance");
    expect(pauseNote({ status: 'running', paused_by: 'run' })).toBe('pause asked: it parks at its next step boundary');
    expect(pauseNote({ status: 'queued', paused_by: 'tenant' })).toBe('its tenant drains: it parks at its next step boundary');
    expect(pauseNote({ status: 'awaiting_input', paused_by: 'fleet' })).toBe('the fleet is in maintenance: it parks if woken');
  });
});

describe('Pause and Resume on a run page', () => {
  it('offers Pause while the run lives and nothing is asked, Resume while paused or asked', () => {
    for (const status of ['queued', 'running', 'awaiting_input']) {
      expect(runPauseActions({ status })).toEqual({ pause: true, resume: false });
      expect(runPauseActions({ status, paused_by: 'run' })).toEqual({ pause: false, resume: true });
    }
    expect(runPauseActions({ status: 'paused', paused_by: 'run' })).toEqual({ pause: false, resume: true });
    expect(runPauseActions({ status: 'paused' })).toEqual({ pause: false, resume: true });
    // Held by a drain: Resume is still offered; the gateway's 503 tenant_paused says why not.
    expect(runPauseActions({ status: 'paused', paused_by: 'tenant' })).toEqual({ pause: false, resume: true });
  });

  it('offers neither once the run ended', () => {
    for (const status of ['succeeded', 'failed', 'cancelled']) {
      expect(runPauseActions({ status })).toEqual({ pause: false, resume: false });
      expect(runPauseActions({ status, paused_by: 'run' })).toEqual({ pause: false, resume: false });
    }
  });
});

describe('the transcript and the header follow run_paused and run_resumed', () => {
  const ev = (seq: number, kind: string, data: Record<string, unknown> = {}): RunEvent => ({ seq, kind, data });

  it('reads each as a line', () => {
    expect(pauseEventText('run_paused', { by: 'run', executor: 'exec-1' })).toBe('⏸ run paused (a pause of this run, parked by executor exec-1)');
    expect(pauseEventText('run_paused', { by: 'tenant' })).toBe("⏸ run paused (its tenant's drain)");
    expect(pauseEventText('run_resumed', { by: 'run' })).toBe('▶ run resumed (its pause was lifted)');
    expect(pauseEventText('run_resumed', { by: 'fleet' })).toBe("▶ run resumed (the fleet's maintenance ended)");
    expect(pauseEventText('run_resumed', {})).toBe('▶ run resumed (queued again)');
    expect(pauseEventText('tool_call', {})).toBeNull();
    const t = [ev(1, 'run_paused', { by: 'fleet', executor: 'e' }), ev(2, 'run_resumed', { by: 'fleet' })].reduce(apply, emptyTerminal);
    expect(t.lines).toEqual([
      { type: 'pause', seq: 1, paused: true, text: "⏸ run paused (the fleet's maintenance, parked by executor e)" },
      { type: 'pause', seq: 2, paused: false, text: "▶ run resumed (the fleet's maintenance ended)" },
    ]);
  });

  it('the header shows paused at once, then queued and running again', () => {
    let f: RunFacts = follow({ status: 'running' }, ev(5, 'run_paused', { by: 'run', executor: 'e' }));
    expect(f).toMatchObject({ status: 'paused', paused_by: 'run' });
    f = follow(f, ev(6, 'run_resumed', { by: 'run' }));
    expect(f).toMatchObject({ status: 'queued', paused_by: null });
    f = follow(f, ev(7, 'provider_chosen', {}));
    expect(f.status).toBe('running');
    // Laid over a fetched run that still says a pause is asked: the stream's newer word wins.
    const run = { status: 'running', paused_by: 'run' } as Pick<Schemas['Run'], 'status' | 'paused_by'>;
    const shown = header(run, 0, { ...follow({}, ev(8, 'run_resumed', { by: 'run' })), at: 1 });
    expect(statusLabel(shown)).toBe('queued');
    expect(runPauseActions(shown)).toEqual({ pause: true, resume: false });
  });
});

describe('a drain on the operations page', () => {
  it('is not draining when none is in force, and offers Drain', () => {
    const v = drainView(drain({ runs: { running: 2, queued: 1, paused: 1, awaiting_input: 0 } }));
    expect(v).toMatchObject({ state: 'not draining', tone: 'idle', toPark: 3, since: null, by: null, canDrain: true, canResume: false });
    expect(v.counts).toEqual([
      { label: 'running', n: 2 },
      { label: 'queued', n: 1 },
      { label: 'paused', n: 1 },
      { label: 'awaiting input', n: 0 },
    ]);
  });

  it('is draining… while runs are still to park, then drained once complete; Resume either way', () => {
    const since = '2026-11-30T23:00:00Z';
    const parking = drainView(drain({ draining: true, since, by: 'ops', runs: { running: 1, queued: 1, paused: 3, awaiting_input: 1 } }));
    expect(parking).toMatchObject({ state: 'draining…', tone: 'warn', toPark: 2, since, by: 'ops', canDrain: false, canResume: true });
    const done = drainView(drain({ draining: true, complete: true, since, runs: { running: 0, queued: 0, paused: 5, awaiting_input: 1 } }));
    expect(done).toMatchObject({ state: 'drained', tone: 'good', toPark: 0, canResume: true });
  });

  it('keeps the transitions, newest first as answered, and tolerates odd counts', () => {
    const transitions = [
      { action: 'resume', at: '2026-11-30T23:05:00Z', subject: 'ops', tenant: 'acme' },
      { action: 'drain', at: '2026-11-30T23:00:00Z', subject: 'ops', tenant: 'acme' },
    ];
    const v = drainView(drain({ transitions, runs: { running: -1, queued: Number.NaN, paused: 0, awaiting_input: 2 } }));
    expect(v.transitions).toEqual(transitions);
    expect(v.toPark).toBe(0);
  });

  it('is polled fast while parking, slowly once drained, never when not draining', () => {
    expect(drainPollMs(undefined)).toBe(false);
    expect(drainPollMs(drain())).toBe(false);
    expect(drainPollMs(drain({ draining: true }))).toBe(2000);
    expect(drainPollMs(drain({ draining: true, complete: true }))).toBe(10000);
  });

  it('is shown to tenant admins, the fleet and any tenant to admins only', () => {
    expect(operationsAccess({ scopes: ['runs:read', 'runs:create'] })).toEqual({ tenant: false, fleet: false, anyTenant: false });
    expect(operationsAccess({ scopes: ['tenant:admin'] })).toEqual({ tenant: true, fleet: false, anyTenant: false });
    expect(operationsAccess({ scopes: ['admin'] })).toEqual({ tenant: true, fleet: true, anyTenant: true });
  });
});
