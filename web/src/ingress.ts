// What the Schedules and Webhooks pages say about a definition's health, from the answers of
// `GET /v1/schedules/{name}/state` and `GET /v1/webhooks/{name}/deliveries`.

import type { paths } from './openapi';
import type { Schemas } from './api';

export type Fire = Schemas['ScheduleFire'];

/** `GET /v1/schedules/{name}/state`; its `fires` newest first. */
export type ScheduleState = Schemas['ScheduleState'];

export type Delivery = Schemas['WebhookDelivery'];

/** `GET /v1/webhooks/{name}/deliveries`: the verdicts of deliveries that verified (`data`), and
 * apart from them those refused before they verified (`rejected`). */
export type DeliveryLog = paths['/v1/webhooks/{name}/deliveries']['get']['responses'][200]['content']['application/json'];

/** Every delivery the log names, verified or refused, newest first. */
export function deliveryRows(log: DeliveryLog): Delivery[] {
  return [...log.data, ...log.rejected.recent].sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
}

/** A one-line verdict: `good`, `bad`, `warn`, or `idle` (nothing to judge yet). */
export interface Health {
  tone: 'good' | 'bad' | 'warn' | 'idle';
  text: string;
}

/** How a schedule is doing: its state, else its newest fire and that fire's run. */
export function scheduleHealth(s: ScheduleState): Health {
  if (s.retired) return { tone: 'idle', text: `retired${s.retired_why ? ` (${s.retired_why})` : ''}` };
  if (!s.enabled) return { tone: 'idle', text: 'disabled' };
  if (s.paused) return { tone: 'idle', text: 'paused' };
  const f = s.fires[0];
  if (!f) return { tone: 'idle', text: 'no fires yet' };
  switch (f.status) {
    case 'failed':
      return { tone: 'bad', text: `last fire failed${f.error ? `: ${f.error}` : ''}` };
    case 'claimed':
      return f.error ? { tone: 'warn', text: `last fire retrying: ${f.error}` } : { tone: 'idle', text: 'firing' };
    case 'skipped':
      return { tone: 'warn', text: 'last slot skipped' };
    default: {
      const run = f.run_status ?? (f.run_id === s.last_run_id ? s.last_run_status : null);
      if (!run) return { tone: 'good', text: 'last fire started a run' };
      return { tone: run === 'failed' || run === 'cancelled' ? 'bad' : 'good', text: `last run ${run}` };
    }
  }
}

/** Verdicts of a delivery that was taken (a replay is answered with the original run). */
const TAKEN = new Set(['accepted', 'replayed']);

/** A webhook's newest accepted and newest refused deliveries, and how it is doing (its newest
 * delivery's verdict). `deliveries` is newest first, as the API lists them. */
export function webhookHealth(deliveries: Delivery[]): {
  health: Health;
  lastAccepted: Delivery | undefined;
  lastRejected: Delivery | undefined;
} {
  const lastAccepted = deliveries.find((d) => TAKEN.has(d.verdict));
  const lastRejected = deliveries.find((d) => !TAKEN.has(d.verdict));
  const newest = deliveries[0];
  const health: Health = !newest
    ? { tone: 'idle', text: 'no deliveries yet' }
    : TAKEN.has(newest.verdict)
      ? { tone: 'good', text: `last delivery ${newest.verdict}` }
      : { tone: 'bad', text: `last delivery ${newest.verdict}` };
  return { health, lastAccepted, lastRejected };
}

/** A verdict with its reason, if any. */
export const verdictText = (d: Delivery): string => (d.reason ? `${d.verdict} (${d.reason})` : d.verdict);

/** The URL a sender posts a webhook's deliveries to. */
export function webhookUrl(origin: string, tenant: string, name: string): string {
  return `${origin}/v1/_webhooks/${encodeURIComponent(tenant)}/${encodeURIComponent(name)}`;
}
