import { useEffect, useMemo, useRef, useState } from 'react';
import { useQuery } from '@tanstack/react-query';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { api, ok, type Schemas } from '../api';
import {
  barSlots,
  bucketLabel,
  label,
  metricOf,
  toSeries,
  xRange,
  yRange,
  type Metric,
  type UsageDim,
  type UsageRow,
} from '../usage';

const RANGES = [
  { key: '1h', hours: 1 },
  { key: '24h', hours: 24 },
  { key: '7d', hours: 24 * 7 },
  { key: '30d', hours: 24 * 30 },
] as const;
const DIMS = [
  { key: 'provider', field: 'provider' },
  { key: 'model', field: 'model' },
  { key: 'subject', field: 'subject' },
  { key: 'token', field: 'token_id' },
  { key: 'kind', field: 'kind' },
] as const satisfies readonly { key: string; field: UsageDim }[];
// uPlot's BarsPathBuilderFacetUnit.ScaleValue (a const enum, which isolated modules cannot read).
const SCALE_VALUE = 1 as uPlot.Series.BarsPathBuilderFacetUnit;
const COLORS = ['#2457c5', '#d97706', '#1a7f37', '#b42318', '#7c3aed', '#0891b2', '#be185d', '#4d7c0f'];

function usage(groupBy: string, from: Date, to: Date): Promise<Schemas['UsageSummary']> {
  return ok(api.GET('/v1/usage', { params: { query: { group_by: groupBy, from: from.toISOString(), to: to.toISOString() } } }));
}

export function UsagePage() {
  const [range, setRange] = useState<(typeof RANGES)[number]['key']>('24h');
  const [dim, setDim] = useState<(typeof DIMS)[number]['key']>('model');
  const [metric, setMetric] = useState<Metric>('tokens');
  const hours = RANGES.find((r) => r.key === range)?.hours ?? 24;
  const bucket = hours <= 24 ? 'hour' : 'day';
  const field = DIMS.find((d) => d.key === dim)?.field ?? 'model';
  // The window is fixed per range choice (and refreshed with the query), so the key is stable.
  const [now, setNow] = useState(() => new Date());
  const from = useMemo(() => new Date(now.getTime() - hours * 3600_000), [now, hours]);
  const series = useQuery({
    queryKey: ['usage', 'series', bucket, dim, from.toISOString(), now.toISOString()],
    queryFn: () => usage(`${bucket},${dim}`, from, now),
  });
  const totals = useQuery({
    queryKey: ['usage', 'totals', dim, from.toISOString(), now.toISOString()],
    queryFn: () => usage(dim, from, now),
  });

  return (
    <section>
      <h1>Usage</h1>
      <form className="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Range{' '}
          <select value={range} onChange={(e) => setRange(e.target.value as typeof range)}>
            {RANGES.map((r) => (
              <option key={r.key}>{r.key}</option>
            ))}
          </select>
        </label>
        <label>
          Group by{' '}
          <select value={dim} onChange={(e) => setDim(e.target.value as typeof dim)}>
            {DIMS.map((d) => (
              <option key={d.key}>{d.key}</option>
            ))}
          </select>
        </label>
        <label>
          Show{' '}
          <select value={metric} onChange={(e) => setMetric(e.target.value as Metric)}>
            <option value="tokens">tokens</option>
            <option value="cost">cost (USD)</option>
            <option value="requests">requests</option>
          </select>
        </label>
        <button type="button" onClick={() => setNow(new Date())}>
          Refresh
        </button>
      </form>
      {(series.isError || totals.isError) && (
        <p className="error" role="alert">
          {(series.error ?? totals.error)?.message}
        </p>
      )}
      {series.isSuccess && series.data.data.length === 0 && (
        <p className="empty">No model calls in this range. Calls through any door (chat, runs) show up here.</p>
      )}
      {series.isSuccess && series.data.data.length > 0 && (
        <Chart rows={series.data.data} bucket={bucket} dim={field} metric={metric} from={from} to={now} />
      )}
      {totals.isSuccess && totals.data.data.length > 0 && (
        <div className="scroll">
          <table className="grid" aria-label="Usage by group">
            <thead>
              <tr>
                <th>{dim}</th>
                <th>Requests</th>
                <th>Input tokens</th>
                <th>Output tokens</th>
                <th>Cost (USD)</th>
                <th>Avg latency (ms)</th>
              </tr>
            </thead>
            <tbody>
              {totals.data.data.map((r, i) => (
                <tr key={i}>
                  <td>{label(r[field])}</td>
                  <td>{r.requests}</td>
                  <td>{r.input_tokens}</td>
                  <td>{r.output_tokens}</td>
                  <td>{metricOf(r, 'cost').toFixed(6)}</td>
                  <td>{Math.round(r.avg_latency_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {(series.data?.truncated || totals.data?.truncated) && (
        <p className="hint">Only the first rows are shown; narrow the range for all of them.</p>
      )}
    </section>
  );
}

function Chart({
  rows,
  bucket,
  dim,
  metric,
  from,
  to,
}: {
  rows: UsageRow[];
  bucket: 'hour' | 'day';
  dim: UsageDim;
  metric: Metric;
  from: Date;
  to: Date;
}) {
  const box = useRef<HTMLDivElement>(null);
  const { xs, names, ys } = useMemo(() => toSeries(rows, bucket, dim, metric), [rows, bucket, dim, metric]);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const styles = getComputedStyle(document.documentElement);
    const fg = styles.getPropertyValue('--fg').trim() || '#888';
    const grid = styles.getPropertyValue('--line').trim() || '#ddd';
    const axis = { stroke: fg, grid: { stroke: grid }, ticks: { stroke: grid } };
    // Bars, one per series side by side in each bucket, sized in time (not from the gap between
    // buckets, which one bucket does not have).
    const slots = barSlots(names.length, bucket);
    const bars = (i: number) =>
      uPlot.paths.bars?.({
        align: 1,
        disp: {
          x0: { unit: SCALE_VALUE, values: (u) => (u.data[0] as number[]).map((x) => x + slots.offsets[i]) },
          size: { unit: SCALE_VALUE, values: () => [slots.width] },
        },
      });
    const width = () => Math.max(el.clientWidth, 200);
    const plot = new uPlot(
      {
        width: width(),
        height: 280,
        series: [
          { value: (_u, x) => (x == null ? '—' : bucketLabel(x, bucket)) },
          ...names.map((n, i) => ({
            label: n,
            stroke: COLORS[i % COLORS.length],
            fill: `${COLORS[i % COLORS.length]}cc`,
            width: 1,
            paths: bars(i),
            points: { show: false },
          })),
        ],
        axes: [axis, axis],
        scales: {
          x: { time: true, range: () => xRange(xs, bucket, from, to) },
          y: { range: () => yRange(ys) },
        },
      },
      [xs, ...ys],
      el,
    );
    const resize = () => plot.setSize({ width: width(), height: 280 });
    window.addEventListener('resize', resize);
    return () => {
      window.removeEventListener('resize', resize);
      plot.destroy();
    };
  }, [xs, names, ys, bucket, from, to]);
  return (
    <>
      <div ref={box} className="chart" data-testid="usage-chart" role="img" aria-label={`${metric} over time by ${dim}`} />
      {xs.length === 1 && (
        <p className="hint" data-testid="usage-one-bucket">
          One {bucket === 'hour' ? 'hourly' : 'daily'} bucket: {bucketLabel(xs[0], bucket)}.
        </p>
      )}
    </>
  );
}
