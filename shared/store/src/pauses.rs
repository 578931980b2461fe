//! Pause, drain and resume (docs/operations.md), as rows: `runs.paused_by` says who asked a run
//! to pause (set at once; the run parks in status `paused` at its next step boundary, by its
//! executor under its lease), and `pauses` holds the drains in force (a tenant's, or `*` for the
//! fleet's maintenance), with every transition in `pause_transitions`. Each transition that
//! moves a run appends its `run_resumed` event in the same transaction.

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::run::{PauseScope, RunEvent, RunResumed, RunStatus};
use weft_core::{RunId, TenantId};

use crate::runs::{Fenced, RunStore, RunStoreError, insert_events, next_seq};

/// The `pauses` scope of the fleet's maintenance.
pub const FLEET: &str = "*";

/// What a drain or a pause did to the runs it reached: those an executor holds (to be told over
/// the control channel) and the others (parked or queued, paused when next leased).
#[derive(Clone, Debug, Default)]
pub struct Marked {
    pub held: Vec<RunId>,
    pub unheld: Vec<RunId>,
}

/// A drain in force.
#[derive(Clone, Debug, PartialEq)]
pub struct PauseRow {
    pub scope: String,
    pub since: OffsetDateTime,
    pub tenant: String,
    pub subject: String,
}

/// Where a scope's runs are: counts by status of the runs not ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PauseProgress {
    /// Working, or queued for an executor: the drain is complete when both are 0.
    pub running: i64,
    pub queued: i64,
    pub paused: i64,
    pub awaiting_input: i64,
}

/// One drain or resume.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub action: String,
    pub tenant: String,
    pub subject: String,
    pub at: OffsetDateTime,
}

/// What a resume did to one run.
#[derive(Clone, Debug, PartialEq)]
pub enum Resumed {
    /// It was parked: it is queued again, with its `run_resumed` event at this seq (to be
    /// dispatched, and published to live watchers).
    Queued { seq: i64, data: Value },
    /// It was asked but had not parked yet: no longer asked. `held`: an executor works on it
    /// (to be told, so the calls under way go on).
    Unasked { held: bool },
}

/// What a scope's resume did: runs queued again (each with its `run_resumed` event), and held
/// runs no longer asked (to be told).
#[derive(Clone, Debug, Default)]
pub struct ScopeResumed {
    pub queued: Vec<(RunId, TenantId, i64, Value)>,
    pub unasked_held: Vec<RunId>,
}

/// Why a run could not be resumed.
#[derive(Debug)]
pub enum ResumeRefused {
    /// Its tenant is draining, or the fleet is in maintenance: that is what to resume.
    ScopePaused(PauseScope),
    /// It is not paused.
    NotPaused(RunStatus),
}

#[derive(sqlx::FromRow)]
struct MarkedRow {
    id: Uuid,
    held: bool,
}

fn split(rows: Vec<MarkedRow>) -> Marked {
    let mut m = Marked::default();
    for r in rows {
        if r.held {
            m.held.push(RunId(r.id));
        } else {
            m.unheld.push(RunId(r.id));
        }
    }
    m
}

/// The pause kind a `pauses` scope stands for.
fn kind_of(scope: &str) -> PauseScope {
    if scope == FLEET {
        PauseScope::Fleet
    } else {
        PauseScope::Tenant
    }
}

impl RunStore {
    /// Asks runs (`ids`, of `tenant`, not ended) to pause: they park at their next step
    /// boundary. A run asked by its tenant's drain is now paused by itself too (a tenant's
    /// resume leaves it paused).
    pub async fn request_pause(
        &self,
        tenant: &TenantId,
        ids: &[RunId],
    ) -> Result<Marked, RunStoreError> {
        let ids: Vec<Uuid> = ids.iter().map(|r| r.0).collect();
        let rows: Vec<MarkedRow> = sqlx::query_as(
            "UPDATE runs SET paused_by = 'run', updated_at = now()
             WHERE id = ANY($1) AND tenant_id = $2
               AND status IN ('queued', 'running', 'awaiting_input', 'paused')
             RETURNING id, (status = 'running' AND lease_owner IS NOT NULL) AS held",
        )
        .bind(&ids)
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(split(rows))
    }

    /// Resumes a run paused by itself: parked, it is queued again (with a `run_resumed` event);
    /// not parked yet, it is no longer asked to park. A run in `paused` that nothing holds
    /// paused any more (imported so, say) is queued again too.
    pub async fn resume_run(
        &self,
        tenant: &TenantId,
        id: RunId,
    ) -> Result<Result<Resumed, ResumeRefused>, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let row: Option<(String, Option<String>, bool, Option<String>)> = sqlx::query_as(
            "SELECT r.status, r.paused_by, r.lease_owner IS NOT NULL,
                    (SELECT p.scope FROM pauses p WHERE p.scope IN (r.tenant_id, '*')
                     ORDER BY p.scope DESC LIMIT 1)
             FROM runs r WHERE r.id = $1 AND r.tenant_id = $2 FOR UPDATE",
        )
        .bind(id.0)
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((status, paused_by, held, in_force)) = row else {
            return Ok(Err(ResumeRefused::NotPaused(RunStatus::Cancelled)));
        };
        let status = RunStatus::parse(&status).unwrap_or(RunStatus::Cancelled);
        if let Some(scope) = in_force {
            return Ok(Err(ResumeRefused::ScopePaused(kind_of(&scope))));
        }
        let parked = status == RunStatus::Paused;
        if paused_by.is_none() && !parked {
            return Ok(Err(ResumeRefused::NotPaused(status)));
        }
        sqlx::query(
            "UPDATE runs SET paused_by = NULL,
                 status = CASE WHEN status = 'paused' THEN 'queued' ELSE status END, updated_at = now()
             WHERE id = $1",
        )
        .bind(id.0)
        .execute(&mut *tx)
        .await?;
        let resumed = if parked {
            let (seq, data) = resumed_event(&mut tx, id, tenant.as_str(), PauseScope::Run).await?;
            Resumed::Queued { seq, data }
        } else {
            Resumed::Unasked { held }
        };
        tx.commit().await?;
        Ok(Ok(resumed))
    }

    /// Starts a drain of `scope` (a tenant id, or [`FLEET`]) asked by `by`: records it (a drain
    /// already in force is left as it began) and asks every run of the scope not ended to
    /// pause. Runs already asked by another pause keep it.
    pub async fn drain(&self, scope: &str, by: (&TenantId, &str)) -> Result<Marked, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let began = sqlx::query(
            "INSERT INTO pauses (scope, tenant_id, subject) VALUES ($1, $2, $3)
             ON CONFLICT (scope) DO NOTHING",
        )
        .bind(scope)
        .bind(by.0.as_str())
        .bind(by.1)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // A drain asked again keeps its start, and is no new transition.
        if began == 1 {
            transition(&mut tx, scope, "drain", by).await?;
        }
        let marked = mark(&mut tx, scope).await?;
        tx.commit().await?;
        Ok(marked)
    }

    /// The runs of a draining `scope` not asked to pause yet (made while the drain began, its
    /// admission having passed before), now asked; and the held runs asked before that have not
    /// parked yet (to be told again: a control message may have been lost).
    pub async fn drain_stragglers(&self, scope: &str) -> Result<Marked, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let mut marked = mark(&mut tx, scope).await?;
        tx.commit().await?;
        let held: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM runs
             WHERE ($1 = '*' OR tenant_id = $1) AND paused_by IS NOT NULL
               AND status = 'running' AND lease_owner IS NOT NULL",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?;
        for id in held {
            if !marked.held.contains(&RunId(id)) {
                marked.held.push(RunId(id));
            }
        }
        Ok(marked)
    }

    /// Those of `ids` asked to pause (for an executor whose control messages may have been
    /// lost).
    pub async fn asked_to_pause(&self, ids: &[RunId]) -> Result<Vec<RunId>, RunStoreError> {
        let ids: Vec<Uuid> = ids.iter().map(|r| r.0).collect();
        let asked: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM runs WHERE id = ANY($1) AND paused_by IS NOT NULL")
                .bind(&ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(asked.into_iter().map(RunId).collect())
    }

    /// The drain in force for `scope`, if any.
    pub async fn pause_of(&self, scope: &str) -> Result<Option<PauseRow>, RunStoreError> {
        let row: Option<(String, OffsetDateTime, String, String)> =
            sqlx::query_as("SELECT scope, since, tenant_id, subject FROM pauses WHERE scope = $1")
                .bind(scope)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|(scope, since, tenant, subject)| PauseRow {
            scope,
            since,
            tenant,
            subject,
        }))
    }

    /// Every drain in force (Redis mirrors them for admission).
    pub async fn pauses(&self) -> Result<Vec<PauseRow>, RunStoreError> {
        let rows: Vec<(String, OffsetDateTime, String, String)> =
            sqlx::query_as("SELECT scope, since, tenant_id, subject FROM pauses ORDER BY scope")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(scope, since, tenant, subject)| PauseRow {
                scope,
                since,
                tenant,
                subject,
            })
            .collect())
    }

    /// Where the runs of `scope` (a tenant id, or [`FLEET`] for all) are.
    pub async fn pause_progress(&self, scope: &str) -> Result<PauseProgress, RunStoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, count(*) FROM runs
             WHERE ($1 = '*' OR tenant_id = $1)
               AND status IN ('queued', 'running', 'awaiting_input', 'paused')
             GROUP BY status",
        )
        .bind(scope)
        .fetch_all(&self.pool)
        .await?;
        let mut p = PauseProgress::default();
        for (status, n) in rows {
            match status.as_str() {
                "queued" => p.queued = n,
                "running" => p.running = n,
                "paused" => p.paused = n,
                _ => p.awaiting_input = n,
            }
        }
        Ok(p)
    }

    /// The last `limit` drains and resumes of `scope`, newest first.
    pub async fn transitions(
        &self,
        scope: &str,
        limit: i64,
    ) -> Result<Vec<Transition>, RunStoreError> {
        let rows: Vec<(String, String, String, OffsetDateTime)> = sqlx::query_as(
            "SELECT action, tenant_id, subject, at FROM pause_transitions
             WHERE scope = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(scope)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(action, tenant, subject, at)| Transition {
                action,
                tenant,
                subject,
                at,
            })
            .collect())
    }

    /// Ends the drain of `scope`: the runs it paused go on (parked ones are queued again, with a
    /// `run_resumed` event each, and returned to be dispatched), unless another drain covers
    /// them (the fleet's, or their tenant's), which then holds them instead. Runs paused by
    /// themselves stay paused. `None` when no drain of `scope` was in force.
    pub async fn resume_scope(
        &self,
        scope: &str,
        by: (&TenantId, &str),
    ) -> Result<Option<ScopeResumed>, RunStoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let gone = sqlx::query("DELETE FROM pauses WHERE scope = $1")
            .bind(scope)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if gone == 0 {
            return Ok(None);
        }
        transition(&mut tx, scope, "resume", by).await?;
        let kind = kind_of(scope).as_str();
        // Another drain in force over a run takes it over.
        sqlx::query(
            "UPDATE runs r SET paused_by = CASE WHEN p.scope = '*' THEN 'fleet' ELSE 'tenant' END
             FROM pauses p
             WHERE r.paused_by = $2 AND ($1 = '*' OR r.tenant_id = $1)
               AND p.scope IN (r.tenant_id, '*')",
        )
        .bind(scope)
        .bind(kind)
        .execute(&mut *tx)
        .await?;
        let rows: Vec<(Uuid, String, String, bool)> = sqlx::query_as(
            "WITH before AS (
                 SELECT id, status FROM runs
                 WHERE paused_by = $2 AND ($1 = '*' OR tenant_id = $1) FOR UPDATE
             )
             UPDATE runs r SET paused_by = NULL,
                 status = CASE WHEN r.status = 'paused' THEN 'queued' ELSE r.status END,
                 updated_at = now()
             FROM before b WHERE r.id = b.id
             RETURNING r.id, r.tenant_id, b.status, r.lease_owner IS NOT NULL",
        )
        .bind(scope)
        .bind(kind)
        .fetch_all(&mut *tx)
        .await?;
        let mut out = ScopeResumed::default();
        for (id, tenant, before, held) in rows {
            let id = RunId(id);
            if before != RunStatus::Paused.as_str() {
                if held {
                    out.unasked_held.push(id);
                }
                continue;
            }
            let (seq, data) = resumed_event(&mut tx, id, &tenant, kind_of(scope)).await?;
            if let Ok(t) = TenantId::parse(&tenant) {
                out.queued.push((id, t, seq, data));
            }
        }
        tx.commit().await?;
        Ok(Some(out))
    }
}

impl Fenced {
    /// Parks the run as `paused` and releases the lease, recording its progress (model turns,
    /// usage) when given, if it is still asked to pause: by whom, or `None` (a resume came first; nothing was changed).
    pub async fn pause(
        &mut self,
        progress: Option<(i32, Value)>,
    ) -> Result<Option<PauseScope>, RunStoreError> {
        let (run, _) = self.run();
        let (iterations, usage) = progress.unzip();
        let by: Option<String> = sqlx::query_scalar(
            "UPDATE runs SET status = 'paused', lease_owner = NULL, lease_expires_at = NULL,
                 iterations = COALESCE($2, iterations), usage = COALESCE($3, usage),
                 updated_at = now()
             WHERE id = $1 AND paused_by IS NOT NULL
             RETURNING paused_by",
        )
        .bind(run.0)
        .bind(iterations)
        .bind(usage)
        .fetch_optional(&mut **self.tx())
        .await?;
        Ok(by.as_deref().and_then(PauseScope::parse))
    }
}

/// Asks every run of `scope` not ended and not asked yet to pause.
async fn mark(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    scope: &str,
) -> Result<Marked, RunStoreError> {
    let rows: Vec<MarkedRow> = sqlx::query_as(
        "UPDATE runs SET paused_by = $2, updated_at = now()
         WHERE ($1 = '*' OR tenant_id = $1) AND paused_by IS NULL
           AND status IN ('queued', 'running', 'awaiting_input')
         RETURNING id, (status = 'running' AND lease_owner IS NOT NULL) AS held",
    )
    .bind(scope)
    .bind(kind_of(scope).as_str())
    .fetch_all(&mut **tx)
    .await?;
    Ok(split(rows))
}

async fn transition(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    scope: &str,
    action: &str,
    by: (&TenantId, &str),
) -> Result<(), RunStoreError> {
    sqlx::query(
        "INSERT INTO pause_transitions (scope, action, tenant_id, subject) VALUES ($1, $2, $3, $4)",
    )
    .bind(scope)
    .bind(action)
    .bind(by.0.as_str())
    .bind(by.1)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Appends `run_resumed`; its seq and data.
async fn resumed_event(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    id: RunId,
    tenant: &str,
    by: PauseScope,
) -> Result<(i64, Value), RunStoreError> {
    let seq = next_seq(tx, id).await?;
    let mut events = [RunEvent::RunResumed(RunResumed {
        by: by.as_str().to_owned(),
    })
    .into_parts()];
    insert_events(tx, id, tenant, 0, seq, &mut events).await?;
    let [(_, data)] = events;
    Ok((seq, data))
}
