//! The group writer's statement against a real Postgres: planned once for every later execution
//! (as a prepared statement is), on a database whose `runs` table is still empty, it must still
//! find each run by its primary key — never by reading the whole table. Every shape of the
//! statement (the parts a batch needs) is checked.
//!
//! The tests use the multi-thread runtime: `TestDb`'s drop closes its pool from another thread
//! while blocking this one.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use sqlx::Row as _;
use weft_store::{StepShape, WRITER_SESSION};
use weft_testkit::TestDb;

#[tokio::test(flavor = "multi_thread")]
async fn every_step_statement_finds_runs_by_key_even_when_planned_on_an_empty_table() {
    let db = TestDb::new().await;
    let mut c = db.pool.acquire().await.unwrap();
    sqlx::query(WRITER_SESSION).execute(&mut *c).await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *c)
        .await
        .unwrap();
    let shapes: Vec<StepShape> = StepShape::every().collect();
    assert_eq!(
        shapes.len(),
        24,
        "lock or update, times events, starts, results"
    );
    assert!(shapes.contains(&StepShape::ALL));
    for (i, shape) in shapes.into_iter().enumerate() {
        let types = shape.param_types();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PREPARE step{i}({}) AS {}",
            types.join(", "),
            shape.sql()
        )))
        .execute(&mut *c)
        .await
        .unwrap_or_else(|e| panic!("{shape:?}: {e}\n{}", shape.sql()));
        let plan: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "EXPLAIN EXECUTE step{i}({})",
            vec!["NULL"; types.len()].join(", ")
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
            "{shape:?}: a step would read the whole runs table:\n{plan}"
        );
        assert_eq!(
            plan.matches("Index Scan using runs_pkey on runs").count(),
            usize::from(shape.lock) + usize::from(shape.update),
            "{shape:?}: the lock and the update each find runs by key:\n{plan}"
        );
        for (part, table, present) in [
            ("events", "Insert on run_events", shape.events),
            (
                "calls started or finished",
                "Insert on tool_ledger",
                shape.starts || shape.dones,
            ),
        ] {
            assert_eq!(
                plan.contains(table),
                present,
                "{shape:?}: the {part} part is there exactly when the batch has it:\n{plan}"
            );
        }
    }
    // Not given back to the pool with the writer's setting (as the writer does with its own).
    c.close_on_drop();
}
