import { useEffect, useRef, useState, type FormEvent } from 'react';
import { useInfiniteQuery, useQuery, useQueryClient } from '@tanstack/react-query';
import { Link, useNavigate, useParams, useSearchParams } from 'react-router';
import {
  api,
  ApiError,
  can,
  deleteVolumeFile,
  ok,
  readVolumeFile,
  writeVolumeFile,
  type Schemas,
  type Session,
  type VolumeChange,
} from '../api';
import { changeSummary, type FileDiff } from '../diff';
import { ErrorNote } from '../ErrorNote';
import { buildTree, dirsOf, formatBytes, shortSha, textLines, type TreeDir } from '../files';
import { UnifiedDiff } from '../UnifiedDiff';

type Volume = Schemas['Volume'];
type FileEntry = Schemas['FileEntry'];
type Snapshot = Schemas['Snapshot'];

const message = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** The tenant's named volumes; one volume's tree, files, changes and snapshots
 * (`/files/<volume>?path=<file>`). */
export function FilesPage({ session }: { session: Session }) {
  const { name } = useParams();
  const navigate = useNavigate();
  const writable = can(session, 'volumes:write');
  const volumes = useQuery({ queryKey: ['volumes'], queryFn: () => ok(api.GET('/v1/volumes')) });
  const rows = volumes.data?.data ?? [];
  return (
    <section>
      <h1>Files</h1>
      <ErrorNote error={volumes.error} />
      {volumes.isSuccess && rows.length === 0 && <p className="empty">No volumes in this tenant yet.</p>}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid" aria-label="Volumes">
            <thead>
              <tr>
                <th>Volume</th>
                <th>Mode</th>
                <th>Files</th>
                <th>Size / quota</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((v) => (
                <tr key={v.name} aria-current={v.name === name ? 'true' : undefined}>
                  <td>
                    <Link to={`/files/${encodeURIComponent(v.name)}`}>{v.name}</Link>
                    {v.description && <div className="t-muted">{v.description}</div>}
                  </td>
                  <td>{v.mode}</td>
                  <td>{v.files}</td>
                  <td>
                    {formatBytes(v.bytes)} / {formatBytes(v.quota_bytes)}
                  </td>
                  <td>{new Date(v.updated_at).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {writable && <NewVolume onMade={(v) => navigate(`/files/${encodeURIComponent(v)}`)} />}
      {name && <VolumeView key={name} name={name} writable={writable} />}
    </section>
  );
}

function NewVolume({ onMade }: { onMade: (name: string) => void }) {
  const client = useQueryClient();
  const [name, setName] = useState('');
  const [mode, setMode] = useState<Schemas['VolumeMode']>('rw');
  const [error, setError] = useState<string | null>(null);
  const make = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      const v = await ok(api.POST('/v1/volumes', { body: { name, mode } }));
      await client.invalidateQueries({ queryKey: ['volumes'] });
      setName('');
      onMade(v.name);
    } catch (err) {
      setError(message(err));
    }
  };
  return (
    <form className="row" onSubmit={make} aria-label="New volume">
      <label>
        New volume <input value={name} onChange={(e) => setName(e.target.value.trim())} placeholder="a-z, 0-9, _ and -" />
      </label>
      <label>
        Mode{' '}
        <select value={mode} onChange={(e) => setMode(e.target.value as Schemas['VolumeMode'])}>
          <option value="rw">rw</option>
          <option value="ro">ro</option>
        </select>
      </label>
      <button type="submit" disabled={!name}>
        Make volume
      </button>
      <ErrorNote error={error} />
    </form>
  );
}

/** Every file of a volume, a page of 1,000 at a time. */
async function wholeTree(name: string): Promise<{ files: FileEntry[]; treeHash: string; cut: boolean }> {
  const files: FileEntry[] = [];
  let cursor: string | null = null;
  let treeHash = '';
  // 20 pages: twice volumes.max_files' default; a bigger tree says it is cut.
  for (let i = 0; i < 20; i++) {
    const page: Schemas['VolumeTree'] = await ok(
      api.GET('/v1/volumes/{name}/tree', {
        params: { path: { name }, query: { limit: 1000, ...(cursor ? { cursor } : {}) } },
      }),
    );
    files.push(...page.data);
    treeHash = page.tree_hash;
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  return { files, treeHash, cut: cursor !== null };
}

function VolumeView({ name, writable }: { name: string; writable: boolean }) {
  const client = useQueryClient();
  const [params, setParams] = useSearchParams();
  const path = params.get('path');
  const [creating, setCreating] = useState(false);
  const info = useQuery({
    queryKey: ['vol', name, 'info'],
    queryFn: () => ok(api.GET('/v1/volumes/{name}', { params: { path: { name } } })),
    // A run writing to the volume moves its change count: everything else is fetched again.
    refetchInterval: 5000,
  });
  const tree = useQuery({ queryKey: ['vol', name, 'tree'], queryFn: () => wholeTree(name) });
  // Folders start folded; those of the file opened are unfolded.
  const [open, setOpen] = useState<Set<string>>(() => new Set(path ? dirsOf(path) : []));
  const refresh = async () => {
    await Promise.all([
      client.invalidateQueries({ queryKey: ['vol', name] }),
      client.invalidateQueries({ queryKey: ['volumes'] }),
    ]);
  };
  const seq = info.data?.seq;
  const seen = useRef<number | undefined>(undefined);
  useEffect(() => {
    if (seq === undefined) return;
    if (seen.current !== undefined && seen.current !== seq) {
      void client.invalidateQueries({ queryKey: ['vol', name], predicate: (q) => q.queryKey[2] !== 'info' });
      void client.invalidateQueries({ queryKey: ['volumes'] });
    }
    seen.current = seq;
  }, [seq, client, name]);
  const pick = (p: string | null) => {
    setCreating(false);
    setParams(p ? { path: p } : {});
    if (p) setOpen((o) => new Set([...o, ...dirsOf(p)]));
  };
  const toggle = (dir: string) =>
    setOpen((o) => {
      const next = new Set(o);
      if (next.has(dir)) next.delete(dir);
      else next.add(dir);
      return next;
    });
  const v = info.data;
  const root = tree.data ? buildTree(tree.data.files) : null;
  const canWrite = writable && v?.mode !== 'ro';
  if (info.isError && !v) {
    // No such volume (or no right to it): one error, not one per panel.
    return (
      <div>
        <h2>
          Volume <code>{name}</code>
        </h2>
        <ErrorNote error={info.error} />
      </div>
    );
  }
  return (
    <div>
      <h2>
        Volume <code>{name}</code>
      </h2>
      <ErrorNote error={info.error} />
      {v && <VolumeFacts v={v} />}
      <div className="split">
        <div className="panel">
          <h2>Tree</h2>
          <ErrorNote error={tree.error} />
          {root && root.dirs.length === 0 && root.files.length === 0 && <p className="empty">No files yet.</p>}
          {root && <Tree dir={root} open={open} toggle={toggle} selected={path} pick={pick} />}
          {tree.data?.cut && <p className="t-muted">Only the first {tree.data.files.length} files are shown.</p>}
          {canWrite && (
            <button type="button" onClick={() => setCreating(true)}>
              New file
            </button>
          )}
        </div>
        {creating ? (
          <NewFile
            volume={name}
            onDone={async (p) => {
              await refresh();
              pick(p);
            }}
          />
        ) : (
          path && <FileView key={path} volume={name} path={path} writable={canWrite} onChanged={refresh} onGone={() => pick(null)} />
        )}
      </div>
      <Changes name={name} writable={canWrite} onChanged={refresh} />
      <Snapshots name={name} treeHash={tree.data?.treeHash ?? v?.tree_hash} writable={canWrite} onChanged={refresh} />
    </div>
  );
}

function VolumeFacts({ v }: { v: Volume }) {
  return (
    <dl className="facts" aria-label="Volume">
      <dt>Mode</dt>
      <dd data-testid="volume-mode">{v.mode === 'ro' ? 'ro (read-only: every write is refused)' : 'rw'}</dd>
      <dt>Files</dt>
      <dd data-testid="volume-files">{v.files}</dd>
      <dt>Size</dt>
      <dd>
        {formatBytes(v.bytes)} of {formatBytes(v.quota_bytes)}
      </dd>
      <dt>Version</dt>
      <dd>
        <code title={v.tree_hash}>{shortSha(v.tree_hash)}</code> after {v.seq} change{v.seq === 1 ? '' : 's'}
      </dd>
    </dl>
  );
}

function Tree({
  dir,
  open,
  toggle,
  selected,
  pick,
}: {
  dir: TreeDir;
  open: Set<string>;
  toggle: (dir: string) => void;
  selected: string | null;
  pick: (path: string) => void;
}) {
  return (
    <ul className="tree" aria-label={dir.path === '' ? 'Tree' : `Folder ${dir.path}`}>
      {dir.dirs.map((d) => {
        const unfolded = open.has(d.path);
        return (
          <li key={d.path}>
            <button type="button" className="link" aria-expanded={unfolded} onClick={() => toggle(d.path)}>
              <span aria-hidden="true">{unfolded ? '▾ ' : '▸ '}</span>
              {d.name}/
            </button>
            {unfolded && <Tree dir={d} open={open} toggle={toggle} selected={selected} pick={pick} />}
          </li>
        );
      })}
      {dir.files.map((f) => (
        <li key={f.path}>
          <button
            type="button"
            className={f.path === selected ? 'link open' : 'link'}
            aria-current={f.path === selected ? 'true' : undefined}
            title={`${formatBytes(f.size)} · sha256 ${f.sha256}`}
            onClick={() => pick(f.path)}
          >
            {f.name}
          </button>
        </li>
      ))}
    </ul>
  );
}

/** One file: its text with line numbers (or what a binary one is), an editor whose save is a
 * compare-and-set on the sha256 shown, and Delete. */
function FileView({
  volume,
  path,
  writable,
  onChanged,
  onGone,
}: {
  volume: string;
  path: string;
  writable: boolean;
  onChanged: () => Promise<void>;
  onGone: () => void;
}) {
  const file = useQuery({ queryKey: ['vol', volume, 'file', path], queryFn: () => readVolumeFile(volume, path) });
  // The text being edited and the sha256 of the version it started from (what `If-Match` sends,
  // whatever a refetch shows meanwhile).
  const [draft, setDraft] = useState<{ text: string; base: string } | null>(null);
  const [stale, setStale] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const f = file.data;
  const save = async (e: FormEvent) => {
    e.preventDefault();
    if (!draft) return;
    setError(null);
    try {
      await writeVolumeFile(volume, path, draft.text, draft.base);
      setDraft(null);
      await onChanged();
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) setStale(true);
      else setError(message(err));
    }
  };
  const reload = async () => {
    setStale(false);
    setError(null);
    const r = await file.refetch();
    setDraft(r.data && r.data.text !== null ? { text: r.data.text, base: r.data.sha256 } : null);
  };
  const remove = async () => {
    if (!f || !window.confirm(`Delete ${path}? It can be undone from the changes below.`)) return;
    setError(null);
    try {
      await deleteVolumeFile(volume, path, f.sha256);
      await onChanged();
      onGone();
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) setStale(true);
      else setError(message(err));
    }
  };
  return (
    <div className="panel" role="region" aria-label="File">
      <h2>
        <code>{path}</code>
      </h2>
      <ErrorNote error={file.error} />
      {f && (
        <p className="t-muted" data-testid="file-facts">
          {formatBytes(f.size)} · sha256 <code title={f.sha256}>{shortSha(f.sha256)}</code>
        </p>
      )}
      {f && f.text === null && (
        <p data-testid="file-binary">
          A binary file of {f.size} bytes, sha256 <code>{f.sha256}</code>.
        </p>
      )}
      {f && f.text !== null && !draft && (
        <pre className="numbered" aria-label="Content">
          {textLines(f.text).map((l, i) => (
            <div key={i}>
              <span className="ln" aria-hidden="true">
                {i + 1}
              </span>
              {l}
            </div>
          ))}
        </pre>
      )}
      {draft && (
        <form onSubmit={save} aria-label="Edit file">
          <textarea
            className="code"
            rows={Math.min(30, Math.max(8, textLines(draft.text).length + 2))}
            value={draft.text}
            onChange={(e) => setDraft({ ...draft, text: e.target.value })}
            aria-label="File text"
            spellCheck={false}
          />
          <div className="row">
            <button type="submit" disabled={stale}>
              Save
            </button>
            <button type="button" onClick={() => (setDraft(null), setStale(false))}>
              Discard
            </button>
          </div>
        </form>
      )}
      {stale && (
        <p className="error" role="alert">
          This file changed elsewhere since it was shown here, so it was not saved.{' '}
          <button type="button" onClick={reload}>
            Reload
          </button>{' '}
          (your text is dropped for the new version; copy it first to keep it)
        </p>
      )}
      {writable && f && !draft && (
        <div className="row">
          {f.text !== null && (
            <button type="button" onClick={() => setDraft({ text: f.text ?? '', base: f.sha256 })}>
              Edit
            </button>
          )}
          <button type="button" onClick={remove}>
            Delete
          </button>
        </div>
      )}
      <ErrorNote error={error} />
    </div>
  );
}

function NewFile({ volume, onDone }: { volume: string; onDone: (path: string) => Promise<void> }) {
  const [path, setPath] = useState('');
  const [text, setText] = useState('');
  const [error, setError] = useState<string | null>(null);
  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      // It must not exist yet: a file of that path is not overwritten unseen.
      await writeVolumeFile(volume, path, text, null);
      await onDone(path);
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 412 ? `${path} exists already: open it from the tree to edit it.` : message(err),
      );
    }
  };
  return (
    <form className="panel" onSubmit={save} aria-label="New file">
      <h2>New file</h2>
      <label>
        Path <input value={path} onChange={(e) => setPath(e.target.value)} placeholder="notes/todo.md" required />
      </label>
      <textarea className="code" rows={10} value={text} onChange={(e) => setText(e.target.value)} aria-label="File text" spellCheck={false} />
      <button type="submit" disabled={!path}>
        Save
      </button>
      <ErrorNote error={error} />
    </form>
  );
}

/** A change's files as the diff helpers take them. */
const diffsOf = (c: VolumeChange): FileDiff[] =>
  c.files.map((f) => ({ path: f.path, before: f.before_sha, after: f.after_sha, diff: f.diff ?? '' }));

/** The changelog, newest first, each change folded to one line over its diffs, with Undo. */
function Changes({ name, writable, onChanged }: { name: string; writable: boolean; onChanged: () => Promise<void> }) {
  const changes = useInfiniteQuery({
    queryKey: ['vol', name, 'changes'],
    queryFn: ({ pageParam }) =>
      ok(
        api.GET('/v1/volumes/{name}/changes', {
          params: { path: { name }, query: { diff: true, limit: 50, ...(pageParam ? { before_seq: pageParam } : {}) } },
        }),
      ),
    initialPageParam: null as number | null,
    getNextPageParam: (last) => last.next_before_seq ?? null,
  });
  const rows = changes.data?.pages.flatMap((p) => p.data) ?? [];
  const seqOf = new Map(rows.map((c) => [c.id, c.seq]));
  return (
    <div className="panel">
      <h2>Changes</h2>
      <ErrorNote error={changes.error} />
      {changes.isSuccess && rows.length === 0 && <p className="empty">No changes yet.</p>}
      <ol className="changes" aria-label="Changes">
        {rows.map((c) => (
          <ChangeItem key={c.id} name={name} change={c} undoneSeq={seqOf} writable={writable} onChanged={onChanged} />
        ))}
      </ol>
      {changes.hasNextPage && (
        <button type="button" onClick={() => changes.fetchNextPage()}>
          Older changes
        </button>
      )}
    </div>
  );
}

function ChangeItem({
  name,
  change: c,
  undoneSeq,
  writable,
  onChanged,
}: {
  name: string;
  change: VolumeChange;
  undoneSeq: Map<string, number>;
  writable: boolean;
  onChanged: () => Promise<void>;
}) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const undo = async () => {
    setError(null);
    setBusy(true);
    try {
      await ok(api.POST('/v1/volumes/{name}/undo', { params: { path: { name } }, body: { change_id: c.id } }));
      await onChanged();
    } catch (err) {
      // A 409 names the file that changed since: later edits are never clobbered.
      setError(message(err));
    } finally {
      setBusy(false);
    }
  };
  const undoes = c.undoes ? undoneSeq.get(c.undoes) : undefined;
  return (
    <li aria-label={`Change #${c.seq}`}>
      <details>
        <summary>
          <span className={c.undone_by ? 'undone' : undefined}>
            #{c.seq} {changeSummary(diffsOf(c))}
          </span>{' '}
          <span className="t-muted">
            · {c.source}
            {c.undoes ? ` of #${undoes ?? shortSha(c.undoes)}` : ''} · {c.subject} · {new Date(c.created_at).toLocaleString()}
          </span>
          {c.undone_by && <span className="badge badge-idle"> undone</span>}
        </summary>
        {c.files.map((f) => (
          <div key={f.path}>
            <p className="t-muted">
              {f.path}: {f.before_sha ? shortSha(f.before_sha) : 'none'} → {f.after_sha ? shortSha(f.after_sha) : 'deleted'}
            </p>
            <UnifiedDiff diff={f.diff ?? ''} label={`Diff of ${f.path} in change #${c.seq}`} />
          </div>
        ))}
      </details>
      <div className="row">
        {c.run_id && (
          <Link to={`/runs/${c.run_id}`} title={c.tool_use_id ?? undefined}>
            run {shortSha(c.run_id)}
          </Link>
        )}
        {writable && !c.undone_by && (
          <button type="button" onClick={undo} disabled={busy} aria-label={`Undo #${c.seq}`}>
            Undo
          </button>
        )}
      </div>
      <ErrorNote error={error} />
    </li>
  );
}

/** Snapshots: take one with a label, list them, restore one (after a confirmation, and only
 * over the version of the tree shown: a change made since is a 409, not lost). */
function Snapshots({
  name,
  treeHash,
  writable,
  onChanged,
}: {
  name: string;
  treeHash: string | undefined;
  writable: boolean;
  onChanged: () => Promise<void>;
}) {
  const client = useQueryClient();
  const snaps = useQuery({
    queryKey: ['vol', name, 'snapshots'],
    queryFn: () => ok(api.GET('/v1/volumes/{name}/snapshots', { params: { path: { name } } })),
  });
  const [label, setLabel] = useState('');
  const [error, setError] = useState<string | null>(null);
  const take = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      await ok(api.POST('/v1/volumes/{name}/snapshots', { params: { path: { name } }, body: label ? { label } : {} }));
      setLabel('');
      await client.invalidateQueries({ queryKey: ['vol', name, 'snapshots'] });
    } catch (err) {
      setError(message(err));
    }
  };
  const restore = async (s: Snapshot) => {
    const what = s.label ? `“${s.label}”` : `of ${new Date(s.created_at).toLocaleString()}`;
    if (!window.confirm(`Restore the snapshot ${what}? The volume's files become its ${s.files} files, as one change (which can be undone).`)) {
      return;
    }
    setError(null);
    try {
      await ok(
        api.POST('/v1/volumes/{name}/snapshots/{snapshot_id}/restore', {
          params: { path: { name, snapshot_id: s.id } },
          body: treeHash ? { if_tree: treeHash } : {},
        }),
      );
      await onChanged();
    } catch (err) {
      setError(message(err));
    }
  };
  const rows = snaps.data?.data ?? [];
  return (
    <div className="panel">
      <h2>Snapshots</h2>
      {writable && (
        <form className="row" onSubmit={take} aria-label="Take a snapshot">
          <label>
            Label <input value={label} onChange={(e) => setLabel(e.target.value)} maxLength={256} placeholder="before the refactor" />
          </label>
          <button type="submit">Take snapshot</button>
        </form>
      )}
      <ErrorNote error={snaps.error ?? error} />
      {snaps.isSuccess && rows.length === 0 && <p className="empty">No snapshots yet.</p>}
      {rows.length > 0 && (
        <div className="scroll">
          <table className="grid" aria-label="Snapshots">
            <thead>
              <tr>
                <th>Label</th>
                <th>Files</th>
                <th>Size</th>
                <th>Version</th>
                <th>Taken</th>
                {writable && <th />}
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.id}>
                  <td>{s.label || <span className="t-muted">(no label)</span>}</td>
                  <td>{s.files}</td>
                  <td>{formatBytes(s.bytes)}</td>
                  <td>
                    <code title={s.tree_hash}>{shortSha(s.tree_hash)}</code>
                    {s.tree_hash === treeHash && <span className="t-muted"> (current)</span>}
                  </td>
                  <td>{new Date(s.created_at).toLocaleString()}</td>
                  {writable && (
                    <td>
                      <button type="button" onClick={() => restore(s)} aria-label={`Restore ${s.label || s.id}`}>
                        Restore
                      </button>
                    </td>
                  )}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}
