/** A row of `GET /v1/usage` grouped by a time bucket and one dimension. */
export interface UsageRow {
  [key: string]: unknown;
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
}

export type Metric = 'tokens' | 'cost' | 'requests';

export function metricOf(r: UsageRow, m: Metric): number {
  switch (m) {
    case 'tokens':
      return (r.input_tokens ?? 0) + (r.output_tokens ?? 0);
    case 'cost':
      return r.cost_usd ?? 0;
    case 'requests':
      return r.requests ?? 0;
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
  dim: string,
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
