/** One line of a diff: kept (' '), removed ('-') or added ('+'). */
export interface DiffLine {
  op: ' ' | '-' | '+';
  text: string;
}

/** A line diff of `a` against `b` (longest common subsequence; definitions are small). */
export function diffLines(a: string, b: string): DiffLine[] {
  const x = a.split('\n');
  const y = b.split('\n');
  const n = x.length;
  const m = y.length;
  // lcs[i][j] = length of the LCS of x[i..] and y[j..]
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push({ op: ' ', text: x[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
      out.push({ op: '-', text: x[i++] });
    } else {
      out.push({ op: '+', text: y[j++] });
    }
  }
  while (i < n) out.push({ op: '-', text: x[i++] });
  while (j < m) out.push({ op: '+', text: y[j++] });
  return out;
}

/** `v` with the keys of every object sorted. */
export function sortKeys(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(sortKeys);
  if (x && typeof x === 'object') {
    return Object.fromEntries(
      Object.keys(x as object)
        .sort()
        .map((k) => [k, sortKeys((x as Record<string, unknown>)[k])]),
    );
  }
  return x;
}

/** JSON with sorted keys, two-space indented: the same content always prints the same. */
export function canonical(v: unknown): string {
  return JSON.stringify(sortKeys(v), null, 2);
}

/** What one line of a unified diff is: a file header (`--- a/x`, `+++ b/x`), a hunk header
 * (`@@ -1,2 +1,3 @@`), an added, removed or kept line, or a note (`\ No newline at end of file`,
 * `Binary files … differ`, a diff cut short). */
export type UnifiedKind = 'file' | 'hunk' | 'add' | 'del' | 'ctx' | 'note';

export interface UnifiedLine {
  kind: UnifiedKind;
  text: string;
}

const HUNK = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;

/**
 * The lines of a unified diff (one file's, as the volume routes and the `file_changed` run event
 * carry it), each with its kind. A hunk's lines are counted from its header, so a removed line
 * that reads `-- x` is a removed line, not a file header, and what follows a hunk is a note.
 */
export function unifiedLines(diff: string): UnifiedLine[] {
  const lines = diff.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const out: UnifiedLine[] = [];
  let before = 0; // lines of the old side the current hunk still has
  let after = 0; // of the new side
  for (const text of lines) {
    const hunk = HUNK.exec(text);
    let kind: UnifiedKind;
    if (hunk) {
      kind = 'hunk';
      before = hunk[1] === undefined ? 1 : Number(hunk[1]);
      after = hunk[2] === undefined ? 1 : Number(hunk[2]);
    } else if (text.startsWith('+') && after > 0) {
      kind = 'add';
      after--;
    } else if (text.startsWith('-') && before > 0) {
      kind = 'del';
      before--;
    } else if (text.startsWith(' ') && before > 0 && after > 0) {
      kind = 'ctx';
      before--;
      after--;
    } else if (before === 0 && after === 0 && (text.startsWith('--- ') || text.startsWith('+++ '))) {
      kind = 'file';
    } else {
      kind = 'note';
    }
    out.push({ kind, text });
  }
  return out;
}

/** Lines added and removed by a unified diff. */
export function diffStat(diff: string): { added: number; removed: number } {
  let added = 0;
  let removed = 0;
  for (const l of unifiedLines(diff)) {
    if (l.kind === 'add') added++;
    else if (l.kind === 'del') removed++;
  }
  return { added, removed };
}

/** One file of a change: its path, its sha256 before and after (null: it did not exist), and
 * its unified diff (empty for a binary file, a move, or one too large to diff). */
export interface FileDiff {
  path: string;
  before: string | null;
  after: string | null;
  diff: string;
}

/** `(+3 −1)`, or nothing when the diff is empty. */
function stat(f: FileDiff): string {
  if (!f.diff) return '';
  const { added, removed } = diffStat(f.diff);
  return ` (+${added} −${removed})`;
}

/** What a change did to one file: `created`, `deleted` or `changed`. */
export function verb(f: Pick<FileDiff, 'before' | 'after'>): string {
  return f.before === null ? 'created' : f.after === null ? 'deleted' : 'changed';
}

/**
 * A change on one line: `changed src/a.py (+3 −1)`, `created notes.md (+2 −0)`,
 * `deleted old.txt`, `moved a.txt → b.txt`, or `changed 3 files (+5 −2)`.
 */
export function changeSummary(files: FileDiff[]): string {
  if (files.length === 0) return 'changed nothing';
  if (files.length === 1) return `${verb(files[0])} ${files[0].path}${stat(files[0])}`;
  if (files.length === 2) {
    const gone = files.find((f) => f.after === null);
    const made = files.find((f) => f.before === null);
    if (gone && made && gone !== made && gone.before === made.after) return `moved ${gone.path} → ${made.path}`;
  }
  let added = 0;
  let removed = 0;
  for (const f of files) {
    const s = diffStat(f.diff);
    added += s.added;
    removed += s.removed;
  }
  return `changed ${files.length} files (+${added} −${removed})`;
}
