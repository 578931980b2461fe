//! The group writer's statement against a real Postgres: planned once for every later execution
//! (as a prepared statement is), on a database whose `runs` table is still empty, it must still
//! find each run by its primary key — never by reading the whole table.
//!
//! The tests use the multi-thread runtime: `TestDb`'s drop closes its pool from another thread
//! while blocking this one.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use sqlx::Row as _;
use weft_store::{STEP_SQL, WRITER_SESSION};
use weft_testkit::TestDb;

/// The parameter types of [`STEP_SQL`], `$1` to `$27`.
const TYPES: [&str; 27] = [
    "uuid[]",
    "bigint[]",
    "smallint[]",
    "int[]",
    "jsonb[]",
    "text[]",
    "text[]",
    "jsonb[]",
    "jsonb[]",
    "uuid[]",
    "bigint[]",
    "text[]",
    "jsonb[]",
    "uuid[]",
    "text[]",
    "text[]",
    "jsonb[]",
    "bool[]",
    "uuid[]",
    "text[]",
    "text[]",
    "jsonb[]",
    "text[]",
    "bool[]",
    "bigint[]",
    "bigint[]",
    "bigint[]",
];

#[tokio::test(flavor = "multi_thread")]
async fn the_step_statement_finds_runs_by_key_even_when_planned_on_an_empty_table() {
    let db = TestDb::new().await;
    let mut c = db.pool.acquire().await.unwrap();
    sqlx::query(WRITER_SESSION).execute(&mut *c).await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *c)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "PREPARE step({}) AS {STEP_SQL}",
        TYPES.join(", ")
    )))
    .execute(&mut *c)
    .await
    .unwrap();
    let plan: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN EXECUTE step({})",
        vec!["NULL"; TYPES.len()].join(", ")
    )))
    .fetch_all(&mut *c)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<String, _>(0))
    .collect();
    let plan = plan.join("\n");
    assert!(
        !plan.contains("Seq Scan on runs"),
        "a step would read the whole runs table:\n{plan}"
    );
    assert_eq!(
        plan.matches("Index Scan using runs_pkey on runs").count(),
        2,
        "the lock and the update both find runs by key:\n{plan}"
    );
    // Not given back to the pool with the writer's setting (as the writer does with its own).
    c.close_on_drop();
}
