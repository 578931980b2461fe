import { unifiedLines } from './diff';

/** A unified diff with its added lines green and its removed lines red; an empty one says why
 * there is nothing to show. */
export function UnifiedDiff({ diff, label }: { diff: string; label: string }) {
  if (!diff) {
    return (
      <p className="t-muted" aria-label={label}>
        no text diff (a binary file, a move, or a file too large to diff)
      </p>
    );
  }
  return (
    <pre className="diff" aria-label={label}>
      {unifiedLines(diff).map((l, i) => (
        <div key={i} className={l.kind}>
          {l.text || ' '}
        </div>
      ))}
    </pre>
  );
}
