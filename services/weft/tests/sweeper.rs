//! No run is stranded: a gateway that dies between committing a run and dispatching it, a lease
//! that lapsed with no redelivery, and a run that keeps losing its executors are all found by
//! the executors' sweeper (docs/runs.md, "Recovery").

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::{TestFleet, create, put_agent, stream};
use serde_json::json;
use uuid::Uuid;

/// A fleet whose executor sweeps every 200 ms for runs stranded for 1 s.
async fn sweeping_fleet() -> TestFleet {
    TestFleet::start_with(|c| {
        c.executor.sweep_interval_ms = 200;
        c.executor.sweep_after_ms = 1_000;
    })
    .await
}

async fn pool(f: &TestFleet) -> sqlx::PgPool {
    sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_that_dies_between_the_insert_and_the_dispatch_loses_no_run() {
    let f = sweeping_fleet().await;
    // A second deployment replica that only serves the gateway, set to crash right after it
    // commits a run and before it publishes the run's dispatch.
    common::run_on_a_process_that_dies_at_insert(&f, &[("WEFT_EXECUTOR__EMBEDDED", "false")]).await;

    // The run was committed and never dispatched (the sweeper may already have found it); it
    // runs to the end.
    let db = pool(&f).await;
    let id: Uuid = sqlx::query_scalar("SELECT id FROM runs WHERE agent_name = 'worker'")
        .fetch_one(&db)
        .await
        .unwrap();
    let frames = stream(&f, &f.admin, &id.to_string(), "", None).await;
    let (_, kind, last) = frames.last().unwrap();
    assert_eq!(kind, "run_finished");
    assert_eq!(last["data"]["status"], "succeeded", "{last}");
    let results = frames.iter().filter(|(_, k, _)| k == "tool_result").count();
    assert_eq!(results, 1);
    let swept: Option<time::OffsetDateTime> =
        sqlx::query_scalar("SELECT swept_at FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(swept.is_some(), "the sweeper dispatched it");
}

/// An interactive run with no input: parked when its creation returns, with no dispatch in flight.
async fn parked_run(f: &TestFleet) -> Uuid {
    put_agent(f, &f.admin, "chat", json!({"model": "mock-1"})).await;
    let run = create(f, &f.admin, json!({"agent": "chat", "interactive": true})).await;
    let (_, now) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(now["status"], "awaiting_input", "{now}");
    Uuid::parse_str(&run).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lapsed_lease_with_no_redelivery_is_taken_over() {
    let f = sweeping_fleet().await;
    let id = parked_run(&f).await;
    let db = pool(&f).await;
    // As an executor that died holding the run leaves it once JetStream has given up on its
    // dispatch: running, its lease lapsed, input waiting.
    sqlx::query(
        "INSERT INTO run_inputs (id, run_id, tenant_id, text)
         SELECT $2, id, tenant_id, 'hello' FROM runs WHERE id = $1",
    )
    .bind(id)
    .bind(Uuid::now_v7())
    .execute(&db)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE runs SET status = 'running', lease_owner = 'executor-gone', lease_epoch = lease_epoch + 1,
             lease_expires_at = now() - interval '1 minute' WHERE id = $1",
    )
    .bind(id)
    .execute(&db)
    .await
    .unwrap();
    let run = id.to_string();
    // An executor takes it over, answers the input and parks it again.
    let frames =
        common::stream_until(&f, &f.admin, &run, "?from_seq=2", None, "awaiting_input").await;
    let kinds: Vec<&str> = frames.iter().map(|(_, k, _)| k.as_str()).collect();
    assert!(kinds.contains(&"user_input"), "{kinds:?}");
    assert!(kinds.contains(&"assistant_message"), "{kinds:?}");
    let (lapses, sweeps, swept): (i32, i32, Option<time::OffsetDateTime>) =
        sqlx::query_as("SELECT lapses, sweeps, swept_at FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(swept.is_some(), "the sweeper dispatched it");
    assert_eq!(sweeps, 0, "a lease taken resets the sweeps");
    assert_eq!(
        lapses, 0,
        "the takeover counted, and the turn it made reset the count"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_keeps_losing_its_executor_is_ended_with_an_error() {
    let f = sweeping_fleet().await;
    let id = parked_run(&f).await;
    let db = pool(&f).await;
    // Its executors lost it max_deliver (20) times, the last one just now.
    sqlx::query(
        "UPDATE runs SET status = 'running', lease_owner = 'executor-gone', lease_epoch = 20,
             lapses = 19, lease_expires_at = now() - interval '1 minute' WHERE id = $1",
    )
    .bind(id)
    .execute(&db)
    .await
    .unwrap();
    let run = id.to_string();
    let frames = stream(&f, &f.admin, &run, "?from_seq=2", None).await;
    let (_, kind, last) = frames.last().unwrap();
    assert_eq!(kind, "run_finished");
    assert_eq!(last["data"]["status"], "failed", "{last}");
    assert_eq!(last["data"]["stop_reason"], "error", "{last}");
    let error = frames.iter().find(|(_, k, _)| k == "error").unwrap();
    let message = error.2["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("lost its executor 20 times") && message.contains(&run),
        "{message}"
    );
    let (_, now) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(now["status"], "failed");
    assert_eq!(now["error"]["code"], "unavailable");
    // The late executor is fenced out: the epoch moved on.
    let epoch: i64 = sqlx::query_scalar("SELECT lease_epoch FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(epoch, 21);
}
