//! The live state of cron schedules and their fires (`schedules`, `schedule_fires`), and the
//! accepted webhook deliveries (`webhook_deliveries`).
//!
//! Exactly once, with no leader: every ingress replica calls [`ScheduleStore::claim_due`] on
//! its tick. One short transaction locks the due schedule rows (`FOR UPDATE SKIP LOCKED`, so
//! replicas never wait on each other), inserts one `schedule_fires` row per slot — unique on
//! (schedule, kind, fire time), so a slot can be claimed once, ever — and advances
//! `next_fire_at` before it commits. The run is made after the commit; a fire whose replica died
//! before making it stays `claimed` and [`ScheduleStore::reclaim_stale`] hands it to another.

use std::sync::Arc;

use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::TenantId;

use crate::StoreError;
use crate::kept::Kept;

/// A schedule's live row.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ScheduleRow {
    pub id: Uuid,
    #[sqlx(rename = "tenant_id")]
    pub tenant: String,
    pub name: String,
    pub def_hash: String,
    pub content: String,
    pub enabled: bool,
    pub paused: bool,
    pub next_fire_at: Option<OffsetDateTime>,
    pub cron_fires: i64,
    pub run_now_fires: i64,
    pub skipped: i64,
    pub last_fire_at: Option<OffsetDateTime>,
    pub last_run_id: Option<Uuid>,
    /// The status of the last fire's run, when it has one.
    pub last_run_status: Option<String>,
    pub retired_at: Option<OffsetDateTime>,
    pub retired_why: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A due schedule, locked by the claiming transaction.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct DueSchedule {
    pub id: Uuid,
    #[sqlx(rename = "tenant_id")]
    pub tenant: String,
    pub name: String,
    pub def_hash: String,
    pub content: String,
    pub next_fire_at: OffsetDateTime,
    pub cron_fires: i64,
    /// The last fire's run is still going, or a fire is claimed and not yet dispatched.
    pub busy: bool,
    /// The database's clock at the claim.
    #[sqlx(rename = "db_now")]
    pub now: OffsetDateTime,
}

/// What to do with one due schedule, decided by the caller (the ingress owns the policy).
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Slots to claim: `true` = fire it, `false` = record it as skipped (overlap policy).
    pub fires: Vec<(OffsetDateTime, bool)>,
    /// Slots passed over without a row (missed beyond `catch_up_max`).
    pub skipped_unrecorded: i64,
    pub next_fire_at: Option<OffsetDateTime>,
    /// Retire the schedule (why), e.g. `max_fires` reached.
    pub retire: Option<String>,
    /// The fired slots have `on_complete` actions to run after their runs end.
    pub on_complete: bool,
}

/// A fire to dispatch: claimed, not yet a run.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ClaimedFire {
    pub id: Uuid,
    pub schedule_id: Uuid,
    #[sqlx(rename = "tenant_id")]
    pub tenant: String,
    pub name: String,
    /// `cron` or `run_now`.
    pub kind: String,
    pub fire_at: OffsetDateTime,
    pub def_hash: String,
    /// The schedule's content at the time of dispatch (the active version).
    pub content: String,
    pub attempts: i32,
}

/// A fire as the state route shows it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct FireRow {
    pub id: Uuid,
    pub kind: String,
    pub fire_at: OffsetDateTime,
    pub status: String,
    pub run_id: Option<Uuid>,
    pub run_status: Option<String>,
    pub error: Option<String>,
    pub attempts: i32,
    pub on_complete: Option<String>,
    pub on_complete_result: Option<Value>,
}

/// A fire whose run has ended and whose `on_complete` actions are pending.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct FinishedFire {
    pub id: Uuid,
    #[sqlx(rename = "tenant_id")]
    pub tenant: String,
    pub name: String,
    pub fire_at: OffsetDateTime,
    pub run_id: Uuid,
    pub run_status: String,
    pub content: String,
}

#[derive(Clone)]
pub struct ScheduleStore {
    pool: PgPool,
}

macro_rules! schedule_columns {
    () => {
        "s.id, s.tenant_id, s.name, s.def_hash, s.content, s.enabled, s.paused, s.next_fire_at, s.cron_fires, s.run_now_fires, s.skipped, s.last_fire_at, s.last_run_id, r.status AS last_run_status, s.retired_at, s.retired_why, s.created_at, s.updated_at"
    };
}

impl ScheduleStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Makes the row follow the definition's active version. A new version (another hash)
    /// starts from `next_fire_at` and is no longer retired; the same version keeps its state.
    pub async fn upsert_def(
        &self,
        tenant: &TenantId,
        name: &str,
        def_hash: &str,
        content: &str,
        enabled: bool,
        next_fire_at: Option<OffsetDateTime>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO schedules (id, tenant_id, name, def_hash, content, enabled, next_fire_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (tenant_id, name) DO UPDATE SET
               def_hash = EXCLUDED.def_hash,
               content = EXCLUDED.content,
               enabled = EXCLUDED.enabled,
               next_fire_at = CASE WHEN schedules.def_hash = EXCLUDED.def_hash
                                    AND schedules.retired_at IS NULL
                                   THEN schedules.next_fire_at ELSE EXCLUDED.next_fire_at END,
               retired_at = CASE WHEN schedules.def_hash = EXCLUDED.def_hash
                                 THEN schedules.retired_at END,
               retired_why = CASE WHEN schedules.def_hash = EXCLUDED.def_hash
                                  THEN schedules.retired_why END,
               updated_at = now()",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(name)
        .bind(def_hash)
        .bind(content)
        .bind(enabled)
        .bind(next_fire_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Stops the schedule for good (its definition retired or deleted); no-op when absent.
    pub async fn retire(&self, tenant: &TenantId, name: &str, why: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE schedules SET retired_at = now(), retired_why = $3, next_fire_at = NULL, updated_at = now()
             WHERE tenant_id = $1 AND name = $2 AND retired_at IS NULL",
        )
        .bind(tenant.as_str())
        .bind(name)
        .bind(why)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The schedule's row with its last run's status; another tenant's is `None`.
    pub async fn get(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<ScheduleRow>, StoreError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules s LEFT JOIN runs r ON r.id = s.last_run_id
             WHERE s.tenant_id = $1 AND s.name = $2"
        ))
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Every schedule row of the tenant, by name.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<ScheduleRow>, StoreError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules s LEFT JOIN runs r ON r.id = s.last_run_id
             WHERE s.tenant_id = $1 ORDER BY s.name LIMIT 10000"
        ))
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Pauses, or resumes from `next_fire_at` (the first slot after now: slots passed while
    /// paused are not caught up). `false` when there is no such schedule.
    pub async fn set_paused(
        &self,
        tenant: &TenantId,
        name: &str,
        paused: bool,
        next_fire_at: Option<OffsetDateTime>,
    ) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "UPDATE schedules SET paused = $3,
               next_fire_at = CASE WHEN $3 OR retired_at IS NOT NULL OR NOT paused THEN next_fire_at ELSE $4 END,
               updated_at = now()
             WHERE tenant_id = $1 AND name = $2",
        )
        .bind(tenant.as_str())
        .bind(name)
        .bind(paused)
        .bind(next_fire_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// The most recent fires of a schedule, newest first.
    pub async fn fires(&self, schedule_id: Uuid, limit: i64) -> Result<Vec<FireRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT f.id, f.kind, f.fire_at, f.status, f.run_id, r.status AS run_status, f.error, f.attempts,
                    f.on_complete, f.on_complete_result
             FROM schedule_fires f LEFT JOIN runs r ON r.id = f.run_id
             WHERE f.schedule_id = $1 ORDER BY f.fire_at DESC, f.id DESC LIMIT $2",
        )
        .bind(schedule_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// A run-now fire: a distinct slot at the database's now, not a move of `next_fire_at`.
    /// `None` when there is no live schedule of that name.
    pub async fn claim_run_now(
        &self,
        tenant: &TenantId,
        name: &str,
        claimer: &str,
        on_complete: bool,
    ) -> Result<Option<ClaimedFire>, StoreError> {
        Ok(sqlx::query_as(
            "WITH s AS (
               UPDATE schedules SET run_now_fires = run_now_fires + 1, updated_at = now()
               WHERE tenant_id = $2 AND name = $3 AND retired_at IS NULL
               RETURNING id, tenant_id, name, def_hash, content
             ), f AS (
               INSERT INTO schedule_fires (id, schedule_id, tenant_id, kind, fire_at, def_hash, status, claimed_by, on_complete)
               SELECT $1, s.id, s.tenant_id, 'run_now', clock_timestamp(), s.def_hash, 'claimed', $4,
                      CASE WHEN $5 THEN 'pending' END
               FROM s
               RETURNING id, schedule_id, tenant_id, kind, fire_at, def_hash, attempts
             )
             SELECT f.*, s.name, s.content FROM f JOIN s ON s.id = f.schedule_id",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(name)
        .bind(claimer)
        .bind(on_complete)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Claims the due slots of up to `limit` schedules in one transaction (see the module
    /// docs). `decide` sees each locked schedule and says which slots to claim and where
    /// `next_fire_at` goes; it runs inside the transaction, so it must not wait on anything.
    pub async fn claim_due(
        &self,
        limit: i64,
        claimer: &str,
        decide: &mut (dyn FnMut(&DueSchedule) -> Decision + Send),
    ) -> Result<Vec<ClaimedFire>, StoreError> {
        let mut tx = crate::begin(&self.pool).await?;
        let rows: Vec<DueSchedule> = sqlx::query_as(
            "SELECT s.id, s.tenant_id, s.name, s.def_hash, s.content, s.next_fire_at, s.cron_fires,
                    (COALESCE(r.status IN ('queued', 'running', 'awaiting_input', 'paused'), false)
                     OR EXISTS (SELECT 1 FROM schedule_fires f
                                WHERE f.schedule_id = s.id AND f.status = 'claimed')) AS busy,
                    now() AS db_now
             FROM schedules s LEFT JOIN runs r ON r.id = s.last_run_id
             WHERE s.next_fire_at <= now() AND s.enabled AND NOT s.paused AND s.retired_at IS NULL
               -- A draining tenant's schedules, and every one in maintenance, hold their fires:
               -- the resume catches them up by their catch_up_max, as after a downtime.
               AND NOT EXISTS (SELECT 1 FROM pauses p WHERE p.scope IN (s.tenant_id, '*'))
             ORDER BY s.next_fire_at
             LIMIT $1
             FOR UPDATE OF s SKIP LOCKED",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        // Column arrays for one insert and one update.
        let (mut f_id, mut f_sched, mut f_tenant, mut f_at, mut f_hash, mut f_status, mut f_oc) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let (mut s_id, mut s_next, mut s_cron, mut s_skip, mut s_retire, mut s_last) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut claimed = Vec::new();
        for due in &rows {
            let d = decide(due);
            let mut fired = 0i64;
            let mut skipped = d.skipped_unrecorded;
            let mut last = None;
            for (at, fire) in &d.fires {
                let id = Uuid::now_v7();
                f_id.push(id);
                f_sched.push(due.id);
                f_tenant.push(due.tenant.clone());
                f_at.push(*at);
                f_hash.push(due.def_hash.clone());
                f_status.push(if *fire { "claimed" } else { "skipped" });
                f_oc.push((*fire && d.on_complete).then_some("pending"));
                if *fire {
                    fired += 1;
                    last = Some(*at);
                    claimed.push(ClaimedFire {
                        id,
                        schedule_id: due.id,
                        tenant: due.tenant.clone(),
                        name: due.name.clone(),
                        kind: "cron".into(),
                        fire_at: *at,
                        def_hash: due.def_hash.clone(),
                        content: due.content.clone(),
                        attempts: 0,
                    });
                } else {
                    skipped += 1;
                }
            }
            s_id.push(due.id);
            s_next.push(d.next_fire_at);
            s_cron.push(fired);
            s_skip.push(skipped);
            s_retire.push(d.retire);
            s_last.push(last);
        }
        if !f_id.is_empty() {
            sqlx::query(
                "INSERT INTO schedule_fires (id, schedule_id, tenant_id, kind, fire_at, def_hash, status, claimed_by, on_complete)
                 SELECT id, sid, tid, 'cron', at, h, st, $8, oc
                 FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[])
                      AS t(id, sid, tid, at, h, st, oc)",
            )
            .bind(&f_id)
            .bind(&f_sched)
            .bind(&f_tenant)
            .bind(&f_at)
            .bind(&f_hash)
            .bind(&f_status)
            .bind(&f_oc)
            .bind(claimer)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE schedules s SET
               next_fire_at = CASE WHEN t.why IS NULL THEN t.next END,
               cron_fires = s.cron_fires + t.fired,
               skipped = s.skipped + t.skipped,
               retired_at = CASE WHEN t.why IS NULL THEN s.retired_at ELSE now() END,
               retired_why = COALESCE(t.why, s.retired_why),
               last_fire_at = GREATEST(s.last_fire_at, t.last),
               updated_at = now()
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::text[], $6::timestamptz[])
                  AS t(id, next, fired, skipped, why, last)
             WHERE s.id = t.id",
        )
        .bind(&s_id)
        .bind(&s_next)
        .bind(&s_cron)
        .bind(&s_skip)
        .bind(&s_retire)
        .bind(&s_last)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(claimed)
    }

    /// Claimed fires nobody dispatched within `older_than_ms` (their replica died between
    /// claim and run, or the run could not be made yet), taken over by `claimer`.
    pub async fn reclaim_stale(
        &self,
        claimer: &str,
        older_than_ms: i64,
        limit: i64,
    ) -> Result<Vec<ClaimedFire>, StoreError> {
        Ok(sqlx::query_as(
            "WITH f AS (
               UPDATE schedule_fires SET claimed_by = $1, claimed_at = now(), attempts = attempts + 1
               WHERE id IN (SELECT id FROM schedule_fires
                            WHERE status = 'claimed' AND claimed_at < now() - make_interval(secs => $2::float8 / 1000)
                            ORDER BY claimed_at LIMIT $3 FOR UPDATE SKIP LOCKED)
               RETURNING id, schedule_id, tenant_id, kind, fire_at, def_hash, attempts
             )
             SELECT f.*, s.name, s.content FROM f JOIN schedules s ON s.id = f.schedule_id",
        )
        .bind(claimer)
        .bind(older_than_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Records the runs made for claimed fires (`(fire, run)` pairs), and each schedule's last
    /// run. A fire already dispatched (by a slower twin) keeps its first record.
    pub async fn mark_dispatched(&self, done: &[(Uuid, Uuid)]) -> Result<(), StoreError> {
        if done.is_empty() {
            return Ok(());
        }
        let fires: Vec<Uuid> = done.iter().map(|d| d.0).collect();
        let runs: Vec<Uuid> = done.iter().map(|d| d.1).collect();
        sqlx::query(
            "WITH f AS (
               UPDATE schedule_fires f SET status = 'dispatched', run_id = t.run, dispatched_at = now(), error = NULL
               FROM UNNEST($1::uuid[], $2::uuid[]) AS t(fire, run)
               WHERE f.id = t.fire AND f.status = 'claimed'
               RETURNING f.schedule_id, f.fire_at, f.run_id
             ), latest AS (
               SELECT DISTINCT ON (schedule_id) schedule_id, fire_at, run_id FROM f
               ORDER BY schedule_id, fire_at DESC
             )
             UPDATE schedules s SET last_run_id = latest.run_id,
                    last_fire_at = GREATEST(s.last_fire_at, latest.fire_at)
             FROM latest
             WHERE s.id = latest.schedule_id AND (s.last_fire_at IS NULL OR s.last_fire_at <= latest.fire_at)",
        )
        .bind(&fires)
        .bind(&runs)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A fire whose run could not be made: `permanent` ends it as failed; otherwise it stays
    /// claimed and is retried once stale (attempts are counted by [`Self::reclaim_stale`]).
    pub async fn mark_failed(
        &self,
        fire: Uuid,
        error: &str,
        permanent: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE schedule_fires SET error = $2,
               status = CASE WHEN $3 THEN 'failed' ELSE status END,
               on_complete = CASE WHEN $3 THEN NULL ELSE on_complete END
             WHERE id = $1 AND status = 'claimed'",
        )
        .bind(fire)
        .bind(error)
        .bind(permanent)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Fires whose runs have ended with `on_complete` actions pending, locked for the caller
    /// until it records the outcome with [`Self::finish_on_complete`] in the same transaction.
    pub async fn begin_on_complete(
        &self,
        limit: i64,
    ) -> Result<
        (
            sqlx::Transaction<'static, sqlx::Postgres>,
            Vec<FinishedFire>,
        ),
        StoreError,
    > {
        let mut tx = crate::begin(&self.pool).await?;
        let out = sqlx::query_as(
            "SELECT f.id, f.tenant_id, s.name, f.fire_at, f.run_id, r.status AS run_status, s.content
             FROM schedule_fires f
             JOIN runs r ON r.id = f.run_id
             JOIN schedules s ON s.id = f.schedule_id
             WHERE f.on_complete = 'pending' AND r.status IN ('succeeded', 'failed', 'cancelled')
             ORDER BY f.dispatched_at
             LIMIT $1
             FOR UPDATE OF f SKIP LOCKED",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        Ok((tx, out))
    }

    /// Records the outcome of a fire's `on_complete` actions (`done` or `failed`).
    pub async fn finish_on_complete(
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        fire: Uuid,
        ok: bool,
        result: &Value,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE schedule_fires SET on_complete = $2, on_complete_result = $3 WHERE id = $1",
        )
        .bind(fire)
        .bind(if ok { "done" } else { "failed" })
        .bind(result)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }
}

/// Accepted webhook deliveries: the dedupe memory.
#[derive(Clone)]
pub struct DeliveryStore {
    pool: PgPool,
    /// Connections kept for the two statements of every delivery (its lookup and its burn),
    /// which would otherwise each pay the pool's test on release.
    kept: Arc<Kept>,
}

/// At most this many connections kept by a [`DeliveryStore`] beside its pool.
const KEPT_CONNECTIONS: usize = 4;

/// What an accepted delivery made.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Accepted {
    pub run_id: Option<Uuid>,
    pub channel_seq: Option<i64>,
    pub accepted_at: OffsetDateTime,
}

impl DeliveryStore {
    pub fn new(pool: PgPool) -> Self {
        Self {
            kept: Arc::new(Kept::new(pool.clone(), KEPT_CONNECTIONS)),
            pool,
        }
    }

    /// The accepted delivery of the webhook under id `first` or else `other`; one statement.
    /// (Two lookups of the primary key, not `= ANY($ids)`: a cached generic plan for that,
    /// made while the table looked empty, scans the whole table for ever after.)
    pub async fn find(
        &self,
        tenant: &TenantId,
        webhook: &str,
        first: &str,
        other: Option<&str>,
    ) -> Result<Option<Accepted>, StoreError> {
        self.kept
            .run(async |conn| {
                Ok(sqlx::query_as(
                    "(SELECT run_id, channel_seq, accepted_at FROM webhook_deliveries
                      WHERE tenant_id = $1 AND webhook = $2 AND delivery_id = $3)
                     UNION ALL
                     (SELECT run_id, channel_seq, accepted_at FROM webhook_deliveries
                      WHERE tenant_id = $1 AND webhook = $2 AND delivery_id = $4)
                     LIMIT 1",
                )
                .bind(tenant.as_str())
                .bind(webhook)
                .bind(first)
                .bind(other)
                .fetch_optional(conn)
                .await?)
            })
            .await
    }

    /// Burns the delivery's ids with what it made, in one statement: `first` (the one a
    /// concurrent twin races for), and `other` with it. When a twin burned `first` first,
    /// returns the twin's record and `false`, and burns `other` (the twin's header id may have
    /// been another) with the twin's record.
    pub async fn accept(
        &self,
        tenant: &TenantId,
        webhook: &str,
        first: &str,
        other: Option<&str>,
        run_id: Option<Uuid>,
        channel_seq: Option<i64>,
    ) -> Result<(Accepted, bool), StoreError> {
        let accepted_at: Option<OffsetDateTime> = self
            .kept
            .run(async |conn| {
                Ok::<_, StoreError>(
                    sqlx::query_scalar(
                        "WITH first AS (
                           INSERT INTO webhook_deliveries
                             (tenant_id, webhook, delivery_id, run_id, channel_seq)
                           VALUES ($1, $2, $3, $4, $5)
                           ON CONFLICT DO NOTHING RETURNING accepted_at
                         ), other AS (
                           INSERT INTO webhook_deliveries
                             (tenant_id, webhook, delivery_id, run_id, channel_seq)
                           SELECT $1, $2, $6, $4, $5
                           WHERE $6 IS NOT NULL AND EXISTS (SELECT 1 FROM first)
                           ON CONFLICT DO NOTHING
                         )
                         SELECT accepted_at FROM first",
                    )
                    .bind(tenant.as_str())
                    .bind(webhook)
                    .bind(first)
                    .bind(run_id)
                    .bind(channel_seq)
                    .bind(other)
                    .fetch_optional(conn)
                    .await?,
                )
            })
            .await?;
        if let Some(accepted_at) = accepted_at {
            return Ok((
                Accepted {
                    run_id,
                    channel_seq,
                    accepted_at,
                },
                true,
            ));
        }
        let twin = self
            .find(tenant, webhook, first, None)
            .await?
            .ok_or(StoreError::Db(sqlx::Error::RowNotFound))?;
        if let Some(other) = other {
            self.kept
                .run(async |conn| {
                    sqlx::query(
                        "INSERT INTO webhook_deliveries
                           (tenant_id, webhook, delivery_id, run_id, channel_seq)
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    )
                    .bind(tenant.as_str())
                    .bind(webhook)
                    .bind(other)
                    .bind(twin.run_id)
                    .bind(twin.channel_seq)
                    .execute(conn)
                    .await
                })
                .await?;
        }
        Ok((twin, false))
    }

    /// Forgets accepted deliveries older than `days` (a replay after that starts a new run).
    pub async fn prune(&self, days: i64) -> Result<u64, StoreError> {
        Ok(sqlx::query(
            "DELETE FROM webhook_deliveries WHERE accepted_at < now() - make_interval(days => $1::int)",
        )
        .bind(days)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is how a test fails"
)]
mod tests {
    use weft_testkit::TestDb;

    use super::*;

    /// A delivery burns both its ids in one statement; a replay under either finds it; a twin
    /// that burns the same first id later gets the first's record and burns nothing.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_delivery_burns_both_ids_at_once_and_a_twin_gets_the_first() {
        let db = TestDb::new().await;
        let store = DeliveryStore::new(db.pool.clone());
        let acme = TenantId::parse("acme").unwrap();
        let (run, twin_run) = (Uuid::now_v7(), Uuid::now_v7());
        let none = store.find(&acme, "gh", "body", Some("hdr")).await.unwrap();
        assert_eq!(none, None);
        let (a, first) = store
            .accept(&acme, "gh", "body", Some("hdr"), Some(run), None)
            .await
            .unwrap();
        assert!(first);
        assert_eq!(a.run_id, Some(run));
        for (one, other) in [("body", None), ("hdr", None), ("other", Some("hdr"))] {
            let found = store.find(&acme, "gh", one, other).await.unwrap();
            assert_eq!(found.map(|f| f.run_id), Some(Some(run)), "{one} {other:?}");
        }
        // A twin with another header id: the first's record, and its header id burned with it.
        let (b, first) = store
            .accept(&acme, "gh", "body", Some("late"), Some(twin_run), None)
            .await
            .unwrap();
        assert!(!first);
        assert_eq!(b, a);
        let late = store.find(&acme, "gh", "late", None).await.unwrap();
        assert_eq!(late.map(|f| f.run_id), Some(Some(run)));
        // The first id wins when both are burned, by different deliveries.
        store
            .accept(&acme, "gh", "new", None, Some(twin_run), Some(7))
            .await
            .unwrap();
        let found = store.find(&acme, "gh", "new", Some("body")).await.unwrap();
        assert_eq!(found.map(|f| f.run_id), Some(Some(twin_run)));
        // Another tenant's and another webhook's ids are their own.
        let other = TenantId::parse("other").unwrap();
        assert_eq!(store.find(&other, "gh", "body", None).await.unwrap(), None);
        assert_eq!(
            store.find(&acme, "slack", "body", None).await.unwrap(),
            None
        );
    }
}
