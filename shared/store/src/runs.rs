//! Runs, their transcripts (`run_events`), the tool ledger and pending input.
//!
//! Fencing: an executor works on a run only under a lease whose epoch it got from
//! [`RunStore::acquire_lease`]. Every executor write names that epoch. A step is one statement
//! ([`RunStore::step`]) whose first part locks the run row `FOR SHARE` — or updates it, when
//! the step records progress, parks or finishes — where `lease_epoch` still matches, and whose
//! inserts read from that part, so they happen only under the lease. The few writes of several
//! statements (a sub-run's creation, taking input, handing the run back) run in a [`Fenced`]
//! transaction that takes the same lock first. A lease taken by another executor bumps the
//! epoch (under a row lock that waits for those statements and transactions), so a stale
//! executor's writes fail with [`RunStoreError::StaleLease`] and change nothing.

use std::sync::Arc;

use serde_json::Value;
use sqlx::{PgConnection, PgPool, Postgres, QueryBuilder, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::run::{ErrorEvent, PauseScope, RunEvent, RunFinished, RunStatus, StopReason};
use weft_core::{RunId, TenantId};

use crate::StoreError;
use crate::kept::Kept;

#[derive(Debug, thiserror::Error)]
pub enum RunStoreError {
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The lease was lost: another executor took the run, or it ended.
    #[error("the lease on run {0} was lost")]
    StaleLease(RunId),
}

impl RunStoreError {
    /// Whether retrying can never help: the database refused the data itself (SQLSTATE class
    /// 22, data exception — e.g. an untranslatable character; 23, integrity constraint; 54,
    /// program limit exceeded — e.g. a value too large). Lost connections, timeouts and lock
    /// conflicts are not permanent.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Store(StoreError::Db(e)) => refused_data(e),
            _ => false,
        }
    }
}

/// Whether the database refused the data itself (see [`RunStoreError::is_permanent`]): the
/// connection that sent it is fine.
pub(crate) fn refused_data(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| matches!(c.get(..2), Some("22" | "23" | "54"))),
        _ => false,
    }
}

impl From<sqlx::Error> for RunStoreError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(StoreError::Db(e))
    }
}

/// A run row.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub tenant: TenantId,
    pub subject: String,
    pub agent_name: String,
    pub agent_hash: String,
    pub parent_run_id: Option<RunId>,
    pub root_run_id: RunId,
    pub depth: i32,
    pub status: RunStatus,
    pub stop_reason: Option<StopReason>,
    pub interactive: bool,
    pub spec: Value,
    pub idempotency_key: Option<String>,
    pub lease_epoch: i64,
    pub lease_owner: Option<String>,
    pub pending_interrupt: Option<Value>,
    pub usage: Value,
    pub iterations: i32,
    pub error: Option<Value>,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    /// Who asked the run to pause, while it is asked (before and while it is `paused`).
    pub paused_by: Option<PauseScope>,
}

macro_rules! run_columns {
    () => {
        "id, tenant_id, subject, agent_name, agent_hash, parent_run_id, root_run_id, depth, status, stop_reason, interactive, spec, idempotency_key, lease_epoch, lease_owner, pending_interrupt, usage, iterations, error, created_at, started_at, finished_at, paused_by"
    };
}
const RUN_COLUMNS: &str = run_columns!();

/// A `runs` row as selected by [`run_columns!`]; [`RunRecord`] is it with typed ids and states.
#[derive(sqlx::FromRow)]
struct RunRow {
    id: Uuid,
    tenant_id: String,
    subject: String,
    agent_name: String,
    agent_hash: String,
    parent_run_id: Option<Uuid>,
    root_run_id: Uuid,
    depth: i32,
    status: String,
    stop_reason: Option<String>,
    interactive: bool,
    spec: Value,
    idempotency_key: Option<String>,
    lease_epoch: i64,
    lease_owner: Option<String>,
    pending_interrupt: Option<Value>,
    usage: Value,
    iterations: i32,
    error: Option<Value>,
    created_at: OffsetDateTime,
    started_at: Option<OffsetDateTime>,
    finished_at: Option<OffsetDateTime>,
    paused_by: Option<String>,
}

impl TryFrom<RunRow> for RunRecord {
    type Error = RunStoreError;

    fn try_from(r: RunRow) -> Result<Self, RunStoreError> {
        Ok(RunRecord {
            id: RunId(r.id),
            tenant: TenantId::parse(&r.tenant_id).map_err(|_| decode("tenant_id"))?,
            subject: r.subject,
            agent_name: r.agent_name,
            agent_hash: r.agent_hash,
            parent_run_id: r.parent_run_id.map(RunId),
            root_run_id: RunId(r.root_run_id),
            depth: r.depth,
            status: RunStatus::parse(&r.status).ok_or_else(|| decode("status"))?,
            stop_reason: match r.stop_reason {
                Some(s) => Some(StopReason::parse(&s).ok_or_else(|| decode("stop_reason"))?),
                None => None,
            },
            interactive: r.interactive,
            spec: r.spec,
            idempotency_key: r.idempotency_key,
            lease_epoch: r.lease_epoch,
            lease_owner: r.lease_owner,
            pending_interrupt: r.pending_interrupt,
            usage: r.usage,
            iterations: r.iterations,
            error: r.error,
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            paused_by: match r.paused_by {
                Some(s) => Some(PauseScope::parse(&s).ok_or_else(|| decode("paused_by"))?),
                None => None,
            },
        })
    }
}

fn decode(column: &str) -> RunStoreError {
    RunStoreError::Store(StoreError::Db(sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: "unexpected value".into(),
    }))
}

/// A row of [`RunStore::transcript`]: an event, or (at seq 0) the ledger and whether input is
/// waiting.
#[derive(sqlx::FromRow)]
struct TranscriptRow {
    #[sqlx(flatten)]
    event: EventRecord,
    ledger: Option<Value>,
    waiting: Option<bool>,
}

/// What [`RunStore::cancel_unheld_event`] reads back from the run it ended.
#[derive(sqlx::FromRow)]
struct Ended {
    tenant_id: String,
    usage: Value,
}

/// What [`RunStore::end_abandoned`] reads back from the run it ended.
#[derive(sqlx::FromRow)]
struct Abandoned {
    tenant_id: String,
    usage: Value,
    iterations: i32,
}

/// A run claimed by [`RunStore::sweep`], before its ids and status are typed ([`Swept`]).
#[derive(sqlx::FromRow)]
struct SweptRow {
    id: Uuid,
    tenant_id: String,
    status: String,
    lapses: i32,
}

/// Why [`RunStore::acquire_lease`] got no lease: the run's status and the lease's time left.
#[derive(sqlx::FromRow)]
struct LeaseState {
    status: String,
    remaining: Option<i64>,
}

/// What to insert for a new run. Its first events (`run_started`, the input) go in with it.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: RunId,
    pub tenant: TenantId,
    pub subject: String,
    pub agent_name: String,
    pub agent_hash: String,
    pub parent_run_id: Option<RunId>,
    pub root_run_id: RunId,
    pub depth: i32,
    pub interactive: bool,
    pub spec: Value,
    pub idempotency_key: Option<String>,
    /// Events written with the row, as `(kind, data)`, numbered from seq 1.
    pub initial_events: Vec<(String, Value)>,
    /// Inserted already leased (`running`, epoch 1) to an executor of this process, which
    /// works on it without a dispatch message (the in-process fast path, docs/runs.md); `None`
    /// inserts it `queued` for a dispatch.
    pub lease: Option<NewLease>,
}

/// The lease a run is inserted with ([`NewRun::lease`]).
#[derive(Clone, Debug)]
pub struct NewLease {
    /// The executor's lease-owner id.
    pub owner: String,
    /// How long the lease lasts unless renewed.
    pub ttl_ms: i64,
}

/// One persisted event.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct EventRecord {
    pub seq: i64,
    pub kind: String,
    pub data: Value,
    pub created_at: OffsetDateTime,
}

/// A tool ledger row.
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerEntry {
    pub tool_use_id: String,
    pub tool: String,
    pub input: Value,
    pub idempotent: bool,
    pub finished: bool,
    pub result: Option<String>,
    pub is_error: Option<bool>,
    pub state: Option<Value>,
    /// What the call's tool-use hooks decided (`{"pre": …, "post": …}`), when any applied.
    pub hooks: Option<Value>,
}

/// What a pending input of a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Text from the caller (`POST /v1/runs/{id}/input`).
    Text,
    /// A request to compact the run's context (`POST /v1/runs/{id}/compact`).
    Compact,
}

impl InputKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Compact => "compact",
        }
    }
}

/// A run as an executor resumes it ([`RunStore::transcript`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transcript {
    /// Every event, in seq order.
    pub events: Vec<EventRecord>,
    pub ledger: Vec<LedgerEntry>,
    /// Input is waiting to be taken.
    pub input_waiting: bool,
}

/// A tool ledger row from its JSON form in [`RunStore::transcript`].
fn ledger_entry(v: &Value) -> Option<LedgerEntry> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(LedgerEntry {
        tool_use_id: text("tool_use_id")?,
        tool: text("tool")?,
        input: v.get("input").cloned().unwrap_or(Value::Null),
        idempotent: v.get("idempotent").and_then(Value::as_bool)?,
        finished: v.get("status").and_then(Value::as_str)? == "finished",
        result: text("result"),
        is_error: v.get("is_error").and_then(Value::as_bool),
        state: v.get("state").filter(|s| !s.is_null()).cloned(),
        hooks: v.get("hooks").filter(|s| !s.is_null()).cloned(),
    })
}

/// A held lease: the run and the epoch every write must carry.
#[derive(Clone, Debug)]
pub struct Lease {
    pub run: RunRecord,
    pub epoch: i64,
}

/// Why a lease could not be taken.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseRefused {
    /// No such run.
    Missing,
    /// The run is terminal or parked: nothing to do.
    NotRunnable(RunStatus),
    /// Another executor holds a live lease for this long yet.
    Held { remaining_ms: i64 },
}

/// A run the sweeper claimed ([`RunStore::sweep`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Swept {
    pub id: RunId,
    pub tenant: TenantId,
    /// `queued` (its dispatch was lost) or `running` (its lease lapsed and nobody took it over).
    pub status: RunStatus,
    /// Leases taken over from an executor whose lease had lapsed.
    pub lapses: i32,
}

/// Filters of [`RunStore::list`].
#[derive(Clone, Debug, Default)]
pub struct RunFilter {
    /// Only runs created by this subject (None: the whole tenant).
    pub subject: Option<String>,
    pub status: Option<RunStatus>,
    pub agent: Option<String>,
    /// Runs older than this id (ids are time-ordered).
    pub before: Option<RunId>,
    /// Runs created at or after this time.
    pub since: Option<time::OffsetDateTime>,
    pub limit: i64,
}

/// The run `subject` of `tenant` created with idempotency key `key`.
async fn run_by_key(
    conn: &mut PgConnection,
    tenant: &TenantId,
    subject: &str,
    key: &str,
) -> Result<Option<RunRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE tenant_id = $1 AND subject = $2 AND idempotency_key = $3"
    ))
    .bind(tenant.as_str())
    .bind(subject)
    .bind(key)
    .fetch_optional(conn)
    .await
}

/// Runs, events, ledger and inputs in Postgres.
#[derive(Clone, Debug)]
pub struct RunStore {
    pub(crate) pool: PgPool,
    /// Connections kept for the single statements made for every run (insert, read, page of
    /// events, live sub-runs, the idempotency lookup), which would otherwise each pay the
    /// pool's test on release.
    kept: Arc<Kept>,
}

/// At most this many connections kept by a [`RunStore`] beside its pool ([`Kept`]).
const KEPT_CONNECTIONS: usize = 4;

impl RunStore {
    pub fn new(pool: PgPool) -> Self {
        Self {
            kept: Arc::new(Kept::new(pool.clone(), KEPT_CONNECTIONS)),
            pool,
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Inserts a run with its first events. With an idempotency key already used by the same
    /// subject, returns the existing run and `false`.
    pub async fn create(&self, new: &NewRun) -> Result<(RunRecord, bool), RunStoreError> {
        self.kept
            .run(async |conn| {
                if let Some(run) = insert_run(&mut *conn, new).await? {
                    return Ok((run, true));
                }
                let key = new.idempotency_key.as_deref().unwrap_or_default();
                let r = run_by_key(conn, &new.tenant, &new.subject, key)
                    .await?
                    .ok_or(sqlx::Error::RowNotFound)?;
                Ok((r.try_into()?, false))
            })
            .await
    }

    /// Deletes a run that was inserted and never started, with its first events: the launcher's
    /// undo of a run whose admission was refused beside its insert (nobody was told of it, no
    /// executor holds it). The only place runs are deleted (the migration that dropped the
    /// transcript's foreign keys says runs never are: that holds for every run an executor could
    /// write to). A run leased again since, or already ended, is kept.
    pub async fn delete_unstarted(
        &self,
        tenant: &TenantId,
        id: RunId,
    ) -> Result<(), RunStoreError> {
        sqlx::query(
            "WITH gone AS (DELETE FROM runs WHERE id = $1 AND tenant_id = $2 AND lease_epoch <= 1
                               AND status IN ('queued', 'running') RETURNING id)
             DELETE FROM run_events WHERE run_id IN (SELECT id FROM gone)",
        )
        .bind(id.0)
        .bind(tenant.as_str())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A run of `tenant`; another tenant's run is `None`.
    pub async fn get(
        &self,
        tenant: &TenantId,
        id: RunId,
    ) -> Result<Option<RunRecord>, RunStoreError> {
        let r: Option<RunRow> = self
            .kept
            .run(async |conn| {
                sqlx::query_as(concat!(
                    "SELECT ",
                    run_columns!(),
                    " FROM runs WHERE id = $1 AND tenant_id = $2"
                ))
                .bind(id.0)
                .bind(tenant.as_str())
                .fetch_optional(conn)
                .await
            })
            .await?;
        r.map(RunRecord::try_from).transpose()
    }

    /// A run by id alone: for the executor, which learns the tenant from the row.
    pub async fn get_any(&self, id: RunId) -> Result<Option<RunRecord>, RunStoreError> {
        let r: Option<RunRow> = self
            .kept
            .run(async |conn| {
                sqlx::query_as(concat!(
                    "SELECT ",
                    run_columns!(),
                    " FROM runs WHERE id = $1"
                ))
                .bind(id.0)
                .fetch_optional(conn)
                .await
            })
            .await?;
        r.map(RunRecord::try_from).transpose()
    }

    /// A page of the tenant's runs, newest first.
    pub async fn list(
        &self,
        tenant: &TenantId,
        f: &RunFilter,
    ) -> Result<Vec<RunRecord>, RunStoreError> {
        let mut q = QueryBuilder::<Postgres>::new(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE tenant_id = "
        ));
        q.push_bind(tenant.as_str());
        if let Some(s) = &f.subject {
            q.push(" AND subject = ").push_bind(s);
        }
        if let Some(s) = f.status {
            q.push(" AND status = ").push_bind(s.as_str());
        }
        if let Some(a) = &f.agent {
            q.push(" AND agent_name = ").push_bind(a);
        }
        if let Some(b) = f.before {
            q.push(" AND id < ").push_bind(b.0);
        }
        if let Some(t) = f.since {
            q.push(" AND created_at >= ").push_bind(t);
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind(f.limit);
        let rows: Vec<RunRow> = q.build_query_as().fetch_all(&self.pool).await?;
        rows.into_iter().map(RunRecord::try_from).collect()
    }

    /// Transcript events with `seq >= from_seq`, at most `limit`.
    pub async fn events(
        &self,
        id: RunId,
        from_seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRecord>, RunStoreError> {
        Ok(self
            .kept
            .run(async |conn| {
                sqlx::query_as(
                "SELECT seq, kind, data, created_at FROM run_events WHERE run_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
            )
            .bind(id.0)
            .bind(from_seq)
            .bind(limit)
                .fetch_all(conn)
                .await
            })
            .await?)
    }

    /// Non-terminal descendants of a run, for cancel cascades.
    pub async fn live_descendants(
        &self,
        tenant: &TenantId,
        id: RunId,
    ) -> Result<Vec<RunId>, RunStoreError> {
        let ids: Vec<Uuid> = self
            .kept
            .run(async |conn| {
                sqlx::query_scalar(
                    "WITH RECURSIVE d(id) AS (
                    SELECT id FROM runs WHERE parent_run_id = $1 AND tenant_id = $2
                    UNION ALL
                    SELECT r.id FROM runs r JOIN d ON r.parent_run_id = d.id
                 )
                 SELECT runs.id FROM runs JOIN d ON runs.id = d.id
                 WHERE runs.status NOT IN ('succeeded', 'failed', 'cancelled')",
                )
                .bind(id.0)
                .bind(tenant.as_str())
                .fetch_all(conn)
                .await
            })
            .await?;
        Ok(ids.into_iter().map(RunId).collect())
    }

    /// Queues input for a run. A parked run becomes `queued` again: returns true when the
    /// caller must dispatch it. A terminal run refuses (`Err(status)`).
    pub async fn add_input(
        &self,
        tenant: &TenantId,
        id: RunId,
        text: &str,
    ) -> Result<Result<bool, RunStatus>, RunStoreError> {
        self.add_pending(tenant, id, InputKind::Text, text).await
    }

    /// Queues a pending input of `kind` (text, or a request to compact the run's context), as
    /// [`RunStore::add_input`].
    pub async fn add_pending(
        &self,
        tenant: &TenantId,
        id: RunId,
        kind: InputKind,
        text: &str,
    ) -> Result<Result<bool, RunStatus>, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let Some(status) = lock_status(&mut tx, tenant, id).await? else {
            return Err(RunStoreError::Store(StoreError::Db(
                sqlx::Error::RowNotFound,
            )));
        };
        if status.is_terminal() {
            return Ok(Err(status));
        }
        sqlx::query(
            "INSERT INTO run_inputs (id, run_id, tenant_id, text, kind) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(Uuid::now_v7())
        .bind(id.0)
        .bind(tenant.as_str())
        .bind(text)
        .bind(kind.as_str())
        .execute(&mut *tx)
        .await?;
        let wake = status == RunStatus::AwaitingInput;
        if wake {
            sqlx::query("UPDATE runs SET status = 'queued', updated_at = now() WHERE id = $1")
                .bind(id.0)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Ok(wake))
    }

    /// Answers a pending `Interruption.ask`: records the answer as the tool's result and makes
    /// the run runnable. `Ok(false)` when `interrupt_id` is not the pending interruption.
    pub async fn answer_interrupt(
        &self,
        tenant: &TenantId,
        id: RunId,
        interrupt_id: &str,
        answer: &str,
    ) -> Result<bool, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let pending: Option<Option<Value>> = sqlx::query_scalar(
            "SELECT pending_interrupt FROM runs WHERE id = $1 AND tenant_id = $2 AND status = 'awaiting_input' FOR UPDATE",
        )
        .bind(id.0)
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(pending) = pending.flatten() else {
            return Ok(false);
        };
        if pending.get("id").and_then(Value::as_str) != Some(interrupt_id) {
            return Ok(false);
        }
        let tool_use_id = pending
            .get("tool_use_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let result = serde_json::json!({ "answer": answer }).to_string();
        sqlx::query(
            "UPDATE tool_ledger SET status = 'finished', result = $3, is_error = false, finished_at = now()
             WHERE run_id = $1 AND tool_use_id = $2 AND status = 'started'",
        )
        .bind(id.0)
        .bind(&tool_use_id)
        .bind(result)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE runs SET status = 'queued', pending_interrupt = NULL, updated_at = now() WHERE id = $1",
        )
        .bind(id.0)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Cancels a run nobody holds (queued or parked, or whose holder's lease lapsed): bumps the
    /// epoch (fencing any late executor), ends it `cancelled` and appends `run_finished`.
    /// Returns false when a live lease holds it (the holder must cancel it) or it already ended.
    pub async fn cancel_unheld(
        &self,
        id: RunId,
        reason: Option<&str>,
    ) -> Result<bool, RunStoreError> {
        Ok(self.cancel_unheld_event(id, reason).await?.is_some())
    }

    /// [`RunStore::cancel_unheld`], answering the `run_finished` it appended (its seq and
    /// data) so that the caller can publish it to live watchers; `None` when nothing was
    /// cancelled.
    pub async fn cancel_unheld_event(
        &self,
        id: RunId,
        reason: Option<&str>,
    ) -> Result<Option<(i64, Value)>, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let r: Option<Ended> = sqlx::query_as(
            "UPDATE runs SET status = 'cancelled', stop_reason = 'cancelled', lease_epoch = lease_epoch + 1,
                 lease_owner = NULL, lease_expires_at = NULL, pending_interrupt = NULL, paused_by = NULL,
                 finished_at = now(), updated_at = now()
             WHERE id = $1 AND status IN ('queued', 'running', 'awaiting_input', 'paused')
               AND (lease_owner IS NULL OR lease_expires_at < now())
             RETURNING tenant_id, usage",
        )
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(r) = r else {
            return Ok(None);
        };
        let seq = next_seq(&mut tx, id).await?;
        let data = serde_json::json!({"status": "cancelled", "stop_reason": "cancelled", "reason": reason, "usage": r.usage});
        insert_events(
            &mut tx,
            id,
            &r.tenant_id,
            0,
            seq,
            &mut [("run_finished".to_owned(), data.clone())],
        )
        .await?;
        tx.commit().await?;
        Ok(Some((seq, data)))
    }

    /// Claims up to `limit` runs that nothing is working on, for the sweeper: `queued` for longer
    /// than `after_ms` (the dispatch was lost, or JetStream gave up on it), or `running` under a
    /// lease that lapsed more than `after_ms` ago with no executor taking it over. Each claim
    /// counts in `sweeps` and stamps `swept_at`; a run is claimed again only after
    /// `after_ms * 2^sweeps` (capped at 64×), and by one replica at a time (`SKIP LOCKED`).
    pub async fn sweep(&self, after_ms: i64, limit: i64) -> Result<Vec<Swept>, RunStoreError> {
        let rows: Vec<SweptRow> = sqlx::query_as(
            "WITH due AS (
                 SELECT id FROM runs
                 WHERE status IN ('queued', 'running')
                   AND CASE status WHEN 'queued' THEN updated_at ELSE lease_expires_at END
                       < now() - $1 * interval '1 millisecond'
                   AND (swept_at IS NULL
                        OR swept_at < now() - $1 * power(2, least(sweeps, 6)) * interval '1 millisecond')
                 ORDER BY id
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)
             UPDATE runs r SET sweeps = r.sweeps + 1, swept_at = now()
             FROM due WHERE r.id = due.id
             RETURNING r.id, r.tenant_id, r.status, r.lapses",
        )
        .bind(after_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(Swept {
                    id: RunId(r.id),
                    tenant: TenantId::parse(&r.tenant_id).map_err(|_| decode("tenant_id"))?,
                    status: RunStatus::parse(&r.status).ok_or_else(|| decode("status"))?,
                    lapses: r.lapses,
                })
            })
            .collect()
    }

    /// Ends a run that lost its executor `max_lapses` times (the lease lapsed, was taken over, and
    /// lapsed again): `failed` with stop reason `error`, under a bumped epoch (fencing any late
    /// executor), with an `error` and a `run_finished` event. Returns the events written, or
    /// `None` when the run is not in that state any more (an executor took it meanwhile).
    pub async fn end_abandoned(
        &self,
        id: RunId,
        max_lapses: i32,
        code: &str,
        message: &str,
    ) -> Result<Option<Vec<EventRecord>>, RunStoreError> {
        let error = serde_json::json!({"code": code, "message": message});
        let mut tx = crate::begin(&self.pool).await?;
        let r: Option<Abandoned> = sqlx::query_as(
            "UPDATE runs SET status = 'failed', stop_reason = 'error', error = $3,
                 lease_epoch = lease_epoch + 1, lease_owner = NULL, lease_expires_at = NULL,
                 pending_interrupt = NULL, finished_at = now(), updated_at = now()
             WHERE id = $1 AND status = 'running' AND lease_expires_at < now() AND lapses + 1 >= $2
             RETURNING tenant_id, usage, iterations",
        )
        .bind(id.0)
        .bind(max_lapses)
        .bind(&error)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(r) = r else {
            return Ok(None);
        };
        let seq = next_seq(&mut tx, id).await?;
        let mut events = vec![
            RunEvent::Error(ErrorEvent {
                code: code.to_owned(),
                message: message.to_owned(),
            })
            .into_parts(),
            RunEvent::RunFinished(RunFinished {
                status: RunStatus::Failed,
                stop_reason: StopReason::Error,
                usage: r.usage,
                iterations: u32::try_from(r.iterations).ok(),
                executor: None,
                reason: Some(message.to_owned()),
            })
            .into_parts(),
        ];
        insert_events(&mut tx, id, &r.tenant_id, 0, seq, &mut events).await?;
        tx.commit().await?;
        let now = OffsetDateTime::now_utc();
        Ok(Some(
            (seq..)
                .zip(events)
                .map(|(seq, (kind, data))| EventRecord {
                    seq,
                    kind,
                    data,
                    created_at: now,
                })
                .collect(),
        ))
    }

    /// Takes the lease on a runnable run (queued, or running under a lapsed lease).
    pub async fn acquire_lease(
        &self,
        id: RunId,
        owner: &str,
        ttl_ms: i64,
    ) -> Result<Result<Lease, LeaseRefused>, RunStoreError> {
        let r: Option<RunRow> = sqlx::query_as(concat!(
            "UPDATE runs SET lease_epoch = lease_epoch + 1, lease_owner = $2,
                 lease_expires_at = now() + $3 * interval '1 millisecond', status = 'running',
                 lapses = lapses + CASE WHEN lease_owner IS NOT NULL AND lease_owner <> $2 THEN 1 ELSE 0 END,
                 sweeps = 0, started_at = COALESCE(started_at, now()), updated_at = now(),
                 paused_by = COALESCE(paused_by, (SELECT CASE WHEN p.scope = '*' THEN 'fleet' ELSE 'tenant' END
                                                  FROM pauses p WHERE p.scope IN (runs.tenant_id, '*')
                                                  ORDER BY p.scope DESC LIMIT 1))
             WHERE id = $1 AND status IN ('queued', 'running')
               AND (lease_owner IS NULL OR lease_expires_at < now() OR lease_owner = $2)
             RETURNING ",
            run_columns!(),
            ""
        ))
        .bind(id.0)
        .bind(owner)
        .bind(ttl_ms)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = r {
            let run = RunRecord::try_from(r)?;
            return Ok(Ok(Lease {
                epoch: run.lease_epoch,
                run,
            }));
        }
        let r: Option<LeaseState> = sqlx::query_as(
            "SELECT status, (EXTRACT(EPOCH FROM (lease_expires_at - now())) * 1000)::bigint AS remaining
             FROM runs WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await?;
        let Some(r) = r else {
            return Ok(Err(LeaseRefused::Missing));
        };
        let status = RunStatus::parse(&r.status).ok_or_else(|| decode("status"))?;
        if matches!(status, RunStatus::Queued | RunStatus::Running) {
            return Ok(Err(LeaseRefused::Held {
                remaining_ms: r.remaining.unwrap_or(0).max(0),
            }));
        }
        Ok(Err(LeaseRefused::NotRunnable(status)))
    }

    /// Extends a held lease; `StaleLease` when it was lost.
    pub async fn renew_lease(
        &self,
        id: RunId,
        epoch: i64,
        ttl_ms: i64,
    ) -> Result<(), RunStoreError> {
        let n = sqlx::query(
            "UPDATE runs SET lease_expires_at = now() + $3 * interval '1 millisecond'
             WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
        )
        .bind(id.0)
        .bind(epoch)
        .bind(ttl_ms)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 1 {
            Ok(())
        } else {
            Err(RunStoreError::StaleLease(id))
        }
    }

    /// What an executor taking a run reads, in one query: the whole transcript in seq order,
    /// the tool ledger, and whether input is waiting. (It is read after the lease is taken, not
    /// in the lease's statement: a statement that waited for a stale holder's last write to
    /// commit would still read the transcript from before it.)
    pub async fn transcript(&self, id: RunId) -> Result<Transcript, RunStoreError> {
        let rows: Vec<TranscriptRow> = sqlx::query_as(
            "SELECT e.seq, e.kind, e.data, e.created_at, NULL::jsonb AS ledger, NULL::boolean AS waiting
             FROM run_events e WHERE e.run_id = $1
             UNION ALL
             SELECT 0, '', 'null'::jsonb, now(),
                 (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                      'tool_use_id', tool_use_id, 'tool', tool, 'input', input,
                      'idempotent', idempotent, 'status', status, 'result', result,
                      'is_error', is_error, 'state', state, 'hooks', hooks)), '[]'::jsonb)
                  FROM tool_ledger WHERE run_id = $1),
                 EXISTS (SELECT 1 FROM run_inputs WHERE run_id = $1 AND NOT consumed)
             ORDER BY 1",
        )
        .bind(id.0)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Transcript::default();
        for r in rows {
            if r.event.seq == 0 {
                out.input_waiting = r.waiting.unwrap_or(false);
                for l in r
                    .ledger
                    .as_ref()
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    out.ledger
                        .push(ledger_entry(l).ok_or_else(|| decode("ledger"))?);
                }
                continue;
            }
            out.events.push(r.event);
        }
        Ok(out)
    }

    /// Starts a fenced write transaction.
    pub async fn fenced(&self, lease: &Lease) -> Result<Fenced, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let ok =
            sqlx::query("SELECT 1 AS one FROM runs WHERE id = $1 AND lease_epoch = $2 FOR SHARE")
                .bind(lease.run.id.0)
                .bind(lease.epoch)
                .fetch_optional(&mut *tx)
                .await?;
        if ok.is_none() {
            return Err(RunStoreError::StaleLease(lease.run.id));
        }
        Ok(Fenced {
            tx,
            run: lease.run.id,
            tenant: lease.run.tenant.as_str().to_owned(),
            epoch: lease.epoch,
        })
    }

    /// The run a subject created with an idempotency key.
    pub async fn find_by_key(
        &self,
        tenant: &TenantId,
        subject: &str,
        key: &str,
    ) -> Result<Option<RunRecord>, RunStoreError> {
        let r = self
            .kept
            .run(async |conn| run_by_key(conn, tenant, subject, key).await)
            .await?;
        r.map(RunRecord::try_from).transpose()
    }

    /// Parks a new interactive run that has no input yet (no executor needed).
    pub async fn park_new(&self, id: RunId) -> Result<(), RunStoreError> {
        sqlx::query(
            "UPDATE runs SET status = 'awaiting_input', updated_at = now() WHERE id = $1 AND status = 'queued'",
        )
        .bind(id.0)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Whether input is waiting for the run.
    pub async fn has_inputs(&self, id: RunId) -> Result<bool, RunStoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM run_inputs WHERE run_id = $1 AND NOT consumed) AS waiting",
        )
        .bind(id.0)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Makes a parked run runnable again (input raced its parking); true when it was parked.
    pub async fn wake_if_parked(&self, id: RunId) -> Result<bool, RunStoreError> {
        let n = sqlx::query(
            "UPDATE runs SET status = 'queued', updated_at = now()
             WHERE id = $1 AND status = 'awaiting_input' AND pending_interrupt IS NULL",
        )
        .bind(id.0)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// The text of the run's last assistant message (a finished sub-run's answer).
    pub async fn last_assistant_text(&self, id: RunId) -> Result<Option<String>, RunStoreError> {
        let data: Option<Value> = sqlx::query_scalar(
            "SELECT data FROM run_events WHERE run_id = $1 AND kind = 'assistant_message' ORDER BY seq DESC LIMIT 1",
        )
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await?;
        let Some(data) = data else { return Ok(None) };
        let msg: Option<weft_core::message::Message> = data
            .get("message")
            .and_then(|m| serde_json::from_value(m.clone()).ok());
        Ok(msg.map(|m| m.text()))
    }
}

/// A transaction that holds the run's fence: everything in it commits only if the lease was
/// still ours when it began, and no new lease can be taken until it ends.
pub struct Fenced {
    tx: Transaction<'static, Postgres>,
    run: RunId,
    tenant: String,
    epoch: i64,
}

impl Fenced {
    pub fn tx(&mut self) -> &mut Transaction<'static, Postgres> {
        &mut self.tx
    }

    /// The run this transaction writes, and its tenant.
    pub(crate) fn run(&self) -> (RunId, &str) {
        (self.run, &self.tenant)
    }

    pub async fn commit(self) -> Result<(), RunStoreError> {
        self.tx.commit().await?;
        Ok(())
    }

    /// The run's next free seq, read under the fence (for a writer that has not read the
    /// transcript).
    pub async fn next_seq(&mut self) -> Result<i64, RunStoreError> {
        let run = self.run;
        next_seq(&mut self.tx, run).await
    }

    /// Appends events; `first_seq` is the next free seq. The events are made storable in place
    /// (see [`storable`]), so the caller holds what was stored.
    pub async fn append(
        &mut self,
        first_seq: i64,
        events: &mut [(String, Value)],
    ) -> Result<(), RunStoreError> {
        let run = self.run;
        insert_events(
            &mut self.tx,
            run,
            &self.tenant,
            self.epoch,
            first_seq,
            events,
        )
        .await
        .map_err(|e| match e {
            RunStoreError::Store(StoreError::Db(e)) => stale_on_conflict(e, run),
            e => e,
        })
    }

    /// Saves tool-specific progress (e.g. the ids of spawned children) on a started call.
    pub async fn ledger_state(
        &mut self,
        tool_use_id: &str,
        state: &Value,
    ) -> Result<(), RunStoreError> {
        sqlx::query("UPDATE tool_ledger SET state = $3 WHERE run_id = $1 AND tool_use_id = $2")
            .bind(self.run.0)
            .bind(tool_use_id)
            .bind(state)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Records what a started call's pre hooks decided (`{"pre": …}`), before its tool runs;
    /// `idempotent` is cleared when the input the tool runs with is not safe to repeat. Nothing
    /// changes for a call already finished.
    pub async fn ledger_pre_hooks(
        &mut self,
        tool_use_id: &str,
        pre: &Value,
        idempotent: bool,
    ) -> Result<(), RunStoreError> {
        sqlx::query(
            "UPDATE tool_ledger SET hooks = jsonb_build_object('pre', $3::jsonb),
                 idempotent = idempotent AND $4
             WHERE run_id = $1 AND tool_use_id = $2 AND status = 'started'",
        )
        .bind(self.run.0)
        .bind(tool_use_id)
        .bind(pre)
        .bind(idempotent)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Inserts a child run with its first events (the Agent tool), in this transaction.
    /// Returns the existing child when the idempotency key was already used.
    pub async fn create_child(&mut self, new: &NewRun) -> Result<(RunRecord, bool), RunStoreError> {
        sqlx::query("SAVEPOINT child")
            .execute(&mut *self.tx)
            .await?;
        if let Some(run) = insert_run(&mut *self.tx, new).await? {
            sqlx::query("RELEASE SAVEPOINT child")
                .execute(&mut *self.tx)
                .await?;
            return Ok((run, true));
        }
        sqlx::query("ROLLBACK TO SAVEPOINT child")
            .execute(&mut *self.tx)
            .await?;
        let r: RunRow = sqlx::query_as(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE tenant_id = $1 AND subject = $2 AND idempotency_key = $3"
        ))
        .bind(new.tenant.as_str())
        .bind(&new.subject)
        .bind(new.idempotency_key.as_deref().unwrap_or_default())
        .fetch_one(&mut *self.tx)
        .await?;
        Ok((r.try_into()?, false))
    }

    /// Takes the pending inputs of the run (marking them consumed), oldest first.
    pub async fn take_inputs(&mut self) -> Result<Vec<(InputKind, String)>, RunStoreError> {
        let mut out: Vec<(Uuid, String, String)> = sqlx::query_as(
            "UPDATE run_inputs SET consumed = true WHERE id IN (
                 SELECT id FROM run_inputs WHERE run_id = $1 AND NOT consumed ORDER BY id FOR UPDATE)
             RETURNING id, text, kind",
        )
        .bind(self.run.0)
        .fetch_all(&mut *self.tx)
        .await?;
        out.sort_by_key(|(id, _, _)| *id);
        Ok(out
            .into_iter()
            .map(|(_, t, k)| {
                let kind = if k == "compact" {
                    InputKind::Compact
                } else {
                    InputKind::Text
                };
                (kind, t)
            })
            .collect())
    }

    /// Forgets ledger rows this lease recorded as `started` for calls that never started (the
    /// run is handed back between the turn that made them and running them).
    pub async fn forget_unstarted(&mut self, tool_use_ids: &[String]) -> Result<(), RunStoreError> {
        sqlx::query(
            "DELETE FROM tool_ledger WHERE run_id = $1 AND epoch = $2 AND status = 'started'
                 AND tool_use_id = ANY($3)",
        )
        .bind(self.run.0)
        .bind(self.epoch)
        .bind(tool_use_ids)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Releases the lease, leaving the run `queued` for another executor (drain on shutdown).
    pub async fn release(&mut self) -> Result<(), RunStoreError> {
        sqlx::query(
            "UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
             WHERE id = $1",
        )
        .bind(self.run.0)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }
}

pub(crate) fn stale_on_conflict(e: sqlx::Error, run: RunId) -> RunStoreError {
    match &e {
        sqlx::Error::Database(d) if d.is_unique_violation() => RunStoreError::StaleLease(run),
        _ => RunStoreError::Store(StoreError::Db(e)),
    }
}

/// Whatever reaches the transcript is storable: the one rule of `weft_core::storable` (U+0000
/// becomes U+FFFD), applied in place to every event written, by whichever writer.
pub fn storable(events: &mut [(String, Value)]) {
    for (_, d) in events {
        weft_core::storable::json(d);
    }
}

fn columns(first_seq: i64, events: &[(String, Value)]) -> (Vec<i64>, Vec<String>, Vec<Value>) {
    let mut seqs = Vec::with_capacity(events.len());
    let mut kinds = Vec::with_capacity(events.len());
    let mut datas = Vec::with_capacity(events.len());
    for (i, (k, d)) in (0i64..).zip(events) {
        seqs.push(first_seq + i);
        kinds.push(k.clone());
        datas.push(d.clone());
    }
    (seqs, kinds, datas)
}

pub(crate) async fn insert_events(
    tx: &mut Transaction<'static, Postgres>,
    run: RunId,
    tenant: &str,
    epoch: i64,
    first_seq: i64,
    events: &mut [(String, Value)],
) -> Result<(), RunStoreError> {
    if events.is_empty() {
        return Ok(());
    }
    storable(events);
    let (seqs, kinds, datas) = columns(first_seq, events);
    sqlx::query(
        "INSERT INTO run_events (run_id, seq, tenant_id, kind, data, epoch)
         SELECT $1, e.seq, $2, e.kind, e.data, $3
         FROM UNNEST($4::bigint[], $5::text[], $6::jsonb[]) AS e(seq, kind, data)",
    )
    .bind(run.0)
    .bind(tenant)
    .bind(epoch)
    .bind(seqs)
    .bind(kinds)
    .bind(datas)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(crate) async fn next_seq(
    tx: &mut Transaction<'static, Postgres>,
    run: RunId,
) -> Result<i64, RunStoreError> {
    Ok(sqlx::query_scalar(
        "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM run_events WHERE run_id = $1",
    )
    .bind(run.0)
    .fetch_one(&mut **tx)
    .await?)
}

async fn lock_status(
    tx: &mut Transaction<'static, Postgres>,
    tenant: &TenantId,
    id: RunId,
) -> Result<Option<RunStatus>, RunStoreError> {
    let s: Option<String> =
        sqlx::query_scalar("SELECT status FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE")
            .bind(id.0)
            .bind(tenant.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    match s {
        Some(s) => Ok(Some(RunStatus::parse(&s).ok_or_else(|| decode("status"))?)),
        None => Ok(None),
    }
}

/// Inserts the row and its initial events in one statement; `None` when the idempotency key is
/// taken (then nothing is written).
async fn insert_run<'e>(
    ex: impl sqlx::PgExecutor<'e>,
    new: &NewRun,
) -> Result<Option<RunRecord>, RunStoreError> {
    // A sub-run's first input is the parent model's text: it may hold a NUL.
    let mut events = new.initial_events.clone();
    storable(&mut events);
    let (seqs, kinds, datas) = columns(1, &events);
    let r: Option<RunRow> = sqlx::query_as(concat!(
        "WITH run AS (
             INSERT INTO runs (id, tenant_id, subject, agent_name, agent_hash, parent_run_id,
                 root_run_id, depth, status, interactive, spec, idempotency_key,
                 lease_owner, lease_epoch, lease_expires_at, started_at, paused_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                 CASE WHEN $15::text IS NULL THEN 'queued' ELSE 'running' END, $9, $10, $11,
                 $15, CASE WHEN $15::text IS NULL THEN 0 ELSE 1 END,
                 CASE WHEN $15::text IS NULL THEN NULL
                      ELSE now() + $16::bigint * interval '1 millisecond' END,
                 CASE WHEN $15::text IS NULL THEN NULL ELSE now() END,
                 -- A run made leased takes no lease later: it reads the drains in force now,
                 -- as acquire_lease does.
                 CASE WHEN $15::text IS NULL THEN NULL
                      ELSE (SELECT CASE WHEN p.scope = '*' THEN 'fleet' ELSE 'tenant' END
                            FROM pauses p WHERE p.scope IN ($2, '*') ORDER BY p.scope DESC LIMIT 1) END)
             ON CONFLICT (tenant_id, subject, idempotency_key) WHERE idempotency_key IS NOT NULL
             DO NOTHING
             RETURNING *),
         first_events AS (
             INSERT INTO run_events (run_id, seq, tenant_id, kind, data, epoch)
             SELECT run.id, e.seq, run.tenant_id, e.kind, e.data, 0
             FROM run, UNNEST($12::bigint[], $13::text[], $14::jsonb[]) AS e(seq, kind, data))
         SELECT ",
        run_columns!(),
        " FROM run"
    ))
    .bind(new.id.0)
    .bind(new.tenant.as_str())
    .bind(&new.subject)
    .bind(&new.agent_name)
    .bind(&new.agent_hash)
    .bind(new.parent_run_id.map(|r| r.0))
    .bind(new.root_run_id.0)
    .bind(new.depth)
    .bind(new.interactive)
    .bind(&new.spec)
    .bind(&new.idempotency_key)
    .bind(seqs)
    .bind(kinds)
    .bind(datas)
    .bind(new.lease.as_ref().map(|l| l.owner.as_str()))
    .bind(new.lease.as_ref().map_or(0, |l| l.ttl_ms))
    .fetch_optional(ex)
    .await?;
    r.map(RunRecord::try_from).transpose()
}
