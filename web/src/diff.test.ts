import { describe, expect, it } from 'vitest';
import { canonical, diffLines } from './diff';

describe('diffLines', () => {
  it('keeps common lines and marks the changed ones', () => {
    expect(diffLines('a\nb\nc', 'a\nB\nc\nd')).toEqual([
      { op: ' ', text: 'a' },
      { op: '-', text: 'b' },
      { op: '+', text: 'B' },
      { op: ' ', text: 'c' },
      { op: '+', text: 'd' },
    ]);
  });
  it('of equal texts is all kept', () => {
    expect(diffLines('x\ny', 'x\ny').every((l) => l.op === ' ')).toBe(true);
  });
});

describe('canonical', () => {
  it('sorts keys at every depth', () => {
    expect(canonical({ b: 1, a: { d: 2, c: [{ f: 1, e: 0 }] } })).toBe(
      canonical({ a: { c: [{ e: 0, f: 1 }], d: 2 }, b: 1 }),
    );
  });
});

import { fieldOf } from './pages/Library';

describe('fieldOf', () => {
  it('names the top-level field of a server error param', () => {
    expect(fieldOf('tools[2]')).toBe('tools');
    expect(fieldOf('changes.system_prompt')).toBe('system_prompt');
    expect(fieldOf('max_iterations')).toBe('max_iterations');
    expect(fieldOf(undefined)).toBeNull();
  });
});
