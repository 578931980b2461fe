import type { Health } from './ingress';

/** A definition's verdict in a word or two, coloured by its tone. */
export function HealthBadge({ health, testId }: { health: Health; testId?: string }) {
  return (
    <span className={`badge badge-${health.tone}`} data-testid={testId}>
      {health.text}
    </span>
  );
}

/** What a definition refers to that is not there yet (an unset secret variable, a missing
 * agent): the `warnings` the list routes carry, one badge each. */
export function Warnings({ warnings }: { warnings?: unknown }) {
  if (!Array.isArray(warnings) || warnings.length === 0) return null;
  return (
    <span className="badges" aria-label="Warnings">
      {warnings.map((w, i) => (
        <span key={i} className="badge badge-warn" role="note">
          ⚠ {String(w)}
        </span>
      ))}
    </span>
  );
}
