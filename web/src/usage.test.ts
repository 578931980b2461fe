import { describe, expect, it } from 'vitest';
import { barSlots, bucketLabel, label, toSeries, xRange, yRange, type UsageRow } from './usage';

const row = (hour: string, model: string | null, input: number, output: number): UsageRow => ({
  hour,
  model,
  requests: 1,
  input_tokens: input,
  output_tokens: output,
  cost_usd: 0.5,
  cache_read_tokens: 0,
  cache_write_tokens: 0,
  avg_latency_ms: 10,
  p95_latency_ms: 10,
});

describe('usage series', () => {
  it('puts each group on its own series over the sorted buckets, 0 where it has no row', () => {
    const s = toSeries(
      [row('2026-11-28T10:00:00Z', 'b', 1, 1), row('2026-11-28T09:00:00Z', 'a', 2, 3), row('2026-11-28T10:00:00Z', 'a', 1, 0)],
      'hour',
      'model',
      'tokens',
    );
    expect(s.xs).toEqual([Date.parse('2026-11-28T09:00:00Z') / 1000, Date.parse('2026-11-28T10:00:00Z') / 1000]);
    expect(s.names).toEqual(['a', 'b']);
    expect(s.ys).toEqual([
      [5, 1],
      [0, 2],
    ]);
  });

  it('sums cost and names a missing value', () => {
    const s = toSeries([row('2026-11-28T09:00:00Z', null, 0, 0), row('2026-11-28T09:00:00Z', null, 0, 0)], 'hour', 'model', 'cost');
    expect(s.names).toEqual(['(none)']);
    expect(s.ys).toEqual([[1]]);
    expect(label('')).toBe('(none)');
  });
});

describe('the chart with few buckets', () => {
  const at = (s: string) => Date.parse(s) / 1000;

  it('gives one bucket a whole bucket of room inside the window asked for', () => {
    const x = at('2026-11-28T10:00:00Z');
    // The last hour, at 10:20: one bucket, 10:00.
    const [lo, hi] = xRange([x], 'hour', new Date('2026-11-28T09:20:00Z'), new Date('2026-11-28T10:20:00Z'));
    expect([lo, hi]).toEqual([at('2026-11-28T09:00:00Z'), at('2026-11-28T11:00:00Z')]);
    expect(hi - lo).toBeGreaterThanOrEqual(3600);
    expect(x).toBeGreaterThanOrEqual(lo);
    expect(x + 3600).toBeLessThanOrEqual(hi);
    // No rows and an empty window still make a range, never a zero-width one.
    const [a, b] = xRange([], 'day', new Date('2026-11-28T10:00:00Z'), new Date('2026-11-28T10:00:00Z'));
    expect(b - a).toBe(86400);
  });

  it('puts a bar of width > 0 in the bucket for each series, even for one bucket', () => {
    expect(barSlots(1, 'hour')).toEqual({ width: 2880, offsets: [360] });
    const two = barSlots(2, 'day');
    expect(two.width).toBeCloseTo(34560);
    expect(two.offsets[1] + two.width).toBeCloseTo(86400 * 0.9);
  });

  it('starts y at 0, with a usable range when every value is 0 (no NaN axis)', () => {
    expect(yRange([[0]])).toEqual([0, 1]);
    expect(yRange([[5], [2]])).toEqual([0, 5.5]);
    expect(yRange([])).toEqual([0, 1]);
    expect(yRange([[NaN, 3]])[1]).toBeCloseTo(3.3);
  });

  it('names a bucket', () => {
    expect(bucketLabel(at('2026-11-28T10:00:00Z'), 'hour', 'en-GB', 'UTC')).toBe('28 Nov 2026, 10:00–11:00');
    expect(bucketLabel(at('2026-11-28T00:00:00Z'), 'day', 'en-GB', 'UTC')).toBe('28 Nov 2026');
  });
});
