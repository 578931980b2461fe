//! The run spec a run is created with: one function (`RunSpec::resolve`) for runs created over
//! the API and for sub-runs. A sub-run's channel ACL is its parent's intersected with its own
//! agent's (never wider than either); memory scopes and skills are its own agent's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::{TestFleet, create, put_agent, script, stream};
use serde_json::{Value, json};

/// The spec stored with run `run`.
async fn spec_of(f: &TestFleet, run: &str) -> Value {
    let id: uuid::Uuid = run.parse().unwrap();
    sqlx::query_scalar("SELECT spec FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}

// Multi-threaded: the test database pool is used here and closed from `TestDb`'s drop.
#[tokio::test(flavor = "multi_thread")]
async fn a_sub_run_cannot_widen_its_parents_channels() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "child",
        json!({
            "model": "mock-1",
            "channels": {"publish": ["a.b.*", "x"], "subscribe": ["*"]},
            "memory_scopes": ["user"],
        }),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "parent",
        json!({
            "model": "mock-1",
            "tools": ["Agent"],
            "channels": {"publish": ["a.*"], "subscribe": ["inbox.me"]},
            "memory_scopes": ["run"],
        }),
    )
    .await;
    let input = script(
        json!([[{"name": "Agent", "input": {"op": "spawn", "agent": "child", "input": "hi"}}]]),
        "done",
    );
    let run = create(&f, &f.admin, json!({"agent": "parent", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");

    let parent = spec_of(&f, &run).await;
    assert_eq!(
        parent["channels"],
        json!({"publish": ["a.*"], "subscribe": ["inbox.me"]})
    );
    assert_eq!(parent["memory_scopes"], json!(["run"]));

    let (_, list) = f.get("/v1/runs?agent=child&limit=5", &f.admin).await;
    let children = list["runs"].as_array().unwrap();
    assert_eq!(children.len(), 1);
    let child = spec_of(&f, children[0]["run_id"].as_str().unwrap()).await;
    // a.* ∩ {a.b.*, x} = a.b.*; inbox.me ∩ * = inbox.me.
    assert_eq!(
        child["channels"],
        json!({"publish": ["a.b.*"], "subscribe": ["inbox.me"]})
    );
    // Memory scopes come from the child's own definition.
    assert_eq!(child["memory_scopes"], json!(["user"]));
}
