//! Fenced steps of runs, written by a group writer: the steps that executors' runs make at about
//! the same moment go to Postgres as **one statement and one commit** ([`StepWriter`]), and each
//! caller is answered only after that commit. Per run nothing changes: a run has at most one
//! step in flight (its driver waits for each), so its seq order is kept; each step is fenced by
//! its own lease epoch; and a step is durable when its caller hears so.
//!
//! The statement takes every step as rows of arrays. Its first part is the fence: each run row
//! is locked `FOR SHARE` (a step that only appends) or updated (a turn's progress, parking,
//! finishing) **where `lease_epoch` is still the step's**; the events and ledger rows are
//! inserted joined to that part, so a step whose lease was lost writes nothing, and its caller is
//! told so, while the others commit. The parts no step of a batch needs are left out of its
//! statement ([`StepShape`]). A batch the database refuses as a whole (one step's content is
//! unstorable, a deadlock) is written again one step at a time, so only the bad step fails.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;
use weft_core::RunId;
use weft_core::run::StopReason;

use crate::StoreError;
use crate::runs::{RunStore, RunStoreError, refused_data, stale_on_conflict, storable};

/// The most steps one statement carries.
const MAX_BATCH: usize = 256;
/// Steps queued for the writers before callers wait to queue theirs.
const QUEUE: usize = 4096;

/// What a step changes besides appending its events.
#[derive(Clone, Debug)]
pub enum StepChange {
    /// Only the events.
    Events,
    /// A model turn: the run's progress (model turns taken, usage so far), and the turn's tool
    /// calls recorded as about to run (as [`StepChange::LedgerStart`]).
    Turn {
        iterations: i32,
        usage: Value,
        calls: Vec<LedgerStart>,
    },
    /// Parks the run (`awaiting_input`, with the pending `Interruption.ask` if that is why) and
    /// releases the lease; records its progress.
    Park {
        iterations: i32,
        usage: Value,
        interrupt: Option<Value>,
    },
    /// Ends the run and releases the lease; records its progress.
    Finish {
        iterations: i32,
        usage: Value,
        reason: StopReason,
        error: Option<Value>,
    },
    /// Records tool calls as about to run. A row already there (a resumed run) is left as it
    /// is, bar its epoch and start time while it is still `started`.
    LedgerStart(Vec<LedgerStart>),
}

/// A tool call's result, recorded in the ledger; its row is inserted (not idempotent) when it
/// has none.
#[derive(Clone, Debug)]
pub struct LedgerDone {
    pub tool_use_id: String,
    pub tool: String,
    pub input: Value,
    pub result: String,
    pub is_error: bool,
    /// What the call's post hooks decided, kept beside its pre hooks' decision (`"post"` of
    /// the ledger's `hooks`); `None` when no post hook applied.
    pub post_hooks: Option<Value>,
}

/// A tool call about to run.
#[derive(Clone, Debug)]
pub struct LedgerStart {
    pub tool_use_id: String,
    pub tool: String,
    pub input: Value,
    /// Safe to run again when its result was never recorded.
    pub idempotent: bool,
}

/// One fenced step of one run: its events (appended from `first_seq`), its change and the tool
/// results it records, written only under lease epoch `epoch`. One statement may touch a ledger
/// row once: a result's call is not also among the change's calls, nor twice in `done`.
#[derive(Clone, Debug)]
pub struct Step {
    pub run: RunId,
    pub epoch: i64,
    pub first_seq: i64,
    pub events: Vec<(String, Value)>,
    pub change: StepChange,
    pub done: Vec<LedgerDone>,
}

/// Every step of a batch as the statement's arrays.
#[derive(Default)]
struct Columns {
    id: Vec<Uuid>,
    epoch: Vec<i64>,
    /// 0 append only (the row is locked), 1 turn, 2 park, 3 finish (the row is updated).
    mode: Vec<i16>,
    iterations: Vec<Option<i32>>,
    usage: Vec<Option<Value>>,
    status: Vec<Option<String>>,
    stop_reason: Vec<Option<String>>,
    error: Vec<Option<Value>>,
    interrupt: Vec<Option<Value>>,
    ev_run: Vec<Uuid>,
    ev_epoch: Vec<i64>,
    ev_seq: Vec<i64>,
    ev_kind: Vec<String>,
    ev_data: Vec<Value>,
    start_run: Vec<Uuid>,
    start_epoch: Vec<i64>,
    start_id: Vec<String>,
    start_tool: Vec<String>,
    start_input: Vec<Value>,
    start_idempotent: Vec<bool>,
    done_run: Vec<Uuid>,
    done_epoch: Vec<i64>,
    done_id: Vec<String>,
    done_tool: Vec<String>,
    done_input: Vec<Value>,
    done_result: Vec<String>,
    done_error: Vec<bool>,
    done_hooks: Vec<Option<Value>>,
}

impl Columns {
    fn push(&mut self, step: &Step) {
        let run = step.run.0;
        self.id.push(run);
        self.epoch.push(step.epoch);
        let (mode, iterations, usage, status, stop_reason, error, interrupt) = match &step.change {
            StepChange::Events | StepChange::LedgerStart(_) => {
                (0, None, None, None, None, None, None)
            }
            StepChange::Turn {
                iterations, usage, ..
            } => (
                1,
                Some(*iterations),
                Some(usage.clone()),
                None,
                None,
                None,
                None,
            ),
            StepChange::Park {
                iterations,
                usage,
                interrupt,
            } => (
                2,
                Some(*iterations),
                Some(usage.clone()),
                Some("awaiting_input".to_owned()),
                None,
                None,
                interrupt.clone().map(weft_core::storable::json_owned),
            ),
            StepChange::Finish {
                iterations,
                usage,
                reason,
                error,
            } => (
                3,
                Some(*iterations),
                Some(usage.clone()),
                Some(reason.final_status().as_str().to_owned()),
                Some(reason.as_str().to_owned()),
                error.clone().map(weft_core::storable::json_owned),
                None,
            ),
        };
        self.mode.push(mode);
        self.iterations.push(iterations);
        self.usage.push(usage);
        self.status.push(status);
        self.stop_reason.push(stop_reason);
        self.error.push(error);
        self.interrupt.push(interrupt);
        for ((kind, data), seq) in step.events.iter().zip(step.first_seq..) {
            self.ev_run.push(run);
            self.ev_epoch.push(step.epoch);
            self.ev_seq.push(seq);
            self.ev_kind.push(kind.clone());
            self.ev_data.push(data.clone());
        }
        let calls = match &step.change {
            StepChange::Turn { calls, .. } | StepChange::LedgerStart(calls) => calls.as_slice(),
            _ => &[],
        };
        for (i, c) in calls.iter().enumerate() {
            // A model may repeat a call id; one statement may touch a ledger row only once.
            if calls[..i].iter().any(|d| d.tool_use_id == c.tool_use_id) {
                continue;
            }
            self.start_run.push(run);
            self.start_epoch.push(step.epoch);
            self.start_id.push(c.tool_use_id.clone());
            self.start_tool
                .push(weft_core::storable::text(&c.tool).into_owned());
            self.start_input
                .push(weft_core::storable::json_owned(c.input.clone()));
            self.start_idempotent.push(c.idempotent);
        }
        for d in &step.done {
            self.done_run.push(run);
            self.done_epoch.push(step.epoch);
            self.done_id.push(d.tool_use_id.clone());
            self.done_tool
                .push(weft_core::storable::text(&d.tool).into_owned());
            self.done_input
                .push(weft_core::storable::json_owned(d.input.clone()));
            self.done_result
                .push(weft_core::storable::text(&d.result).into_owned());
            self.done_error.push(d.is_error);
            self.done_hooks.push(
                d.post_hooks
                    .clone()
                    .map(|p| weft_core::storable::json_owned(serde_json::json!({"post": p}))),
            );
        }
    }
}

/// Which parts of the step statement a batch needs. A part with no rows in the batch is left
/// out of the statement, so Postgres neither sets it up nor runs it: most batches append events
/// and update or lock their runs, few record tool calls, and setting up the unused inserts (their
/// tables, indexes, conflict clauses) was a fifth of the statement's cost. Each shape is its own
/// prepared statement (at most 24 on the writer's connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepShape {
    /// Some step only appends: its run row is locked `FOR SHARE` (mode 0).
    pub lock: bool,
    /// Some step changes its run row (a turn, parking, finishing: modes 1 to 3).
    pub update: bool,
    /// Some step appends events.
    pub events: bool,
    /// Some step records tool calls as about to run.
    pub starts: bool,
    /// Some step records tool results.
    pub dones: bool,
}

/// One statement per combination of [`StepShape`]'s five flags.
const SHAPES: usize = 32;

impl StepShape {
    /// Every part.
    pub const ALL: Self = Self {
        lock: true,
        update: true,
        events: true,
        starts: true,
        dones: true,
    };

    /// Every shape a batch can have (it has at least one step, so it locks or updates).
    pub fn every() -> impl Iterator<Item = Self> {
        (0..SHAPES)
            .map(Self::from_bits)
            .filter(|s| s.lock || s.update)
    }

    fn from_bits(b: usize) -> Self {
        Self {
            lock: b & 1 != 0,
            update: b & 2 != 0,
            events: b & 4 != 0,
            starts: b & 8 != 0,
            dones: b & 16 != 0,
        }
    }

    fn bits(self) -> usize {
        usize::from(self.lock)
            | usize::from(self.update) << 1
            | usize::from(self.events) << 2
            | usize::from(self.starts) << 3
            | usize::from(self.dones) << 4
    }

    /// The statement for this shape (built once per process).
    pub fn sql(self) -> &'static str {
        static SQL: std::sync::LazyLock<[String; SHAPES]> =
            std::sync::LazyLock::new(|| std::array::from_fn(|b| StepShape::from_bits(b).build().0));
        // Five flags, so `bits` is below `SHAPES`.
        &SQL[self.bits()]
    }

    /// The types of the statement's parameters, `$1` onwards, in the order they are bound.
    pub fn param_types(self) -> Vec<&'static str> {
        self.build().1
    }

    /// The statement and its parameter types. Parameters are numbered in the order of the
    /// parts: the steps (9), then the events (5), the calls started (6), the results (8).
    fn build(self) -> (String, Vec<&'static str>) {
        let mut types: Vec<&'static str> = Vec::new();
        let mut p = |ty: &'static str| {
            types.push(ty);
            format!("${}::{ty}", types.len())
        };
        let mut sql = format!(
            "WITH req AS (
        SELECT * FROM UNNEST({}, {}, {}, {}, {}, {}, {}, {}, {})
            AS r(id, epoch, mode, iterations, usage, status, stop_reason, error, interrupt))",
            p("uuid[]"),
            p("bigint[]"),
            p("smallint[]"),
            p("int[]"),
            p("jsonb[]"),
            p("text[]"),
            p("text[]"),
            p("jsonb[]"),
            p("jsonb[]"),
        );
        // The fence: a batch of no step would lock nothing; it is never written.
        let lock = self.lock || !self.update;
        let mut fence = Vec::new();
        if lock {
            sql.push_str(
                ",
    locked AS (
        SELECT runs.id, runs.tenant_id, runs.lease_epoch FROM runs JOIN req ON runs.id = req.id
        WHERE runs.lease_epoch = req.epoch AND req.mode = 0
        FOR SHARE OF runs)",
            );
            fence.push("SELECT * FROM locked");
        }
        if self.update {
            sql.push_str(
                ",
    updated AS (
        UPDATE runs SET iterations = req.iterations, usage = req.usage,
            status = COALESCE(req.status, runs.status),
            stop_reason = CASE WHEN req.mode = 3 THEN req.stop_reason ELSE runs.stop_reason END,
            error = CASE WHEN req.mode = 3 THEN req.error ELSE runs.error END,
            pending_interrupt = CASE req.mode WHEN 2 THEN req.interrupt WHEN 3 THEN NULL
                                ELSE runs.pending_interrupt END,
            lease_owner = CASE WHEN req.mode >= 2 THEN NULL ELSE runs.lease_owner END,
            lease_expires_at = CASE WHEN req.mode >= 2 THEN NULL ELSE runs.lease_expires_at END,
            finished_at = CASE WHEN req.mode = 3 THEN now() ELSE runs.finished_at END,
            paused_by = CASE WHEN req.mode = 3 THEN NULL ELSE runs.paused_by END,
            lapses = 0, updated_at = now()
        FROM req WHERE runs.id = req.id AND runs.lease_epoch = req.epoch AND req.mode > 0
        RETURNING runs.id, runs.tenant_id, runs.lease_epoch)",
            );
            fence.push("SELECT * FROM updated");
        }
        sql.push_str(",\n    fence AS (");
        sql.push_str(&fence.join(" UNION ALL "));
        sql.push(')');
        if self.events {
            sql.push_str(&format!(
                ",
    appended AS (
        INSERT INTO run_events (run_id, seq, tenant_id, kind, data, epoch)
        SELECT e.run_id, e.seq, f.tenant_id, e.kind, e.data, f.lease_epoch
        FROM UNNEST({}, {}, {}, {}, {}) AS e(run_id, epoch, seq, kind, data)
        JOIN fence f ON f.id = e.run_id AND f.lease_epoch = e.epoch)",
                p("uuid[]"),
                p("bigint[]"),
                p("bigint[]"),
                p("text[]"),
                p("jsonb[]"),
            ));
        }
        if self.starts {
            sql.push_str(&format!(
                ",
    started AS (
        INSERT INTO tool_ledger (run_id, tool_use_id, tenant_id, tool, input, idempotent, status, epoch)
        SELECT c.run_id, c.id, f.tenant_id, c.tool, c.input, c.idempotent, 'started', f.lease_epoch
        FROM UNNEST({}, {}, {}, {}, {}, {}) AS c(run_id, epoch, id, tool, input, idempotent)
        JOIN fence f ON f.id = c.run_id AND f.lease_epoch = c.epoch
        ON CONFLICT (run_id, tool_use_id) DO UPDATE SET epoch = EXCLUDED.epoch, started_at = now()
        WHERE tool_ledger.status = 'started')",
                p("uuid[]"),
                p("bigint[]"),
                p("text[]"),
                p("text[]"),
                p("jsonb[]"),
                p("bool[]"),
            ));
        }
        if self.dones {
            sql.push_str(&format!(
                ",
    finished AS (
        INSERT INTO tool_ledger (run_id, tool_use_id, tenant_id, tool, input, idempotent, status,
                                 result, is_error, epoch, finished_at, hooks)
        SELECT c.run_id, c.id, f.tenant_id, c.tool, c.input, false, 'finished', c.result,
               c.is_error, f.lease_epoch, now(), c.hooks
        FROM UNNEST({}, {}, {}, {}, {}, {}, {}, {})
            AS c(run_id, epoch, id, tool, input, result, is_error, hooks)
        JOIN fence f ON f.id = c.run_id AND f.lease_epoch = c.epoch
        ON CONFLICT (run_id, tool_use_id) DO UPDATE SET status = 'finished',
            result = EXCLUDED.result, is_error = EXCLUDED.is_error,
            finished_at = EXCLUDED.finished_at, epoch = EXCLUDED.epoch,
            hooks = CASE WHEN EXCLUDED.hooks IS NULL THEN tool_ledger.hooks
                         ELSE COALESCE(tool_ledger.hooks, '{{}}'::jsonb) || EXCLUDED.hooks END)",
                p("uuid[]"),
                p("bigint[]"),
                p("text[]"),
                p("text[]"),
                p("jsonb[]"),
                p("text[]"),
                p("bool[]"),
                p("jsonb[]"),
            ));
        }
        sql.push_str("\n    SELECT id, lease_epoch FROM fence");
        (sql, types)
    }
}

/// A run whose fence held in [`write_steps_on`]'s statement (its final `SELECT ... FROM fence`).
#[derive(sqlx::FromRow)]
struct HeldFence {
    id: Uuid,
    lease_epoch: i64,
}

/// Writes the steps of many runs (at most one per run) in one statement and one commit, on
/// `ex` (the group writer's own connection: see [`WRITER_SESSION`]). Returns, in order, which
/// steps' fences held; `Err` when the database refused the whole statement (nothing was
/// written).
async fn write_steps_on<'e>(
    ex: impl sqlx::PgExecutor<'e>,
    steps: &mut [Step],
) -> Result<Vec<bool>, sqlx::Error> {
    let mut c = Columns::default();
    for s in steps.iter_mut() {
        storable(&mut s.events);
        c.push(s);
    }
    let shape = StepShape {
        lock: c.mode.contains(&0),
        update: c.mode.iter().any(|m| *m > 0),
        events: !c.ev_run.is_empty(),
        starts: !c.start_run.is_empty(),
        dones: !c.done_run.is_empty(),
    };
    let mut q = sqlx::query_as::<_, HeldFence>(shape.sql())
        .bind(c.id)
        .bind(c.epoch)
        .bind(c.mode)
        .bind(c.iterations)
        .bind(c.usage)
        .bind(c.status)
        .bind(c.stop_reason)
        .bind(c.error)
        .bind(c.interrupt);
    if shape.events {
        q = q
            .bind(c.ev_run)
            .bind(c.ev_epoch)
            .bind(c.ev_seq)
            .bind(c.ev_kind)
            .bind(c.ev_data);
    }
    if shape.starts {
        q = q
            .bind(c.start_run)
            .bind(c.start_epoch)
            .bind(c.start_id)
            .bind(c.start_tool)
            .bind(c.start_input)
            .bind(c.start_idempotent);
    }
    if shape.dones {
        q = q
            .bind(c.done_run)
            .bind(c.done_epoch)
            .bind(c.done_id)
            .bind(c.done_tool)
            .bind(c.done_input)
            .bind(c.done_result)
            .bind(c.done_error)
            .bind(c.done_hooks);
    }
    let rows = q.fetch_all(ex).await?;
    let held: std::collections::HashSet<(Uuid, i64)> =
        rows.into_iter().map(|r| (r.id, r.lease_epoch)).collect();
    Ok(steps
        .iter()
        .map(|s| held.contains(&(s.run.0, s.epoch)))
        .collect())
}

/// Writes one step in its own statement on `ex`; returns its events as stored (see
/// [`storable`]). `StaleLease` when its fence did not hold.
async fn write_step_on<'e>(ex: impl sqlx::PgExecutor<'e>, mut step: Step) -> Written {
    let run = step.run;
    let held = write_steps_on(ex, std::slice::from_mut(&mut step))
        .await
        .map_err(|e| stale_on_conflict(e, run))?;
    if held.first() == Some(&true) {
        Ok(step.events)
    } else {
        Err(RunStoreError::StaleLease(run))
    }
}

/// What a step's writer hears: its events as stored, or why nothing was.
type Written = Result<Vec<(String, Value)>, RunStoreError>;

/// A step on its way, and who waits for its commit.
type Pending = (Step, oneshot::Sender<Written>);

/// The group writer of one process: [`StepWriter::write`] queues a step and returns once it is
/// committed. Its writers each take everything queued (up to [`MAX_BATCH`] steps) and write it
/// as one statement; while they write, the next steps queue up. A lone step is a batch of one,
/// so nothing waits for company.
#[derive(Clone)]
pub struct StepWriter {
    tx: mpsc::Sender<Pending>,
}

impl StepWriter {
    /// Starts `writers` writer tasks on the current runtime, writing with `store`.
    pub fn spawn(store: RunStore, writers: usize) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..writers.max(1) {
            tokio::spawn(write_batches(store.clone(), rx.clone()));
        }
        Self { tx }
    }

    /// Writes `step`; returns once it is committed (or refused), with its events as stored
    /// (made storable: see `weft_core::storable`). `StaleLease` when the run's lease was lost:
    /// nothing of the step was written.
    pub async fn write(&self, step: Step) -> Written {
        let (done, answer) = oneshot::channel();
        if self.tx.send((step, done)).await.is_err() {
            return Err(gone());
        }
        answer.await.unwrap_or_else(|_| Err(gone()))
    }
}

/// The writers stopped (the runtime is shutting down): like a closed pool, worth a retry
/// elsewhere.
fn gone() -> RunStoreError {
    RunStoreError::Store(StoreError::Db(sqlx::Error::PoolClosed))
}

/// A connection of the pool made the group writer's own: see [`WRITER_SESSION`]. It is closed,
/// not given back, when dropped, so no other user of the pool gets that setting.
async fn writer_connection(
    store: &RunStore,
) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, sqlx::Error> {
    let mut c = store.pool().acquire().await?;
    c.close_on_drop();
    sqlx::query(WRITER_SESSION).execute(&mut *c).await?;
    Ok(c)
}

/// The writer's session setting. The step statements (one per [`StepShape`]) run as prepared
/// statements, and Postgres plans each once for every later execution (a generic plan) — with
/// the sizes `runs` had then. Planned while `runs` was nearly empty (a new deployment, every test
/// database), the update of the runs that end a turn, park or finish joined them by reading the
/// **whole table**, and went on doing so on every step as the table grew (until an `ANALYZE`
/// re-planned it): most of Postgres's time in the runs benchmark. Without sequential scans on
/// this connection, each run is found by its primary key whatever the statistics say; nothing
/// the statements do is a scan of a whole table.
pub const WRITER_SESSION: &str = "SET enable_seqscan = off";

async fn write_batches(store: RunStore, rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Pending>>>) {
    // The writer keeps a connection of its own: the pool tests a connection (a round trip) each
    // time one is given back. It is dropped (closed) after an error, in case that broke it.
    let mut conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>> = None;
    loop {
        let mut batch: Vec<Pending> = Vec::new();
        {
            let mut rx = rx.lock().await;
            match rx.recv().await {
                Some(p) => batch.push(p),
                None => return,
            }
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
        }
        // One order for every batch, so two batches never lock the same rows in opposite
        // orders.
        batch.sort_by_key(|(s, _)| s.run.0);
        metrics::histogram!("weft_run_step_batch_size").record(batch.len() as f64);
        let (mut steps, answers): (Vec<Step>, Vec<_>) = batch.into_iter().unzip();
        let written = match conn.as_mut() {
            Some(c) => write_steps_on(&mut **c, &mut steps).await,
            None => match writer_connection(&store).await {
                Ok(c) => write_steps_on(&mut **conn.insert(c), &mut steps).await,
                Err(e) => Err(e),
            },
        };
        // Refused for one step's content, the connection is fine; anything else may have
        // broken it.
        if matches!(&written, Err(e) if !refused_data(e)) {
            conn = None;
        }
        match written {
            Ok(held) => {
                for ((s, answer), held) in steps.into_iter().zip(answers).zip(held) {
                    let r = if held {
                        Ok(s.events)
                    } else {
                        Err(RunStoreError::StaleLease(s.run))
                    };
                    let _ = answer.send(r);
                }
            }
            // A batch of one has its answer; a bigger one is written again step by step, so
            // only a step that cannot be stored fails.
            Err(e) if steps.len() == 1 => {
                let run = steps[0].run;
                if let Some(answer) = answers.into_iter().next() {
                    let _ = answer.send(Err(stale_on_conflict(e, run)));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, steps = steps.len(), "a batch of steps was refused; writing them one by one");
                for (s, answer) in steps.into_iter().zip(answers) {
                    let written = match conn.as_mut() {
                        Some(c) => write_step_on(&mut **c, s).await,
                        None => match writer_connection(&store).await {
                            Ok(c) => write_step_on(&mut **conn.insert(c), s).await,
                            Err(e) => Err(RunStoreError::Store(StoreError::Db(e))),
                        },
                    };
                    // Refused for its content, the connection is fine; anything else may
                    // have broken it.
                    if matches!(&written, Err(e @ RunStoreError::Store(_)) if !e.is_permanent()) {
                        conn = None;
                    }
                    let _ = answer.send(written);
                }
            }
        }
    }
}
