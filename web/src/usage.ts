import type { Schemas } from './api';

/** A row of `GET /v1/usage`, grouped by a time bucket and one dimension. */
export type UsageRow = Schemas['UsageGroup'];

/** A dimension a row can be grouped by (its field, null when a call has none). */
export type UsageDim = 'provider' | 'model' | 'requested_model' | 'subject' | 'token_id' | 'kind';

export type Metric = 'tokens' | 'cost' | 'requests';

export function metricOf(r: UsageRow, m: Metric): number {
  switch (m) {
    case 'tokens':
      return r.input_tokens + r.output_tokens;
    case 'cost':
      return r.cost_usd;
    case 'requests':
      return r.requests;
  }
}

/** The label of a row's dimension value (`null` — e.g. a call without a token — shown as such). */
export function label(v: unknown): string {
  return v === null || v === undefined || v === '' ? '(none)' : String(v);
}

/**
 * uPlot's columns: x = the buckets' Unix seconds (sorted), then one series per dimension value,
 * 0 where a bucket has no row of that value.
 */
export function toSeries(
  rows: UsageRow[],
  bucket: 'hour' | 'day',
  dim: UsageDim,
  metric: Metric,
): { xs: number[]; names: string[]; ys: number[][] } {
  const xs = [...new Set(rows.map((r) => Date.parse(String(r[bucket])) / 1000))].sort((a, b) => a - b);
  const names = [...new Set(rows.map((r) => label(r[dim])))].sort();
  const at = new Map(xs.map((x, i) => [x, i]));
  const ys = names.map(() => xs.map(() => 0));
  for (const r of rows) {
    const i = at.get(Date.parse(String(r[bucket])) / 1000);
    const s = names.indexOf(label(r[dim]));
    if (i !== undefined && s >= 0) ys[s][i] += metricOf(r, metric);
  }
  return { xs, names, ys };
}

/** A bucket's length in seconds. */
export const bucketSeconds = (bucket: 'hour' | 'day'): number => (bucket === 'hour' ? 3600 : 86400);

/**
 * The chart's x range: the whole window asked for, widened to whole buckets (buckets start on
 * UTC hours and days) so every bucket's bar fits in it — one bucket is a bar among the window's
 * empty ones, never stretched over the axis or squeezed to nothing.
 */
export function xRange(xs: number[], bucket: 'hour' | 'day', from: Date, to: Date): [number, number] {
  const w = bucketSeconds(bucket);
  const lo = Math.min(from.getTime() / 1000, ...xs);
  const hi = Math.max(to.getTime() / 1000, ...xs.map((x) => x + w));
  const start = Math.floor(lo / w) * w;
  return [start, Math.max(Math.ceil(hi / w) * w, start + w)];
}

/** The chart's y range: from 0 (bars), with room above the tallest; [0, 1] when all are 0. */
export function yRange(ys: number[][]): [number, number] {
  const max = Math.max(0, ...ys.flat().filter(Number.isFinite));
  return [0, max > 0 ? max * 1.1 : 1];
}

/** Where each series' bar sits in its bucket: the group fills 80% of the bucket, side by side. */
export function barSlots(series: number, bucket: 'hour' | 'day'): { width: number; offsets: number[] } {
  const w = bucketSeconds(bucket);
  const width = (w * 0.8) / Math.max(series, 1);
  return { width, offsets: Array.from({ length: series }, (_, i) => w * 0.1 + i * width) };
}

/** A bucket in words: `28 Nov 2026, 10:00–11:00` for an hour, `28 Nov 2026` for a day. */
export function bucketLabel(x: number, bucket: 'hour' | 'day', locale?: string, timeZone?: string): string {
  const day = new Date(x * 1000).toLocaleDateString(locale, { day: 'numeric', month: 'short', year: 'numeric', timeZone });
  if (bucket === 'day') return day;
  const time = (s: number) =>
    new Date(s * 1000).toLocaleTimeString(locale, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23', timeZone });
  return `${day}, ${time(x)}–${time(x + 3600)}`;
}
