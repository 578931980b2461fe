import { describe, expect, it } from 'vitest';
import { buildTree, dirsOf, formatBytes, shortSha, textLines } from './files';

const e = (path: string) => ({ path, size: 1, sha256: 'ab' });

describe('buildTree', () => {
  it('nests files in their folders, each level sorted, folders apart from files', () => {
    const t = buildTree([e('src/b.py'), e('README.md'), e('src/lib/z.py'), e('src/a.py'), e('docs/x.md'), e('a.txt')]);
    expect(t.files.map((f) => f.name)).toEqual(['README.md', 'a.txt']);
    expect(t.dirs.map((d) => d.path)).toEqual(['docs/', 'src/']);
    const src = t.dirs[1];
    expect(src.files.map((f) => f.path)).toEqual(['src/a.py', 'src/b.py']);
    expect(src.dirs).toMatchObject([{ name: 'lib', path: 'src/lib/', files: [{ name: 'z.py', path: 'src/lib/z.py' }] }]);
  });

  it('of nothing is an empty root', () => {
    expect(buildTree([])).toEqual({ name: '', path: '', dirs: [], files: [] });
  });
});

describe('the small helpers', () => {
  it('dirsOf lists the folders a path is in, outermost first', () => {
    expect(dirsOf('a/b/c.txt')).toEqual(['a/', 'a/b/']);
    expect(dirsOf('c.txt')).toEqual([]);
  });

  it('formatBytes', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(256 * 1024 * 1024)).toBe('256 MiB');
    expect(formatBytes(1024 ** 3)).toBe('1 GiB');
  });

  it('textLines: a final newline ends the last line', () => {
    expect(textLines('a\nb\n')).toEqual(['a', 'b']);
    expect(textLines('a\nb')).toEqual(['a', 'b']);
    expect(textLines('\n')).toEqual(['']);
    expect(textLines('')).toEqual([]);
  });

  it('shortSha', () => {
    expect(shortSha(`sha256:${'0123456789abcdef'.repeat(4)}`)).toBe('0123456789ab');
    expect(shortSha('fedcba9876543210')).toBe('fedcba987654');
  });
});
