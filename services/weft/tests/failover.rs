//! Crash failover: two `weft executor` processes share the work; one is killed with SIGKILL
//! while it holds runs. Every run still finishes — taken over once its lease lapses — with no
//! tool result recorded twice and no gap in any transcript.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Proc, TestFleet, executor_process};
use futures::StreamExt as _;
use serde_json::{Value, json};

fn executor(f: &TestFleet) -> Proc {
    executor_process(f, &[])
}

#[tokio::test]
async fn killing_an_executor_mid_run_loses_nothing() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        if let Some(weft_config::ProviderConfig::Mock(m)) = c.router.providers.get_mut("mock") {
            m.models.insert(
                "slow".into(),
                weft_config::MockModelConfig {
                    latency_ms: 400,
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let (status, body) = put(
        &f,
        "worker",
        json!({"model": "mock/slow", "tools": ["Context"]}),
    )
    .await;
    assert!(status == 201 || status == 200, "{body}");
    let a = executor(&f);
    let b = executor(&f);
    let turns = json!([
        [{"name": "Context", "input": {"op": "time"}}, {"name": "Context", "input": {"op": "self"}}],
        [{"name": "Context", "input": {"op": "time"}}],
        [{"name": "Context", "input": {"op": "self"}}]
    ]);
    let input = format!("#mock {}", json!({"turns": turns, "reply": "done"}));
    let mut runs = Vec::new();
    for _ in 0..8 {
        let (status, r) = f
            .post(
                "/v1/runs",
                &f.admin,
                json!({"agent": "worker", "input": input}),
            )
            .await;
        assert_eq!(status, 201, "{r}");
        runs.push(r["run_id"].as_str().unwrap().to_owned());
    }
    // Once the first run has a tool result (two of its four model turns still to come), kill
    // whichever executor holds it, in the middle of its work.
    let (first_pid, held, survivor) = kill_holder(&f, &runs[0], a, b).await;

    // Each run's stream ends at its run_finished, wherever it finished.
    for run in &runs {
        let done = finished(&f, run).await;
        assert_eq!(done["data"]["status"], "succeeded", "{run}: {done}");
    }
    let mut taken_over = 0;
    for run in &runs {
        let (_, page) = f
            .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
            .await;
        let events = page["events"].as_array().unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=i64::try_from(seqs.len()).unwrap()).collect::<Vec<_>>(),
            "no gap in {run}"
        );
        let mut calls: HashMap<String, usize> = HashMap::new();
        let mut results: HashMap<String, usize> = HashMap::new();
        for e in events {
            match e["kind"].as_str().unwrap() {
                "tool_call" => {
                    *calls
                        .entry(e["data"]["id"].as_str().unwrap().to_owned())
                        .or_default() += 1
                }
                "tool_result" => {
                    *results
                        .entry(e["data"]["tool_use_id"].as_str().unwrap().to_owned())
                        .or_default() += 1
                }
                _ => {}
            }
        }
        assert_eq!(calls.len(), 4, "four tool calls in {run}: {calls:?}");
        assert!(
            calls.values().all(|n| *n == 1),
            "each call once in {run}: {calls:?}"
        );
        assert_eq!(
            calls.keys().collect::<std::collections::BTreeSet<_>>(),
            results.keys().collect(),
            "every call has a result in {run}"
        );
        assert!(
            results.values().all(|n| *n == 1),
            "no duplicated tool result in {run}: {results:?}"
        );
        let assistants = events
            .iter()
            .filter(|e| e["kind"] == "assistant_message")
            .count();
        assert_eq!(assistants, 4, "three tool turns and a reply in {run}");
        let finisher = events.last().unwrap()["data"]["executor"]
            .as_str()
            .unwrap()
            .to_owned();
        if held.iter().any(|h| h.to_string() == *run) {
            assert!(
                !finisher.starts_with(&format!("executor-{first_pid}-")),
                "a killed executor cannot finish {run}"
            );
            taken_over += 1;
        }
    }
    assert!(taken_over >= 1);
    drop(survivor);
}

async fn put(f: &TestFleet, name: &str, body: Value) -> (u16, Value) {
    f.put(&format!("/v1/agents/{name}"), &f.admin, body).await
}

/// Waits until `run` has a tool result, then SIGKILLs whichever of `a` and `b` holds it. Returns
/// the victim's pid, the runs it held, and the survivor.
async fn kill_holder(f: &TestFleet, run: &str, a: Proc, b: Proc) -> (u32, Vec<uuid::Uuid>, Proc) {
    let r = f
        .http
        .get(format!("{}/v1/runs/{}/stream", f.url, run))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.next().await {
            if ev.unwrap().event == "tool_result" {
                return;
            }
        }
        panic!("the run's stream ended before a tool result");
    })
    .await
    .expect("the run reached a tool result");
    drop(events);
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(uuid::Uuid::parse_str(run).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let owner = owner.expect("an executor holds the run mid-flight");
    let (mut victim, survivor) = if owner.starts_with(&format!("executor-{}-", a.0.id())) {
        (a, b)
    } else {
        (b, a)
    };
    let pid = victim.0.id();
    assert!(owner.starts_with(&format!("executor-{pid}-")), "{owner}");
    let held: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM runs WHERE lease_owner LIKE $1 AND status = 'running'")
            .bind(format!("executor-{pid}-%"))
            .fetch_all(&pool)
            .await
            .unwrap();
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    (pid, held, survivor)
}

/// The `run_finished` data of `run`, wherever it finished.
async fn finished(f: &TestFleet, run: &str) -> Value {
    let r = common::open_stream(f, run).await;
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = events.next().await {
            let ev = ev.unwrap();
            if ev.event == "run_finished" {
                return serde_json::from_str::<Value>(&ev.data).unwrap();
            }
        }
        panic!("the stream of {run} ended without run_finished");
    })
    .await
    .expect("every run finishes")
}

/// Runs that write Memory (`incr`) and publish to a channel on every turn, while the executor
/// holding one of them is killed: every run finishes, and every write and every message exists
/// exactly once (the substrate keeps each call's exactly-once key with its change).
#[tokio::test]
async fn killing_an_executor_mid_memory_and_channel_writes_applies_each_once() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        if let Some(weft_config::ProviderConfig::Mock(m)) = c.router.providers.get_mut("mock") {
            m.models.insert(
                "slow".into(),
                weft_config::MockModelConfig {
                    latency_ms: 300,
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let (status, body) = f
        .put("/v1/channels/events", &f.admin, json!({"scope": "agent"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = put(
        &f,
        "writer",
        json!({
            "model": "mock/slow",
            "tools": ["Memory", "Channel"],
            "memory_scopes": ["agent"],
            "channels": {"publish": ["events"], "subscribe": ["events"]},
        }),
    )
    .await;
    assert!(status == 201 || status == 200, "{body}");
    let a = executor(&f);
    let b = executor(&f);
    const RUNS: usize = 8;
    const TURNS: usize = 3;
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let turns: Vec<Value> = (0..TURNS)
            .map(|t| {
                json!([
                    {"name": "Memory", "input": {"op": "incr", "scope": "agent", "key": "count"}},
                    {"name": "Channel", "input": {"op": "publish", "channel": "events", "payload": {"run": i, "turn": t}}}
                ])
            })
            .collect();
        let input = format!("#mock {}", json!({"turns": turns, "reply": "done"}));
        let (status, r) = f
            .post(
                "/v1/runs",
                &f.admin,
                json!({"agent": "writer", "input": input}),
            )
            .await;
        assert_eq!(status, 201, "{r}");
        runs.push(r["run_id"].as_str().unwrap().to_owned());
    }
    let (pid, held, survivor) = kill_holder(&f, &runs[0], a, b).await;
    let mut taken_over = 0;
    for run in &runs {
        let done = finished(&f, run).await;
        assert_eq!(done["data"]["status"], "succeeded", "{run}: {done}");
        if held.iter().any(|h| h.to_string() == *run) {
            let by = done["data"]["executor"].as_str().unwrap();
            assert!(!by.starts_with(&format!("executor-{pid}-")), "{run}");
            taken_over += 1;
        }
    }
    assert!(taken_over >= 1);
    let (status, count) = f.get("/v1/memory/agent/writer/count", &f.admin).await;
    assert_eq!(status, 200, "{count}");
    assert_eq!(
        count["value"],
        json!(RUNS * TURNS),
        "each incr applied once"
    );
    let (status, peek) = f
        .get("/v1/channels/events/peek?max=1000&agent=writer", &f.admin)
        .await;
    assert_eq!(status, 200, "{peek}");
    let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
    for m in peek["messages"].as_array().unwrap() {
        let p = &m["payload"];
        *seen
            .entry((p["run"].as_u64().unwrap(), p["turn"].as_u64().unwrap()))
            .or_default() += 1;
    }
    assert_eq!(
        seen.len(),
        RUNS * TURNS,
        "every message published: {seen:?}"
    );
    assert!(seen.values().all(|n| *n == 1), "no message twice: {seen:?}");
    drop(survivor);
}

/// Runs that write and edit files of a shared volume, one mutation per turn, while the executor
/// holding one of them is killed: every run finishes, every file holds exactly one application
/// of each edit (an edit applied twice would repeat its line), and the volume's changelog has
/// exactly one row per mutation — the substrate keeps each call's exactly-once key with its
/// change, and a resumed edit starts from the file as the crashed executor left it.
#[tokio::test]
async fn killing_an_executor_mid_file_edits_applies_each_once() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        if let Some(weft_config::ProviderConfig::Mock(m)) = c.router.providers.get_mut("mock") {
            m.models.insert(
                "slow".into(),
                weft_config::MockModelConfig {
                    latency_ms: 300,
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let (status, body) = f
        .post("/v1/volumes", &f.admin, json!({"name": "shared"}))
        .await;
    assert!(status == 201 || status == 200, "{body}");
    let (status, body) = put(
        &f,
        "editor",
        json!({
            "model": "mock/slow",
            "tools": ["Write", "Edit"],
            "volumes": [{"name": "shared", "mode": "rw"}],
        }),
    )
    .await;
    assert!(status == 201 || status == 200, "{body}");
    let a = executor(&f);
    let b = executor(&f);
    const RUNS: usize = 8;
    const EDITS: usize = 4;
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let path = format!("r{i}.txt");
        let mut turns =
            vec![json!([{"name": "Write", "input": {"path": path, "content": "start\n"}}])];
        for k in 1..=EDITS {
            // Each edit puts its line right after `start`: applied twice, the line would repeat.
            turns.push(json!([{"name": "Edit", "input": {"path": path, "edits": [
                {"old": "start\n", "new": format!("start\n{k}\n")}
            ]}}]));
        }
        let input = format!("#mock {}", json!({"turns": turns, "reply": "done"}));
        let (status, r) = f
            .post(
                "/v1/runs",
                &f.admin,
                json!({"agent": "editor", "input": input}),
            )
            .await;
        assert_eq!(status, 201, "{r}");
        runs.push(r["run_id"].as_str().unwrap().to_owned());
    }
    let (pid, held, survivor) = kill_holder(&f, &runs[0], a, b).await;
    let mut taken_over = 0;
    for run in &runs {
        let done = finished(&f, run).await;
        assert_eq!(done["data"]["status"], "succeeded", "{run}: {done}");
        if held.iter().any(|h| h.to_string() == *run) {
            let by = done["data"]["executor"].as_str().unwrap();
            assert!(!by.starts_with(&format!("executor-{pid}-")), "{run}");
            taken_over += 1;
        }
    }
    assert!(taken_over >= 1);
    let expected: String = std::iter::once("start\n".to_owned())
        .chain((1..=EDITS).rev().map(|k| format!("{k}\n")))
        .collect();
    for (i, run) in runs.iter().enumerate() {
        let r = f
            .http
            .get(format!("{}/v1/volumes/shared/files/r{i}.txt", f.url))
            .bearer_auth(&f.admin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "r{i}.txt");
        assert_eq!(r.text().await.unwrap(), expected, "r{i}.txt of {run}");
        let (status, page) = f
            .get(
                &format!("/v1/volumes/shared/changes?run_id={run}&limit=100"),
                &f.admin,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        let changes = page["data"].as_array().unwrap();
        assert_eq!(
            changes.len(),
            1 + EDITS,
            "one changelog row per mutation of {run}: {page}"
        );
    }
    drop(survivor);
}
