//! Plan runs' rows (`migrations/20261130000010_plans.sql`): plan versions, people's approvals and
//! retry/skip controls, and evaluations. The executor writes under its fenced transaction
//! ([`Fenced`]); the gateway reads, approves and queues controls ([`RunStore`]). Every query
//! filters on the tenant.

use serde_json::Value;
use sqlx::Row as _;
use time::OffsetDateTime;
use weft_core::{RunId, TenantId};

use crate::runs::{Fenced, RunStore, RunStoreError};

/// One version of a plan run's plan.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRow {
    pub version: u32,
    /// `proposed`, `accepted` or `superseded`.
    pub status: String,
    /// `planner`, `caller`, `replanner` or `person`.
    pub source: String,
    pub tasks: Value,
    pub approved_by: Option<String>,
    pub created_at: OffsetDateTime,
}

/// A person's retry or skip, taken by the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanControl {
    pub task: String,
    pub action: String,
    pub subject: String,
}

/// One evaluation to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvaluation {
    pub task: String,
    pub attempt: u32,
    pub agent_name: String,
    pub agent_hash: String,
    /// `checks`, `verifier`, `human` or `agent`.
    pub emitter_role: String,
    /// `pass`, `fail` or `inconclusive`.
    pub verdict: String,
    pub score: f64,
    pub dimensions: Value,
}

/// Evaluation counts of one (agent, version, role, verdict).
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluationCount {
    pub agent_hash: String,
    pub emitter_role: String,
    pub verdict: String,
    pub count: i64,
    pub score_sum: f64,
    /// When this version was last evaluated (newest first ordering).
    pub last_at: OffsetDateTime,
}

/// What `PUT /v1/runs/{id}/plan` did.
#[derive(Clone, Debug, PartialEq)]
pub enum Approved {
    /// Approved (as the version given, or as the new version holding the edit).
    Done(PlanRow),
    /// No such run (of this tenant), or no plan yet.
    NotFound,
    /// `If-Match` named another version: the current one.
    Stale(u32),
    /// The plan is not waiting for approval.
    NotWaiting,
}

fn plan_row(r: &sqlx::postgres::PgRow) -> Result<PlanRow, sqlx::Error> {
    Ok(PlanRow {
        version: u32::try_from(r.try_get::<i32, _>("version")?).unwrap_or(0),
        status: r.try_get("status")?,
        source: r.try_get("source")?,
        tasks: r.try_get("tasks")?,
        approved_by: r.try_get("approved_by")?,
        created_at: r.try_get("created_at")?,
    })
}

macro_rules! plan_columns {
    () => {
        "version, status, source, tasks, approved_by, created_at"
    };
}

impl Fenced {
    /// Records plan version `version` (again: a replayed write, or a person's edit the gateway
    /// recorded first, keeps its row and takes the newer status).
    pub async fn put_plan(
        &mut self,
        version: u32,
        status: &str,
        source: &str,
        tasks: &Value,
        approved_by: Option<&str>,
    ) -> Result<(), RunStoreError> {
        let (run, tenant) = self.run();
        let tenant = tenant.to_owned();
        sqlx::query(
            "INSERT INTO run_plans (run_id, version, tenant_id, status, source, tasks, approved_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (run_id, version) DO UPDATE
             SET status = EXCLUDED.status,
                 approved_by = COALESCE(run_plans.approved_by, EXCLUDED.approved_by)",
        )
        .bind(run.0)
        .bind(i32::try_from(version).unwrap_or(i32::MAX))
        .bind(tenant)
        .bind(status)
        .bind(source)
        .bind(tasks)
        .bind(approved_by)
        .execute(&mut **self.tx())
        .await?;
        Ok(())
    }

    /// Version `version` runs: it is `accepted`, every other `superseded`.
    pub async fn accept_plan(&mut self, version: u32) -> Result<(), RunStoreError> {
        let (run, _) = self.run();
        sqlx::query(
            "UPDATE run_plans SET status = CASE WHEN version = $2 THEN 'accepted' ELSE 'superseded' END
             WHERE run_id = $1 AND (version = $2 OR status <> 'superseded')",
        )
        .bind(run.0)
        .bind(i32::try_from(version).unwrap_or(i32::MAX))
        .execute(&mut **self.tx())
        .await?;
        Ok(())
    }

    /// Withdraws the question to a person `tool_use_id` (a split vote's, ledger tool
    /// `plan.person`) that a person's control settled instead of an answer: its ledger row is
    /// finished with `result` (which holds no `answer`), so it is never read as one.
    pub async fn withdraw_question(
        &mut self,
        tool_use_id: &str,
        result: &Value,
    ) -> Result<(), RunStoreError> {
        let (run, _) = self.run();
        sqlx::query(
            "UPDATE tool_ledger SET status = 'finished', result = $3, is_error = false, finished_at = now()
             WHERE run_id = $1 AND tool_use_id = $2 AND tool = 'plan.person' AND status = 'started'",
        )
        .bind(run.0)
        .bind(tool_use_id)
        .bind(result.to_string())
        .execute(&mut **self.tx())
        .await?;
        Ok(())
    }

    /// Takes (marks) the run's waiting controls, oldest first.
    pub async fn take_plan_controls(&mut self) -> Result<Vec<PlanControl>, RunStoreError> {
        let (run, _) = self.run();
        let rows = sqlx::query(
            "UPDATE plan_controls SET taken_at = now()
             WHERE id IN (SELECT id FROM plan_controls WHERE run_id = $1 AND taken_at IS NULL
                          ORDER BY id FOR UPDATE)
             RETURNING id, task_id, action, subject",
        )
        .bind(run.0)
        .fetch_all(&mut **self.tx())
        .await?;
        let mut out: Vec<(i64, PlanControl)> = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("id")?,
                    PlanControl {
                        task: r.try_get("task_id")?,
                        action: r.try_get("action")?,
                        subject: r.try_get("subject")?,
                    },
                ))
            })
            .collect::<Result<_, sqlx::Error>>()?;
        out.sort_by_key(|(id, _)| *id);
        Ok(out.into_iter().map(|(_, c)| c).collect())
    }
}

/// Makes parked plan run `run` runnable (`queued`): parked on an approval (no pending
/// interruption), or on a question to a person (a pending interruption whose ledger row is the
/// plan's own, tool `plan.person`; it is cleared, and the question's row stays open). `true`
/// when it was parked so.
async fn wake_parked_plan(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    run: RunId,
) -> Result<bool, RunStoreError> {
    let n = sqlx::query(
        "UPDATE runs SET status = 'queued', pending_interrupt = NULL, updated_at = now()
         WHERE id = $1 AND status = 'awaiting_input'
           AND (pending_interrupt IS NULL
                OR EXISTS (SELECT 1 FROM tool_ledger l
                           WHERE l.run_id = runs.id
                             AND l.tool_use_id = runs.pending_interrupt->>'tool_use_id'
                             AND l.tool = 'plan.person'))",
    )
    .bind(run.0)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(n == 1)
}

impl RunStore {
    /// The plan versions of run `run` of `tenant`, oldest first.
    pub async fn plan_rows(
        &self,
        tenant: &TenantId,
        run: RunId,
    ) -> Result<Vec<PlanRow>, RunStoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM run_plans WHERE tenant_id = $1 AND run_id = $2 ORDER BY version"
        ))
        .bind(tenant.as_str())
        .bind(run.0)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(plan_row).collect::<Result<_, _>>()?)
    }

    /// The usage of every sub-run of run `run` of `tenant`, and of their own sub-runs, summed:
    /// what a plan run's roles have used so far (its orchestration makes no model calls), read
    /// fresh from each run's row, which a live run updates after each model turn. The total of a
    /// row that has none is its prompt and completion tokens.
    pub async fn subtree_usage(
        &self,
        tenant: &TenantId,
        run: RunId,
    ) -> Result<weft_core::message::Usage, RunStoreError> {
        let row = sqlx::query(
            "WITH RECURSIVE d(id) AS (
                 SELECT id FROM runs WHERE parent_run_id = $1 AND tenant_id = $2
                 UNION ALL
                 SELECT r.id FROM runs r JOIN d ON r.parent_run_id = d.id
             ), u AS (
                 SELECT COALESCE((r.usage->>'prompt_tokens')::bigint, 0) AS prompt,
                        COALESCE((r.usage->>'completion_tokens')::bigint, 0) AS completion,
                        COALESCE((r.usage->>'total_tokens')::bigint, 0) AS total,
                        COALESCE((r.usage->>'cache_read_tokens')::bigint, 0) AS cache_read,
                        COALESCE((r.usage->>'cache_write_tokens')::bigint, 0) AS cache_write
                 FROM runs r JOIN d ON r.id = d.id
             )
             SELECT COALESCE(SUM(prompt), 0)::bigint AS prompt,
                    COALESCE(SUM(completion), 0)::bigint AS completion,
                    COALESCE(SUM(CASE WHEN total > 0 THEN total ELSE prompt + completion END), 0)::bigint AS total,
                    COALESCE(SUM(cache_read), 0)::bigint AS cache_read,
                    COALESCE(SUM(cache_write), 0)::bigint AS cache_write
             FROM u",
        )
        .bind(run.0)
        .bind(tenant.as_str())
        .fetch_one(self.pool())
        .await?;
        let n = |c: &str| -> Result<u64, sqlx::Error> {
            Ok(u64::try_from(row.try_get::<i64, _>(c)?).unwrap_or(0))
        };
        Ok(weft_core::message::Usage {
            prompt_tokens: n("prompt")?,
            completion_tokens: n("completion")?,
            total_tokens: n("total")?,
            cache_read_tokens: n("cache_read")?,
            cache_write_tokens: n("cache_write")?,
        })
    }

    /// The `tools_excluded` of the nearest plan run among run `run` of `tenant` and its
    /// ancestors (`Some([])` when that plan excludes none), or `None` when no plan run is among
    /// them: what a sub-run made anywhere below a plan run inherits.
    pub async fn plan_exclusions(
        &self,
        tenant: &TenantId,
        run: RunId,
    ) -> Result<Option<Vec<String>>, RunStoreError> {
        let found: Option<Option<Value>> = sqlx::query_scalar(
            "WITH RECURSIVE a(id, parent_run_id, spec, depth) AS (
                 SELECT id, parent_run_id, spec, 0 FROM runs WHERE id = $1 AND tenant_id = $2
                 UNION ALL
                 SELECT r.id, r.parent_run_id, r.spec, a.depth + 1
                 FROM runs r JOIN a ON r.id = a.parent_run_id
             )
             SELECT spec->'plan'->'tools_excluded' FROM a
             WHERE jsonb_typeof(spec->'plan') = 'object'
             ORDER BY depth LIMIT 1",
        )
        .bind(run.0)
        .bind(tenant.as_str())
        .fetch_optional(self.pool())
        .await?;
        Ok(found.map(|list| {
            list.and_then(|v| serde_json::from_value::<Vec<String>>(v).ok())
                .unwrap_or_default()
        }))
    }

    /// Whether a person's retry or skip waits for run `run`.
    pub async fn has_plan_controls(&self, run: RunId) -> Result<bool, RunStoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM plan_controls WHERE run_id = $1 AND taken_at IS NULL)",
        )
        .bind(run.0)
        .fetch_one(self.pool())
        .await?)
    }

    /// Queues a person's `retry` or `skip` of task `task` for run `run` of `tenant`, and in the
    /// same transaction wakes the run (`queued`) if it is parked — on a plan approval, or on a
    /// question to a person about a split vote (its pending interruption is cleared: the
    /// orchestrator takes the control first, and asks again if the question still stands).
    /// `true` when this woke the run: the caller dispatches it.
    pub async fn add_plan_control(
        &self,
        tenant: &TenantId,
        run: RunId,
        task: &str,
        action: &str,
        subject: &str,
    ) -> Result<bool, RunStoreError> {
        let mut tx = crate::begin(self.pool()).await?;
        sqlx::query(
            "INSERT INTO plan_controls (run_id, tenant_id, task_id, action, subject)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run.0)
        .bind(tenant.as_str())
        .bind(task)
        .bind(action)
        .bind(subject)
        .execute(&mut *tx)
        .await?;
        let woke = wake_parked_plan(&mut tx, run).await?;
        tx.commit().await?;
        Ok(woke)
    }

    /// Wakes plan run `run` if it is parked (see [`RunStore::add_plan_control`]): for a control
    /// that raced the run's parking. `true` when it woke it.
    pub async fn wake_plan_for_controls(&self, run: RunId) -> Result<bool, RunStoreError> {
        let mut tx = crate::begin(self.pool()).await?;
        let woke = wake_parked_plan(&mut tx, run).await?;
        tx.commit().await?;
        Ok(woke)
    }

    /// Approves the proposed plan of run `run` of `tenant` (a parked plan run waiting for it),
    /// as version `if_match`, or — with `edit` — as the next version holding the edit. The
    /// run's row is locked meanwhile, so two approvals cannot both win.
    pub async fn approve_plan(
        &self,
        tenant: &TenantId,
        run: RunId,
        if_match: u32,
        edit: Option<&Value>,
        subject: &str,
    ) -> Result<Approved, RunStoreError> {
        let mut tx = self.pool().begin().await?;
        let status: Option<String> = sqlx::query_scalar(
            "SELECT status FROM runs WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(run.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(status) = status else {
            return Ok(Approved::NotFound);
        };
        let latest = sqlx::query(concat!(
            "SELECT ",
            plan_columns!(),
            " FROM run_plans WHERE run_id = $1 ORDER BY version DESC LIMIT 1"
        ))
        .bind(run.0)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(latest) = latest.as_ref().map(plan_row).transpose()? else {
            return Ok(Approved::NotFound);
        };
        if latest.version != if_match {
            return Ok(Approved::Stale(latest.version));
        }
        if latest.status != "proposed" || latest.approved_by.is_some() || status != "awaiting_input"
        {
            return Ok(Approved::NotWaiting);
        }
        let row = match edit {
            None => sqlx::query(concat!("UPDATE run_plans SET approved_by = $3 WHERE run_id = $1 AND version = $2 RETURNING ", plan_columns!(), ""))
            .bind(run.0)
            .bind(i32::try_from(if_match).unwrap_or(i32::MAX))
            .bind(subject)
            .fetch_one(&mut *tx)
            .await?,
            Some(tasks) => sqlx::query(concat!("INSERT INTO run_plans (run_id, version, tenant_id, status, source, tasks, approved_by)
                 VALUES ($1, $2, $3, 'proposed', 'person', $4, $5) RETURNING ", plan_columns!(), ""))
            .bind(run.0)
            .bind(i32::try_from(if_match + 1).unwrap_or(i32::MAX))
            .bind(tenant.as_str())
            .bind(tasks)
            .bind(subject)
            .fetch_one(&mut *tx)
            .await?,
        };
        let row = plan_row(&row)?;
        tx.commit().await?;
        Ok(Approved::Done(row))
    }

    /// Evaluation counts of agent `agent` of `tenant` (one version, or every one), by version,
    /// role and verdict.
    pub async fn evaluation_counts(
        &self,
        tenant: &TenantId,
        agent: &str,
        version: Option<&str>,
    ) -> Result<Vec<EvaluationCount>, RunStoreError> {
        let rows = sqlx::query(
            "SELECT agent_hash, emitter_role, verdict, count(*) AS n, sum(score) AS score_sum,
                    max(created_at) AS last_at
             FROM evaluations
             WHERE tenant_id = $1 AND agent_name = $2 AND ($3::text IS NULL OR agent_hash = $3)
             GROUP BY agent_hash, emitter_role, verdict
             ORDER BY max(created_at) DESC, agent_hash, emitter_role, verdict",
        )
        .bind(tenant.as_str())
        .bind(agent)
        .bind(version)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok(EvaluationCount {
                    agent_hash: r.try_get("agent_hash")?,
                    emitter_role: r.try_get("emitter_role")?,
                    verdict: r.try_get("verdict")?,
                    count: r.try_get("n")?,
                    score_sum: r.try_get::<Option<f64>, _>("score_sum")?.unwrap_or(0.0),
                    last_at: r.try_get("last_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    }
}
