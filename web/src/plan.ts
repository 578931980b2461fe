// What a plan run's panel shows (`GET /v1/runs/{id}/plan`, docs/harness.md): the task graph laid
// out in columns by dependency depth, each task's and the plan's status as a word and a tone,
// verdicts and checks in a line, and which of approve, retry and skip the API would take now.

import type { Schemas } from './api';

export type PlanView = Schemas['PlanView'];
export type TaskView = Schemas['TaskView'];
export type AttemptView = Schemas['AttemptView'];
export type Verdict = Schemas['Verdict'];
export type CheckResult = Schemas['CheckResult'];
export type Check = Schemas['Check'];
export type TaskStatus = TaskView['status'];
export type PlanStatus = PlanView['status'];

/** A badge's tone: the existing `badge-good|bad|warn|idle`, and `live` for work under way. */
export type Tone = 'good' | 'bad' | 'warn' | 'idle' | 'live';

/** A status as shown: its word (always shown: a status is never told by colour alone), a glyph
 * beside it, and its tone. */
export interface StatusLabel {
  label: string;
  glyph: string;
  tone: Tone;
}

const TASK_STATUS: Record<TaskStatus, StatusLabel> = {
  pending: { label: 'pending', glyph: '○', tone: 'idle' },
  running: { label: 'running', glyph: '◐', tone: 'live' },
  passed: { label: 'passed', glyph: '✓', tone: 'good' },
  failed: { label: 'failed', glyph: '✗', tone: 'bad' },
  skipped: { label: 'skipped', glyph: '↷', tone: 'idle' },
};

/** A task's status as shown. An unknown status (a newer gateway) is shown as it is. */
export function taskStatus(status: string): StatusLabel {
  return TASK_STATUS[status as TaskStatus] ?? { label: status, glyph: '?', tone: 'idle' };
}

/** A plan's status as shown; a proposed plan of a run parked on it says it waits for approval. */
export function planStatus(status: string, runStatus?: string): StatusLabel {
  switch (status) {
    case 'proposed':
      return runStatus === 'awaiting_input'
        ? { label: 'proposed, awaiting approval', glyph: '!', tone: 'warn' }
        : { label: 'proposed', glyph: '○', tone: 'warn' };
    case 'accepted':
      return { label: 'accepted', glyph: '✓', tone: 'good' };
    case 'superseded':
      return { label: 'superseded', glyph: '↷', tone: 'idle' };
    default:
      return { label: status, glyph: '?', tone: 'idle' };
  }
}

const ENDED = new Set(['succeeded', 'failed', 'cancelled']);

/** Whether a run can still take a control: it has not ended (an ended run answers 409). */
export const isLive = (runStatus: string | undefined): boolean => runStatus !== undefined && !ENDED.has(runStatus);

/** Approve shows only on a proposed plan whose run is parked waiting for it. */
export const canApprove = (plan: Pick<PlanView, 'status'>, runStatus: string | undefined): boolean =>
  plan.status === 'proposed' && runStatus === 'awaiting_input';

/** Retry gives a failed task one more attempt, while the run lives. */
export const canRetry = (task: Pick<TaskView, 'status'>, runStatus: string | undefined): boolean =>
  task.status === 'failed' && isLive(runStatus);

/** Skip ends a task that has not passed (nor been skipped), while the run lives. */
export const canSkip = (task: Pick<TaskView, 'status'>, runStatus: string | undefined): boolean =>
  task.status !== 'passed' && task.status !== 'skipped' && isLive(runStatus);

/** Whether a run event may change what `GET /v1/runs/{id}/plan` answers, so the panel should
 * fetch it again: the plan's and tasks' events, and the run's end (its status). */
export function refreshesPlan(kind: string): boolean {
  return (
    kind.startsWith('plan_') ||
    kind.startsWith('task_') ||
    kind === 'outcome_stale' ||
    kind === 'replan_requested' ||
    kind === 'budget_exhausted' ||
    kind === 'run_finished'
  );
}

/** A task's place in the graph: by what it depends on, and whether it is the final one. */
type Node = Pick<TaskView, 'id' | 'depends_on' | 'final'>;

/**
 * The tasks' ids in columns by dependency depth: a task without dependencies is in column 0,
 * any other one column right of its deepest dependency, and the final task (which runs after
 * every other has ended) alone right of them all. Within a column, tasks are ordered by the mean
 * row of their dependencies in earlier columns (fewer crossing edges), ties in plan order. An
 * unknown dependency is ignored and a cycle is cut where it closes (the validator refuses both,
 * but the panel still draws what it is given).
 */
export function layers(tasks: Node[]): string[][] {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const depth = new Map<string, number>();
  const visiting = new Set<string>();
  const depthOf = (id: string): number => {
    const known = depth.get(id);
    if (known !== undefined) return known;
    if (visiting.has(id)) return -1; // the edge that closes a cycle counts for nothing
    visiting.add(id);
    let d = 0;
    for (const dep of byId.get(id)?.depends_on ?? []) {
      if (dep !== id && byId.has(dep)) d = Math.max(d, depthOf(dep) + 1);
    }
    visiting.delete(id);
    depth.set(id, d);
    return d;
  };
  const finals = tasks.filter((t) => t.final);
  let deepest = -1;
  for (const t of tasks) if (!t.final) deepest = Math.max(deepest, depthOf(t.id));
  for (const t of finals) depth.set(t.id, Math.max(deepest + 1, depthOf(t.id)));

  const columns: string[][] = [];
  for (const t of tasks) {
    const d = depth.get(t.id) ?? 0;
    while (columns.length <= d) columns.push([]);
    columns[d].push(t.id);
  }
  const row = new Map<string, number>();
  const out = columns.filter((c) => c.length > 0);
  out.forEach((column, c) => {
    if (c > 0) {
      const order = new Map(column.map((id, i) => [id, i]));
      const key = (id: string): number => {
        const rows = (byId.get(id)?.depends_on ?? []).map((d) => row.get(d)).filter((r): r is number => r !== undefined);
        return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Infinity;
      };
      const keys = new Map(column.map((id) => [id, key(id)]));
      column.sort((a, b) => {
        const ka = keys.get(a) ?? Infinity;
        const kb = keys.get(b) ?? Infinity;
        if (ka !== kb) return ka === Infinity ? 1 : kb === Infinity ? -1 : ka - kb;
        return (order.get(a) ?? 0) - (order.get(b) ?? 0);
      });
    }
    column.forEach((id, i) => row.set(id, i));
  });
  return out;
}

/** The size of a task's box and the gaps between boxes, in CSS pixels. */
export interface BoxSize {
  width: number;
  height: number;
  colGap: number;
  rowGap: number;
}

export const BOX: BoxSize = { width: 208, height: 116, colGap: 56, rowGap: 16 };

/** A task's box: its column and row, and its top-left corner. */
export interface GraphBox {
  id: string;
  column: number;
  row: number;
  x: number;
  y: number;
}

/** A `depends_on` edge, drawn from the right of the dependency to the left of the dependent. */
export interface GraphEdge {
  from: string;
  to: string;
  /** An SVG path: a curve between the two boxes' middles. */
  path: string;
}

export interface Graph {
  width: number;
  height: number;
  boxes: GraphBox[];
  edges: GraphEdge[];
}

/** The task graph: a box per task in its column (`layers`), an edge per known dependency. */
export function graph(tasks: Node[], size: BoxSize = BOX): Graph {
  const cols = layers(tasks);
  const boxes: GraphBox[] = [];
  const at = new Map<string, GraphBox>();
  cols.forEach((column, c) =>
    column.forEach((id, r) => {
      const b = { id, column: c, row: r, x: c * (size.width + size.colGap), y: r * (size.height + size.rowGap) };
      boxes.push(b);
      at.set(id, b);
    }),
  );
  const edges: GraphEdge[] = [];
  for (const t of tasks) {
    const to = at.get(t.id);
    for (const dep of new Set(t.depends_on ?? [])) {
      const from = at.get(dep);
      if (!from || !to || dep === t.id) continue;
      const x1 = from.x + size.width;
      const y1 = from.y + size.height / 2;
      const x2 = to.x;
      const y2 = to.y + size.height / 2;
      const mid = (x1 + x2) / 2;
      edges.push({ from: dep, to: t.id, path: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}` });
    }
  }
  const rows = Math.max(0, ...cols.map((c) => c.length));
  return {
    width: cols.length ? cols.length * size.width + (cols.length - 1) * size.colGap : 0,
    height: rows ? rows * size.height + (rows - 1) * size.rowGap : 0,
    boxes,
    edges,
  };
}

/** A confidence (0–1) as a whole percentage. */
export const percent = (confidence: number): string =>
  `${Math.round(Math.min(1, Math.max(0, Number.isFinite(confidence) ? confidence : 0)) * 100)}%`;

/** A verdict in a few words: `pass (ok)`, `fail (check_failed)`. */
export const verdictLine = (v: Pick<Verdict, 'verdict' | 'reason_code'>): string => `${v.verdict} (${v.reason_code})`;

/** A verdict's tone: a pass is good, a fail bad, and inconclusive — never a pass — a warning. */
export const verdictTone = (v: Pick<Verdict, 'verdict'>): Tone =>
  v.verdict === 'pass' ? 'good' : v.verdict === 'fail' ? 'bad' : 'warn';

/** The newest verdict of a task: of its newest attempt that has one and is not stale (an outcome
 * from an older plan version is ignored), else of the newest stale one. */
export function lastVerdict(task: Pick<TaskView, 'attempts'>): { attempt: number; verdict: Verdict; stale: boolean } | null {
  let stale: { attempt: number; verdict: Verdict; stale: boolean } | null = null;
  for (let i = task.attempts.length - 1; i >= 0; i--) {
    const a = task.attempts[i];
    if (!a.verdict) continue;
    if (!a.stale) return { attempt: a.attempt, verdict: a.verdict, stale: false };
    stale ??= { attempt: a.attempt, verdict: a.verdict, stale: true };
  }
  return stale;
}

/** `no attempts`, `1 attempt`, `3 attempts`. */
export const attemptsLine = (n: number): string => (n === 0 ? 'no attempts' : n === 1 ? '1 attempt' : `${n} attempts`);

/** What a check looks at, in a line: `exists a.txt`, `parses data.csv as csv`,
 * `matches report.md /^# /`, `json_eq out.json /total = 3`. */
export function checkLine(c: Check): string {
  switch (c.check) {
    case 'parses':
      return `parses ${c.path} as ${c.format}`;
    case 'matches':
    case 'not_matches':
      return `${c.check} ${c.path} /${c.pattern}/`;
    case 'json_eq':
      return `json_eq ${c.path}${c.pointer ? ` ${c.pointer}` : ''} = ${JSON.stringify(c.value)}`;
    case 'sha256':
      return `sha256 ${c.path} ${c.sha256.slice(0, 12)}…`;
    default:
      return `${c.check} ${c.path}`;
  }
}

/** How many of an attempt's checks passed: `2/3 checks passed`, or null before it was checked. */
export function checksLine(results: CheckResult[] | undefined): string | null {
  if (!results || results.length === 0) return null;
  const passed = results.filter((r) => r.passed).length;
  return `${passed}/${results.length} check${results.length === 1 ? '' : 's'} passed`;
}

/** A count of tokens with thousands separated: `12,345`. */
export const count = (n: number): string => n.toLocaleString('en-US');
