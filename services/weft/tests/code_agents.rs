//! Code agents: a script takes a run's turns instead of a model. It orchestrates model sub-runs
//! and a Memory write with no tokens of its own, survives the SIGKILL of its executor without
//! repeating the write, fails loudly when a replay does not repeat its calls, and stops at its
//! wall clock, waiting for children included. Model agents spawn code agents too.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    TestFleet, all_events, create, executor_process, finished, kill_holder, put_agent, script,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use weft_testkit::{Behavior, FakeUpstream};

/// Two model sub-runs and a counter in between.
const PIPELINE: &str = r#"
function main(topic) {
  const draft = tools.Agent({op: "spawn", agent: "writer", input: "Write about " + topic});
  tools.Memory({op: "incr", scope: "agent", key: "drafts"});
  const review = tools.Agent({op: "spawn", agent: "critic", input: draft.output});
  return {draft: draft.output, review: review.output, at: new Date().toISOString()};
}
"#;

const DRAFT: &str = "Tides rise twice a day.";
const REVIEW: &str = "Clear and correct.";

/// An upstream serving models `writer` and `critic`; the first request of `critic` waits for
/// `gate` (and `held` is notified when it arrives).
fn upstream_with_gate(
    up: &FakeUpstream,
    gate: &CancellationToken,
    held: &Arc<tokio::sync::Notify>,
) {
    let (gate, held) = (gate.clone(), held.clone());
    let first = Arc::new(AtomicBool::new(true));
    up.set_responder(Arc::new(move |body: &Value| {
        Some(match body["model"].as_str() {
            Some("writer") => Behavior::Text(DRAFT.into()),
            Some("critic") if first.swap(false, Ordering::SeqCst) => {
                held.notify_one();
                Behavior::Gated {
                    open: gate.clone(),
                    then: Box::new(Behavior::Text(REVIEW.into())),
                }
            }
            _ => Behavior::Text(REVIEW.into()),
        })
    }));
}

/// A fleet whose runs are worked only by executor processes, with provider `up` at `base_url`.
async fn fleet_without_executor(base_url: String) -> TestFleet {
    TestFleet::start_with(move |c| {
        c.executor.embedded = false;
        c.router.providers.insert(
            "up".into(),
            weft_config::ProviderConfig::Openai(weft_config::HttpProviderConfig {
                models: vec!["writer".into(), "critic".into()],
                max_retries: 0,
                ..weft_config::HttpProviderConfig::new(base_url)
            }),
        );
    })
    .await
}

async fn put_models(f: &TestFleet) {
    for name in ["writer", "critic"] {
        put_agent(f, &f.admin, name, json!({"model": format!("up/{name}")})).await;
    }
}

/// The text of the run's last assistant message.
fn answer(events: &[Value]) -> String {
    let m = events
        .iter()
        .rev()
        .find(|e| e["kind"] == "assistant_message")
        .expect("an answer");
    m["data"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn kinds_named<'a>(events: &'a [Value], kind: &str, name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == kind && e["data"]["name"] == name)
        .collect()
}

/// Every number in a usage object.
fn tokens(usage: &Value) -> u64 {
    usage
        .as_object()
        .map(|o| o.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_script_orchestrates_two_model_sub_runs_and_a_write_with_no_tokens_and_survives_a_kill() {
    let up = FakeUpstream::start().await;
    let gate = CancellationToken::new();
    let held = Arc::new(tokio::sync::Notify::new());
    upstream_with_gate(&up, &gate, &held);
    let f = fleet_without_executor(up.base_url.clone()).await;
    put_models(&f).await;
    put_agent(
        &f,
        &f.admin,
        "pipeline",
        json!({
            "tools": ["Agent", "Memory"],
            "memory_scopes": ["agent"],
            "code": {"source": PIPELINE, "max_wall_s": 600}
        }),
    )
    .await;
    let a = executor_process(&f, &[]);
    let b = executor_process(&f, &[]);
    let run = create(&f, &f.admin, json!({"agent": "pipeline", "input": "tides"})).await;

    // The critic's model request is held: the script has drafted and counted, and waits on its
    // second sub-run. Its executor dies; the other replays the script from the transcript.
    tokio::time::timeout(Duration::from_secs(120), held.notified())
        .await
        .expect("the critic was asked");
    let (victim, _survivor) = kill_holder(&f, &run, a, b).await;
    gate.cancel();

    let done = finished(&f, &run).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["stop_reason"], "end_turn", "{done}");
    let events = all_events(&f, &run).await;
    let last = events.last().unwrap();
    let by = last["data"]["executor"].as_str().unwrap();
    assert!(
        !by.starts_with(&format!("executor-{victim}-")),
        "the killed executor finished the run: {by}"
    );

    // The answer is the script's, built from both children's.
    let out: Value = serde_json::from_str(&answer(&events)).unwrap();
    assert_eq!(out["draft"], DRAFT, "{out}");
    assert_eq!(out["review"], REVIEW, "{out}");
    // The seeded clock: the run's creation, one millisecond per call made.
    let created = time::OffsetDateTime::parse(
        done["created_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let at = time::OffsetDateTime::parse(
        out["at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(
        at.unix_timestamp_nanos() / 1_000_000,
        created.unix_timestamp_nanos() / 1_000_000 + 3,
        "{out} {done}"
    );

    // No model turn of its own: no tokens; one iteration per call and one for the answer.
    assert_eq!(tokens(&done["usage"]), 0, "{done}");
    assert_eq!(done["iterations"], 4, "{done}");
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "provider_chosen" || e["kind"] == "usage"),
        "the code agent called a model"
    );
    // Each child is a model run that spent tokens.
    let children: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "sub_run_started")
        .map(|e| e["data"]["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(children.len(), 2, "{children:?}");
    for child in children {
        let (_, c) = f.get(&format!("/v1/runs/{child}"), &f.admin).await;
        assert_eq!(c["status"], "succeeded", "{c}");
        assert!(tokens(&c["usage"]) > 0, "{c}");
    }

    // The write happened once: one call in the transcript, and the counter at 1.
    assert_eq!(kinds_named(&events, "tool_call", "Memory").len(), 1);
    assert_eq!(kinds_named(&events, "tool_call", "Agent").len(), 2);
    let (s, m) = f.get("/v1/memory/agent/pipeline/drafts", &f.admin).await;
    assert_eq!(s, 200, "{m}");
    assert_eq!(m["value"], 1, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_script_that_calls_otherwise_on_replay_fails_with_the_divergence_error() {
    let up = FakeUpstream::start().await;
    let gate = CancellationToken::new();
    let held = Arc::new(tokio::sync::Notify::new());
    upstream_with_gate(&up, &gate, &held);
    let f = fleet_without_executor(up.base_url.clone()).await;
    put_models(&f).await;
    let source = r#"function main(i) {
      const r = tools.Agent({op: "spawn", agent: "critic", input: "FIRST_INPUT"});
      return r.output;
    }"#;
    put_agent(
        &f,
        &f.admin,
        "shifty",
        json!({"tools": ["Agent"], "code": {"source": source}}),
    )
    .await;
    let a = executor_process(&f, &[]);
    let run = create(&f, &f.admin, json!({"agent": "shifty", "input": "go"})).await;
    tokio::time::timeout(Duration::from_secs(120), held.notified())
        .await
        .expect("the child was asked");
    // The recorded run's script is changed under its version (a hand edit of the store, a
    // restore of another backup), and its executor dies: the next one replays other code.
    let changed = sqlx::query(
        "UPDATE def_versions SET content_json = replace(content_json, 'FIRST_INPUT', 'OTHER_INPUT') \
         WHERE kind = 'agent' AND name = 'shifty'",
    )
    .execute(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(changed.rows_affected(), 1);
    let mut a = a;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let _b = executor_process(&f, &[]);
    gate.cancel();

    let done = finished(&f, &run).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(
        done["error"]["code"], "code_agent_replay_divergence",
        "{done}"
    );
    let msg = done["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("call 1 was Agent")
            && msg.contains("FIRST_INPUT")
            && msg.contains("OTHER_INPUT"),
        "{msg}"
    );
    // The recorded call was not made again under the new script.
    let events = all_events(&f, &run).await;
    assert_eq!(kinds_named(&events, "tool_call", "Agent").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wall_clock_stops_an_endless_loop_and_a_wait_on_a_child() {
    let f = TestFleet::start_with(common::stalling_model).await;
    put_agent(
        &f,
        &f.admin,
        "spin",
        json!({"code": {"source": "function main(i) { for (;;) {} }", "max_wall_s": 1}}),
    )
    .await;
    put_agent(&f, &f.admin, "sleeper", json!({"model": "mock/slow"})).await;
    put_agent(
        &f,
        &f.admin,
        "waiter",
        json!({
            "tools": ["Agent"],
            "code": {
                "source": "function main(i) { return tools.Agent({op: 'spawn', agent: 'sleeper', input: i}); }",
                "max_wall_s": 2
            }
        }),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "broken",
        json!({"code": {"source": "function main(i) {\n  return i.nope.deeper;\n}"}}),
    )
    .await;

    let spin = create(&f, &f.admin, json!({"agent": "spin", "input": "x"})).await;
    let waiter = create(&f, &f.admin, json!({"agent": "waiter", "input": "x"})).await;
    let broken = create(&f, &f.admin, json!({"agent": "broken", "input": "x"})).await;

    for run in [&spin, &waiter] {
        let done = finished(&f, run).await;
        assert_eq!(done["status"], "failed", "{done}");
        assert_eq!(done["stop_reason"], "timeout", "{done}");
        assert_eq!(done["error"]["code"], "code_agent_error", "{done}");
        assert!(
            done["error"]["message"]
                .as_str()
                .unwrap()
                .contains("wall clock"),
            "{done}"
        );
    }
    // The child the waiter waited on was stopped with it.
    let events = all_events(&f, &waiter).await;
    let child = events
        .iter()
        .find(|e| e["kind"] == "sub_run_started")
        .unwrap()["data"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let child = finished(&f, &child).await;
    assert_eq!(child["status"], "cancelled", "{child}");

    let done = finished(&f, &broken).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["stop_reason"], "error", "{done}");
    assert_eq!(done["error"]["code"], "code_agent_error", "{done}");
    let msg = done["error"]["message"].as_str().unwrap();
    assert!(msg.contains("script.js:2"), "{msg}");
}

#[tokio::test]
async fn model_agents_spawn_code_agents_and_bad_scripts_are_refused() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "upper",
        json!({"code": {"source": "function main(input) { return input.toUpperCase(); }"}}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent"]}),
    )
    .await;
    let spawn = json!([[{"name": "Agent", "input": {"op": "spawn", "agent": "upper", "input": "shout this"}}]]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "boss", "input": script(spawn, "done")}),
    )
    .await;
    let done = finished(&f, &run).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let events = all_events(&f, &run).await;
    let result = events.iter().find(|e| e["kind"] == "tool_result").unwrap();
    let outcome: Value = serde_json::from_str(result["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(outcome["output"], "SHOUT THIS", "{outcome}");
    assert_eq!(outcome["status"], "succeeded", "{outcome}");
    let (_, child) = f
        .get(
            &format!("/v1/runs/{}", outcome["run_id"].as_str().unwrap()),
            &f.admin,
        )
        .await;
    assert_eq!(tokens(&child["usage"]), 0, "{child}");
    assert!(tokens(&done["usage"]) > 0, "{done}");

    for (code, param) in [
        (json!({"source": ""}), "code.source"),
        (
            json!({"source": "function main() {}", "max_wall_s": 0}),
            "code.max_wall_s",
        ),
        (
            json!({"source": "function main() {}", "language": "python"}),
            "code.language",
        ),
        (
            json!({"source": "function main() {}", "timeout": 3}),
            "code.timeout",
        ),
    ] {
        let (s, e) = f
            .put("/v1/agents/bad", &f.admin, json!({"code": code}))
            .await;
        assert_eq!(s, 400, "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }
}
