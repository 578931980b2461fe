//! The in-process fast path of `weft up` (docs/runs.md): a run created here is inserted leased
//! to this process's executor and handed over in memory, with no dispatch message; a process
//! that dies holding such a run loses nothing (the sweeper takes it over once its lease lapses);
//! and the agent definitions `POST /v1/runs` keeps are dropped on every replica when one changes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::Duration;

use common::{TestFleet, put_agent, stream};
use serde_json::{Value, json};
use uuid::Uuid;

async fn pool(f: &TestFleet) -> sqlx::PgPool {
    sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap()
}

/// Dispatch messages ever stored in the deployment's JetStream dispatch stream.
async fn dispatches(f: &TestFleet) -> u64 {
    let bus = weft_bus::Bus::connect(&f.config.nats.url, &f.config.nats.prefix)
        .await
        .unwrap();
    let mut stream = bus.ensure_dispatch_stream().await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// A run with one tool call, created and streamed to its end; its id and frames.
async fn one_run(f: &TestFleet) -> (Uuid, Vec<(i64, String, Value)>) {
    put_agent(
        f,
        &f.admin,
        "worker",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    let input = common::script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "done",
    );
    let (status, run) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "worker", "input": input}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["run_id"].as_str().unwrap().to_owned();
    let frames = stream(f, &f.admin, &id, "", None).await;
    (Uuid::parse_str(&id).unwrap(), frames)
}

fn assert_succeeded_once(frames: &[(i64, String, Value)]) {
    let (_, kind, last) = frames.last().unwrap();
    assert_eq!(kind, "run_finished");
    assert_eq!(last["data"]["status"], "succeeded", "{last}");
    let results = frames.iter().filter(|(_, k, _)| k == "tool_result").count();
    assert_eq!(results, 1, "one tool result: {frames:?}");
    let seqs: Vec<i64> = common::persisted(frames).iter().map(|(s, _)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "every event once, in order: {seqs:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_created_here_is_worked_here_without_a_dispatch() {
    let f = TestFleet::start().await;
    let (id, frames) = one_run(&f).await;
    assert_succeeded_once(&frames);
    // Leased once, at its insert: the epoch an acquired lease would have bumped is still 1.
    let epoch: i64 = sqlx::query_scalar("SELECT lease_epoch FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&pool(&f).await)
        .await
        .unwrap();
    assert_eq!(epoch, 1);
    assert_eq!(dispatches(&f).await, 0, "no dispatch message was published");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_fast_path_every_run_goes_through_jetstream() {
    let f = TestFleet::start_with(|c| c.executor.local_fast_path = false).await;
    let (_, frames) = one_run(&f).await;
    assert_succeeded_once(&frames);
    assert_eq!(dispatches(&f).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_dies_holding_a_run_it_just_created_loses_nothing() {
    // The survivor: another replica whose executor sweeps every 200 ms for runs stranded 1 s.
    let f = TestFleet::start_with(|c| {
        c.executor.sweep_interval_ms = 200;
        c.executor.sweep_after_ms = 1_000;
    })
    .await;
    // A whole `weft up` (gateway and executor) that aborts right after it committed a run
    // leased to its own executor, before that executor starts it.
    common::run_on_a_process_that_dies_at_insert(
        &f,
        &[
            ("WEFT_EXECUTOR__LEASE_TTL_MS", "1000"),
            ("WEFT_EXECUTOR__HEARTBEAT_MS", "200"),
        ],
    )
    .await;

    let db = pool(&f).await;
    // Inserted leased (the fast path), not queued; the survivor takes it only once the dead
    // process's lease (1 s) and the sweep delay (1 s) have passed.
    let (id, status): (Uuid, String) =
        sqlx::query_as("SELECT id, status FROM runs WHERE agent_name = 'worker'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(status, "running");
    let frames = stream(&f, &f.admin, &id.to_string(), "", None).await;
    assert_succeeded_once(&frames);
    let (swept, lapses): (Option<time::OffsetDateTime>, i32) =
        sqlx::query_as("SELECT swept_at, lapses FROM runs WHERE id = $1")
            .bind(id)
            .fetch_one(&db)
            .await
            .unwrap();
    assert!(swept.is_some(), "the sweeper dispatched it");
    // Taken over from the dead owner once (reset to 0 only by progress, which came after).
    assert!(lapses <= 1, "{lapses}");
    // The sweeper's dispatch (a slow machine may see it sweep once more before the take-over).
    assert!(dispatches(&f).await >= 1);
}

/// The agent hash a new (parked, interactive) run of `agent` on `f` gets.
async fn hash_of_a_new_run(f: &TestFleet, agent: &str) -> String {
    let (status, run) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": agent, "interactive": true}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    run["agent_hash"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_agent_reaches_new_runs_on_every_replica() {
    let a = TestFleet::start().await;
    let b = a.join(|_| {}).await;
    put_agent(
        &a,
        &a.admin,
        "helper",
        json!({"model": "mock-1", "description": "one"}),
    )
    .await;
    let one_a = hash_of_a_new_run(&a, "helper").await;
    let one_b = hash_of_a_new_run(&b, "helper").await;
    assert_eq!(one_a, one_b);
    // Both replicas now keep version one. The replica that took the change starts the new
    // version at once.
    let mut changes = announcements(&a).await;
    put_agent(
        &a,
        &a.admin,
        "helper",
        json!({"model": "mock-1", "description": "two"}),
    )
    .await;
    let two = hash_of_a_new_run(&a, "helper").await;
    assert_ne!(two, one_a);
    // The other drops version one when the substrate's announcement reaches it (its cache
    // would keep it 30 s): once the test's own copy of the announcement arrived, b's is at
    // most one delivery behind, so a few requests see the change.
    announced(&mut changes, "helper").await;
    let mut now = hash_of_a_new_run(&b, "helper").await;
    for _ in 0..100 {
        if now == two {
            break;
        }
        assert_eq!(now, one_b, "only the old or the new version");
        now = hash_of_a_new_run(&b, "helper").await;
    }
    assert_eq!(now, two, "replica b still starts version one");
    // Retiring is a change too.
    let (status, _) = a
        .post("/v1/agents/helper/retire", &a.admin, json!({}))
        .await;
    assert_eq!(status, 200);
    announced(&mut changes, "helper").await;
    let body = json!({"agent": "helper", "interactive": true});
    let mut status = b.post("/v1/runs", &b.admin, body.clone()).await.0;
    for _ in 0..100 {
        if status == 404 {
            break;
        }
        assert_eq!(status, 201);
        status = b.post("/v1/runs", &b.admin, body.clone()).await.0;
    }
    assert_eq!(status, 404, "replica b still starts a retired agent");
}

/// The deployment's announcements of agent changes, subscribed to now.
async fn announcements(f: &TestFleet) -> async_nats::Subscriber {
    weft_bus::Bus::connect(&f.config.nats.url, &f.config.nats.prefix)
        .await
        .unwrap()
        .subscribe_agent_changes()
        .await
        .unwrap()
}

/// Waits for the announcement of a change of `agent`.
async fn announced(changes: &mut async_nats::Subscriber, agent: &str) {
    use futures::StreamExt as _;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), changes.next())
            .await
            .expect("the change was announced")
            .unwrap();
        let c: weft_bus::AgentChanged = serde_json::from_slice(&msg.payload).unwrap();
        if c.name == agent {
            return;
        }
    }
}
