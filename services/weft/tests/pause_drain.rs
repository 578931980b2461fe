//! Pause, drain and resume (docs/operations.md): a tenant's drain on two executor processes
//! parks every run of the tenant at a step boundary, refuses new runs with 503 `tenant_paused`
//! and `Retry-After`, leaves another tenant alone, and its resume finishes every run with each
//! Memory write made exactly once; a run paused during an effectful call outliving the grace
//! parks, and its resume does not make the call again; the fleet's maintenance holds schedules
//! (the resume catches them up once) and refuses webhooks with a retry.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    TestFleet, all_events_as, create, executor_process, finished_as, put_agent, slow_model,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Turns of each run of the drain test, each one Memory increment of the run's own key.
const TURNS: usize = 5;

/// A token of `tenant` with `tenant:admin`.
async fn tenant_admin(f: &TestFleet, tenant: &str) -> String {
    let (s, t) = f.mint(&f.admin, tenant, &["tenant:admin"]).await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

/// The script of a run that increments its own key `TURNS` times, a turn each.
fn counting(key: &str) -> String {
    let turns: Vec<Value> = (0..TURNS)
        .map(|_| json!([{"name": "Memory", "input": {"op": "incr", "scope": "agent", "key": key}}]))
        .collect();
    common::script(json!(turns), "done")
}

/// Follows the run's stream until it parks (`run_paused`) or ends (`run_finished`); the kind.
async fn parked_or_finished(f: &TestFleet, token: &str, run: &str) -> String {
    common::follow_until(f, token, run, &["run_paused", "run_finished"]).await
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["kind"].as_str()).collect()
}

/// The Memory results of a run, in order.
fn memory_results(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["kind"] == "tool_result" && e["data"]["name"] == "Memory")
        .map(|e| e["data"]["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_parks_every_run_at_a_boundary_and_its_resume_finishes_them_all_exactly_once() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        slow_model(c, 150);
    })
    .await;
    let acme = tenant_admin(&f, "acme").await;
    let beta = tenant_admin(&f, "beta").await;
    for token in [&acme, &beta] {
        put_agent(
            &f,
            token,
            "counter",
            json!({"model": "mock/slow", "tools": ["Memory"], "memory_scopes": ["agent"]}),
        )
        .await;
    }
    let _a = executor_process(&f, &[]);
    let _b = executor_process(&f, &[]);
    let mut acme_runs = Vec::new();
    for i in 0..12 {
        let input = counting(&format!("k{i}"));
        acme_runs.push(create(&f, &acme, json!({"agent": "counter", "input": input})).await);
    }
    let mut beta_runs = Vec::new();
    for i in 0..4 {
        let input = counting(&format!("b{i}"));
        beta_runs.push(create(&f, &beta, json!({"agent": "counter", "input": input})).await);
    }

    // The drain: accepted at once, and new runs of the tenant are refused with a retry.
    let (s, drain) = f.post("/v1/tenants/acme/drain", &acme, json!({})).await;
    assert_eq!(s, 202, "{drain}");
    assert_eq!(drain["draining"], true);
    assert_eq!(drain["scope"], "acme");
    let refused = f
        .http
        .post(format!("{}/v1/runs", f.url))
        .bearer_auth(&acme)
        .json(&json!({"agent": "counter", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let retry = refused
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("a Retry-After header");
    assert!(retry >= 1, "{retry}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "tenant_paused", "{body}");
    // Another tenant is not drained.
    create(&f, &beta, json!({"agent": "counter", "input": "hi"})).await;

    // Every run of the tenant parks (or had finished already); the drain says complete.
    let mut parked = Vec::new();
    for run in &acme_runs {
        if parked_or_finished(&f, &acme, run).await == "run_paused" {
            parked.push(run.clone());
        }
    }
    assert!(
        !parked.is_empty(),
        "the drain came after every run had finished: nothing was parked"
    );
    let (s, progress) = f.get("/v1/tenants/acme/drain", &acme).await;
    assert_eq!(s, 200, "{progress}");
    assert_eq!(progress["complete"], true, "{progress}");
    assert_eq!(progress["runs"]["running"], 0, "{progress}");
    assert_eq!(progress["runs"]["queued"], 0, "{progress}");
    assert_eq!(
        progress["runs"]["paused"],
        json!(parked.len()),
        "{progress}"
    );
    assert_eq!(progress["transitions"][0]["action"], "drain");
    for run in &parked {
        let (_, r) = f.get(&format!("/v1/runs/{run}"), &acme).await;
        assert_eq!(r["status"], "paused", "{r}");
        assert_eq!(r["paused_by"], "tenant", "{r}");
        // Parked at a boundary: between a turn and the next, or between a model turn and its
        // call (which the resume makes, as the run had not started it).
        let events = all_events_as(&f, &acme, run).await;
        let calls = kinds(&events).iter().filter(|k| **k == "tool_call").count();
        let results = memory_results(&events).len();
        assert!(calls == results || calls == results + 1, "{events:?}");
        assert_eq!(kinds(&events).last(), Some(&"run_paused"));
        // A run held by its tenant's drain is not resumed on its own.
        let (s, e) = f
            .post(&format!("/v1/runs/{run}/resume"), &acme, json!({}))
            .await;
        assert_eq!(s, 503, "{e}");
        assert_eq!(e["error"]["code"], "tenant_paused");
    }
    // One parked run is paused by itself too: the tenant's resume leaves it paused.
    let kept = parked[0].clone();
    let (s, k) = f
        .post(&format!("/v1/runs/{kept}/pause"), &acme, json!({}))
        .await;
    assert_eq!(s, 200, "{k}");
    assert_eq!(k["paused_by"], "run", "{k}");
    // The other tenant's runs went on to their end meanwhile.
    for run in &beta_runs {
        let r = finished_as(&f, &beta, run).await;
        assert_eq!(r["status"], "succeeded", "{r}");
    }

    // The resume: every run goes on where it stopped and ends; each write was made once.
    let (s, resumed) = f.post("/v1/tenants/acme/resume", &acme, json!({})).await;
    assert_eq!(s, 200, "{resumed}");
    assert_eq!(resumed["draining"], false);
    assert_eq!(resumed["transitions"][0]["action"], "resume");
    let (_, k) = f.get(&format!("/v1/runs/{kept}"), &acme).await;
    assert_eq!(k["status"], "paused", "{k}");
    let (s, k) = f
        .post(&format!("/v1/runs/{kept}/resume"), &acme, json!({}))
        .await;
    assert_eq!(s, 200, "{k}");
    for run in &acme_runs {
        let r = finished_as(&f, &acme, run).await;
        assert_eq!(r["status"], "succeeded", "{r}");
        let events = all_events_as(&f, &acme, run).await;
        let results = memory_results(&events);
        assert_eq!(results.len(), TURNS, "{events:?}");
        let last: Value = serde_json::from_str(results.last().unwrap()).unwrap();
        assert_eq!(
            last["entry"]["value"],
            json!(TURNS),
            "the last increment reads {TURNS}: {results:?}"
        );
        let k = kinds(&events);
        let paused = k.iter().filter(|k| **k == "run_paused").count();
        let resumed = k.iter().filter(|k| **k == "run_resumed").count();
        // The run kept paused was resumed once: by its own resume, not the tenant's.
        if parked.contains(run) {
            assert_eq!((paused, resumed), (1, 1), "{k:?}");
            let p = k.iter().position(|k| *k == "run_paused").unwrap();
            let q = k.iter().position(|k| *k == "run_resumed").unwrap();
            assert!(p < q, "{k:?}");
        } else {
            assert_eq!((paused, resumed), (0, 0), "{k:?}");
        }
    }
    // Runs are admitted again.
    create(&f, &acme, json!({"agent": "counter", "input": "hi"})).await;
}

/// An HTTP endpoint that counts its calls and holds each until `release`; `arrived` is notified
/// when one comes in.
async fn holding_endpoint(
    calls: Arc<AtomicUsize>,
    arrived: Arc<tokio::sync::Notify>,
    release: CancellationToken,
) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let (calls, arrived, release) = (calls.clone(), arrived.clone(), release.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                arrived.notify_one();
                release.cancelled().await;
                "taken"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A fleet (executor grace `grace_ms`) with a run whose effectful POST has reached
/// [`holding_endpoint`] and is held there.
struct Posting {
    f: TestFleet,
    run: String,
    calls: Arc<AtomicUsize>,
    release: CancellationToken,
}

async fn posting(grace_ms: u64) -> Posting {
    let calls = Arc::new(AtomicUsize::new(0));
    let arrived = Arc::new(tokio::sync::Notify::new());
    let release = CancellationToken::new();
    let addr = holding_endpoint(calls.clone(), arrived.clone(), release.clone()).await;
    let f = TestFleet::start_with(|c| {
        c.executor.allowed_hosts = vec!["127.0.0.1".into()];
        c.executor.http_private_exempt = vec!["127.0.0.1/32".into()];
        c.executor.http_timeout_ms = 60_000;
        c.executor.pause_grace_ms = grace_ms;
    })
    .await;
    put_agent(
        &f,
        &f.admin,
        "poster",
        json!({"model": "mock-1", "tools": ["HTTP"]}),
    )
    .await;
    let post = json!({"name": "HTTP", "input": {"method": "POST", "url": format!("http://{addr}/hook"), "body": "ship it"}});
    let input = common::script(json!([[post]]), "done");
    let run = create(&f, &f.admin, json!({"agent": "poster", "input": input})).await;
    tokio::time::timeout(Duration::from_secs(60), arrived.notified())
        .await
        .expect("the POST was made");
    Posting {
        f,
        run,
        calls,
        release,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_paused_during_an_effectful_call_parks_after_the_grace_and_its_resume_does_not_repeat_it()
 {
    let Posting {
        f,
        run,
        calls,
        release,
    } = posting(300).await;

    let (s, asked) = f
        .post(&format!("/v1/runs/{run}/pause"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 202, "{asked}");
    assert_eq!(asked["paused_by"], "run", "{asked}");
    assert_eq!(parked_or_finished(&f, &f.admin, &run).await, "run_paused");
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(r["status"], "paused", "{r}");
    // Pausing again is a no-op.
    let (s, again) = f
        .post(&format!("/v1/runs/{run}/pause"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{again}");
    // The endpoint answers only now, to nobody.
    release.cancel();

    let (s, resumed) = f
        .post(&format!("/v1/runs/{run}/resume"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{resumed}");
    let r = finished_as(&f, &f.admin, &run).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the effectful call was made again"
    );
    let events = all_events_as(&f, &f.admin, &run).await;
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 1, "{events:?}");
    let content = results[0]["data"]["content"].as_str().unwrap_or_default();
    assert!(content.contains("unknown"), "{content}");
    let k = kinds(&events);
    assert!(
        k.iter().position(|k| *k == "run_paused") < k.iter().position(|k| *k == "run_resumed"),
        "{k:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_called_off_within_the_grace_lets_the_call_under_way_finish() {
    let Posting {
        f,
        run,
        calls,
        release,
    } = posting(200).await;
    let (s, asked) = f
        .post(&format!("/v1/runs/{run}/pause"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 202, "{asked}");
    let (s, resumed) = f
        .post(&format!("/v1/runs/{run}/resume"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{resumed}");
    assert_eq!(resumed["status"], "running", "{resumed}");
    assert!(resumed.get("paused_by").is_none(), "{resumed}");
    // The grace the pause began runs out while the call is still under way: called off, it
    // must not abandon the call. (The grace is time; so is this wait, five graces long.)
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    release.cancel();
    let r = finished_as(&f, &f.admin, &run).await;
    assert_eq!(r["status"], "succeeded", "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let events = all_events_as(&f, &f.admin, &run).await;
    let result = events
        .iter()
        .find(|e| e["kind"] == "tool_result")
        .expect("a result");
    assert_eq!(result["data"]["is_error"], false, "{result}");
    assert!(
        result["data"]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("taken"),
        "{result}"
    );
    assert!(!kinds(&events).contains(&"run_paused"), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_paused_while_parked_for_input_keeps_the_input_until_it_is_resumed() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "chat", json!({"model": "mock-1"})).await;
    let (s, run) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "chat", "interactive": true, "input": "hello"}),
        )
        .await;
    assert_eq!(s, 201, "{run}");
    let run = run["run_id"].as_str().unwrap().to_owned();
    common::wait_event(&f, &f.admin, &run, 1, "awaiting_input").await;
    let (s, asked) = f
        .post(&format!("/v1/runs/{run}/pause"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 202, "{asked}");
    assert_eq!(asked["status"], "awaiting_input");
    // Input wakes it, and it parks as paused before taking the input.
    let (s, took) = f
        .post(
            &format!("/v1/runs/{run}/input"),
            &f.admin,
            json!({"text": "again"}),
        )
        .await;
    assert_eq!(s, 202, "{took}");
    assert_eq!(parked_or_finished(&f, &f.admin, &run).await, "run_paused");
    let events = all_events_as(&f, &f.admin, &run).await;
    let inputs = kinds(&events)
        .iter()
        .filter(|k| **k == "user_input")
        .count();
    assert_eq!(inputs, 1, "the input waits for the resume: {events:?}");
    let (s, _) = f
        .post(&format!("/v1/runs/{run}/resume"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 200);
    // The resume takes the input, answers it and parks for more.
    let seq = events.last().unwrap()["seq"].as_i64().unwrap();
    common::wait_event(&f, &f.admin, &run, seq + 1, "awaiting_input").await;
    let events = all_events_as(&f, &f.admin, &run).await;
    let inputs = kinds(&events)
        .iter()
        .filter(|k| **k == "user_input")
        .count();
    assert_eq!(inputs, 2, "{events:?}");
    // A paused run is cancelled like a parked one.
    let (s, _) = f
        .post(&format!("/v1/runs/{run}/pause"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 202);
    let (s, c) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(s == 200 || s == 202, "{c}");
    let r = finished_as(&f, &f.admin, &run).await;
    assert_eq!(r["status"], "cancelled", "{r}");
}

/// `weft pause|status|resume` against the fleet, as an operator types them.
fn weft_cli(f: &TestFleet, token: &str, args: &[&str]) -> (bool, String, String) {
    let out = common::weft_command(f)
        .args(args)
        .args(["--url", &f.url])
        .env("WEFT_TOKEN", token)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_drains_reports_and_resumes_a_tenant_and_the_fleet() {
    let f = TestFleet::start().await;
    let acme = tenant_admin(&f, "acme").await;
    let cli =
        |token: &str, args: &[&str]| tokio::task::block_in_place(|| weft_cli(&f, token, args));
    let (ok, out, err) = cli(&acme, &["pause", "--tenant", "acme", "--wait", "60"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("tenant acme: draining since"), "{out}");
    assert!(out.contains("complete"), "{out}");
    let (ok, out, err) = cli(&acme, &["status", "--tenant", "acme", "--json"]);
    assert!(ok, "{out}{err}");
    let status: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["draining"], true, "{status}");
    let (ok, out, err) = cli(&acme, &["resume", "--tenant", "acme"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("tenant acme: not draining"), "{out}");
    // A tenant admin is not an operator: the fleet is not theirs to drain.
    let (ok, _, err) = cli(&acme, &["pause", "--fleet"]);
    assert!(!ok);
    assert!(err.contains("403"), "{err}");
    let (ok, out, err) = cli(&f.admin, &["pause", "--fleet"]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("fleet: draining"), "{out}");
    let (ok, out, err) = cli(&f.admin, &["resume", "--fleet"]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("fleet: not draining"), "{out}");
}
