import { describe, expect, it } from 'vitest';
import { deliveryRows, scheduleHealth, webhookHealth, webhookUrl, type Fire, type ScheduleState } from './ingress';

const state = (fires: Partial<Fire>[], more: Partial<ScheduleState> = {}): ScheduleState => ({
  name: 'nightly',
  enabled: true,
  paused: false,
  retired: false,
  retired_at: null,
  retired_why: null,
  version: 'sha256:00',
  next_fire_at: null,
  last_fire_at: null,
  last_run_id: null,
  last_run_status: null,
  fire_count: fires.length,
  cron_fires: fires.length,
  run_now_fires: 0,
  skipped: 0,
  fires: fires.map((f, i) => ({
    fire_id: `f${i}`,
    kind: 'cron',
    fire_at: '2026-11-28T02:00:00Z',
    status: 'dispatched',
    run_id: null,
    run_status: null,
    error: null,
    attempts: 1,
    on_complete: null,
    on_complete_result: null,
    ...f,
  })),
  ...more,
});

describe('schedule health', () => {
  it('says what its state is before judging its fires', () => {
    expect(scheduleHealth(state([], { retired: true, retired_why: 'max_fires' }))).toEqual({ tone: 'idle', text: 'retired (max_fires)' });
    expect(scheduleHealth(state([], { paused: true })).text).toBe('paused');
    expect(scheduleHealth(state([], { enabled: false })).text).toBe('disabled');
    expect(scheduleHealth(state([]))).toEqual({ tone: 'idle', text: 'no fires yet' });
  });

  it('judges by the newest fire and its run', () => {
    expect(scheduleHealth(state([{ run_id: 'r2', run_status: 'failed' }, { run_status: 'succeeded' }]))).toEqual({
      tone: 'bad',
      text: 'last run failed',
    });
    expect(scheduleHealth(state([{ run_id: 'r', run_status: 'succeeded' }]))).toEqual({ tone: 'good', text: 'last run succeeded' });
    expect(scheduleHealth(state([{ status: 'failed', error: 'no agent `x`' }]))).toEqual({
      tone: 'bad',
      text: 'last fire failed: no agent `x`',
    });
    expect(scheduleHealth(state([{ status: 'claimed', error: 'admission full' }])).tone).toBe('warn');
    expect(scheduleHealth(state([{ status: 'skipped' }])).tone).toBe('warn');
  });
});

describe('webhook health', () => {
  it('finds the newest accepted and refused deliveries; the newest one sets the tone', () => {
    const h = webhookHealth([
      { verdict: 'unauthorized', at: '2026-11-28T10:02:00Z', delivery_id: null, reason: 'bad signature' },
      { verdict: 'accepted', at: '2026-11-28T10:01:00Z', delivery_id: 'd1', run_id: 'r1' },
      { verdict: 'too_large', at: '2026-11-28T10:00:00Z', delivery_id: null },
    ]);
    expect(h.health).toEqual({ tone: 'bad', text: 'last delivery unauthorized' });
    expect(h.lastAccepted?.run_id).toBe('r1');
    expect(h.lastRejected?.verdict).toBe('unauthorized');
    expect(webhookHealth([{ verdict: 'replayed', at: 'x', delivery_id: 'd' }]).health.tone).toBe('good');
    expect(webhookHealth([])).toEqual({ health: { tone: 'idle', text: 'no deliveries yet' }, lastAccepted: undefined, lastRejected: undefined });
  });

  it('names the receiver URL', () => {
    expect(webhookUrl('https://weft.example.com', 'acme', 'github-issues')).toBe(
      'https://weft.example.com/v1/_webhooks/acme/github-issues',
    );
  });
});

describe('delivery log', () => {
  it('lists verified and refused deliveries together, newest first', () => {
    const rows = deliveryRows({
      data: [{ verdict: 'accepted', at: '2026-11-29T10:00:02Z', delivery_id: 'd1', run_id: 'r1' }],
      rejected: {
        unauthorized: 2,
        too_large: 0,
        last_at: '2026-11-29T10:00:03Z',
        recent: [
          { verdict: 'unauthorized', at: '2026-11-29T10:00:03Z', delivery_id: null, reason: 'no signature matches' },
          { verdict: 'unauthorized', at: '2026-11-29T10:00:01Z', delivery_id: null },
        ],
      },
    });
    expect(rows.map((d) => d.verdict)).toEqual(['unauthorized', 'accepted', 'unauthorized']);
    const { lastAccepted, lastRejected } = webhookHealth(rows);
    expect(lastAccepted?.delivery_id).toBe('d1');
    expect(lastRejected?.reason).toBe('no signature matches');
  });
});
