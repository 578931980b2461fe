//! Evaluations as the `Evaluation` tool reads and writes them (`migrations/20261130000010_plans.sql`,
//! the rows [`crate::plans`] writes for verdicts): one recorded under the run's lease that tells a
//! repeat of the same call from another call, a run's rows newest first, and the totals per
//! definition version that `GET /v1/evaluations` and `Evaluation.aggregate` answer with. Every
//! query filters on the tenant.

use std::collections::BTreeMap;

use serde_json::Value;
use sqlx::Row as _;
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::{RunId, TenantId};

use crate::plans::{EvaluationCount, NewEvaluation};
use crate::runs::{Fenced, RunStore, RunStoreError};

/// One evaluation as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluationRow {
    pub id: Uuid,
    pub run_id: RunId,
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
    pub created_at: OffsetDateTime,
}

/// What [`Fenced::record_evaluation`] found.
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    /// The row was written now.
    New(EvaluationRow),
    /// A row of the same (run, task, attempt, role) was there already: this one was not
    /// written. Whether it is the caller's own (a repeat) is the caller's to tell.
    Existing(EvaluationRow),
}

/// The evaluations of one definition version, summed over roles and verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct EvaluationTotals {
    pub agent_hash: String,
    pub total: u64,
    pub pass: u64,
    pub fail: u64,
    pub inconclusive: u64,
    pub score_sum: f64,
    /// Counts per emitter role, then per verdict.
    pub by_role: BTreeMap<String, BTreeMap<String, u64>>,
    /// The newest evaluation of this version.
    pub last_at: OffsetDateTime,
}

impl EvaluationTotals {
    /// pass / total (0 when there are none).
    pub fn pass_rate(&self) -> f64 {
        ratio(u64_f64(self.pass), self.total)
    }

    /// The mean score (0 when there are none).
    pub fn mean_score(&self) -> f64 {
        ratio(self.score_sum, self.total)
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "a rate: counts past 2^53 lose nothing that matters"
)]
fn u64_f64(n: u64) -> f64 {
    n as f64
}

fn ratio(part: f64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        part / u64_f64(total)
    }
}

/// Sums `counts` (of one agent) per version, the version evaluated most recently first (then
/// by hash).
pub fn evaluation_totals(counts: &[EvaluationCount]) -> Vec<EvaluationTotals> {
    let mut by_hash: BTreeMap<&str, EvaluationTotals> = BTreeMap::new();
    for c in counts {
        let n = u64::try_from(c.count).unwrap_or(0);
        let t = by_hash
            .entry(c.agent_hash.as_str())
            .or_insert_with(|| EvaluationTotals {
                agent_hash: c.agent_hash.clone(),
                total: 0,
                pass: 0,
                fail: 0,
                inconclusive: 0,
                score_sum: 0.0,
                by_role: BTreeMap::new(),
                last_at: c.last_at,
            });
        t.last_at = t.last_at.max(c.last_at);
        t.score_sum += c.score_sum;
        t.total += n;
        match c.verdict.as_str() {
            "pass" => t.pass += n,
            "fail" => t.fail += n,
            _ => t.inconclusive += n,
        }
        *t.by_role
            .entry(c.emitter_role.clone())
            .or_default()
            .entry(c.verdict.clone())
            .or_default() += n;
    }
    let mut out: Vec<EvaluationTotals> = by_hash.into_values().collect();
    out.sort_by(|a, b| {
        b.last_at
            .cmp(&a.last_at)
            .then_with(|| a.agent_hash.cmp(&b.agent_hash))
    });
    out
}

macro_rules! evaluation_columns {
    () => {
        "id, run_id, task_id, attempt, agent_name, agent_hash, emitter_role, verdict, score, dimensions, created_at"
    };
}

fn evaluation_row(r: &sqlx::postgres::PgRow) -> Result<EvaluationRow, sqlx::Error> {
    Ok(EvaluationRow {
        id: r.try_get("id")?,
        run_id: RunId(r.try_get("run_id")?),
        task: r.try_get("task_id")?,
        attempt: u32::try_from(r.try_get::<i32, _>("attempt")?).unwrap_or(0),
        agent_name: r.try_get("agent_name")?,
        agent_hash: r.try_get("agent_hash")?,
        emitter_role: r.try_get("emitter_role")?,
        verdict: r.try_get("verdict")?,
        score: r.try_get("score")?,
        dimensions: r.try_get("dimensions")?,
        created_at: r.try_get("created_at")?,
    })
}

impl Fenced {
    /// Records an evaluation of this run unless one of the same (task, attempt, role) is there,
    /// and returns the row either way: a repeat of a write finds what the first one wrote.
    pub async fn record_evaluation(
        &mut self,
        e: &NewEvaluation,
    ) -> Result<Recorded, RunStoreError> {
        let (run, tenant) = self.run();
        let tenant = tenant.to_owned();
        let attempt = i32::try_from(e.attempt).unwrap_or(i32::MAX);
        let written = sqlx::query(concat!(
            "INSERT INTO evaluations (id, tenant_id, run_id, task_id, attempt, agent_name, agent_hash,
                                      emitter_role, verdict, score, dimensions)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (run_id, task_id, attempt, emitter_role) DO NOTHING
             RETURNING ",
            evaluation_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(&tenant)
        .bind(run.0)
        .bind(&e.task)
        .bind(attempt)
        .bind(&e.agent_name)
        .bind(&e.agent_hash)
        .bind(&e.emitter_role)
        .bind(&e.verdict)
        .bind(e.score.clamp(0.0, 1.0))
        .bind(&e.dimensions)
        .fetch_optional(&mut **self.tx())
        .await?;
        if let Some(r) = written {
            return Ok(Recorded::New(evaluation_row(&r)?));
        }
        // The conflicting row is committed (the insert waited for it), so this sees it.
        let r = sqlx::query(concat!(
            "SELECT ",
            evaluation_columns!(),
            " FROM evaluations
             WHERE tenant_id = $1 AND run_id = $2 AND task_id = $3 AND attempt = $4
               AND emitter_role = $5"
        ))
        .bind(&tenant)
        .bind(run.0)
        .bind(&e.task)
        .bind(attempt)
        .bind(&e.emitter_role)
        .fetch_one(&mut **self.tx())
        .await?;
        Ok(Recorded::Existing(evaluation_row(&r)?))
    }
}

impl RunStore {
    /// The evaluations of run `run` of `tenant` (only task `task`'s when given), newest first,
    /// at most `limit`. Another tenant's run has none.
    pub async fn run_evaluations(
        &self,
        tenant: &TenantId,
        run: RunId,
        task: Option<&str>,
        limit: i64,
    ) -> Result<Vec<EvaluationRow>, RunStoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            evaluation_columns!(),
            " FROM evaluations
             WHERE tenant_id = $1 AND run_id = $2 AND ($3::text IS NULL OR task_id = $3)
             ORDER BY created_at DESC, id DESC
             LIMIT $4"
        ))
        .bind(tenant.as_str())
        .bind(run.0)
        .bind(task)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(evaluation_row).collect::<Result<_, _>>()?)
    }

    /// [`RunStore::evaluation_counts`] summed per version ([`evaluation_totals`]).
    pub async fn evaluation_totals(
        &self,
        tenant: &TenantId,
        agent: &str,
        version: Option<&str>,
    ) -> Result<Vec<EvaluationTotals>, RunStoreError> {
        let counts = self.evaluation_counts(tenant, agent, version).await?;
        Ok(evaluation_totals(&counts))
    }

    /// Pass rates of agent `agent` of `tenant` per version (one, or every one), newest version
    /// first: what `GET /v1/evaluations` and the `Evaluation` tool's `aggregate` answer.
    pub async fn evaluation_list(
        &self,
        tenant: &TenantId,
        agent: &str,
        version: Option<&str>,
    ) -> Result<weft_core::plan::EvaluationList, RunStoreError> {
        let totals = self.evaluation_totals(tenant, agent, version).await?;
        let data = totals
            .into_iter()
            .map(|t| weft_core::plan::EvaluationAggregate {
                agent: agent.to_owned(),
                pass_rate: t.pass_rate(),
                mean_score: t.mean_score(),
                version: t.agent_hash,
                total: t.total,
                pass: t.pass,
                fail: t.fail,
                inconclusive: t.inconclusive,
                by_role: t.by_role,
            })
            .collect();
        Ok(weft_core::plan::EvaluationList { data })
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is how a test fails"
)]
mod tests {
    use serde_json::json;
    use time::Duration;
    use weft_testkit::TestDb;

    use super::*;
    use crate::runs::{Lease, NewRun};

    fn count(
        hash: &str,
        role: &str,
        verdict: &str,
        n: i64,
        score: f64,
        at: i64,
    ) -> EvaluationCount {
        EvaluationCount {
            agent_hash: hash.into(),
            emitter_role: role.into(),
            verdict: verdict.into(),
            count: n,
            score_sum: score,
            last_at: OffsetDateTime::UNIX_EPOCH + Duration::seconds(at),
        }
    }

    #[test]
    fn totals_sum_per_version_newest_first() {
        let t = evaluation_totals(&[
            count("old", "verifier", "pass", 3, 3.0, 10),
            count("new", "agent", "pass", 1, 1.0, 30),
            count("new", "verifier", "fail", 2, 0.0, 20),
            count("new", "agent", "inconclusive", 1, 0.5, 25),
            count("old", "checks", "fail", 1, 0.0, 5),
        ]);
        assert_eq!(
            t.iter().map(|t| t.agent_hash.as_str()).collect::<Vec<_>>(),
            ["new", "old"]
        );
        let new = &t[0];
        assert_eq!(
            (new.total, new.pass, new.fail, new.inconclusive),
            (4, 1, 2, 1)
        );
        assert!((new.pass_rate() - 0.25).abs() < 1e-9);
        assert!((new.mean_score() - 1.5 / 4.0).abs() < 1e-9);
        assert_eq!(new.by_role["agent"]["pass"], 1);
        assert_eq!(new.by_role["agent"]["inconclusive"], 1);
        assert_eq!(new.by_role["verifier"]["fail"], 2);
        assert_eq!(
            new.last_at,
            OffsetDateTime::UNIX_EPOCH + Duration::seconds(30)
        );
        assert!((t[1].pass_rate() - 0.75).abs() < 1e-9);
        assert!(evaluation_totals(&[]).is_empty());
    }

    async fn leased_run(store: &RunStore, tenant: &str) -> Lease {
        let id = RunId::new();
        let tenant = TenantId::parse(tenant).unwrap();
        store
            .create(&NewRun {
                id,
                tenant,
                subject: "alice".into(),
                agent_name: "judge".into(),
                agent_hash: "h-judge".into(),
                parent_run_id: None,
                root_run_id: id,
                depth: 0,
                interactive: false,
                spec: json!({}),
                idempotency_key: None,
                initial_events: Vec::new(),
                lease: None,
            })
            .await
            .unwrap();
        store
            .acquire_lease(id, "test", 60_000)
            .await
            .unwrap()
            .unwrap()
    }

    fn evaluation(task: &str, verdict: &str, call: &str) -> NewEvaluation {
        NewEvaluation {
            task: task.into(),
            attempt: 0,
            agent_name: "worker".into(),
            agent_hash: "h1".into(),
            emitter_role: "agent".into(),
            verdict: verdict.into(),
            score: 1.0,
            dimensions: json!({"tool_use_id": call}),
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_repeat_finds_the_first_row_and_reads_stay_in_the_tenant() {
        let db = TestDb::new().await;
        let store = RunStore::new(db.pool.clone());
        let lease = leased_run(&store, "acme").await;
        let run = lease.run.id;
        let acme = lease.run.tenant.clone();

        let mut f = store.fenced(&lease).await.unwrap();
        let Recorded::New(first) = f
            .record_evaluation(&evaluation("t1", "pass", "call-1"))
            .await
            .unwrap()
        else {
            panic!("the first write is new")
        };
        f.commit().await.unwrap();
        // The same (run, task, attempt, role) again, whatever it says: the first row.
        let mut f = store.fenced(&lease).await.unwrap();
        let again = f
            .record_evaluation(&evaluation("t1", "fail", "call-2"))
            .await
            .unwrap();
        f.commit().await.unwrap();
        assert_eq!(again, Recorded::Existing(first.clone()));
        let mut f = store.fenced(&lease).await.unwrap();
        let Recorded::New(second) = f
            .record_evaluation(&evaluation("t2", "fail", "call-3"))
            .await
            .unwrap()
        else {
            panic!("another task is another row")
        };
        f.commit().await.unwrap();

        let rows = store.run_evaluations(&acme, run, None, 100).await.unwrap();
        assert_eq!(rows, [second.clone(), first.clone()], "newest first");
        let rows = store
            .run_evaluations(&acme, run, Some("t1"), 100)
            .await
            .unwrap();
        assert_eq!(rows, [first]);
        assert_eq!(
            store.run_evaluations(&acme, run, None, 1).await.unwrap(),
            [second]
        );
        let beta = TenantId::parse("beta").unwrap();
        assert!(
            store
                .run_evaluations(&beta, run, None, 100)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .evaluation_totals(&beta, "worker", None)
                .await
                .unwrap()
                .is_empty()
        );

        let totals = store
            .evaluation_totals(&acme, "worker", None)
            .await
            .unwrap();
        assert_eq!(totals.len(), 1);
        assert_eq!((totals[0].total, totals[0].pass, totals[0].fail), (2, 1, 1));
        assert!(
            store
                .evaluation_totals(&acme, "worker", Some("h2"))
                .await
                .unwrap()
                .is_empty()
        );
    }
}
