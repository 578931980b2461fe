import { describe, expect, it } from 'vitest';
import { label, toSeries, type UsageRow } from './usage';

const row = (hour: string, model: string | null, input: number, output: number): UsageRow => ({
  hour,
  model,
  requests: 1,
  input_tokens: input,
  output_tokens: output,
  cost_usd: 0.5,
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
