// The Files page's pure parts: a volume's index as a tree of folders, sizes for people, a file's
// lines.

/** The binding name of a run tree's own volume (`run`), as `file_changed` events name it. */
export const RUN_VOLUME = 'run';

export interface TreeFile {
  /** The last segment of its path. */
  name: string;
  path: string;
  size: number;
  sha256: string;
}

export interface TreeDir {
  /** The last segment of its path (empty for the root). */
  name: string;
  /** `src/lib/` (with the slash; empty for the root). */
  path: string;
  dirs: TreeDir[];
  files: TreeFile[];
}

const byName = <T extends { name: string }>(a: T, b: T) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** A volume's index (`GET …/tree`, any order) as folders and files, each level sorted by name. */
export function buildTree(entries: readonly { path: string; size: number; sha256: string }[]): TreeDir {
  const root: TreeDir = { name: '', path: '', dirs: [], files: [] };
  for (const e of entries) {
    const parts = e.path.split('/');
    let dir = root;
    for (const part of parts.slice(0, -1)) {
      let next = dir.dirs.find((d) => d.name === part);
      if (!next) {
        next = { name: part, path: `${dir.path}${part}/`, dirs: [], files: [] };
        dir.dirs.push(next);
      }
      dir = next;
    }
    dir.files.push({ name: parts[parts.length - 1], path: e.path, size: e.size, sha256: e.sha256 });
  }
  const sort = (d: TreeDir) => {
    d.dirs.sort(byName);
    d.files.sort(byName);
    d.dirs.forEach(sort);
  };
  sort(root);
  return root;
}

/** The folders a path is in, outermost first: `a/b/c.txt` → `a/`, `a/b/`. */
export function dirsOf(path: string): string[] {
  const parts = path.split('/').slice(0, -1);
  return parts.map((_, i) => `${parts.slice(0, i + 1).join('/')}/`);
}

/** `0 B`, `999 B`, `1.5 KiB`, `256 MiB`. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 1024) return `${Number.isFinite(n) ? n : 0} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = -1;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  const s = v >= 100 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1);
  return `${s} ${units[u]}`;
}

/** A text file's lines to show numbered: a final newline ends the last line, it starts none. */
export function textLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  return lines;
}

/** The first 12 hex digits of a sha256 (or of a `sha256:` tree hash). */
export const shortSha = (sha: string): string => sha.replace(/^sha256:/, '').slice(0, 12);
