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

import { changeSummary, diffStat, unifiedLines } from './diff';

describe('unifiedLines', () => {
  it('tells headers, hunks, added, removed and kept lines, and notes apart', () => {
    const diff = [
      '--- a/src/a.py',
      '+++ b/src/a.py',
      '@@ -1,3 +1,3 @@',
      ' keep',
      '--- a removed line that looks like a header',
      '+++ an added one',
      ' keep too',
      '\\ No newline at end of file',
      '... diff cut: 120 of 4000 bytes shown',
      '',
    ].join('\n');
    expect(unifiedLines(diff).map((l) => l.kind)).toEqual(['file', 'file', 'hunk', 'ctx', 'del', 'add', 'ctx', 'note', 'note']);
  });

  it('counts a hunk header without counts as one line a side', () => {
    expect(unifiedLines('--- a/a\n+++ b/a\n@@ -0,0 +1 @@\n+hi\n').map((l) => l.kind)).toEqual(['file', 'file', 'hunk', 'add']);
    expect(unifiedLines('@@ -1 +1 @@\n-a\n+b\n@@ -9,2 +9,1 @@\n x\n-y\n').map((l) => l.kind)).toEqual([
      'hunk',
      'del',
      'add',
      'hunk',
      'ctx',
      'del',
    ]);
  });

  it('makes a note of what is no diff', () => {
    expect(unifiedLines('Binary files a/x and b/x differ\n')).toEqual([{ kind: 'note', text: 'Binary files a/x and b/x differ' }]);
    expect(unifiedLines('')).toEqual([]);
  });
});

describe('diffStat and changeSummary', () => {
  it('counts added and removed lines, never the headers', () => {
    expect(diffStat('--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n')).toEqual({ added: 1, removed: 1 });
  });

  it('says what a change did in one line', () => {
    const d = '@@ -1 +1,2 @@\n-a\n+b\n+c\n';
    expect(changeSummary([{ path: 'a', before: '1', after: '2', diff: d }])).toBe('changed a (+2 −1)');
    expect(changeSummary([{ path: 'img.png', before: '1', after: '2', diff: '' }])).toBe('changed img.png');
    expect(
      changeSummary([
        { path: 'a', before: '1', after: '2', diff: d },
        { path: 'b', before: null, after: '3', diff: '@@ -0,0 +1 @@\n+x\n' },
        { path: 'c', before: '4', after: null, diff: '' },
      ]),
    ).toBe('changed 3 files (+3 −1)');
    // Two files that are not one moved: counted.
    expect(
      changeSummary([
        { path: 'a', before: '1', after: null, diff: '' },
        { path: 'b', before: null, after: '2', diff: '@@ -0,0 +1 @@\n+x\n' },
      ]),
    ).toBe('changed 2 files (+1 −0)');
    expect(changeSummary([])).toBe('changed nothing');
  });
});
