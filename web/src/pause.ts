// Pausing, draining and resuming in the UI (docs/operations.md): what a run's status badge says
// about a pause, which of Pause and Resume a run page offers, and what the operations page shows
// of a tenant's drain or the fleet's maintenance (`GET /v1/tenants/{tenant}/drain`,
// `GET /v1/fleet/drain`) and which of its buttons the principal may press.

import { can, type Schemas, type Session } from './api';

export type Run = Schemas['Run'];
export type PauseScope = Schemas['PauseScope'];
export type DrainStatus = Schemas['DrainStatus'];
export type DrainTransition = Schemas['DrainTransition'];

/** The fields of a run these helpers read (the run page's header is the fetched run with the
 * stream's facts laid over it, so its status may be any string). */
export interface RunPauseView {
  status: string;
  paused_by?: PauseScope | string | null;
}

/** Statuses a run can be asked to pause in (it parks at its next step boundary; a waiting
 * interactive run stays parked and is paused if woken). */
const PAUSABLE = new Set(['queued', 'running', 'awaiting_input']);

/** Who asked a pause, as a run page says it. */
export function pausedByText(by: string | null | undefined): string {
  switch (by) {
    case 'run':
      return 'a pause of this run';
    case 'tenant':
      return "its tenant's drain";
    case 'fleet':
      return "the fleet's maintenance";
    default:
      return by ? by : 'a pause';
  }
}

/** Why a parked run went on, by who had paused it. */
function resumedText(by: string): string {
  switch (by) {
    case 'run':
      return 'its pause was lifted';
    case 'tenant':
      return "its tenant's drain ended";
    case 'fleet':
      return "the fleet's maintenance ended";
    default:
      return 'queued again';
  }
}

/** Whether the run was asked to pause and has not parked yet. */
export const isPausing = (r: RunPauseView): boolean => !!r.paused_by && (r.status === 'running' || r.status === 'queued');

/** The word the status badge shows: the status, or `pausing…` while a pause is asked of a run
 * still queued or running. */
export function statusLabel(r: RunPauseView): string {
  return isPausing(r) ? 'pausing…' : r.status;
}

/** The class of the status badge (`status-<status>`; a pausing run is styled as paused). */
export function statusClass(r: RunPauseView): string {
  return `status status-${isPausing(r) ? 'paused' : r.status}`;
}

/** A note beside the badge about a pause, or null when there is none. */
export function pauseNote(r: RunPauseView): string | null {
  if (!r.paused_by && r.status !== 'paused') return null;
  const who = pausedByText(r.paused_by);
  if (r.status === 'paused') return `held by ${who}`;
  const why = r.paused_by === 'tenant' ? 'its tenant drains' : r.paused_by === 'fleet' ? 'the fleet is in maintenance' : 'pause asked';
  if (r.status === 'awaiting_input') return `${why}: it parks if woken`;
  if (isPausing(r)) return `${why}: it parks at its next step boundary`;
  return null;
}

/** Which of Pause and Resume a run page offers: Pause while the run lives and no pause is
 * asked; Resume while it is paused or a pause is asked (a run held by its tenant's drain or the
 * fleet's maintenance answers 503 `tenant_paused`, which the page shows). */
export function runPauseActions(r: RunPauseView): { pause: boolean; resume: boolean } {
  const ended = r.status === 'succeeded' || r.status === 'failed' || r.status === 'cancelled';
  if (ended) return { pause: false, resume: false };
  const asked = !!r.paused_by || r.status === 'paused';
  return { pause: !asked && PAUSABLE.has(r.status), resume: asked };
}

/** What the principal may do on the operations page: a tenant's drain (tenant:admin of it, or
 * admin for any tenant) and the fleet's maintenance (admin only). */
export function operationsAccess(session: Pick<Session, 'scopes'>): { tenant: boolean; fleet: boolean; anyTenant: boolean } {
  const admin = can(session, 'admin');
  return { tenant: can(session, 'tenant:admin'), fleet: admin, anyTenant: admin };
}

/** A drain as the operations page shows it. */
export interface DrainView {
  /** `not draining`, `draining…` (runs still running or queued) or `drained` (every run parked). */
  state: 'not draining' | 'draining…' | 'drained';
  tone: 'good' | 'warn' | 'idle';
  /** The runs not ended, by status, in the order of a drain's progress. */
  counts: { label: string; n: number }[];
  /** Runs still to park (running and queued). */
  toPark: number;
  /** Who began the drain in force and when (ISO), else null. */
  since: string | null;
  by: string | null;
  transitions: DrainTransition[];
  /** Drain shown while not draining, Resume while draining. */
  canDrain: boolean;
  canResume: boolean;
}

const count = (n: unknown): number => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : 0);

/** Reads a `DrainStatus` answer into what the page shows. */
export function drainView(d: DrainStatus): DrainView {
  const runs = d.runs ?? { running: 0, queued: 0, paused: 0, awaiting_input: 0 };
  const counts = [
    { label: 'running', n: count(runs.running) },
    { label: 'queued', n: count(runs.queued) },
    { label: 'paused', n: count(runs.paused) },
    { label: 'awaiting input', n: count(runs.awaiting_input) },
  ];
  const toPark = count(runs.running) + count(runs.queued);
  const state = !d.draining ? 'not draining' : d.complete ? 'drained' : 'draining…';
  return {
    state,
    tone: state === 'drained' ? 'good' : state === 'draining…' ? 'warn' : 'idle',
    counts,
    toPark,
    since: d.draining ? (d.since ?? null) : null,
    by: d.draining ? (d.by ?? null) : null,
    transitions: Array.isArray(d.transitions) ? d.transitions : [],
    canDrain: !d.draining,
    canResume: d.draining,
  };
}

/** How often the operations page polls a drain: every 2 s while it is still parking runs,
 * every 10 s while it is complete (a run may still be woken), not at all while none is in force. */
export function drainPollMs(d: DrainStatus | undefined): number | false {
  if (!d || !d.draining) return false;
  return d.complete ? 10_000 : 2_000;
}

/** A run event's line in the transcript, for `run_paused` ({by, executor}) and `run_resumed`
 * ({by}); null for any other kind. */
export function pauseEventText(kind: string, data: unknown): string | null {
  const d = data && typeof data === 'object' && !Array.isArray(data) ? (data as Record<string, unknown>) : {};
  const by = typeof d.by === 'string' ? d.by : '';
  if (kind === 'run_paused') {
    const on = typeof d.executor === 'string' && d.executor ? `, parked by executor ${d.executor}` : '';
    return `⏸ run paused (${pausedByText(by)}${on})`;
  }
  if (kind === 'run_resumed') return `▶ run resumed (${resumedText(by)})`;
  return null;
}
