import type { Health } from './ingress';
import { statusClass, statusLabel, type RunPauseView } from './pause';

/** A definition's verdict in a word or two, coloured by its tone. */
export function HealthBadge({ health, testId }: { health: Health; testId?: string }) {
  return (
    <span className={`badge badge-${health.tone}`} data-testid={testId}>
      {health.text}
    </span>
  );
}

/** What a definition refers to that is not there yet (an unset secret variable, a missing
 * agent): the `warnings` a get of a schedule's or webhook's active version carries, one badge
 * each. */
export function Warnings({ warnings }: { warnings: string[] }) {
  if (warnings.length === 0) return null;
  return (
    <span className="badges" aria-label="Warnings">
      {warnings.map((w, i) => (
        <span key={i} className="badge badge-warn" role="note">
          ⚠ {w}
        </span>
      ))}
    </span>
  );
}

/** A run's status as the run page shows it: the status, or `pausing…` while a pause is asked
 * of a run still queued or running (`web/src/pause.ts`). */
export function RunStatusBadge({ run, testId }: { run: RunPauseView; testId?: string }) {
  return (
    <span className={statusClass(run)} data-testid={testId}>
      {statusLabel(run)}
    </span>
  );
}
