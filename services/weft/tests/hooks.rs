//! Tool-use hooks on a whole fleet (docs/hooks.md): a receiver started by the test verifies
//! each call's Standard Webhooks signature (with the ingress's verifier), denies one call,
//! rewrites one input and one result, and sees pre hooks in registration order and post hooks
//! in reverse; a hook that fails closed with its receiver down denies; a replay after the
//! holding executor is SIGKILLed reuses the recorded decision (the receiver counts its calls);
//! hook URLs aimed at loopback (not exempt) or the metadata address are refused at call time
//! and flagged at PUT.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use common::{Proc, TestFleet, create, executor_process, put_agent, script, stream};
use serde_json::{Value, json};

/// The signing secret of the hooks that sign (Standard Webhooks' `whsec_` + base64 form).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Its variable: the bootstrap tenant `default`'s hook secret namespace.
const SECRET_ENV: &str = "WEFT_HOOK_DEFAULT__POLICY";

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// (path, body) of every hook call, in arrival order.
    calls: Mutex<Vec<(String, Value)>>,
    /// Calls whose signature did not verify (or was missing on a path that wants one).
    bad_signatures: AtomicUsize,
    /// Query strings of the `HTTP` tool's requests to `/slow`.
    slow: Mutex<Vec<String>>,
    /// Set once `/slow` has been asked for the first time.
    slow_reached: tokio::sync::Notify,
    /// While false, `/slow` does not answer.
    slow_released: tokio::sync::Notify,
    /// Set with `slow_released`: every call after the release passes at once.
    released: std::sync::atomic::AtomicBool,
}

impl Seen {
    fn calls_to(&self, path: &str) -> Vec<Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

/// The receiver: `/gate` (pre: rewrites a Memory set of key `secret` to `[redacted]`, denies a
/// Memory delete, rewrites an HTTP call's `from=model` to `from=hook`; allows the rest), `/audit`
/// and `/tail` (allow), `/shade` (post: rewrites a Memory get's result), `/slow` (the HTTP
/// tool's target: waits until released). Every path but `/slow` checks the signature.
async fn receiver() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    async fn hook(
        State(seen): State<Arc<Seen>>,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let path = uri.path().to_owned();
        if path == "/slow" {
            seen.slow
                .lock()
                .unwrap()
                .push(uri.query().unwrap_or_default().to_owned());
            // `notify_one` keeps a permit when nobody waits yet, so neither side can miss it.
            seen.slow_reached.notify_one();
            loop {
                let woken = seen.slow_released.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if seen.released.load(Ordering::SeqCst) {
                    break;
                }
                woken.await;
            }
            return "slow answer".into_response();
        }
        let def: weft_core::webhook::WebhookContent = serde_json::from_value(json!({
            "agent": "x", "signature": "standard-webhooks", "secret_env": SECRET_ENV
        }))
        .unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        if weft_ingress::verify::verify(&def, SECRET, &headers, &body, now).is_err() {
            seen.bad_signatures.fetch_add(1, Ordering::SeqCst);
        }
        let call: Value = serde_json::from_slice(&body).unwrap();
        seen.calls
            .lock()
            .unwrap()
            .push((path.clone(), call.clone()));
        let (tool, input) = (call["tool"].as_str().unwrap_or_default(), &call["input"]);
        let answer = match path.as_str() {
            "/gate" if tool == "Memory" && input["op"] == "delete" => {
                json!({"decision": "deny", "reason": "deleting is not allowed"})
            }
            "/gate" if tool == "Memory" && input["op"] == "set" && input["key"] == "secret" => {
                let mut rewritten = input.clone();
                rewritten["value"] = json!("[redacted]");
                json!({"decision": "rewrite", "input": rewritten, "reason": "no secrets in memory"})
            }
            "/gate" if tool == "HTTP" => {
                let mut rewritten = input.clone();
                let url = input["url"]
                    .as_str()
                    .unwrap()
                    .replace("from=model", "from=hook");
                rewritten["url"] = json!(url);
                json!({"decision": "rewrite", "input": rewritten})
            }
            "/shade" if tool == "Memory" && input["op"] == "get" => {
                json!({"decision": "rewrite", "result": "[filtered by policy]"})
            }
            _ => json!({"decision": "allow"}),
        };
        Json(answer).into_response()
    }
    let app = Router::new()
        .fallback(axum::routing::any(hook))
        .with_state(seen.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), seen)
}

/// An executor process of `f` that may dial loopback (hooks, and the HTTP tool to 127.0.0.1)
/// and holds the hook signing secret; it reads the tenant's hooks on every turn.
fn executor(f: &TestFleet) -> Proc {
    executor_process(
        f,
        &[
            (
                "WEFT_EXECUTOR__HTTP_PRIVATE_EXEMPT",
                r#"["127.0.0.1/32"]"#.to_owned(),
            ),
            (
                "WEFT_EXECUTOR__ALLOWED_HOSTS",
                r#"["127.0.0.1"]"#.to_owned(),
            ),
            ("WEFT_EXECUTOR__HOOKS_CACHE_MS", "0".to_owned()),
            (SECRET_ENV, SECRET.to_owned()),
        ],
    )
}

async fn put_hook(f: &TestFleet, name: &str, body: Value) -> Value {
    let (status, r) = f.put(&format!("/v1/hooks/{name}"), &f.admin, body).await;
    assert!(
        status == 201 || status == 200,
        "put hook {name}: {status} {r}"
    );
    r
}

/// The persisted events of `run`.
async fn events(f: &TestFleet, run: &str) -> Vec<Value> {
    let (_, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    page["events"].as_array().unwrap().clone()
}

fn result_of<'a>(events: &'a [Value], id: &str) -> &'a Value {
    let found = events
        .iter()
        .find(|e| e["kind"] == "tool_result" && e["data"]["tool_use_id"] == id);
    &found.unwrap_or_else(|| panic!("no result for {id}"))["data"]
}

fn decisions(events: &[Value]) -> Vec<(String, String, String, String)> {
    events
        .iter()
        .filter(|e| e["kind"] == "hook_decision")
        .map(|e| {
            let d = &e["data"];
            let s = |k: &str| d[k].as_str().unwrap().to_owned();
            (s("tool_use_id"), s("hook"), s("phase"), s("decision"))
        })
        .collect()
}

async fn ledger_hooks(f: &TestFleet, run: &str, id: &str) -> Value {
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let v: Option<Value> =
        sqlx::query_scalar("SELECT hooks FROM tool_ledger WHERE run_id = $1 AND tool_use_id = $2")
            .bind(uuid::Uuid::parse_str(run).unwrap())
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    v.unwrap_or(Value::Null)
}

#[tokio::test]
async fn hooks_sign_their_calls_deny_one_rewrite_an_input_and_a_result() {
    let f = TestFleet::start_with(|c| c.executor.embedded = false).await;
    let (url, seen) = receiver().await;
    let signed = |phase: &str, tools: Value, path: &str| {
        json!({"phase": phase, "agents": ["keeper"], "tools": tools, "url": format!("{url}{path}"),
               "fail_mode": "closed", "timeout_ms": 5000, "secret_env": SECRET_ENV})
    };
    // Registration order: gate, audit (pre); shade, tail (post: called tail first).
    put_hook(&f, "gate", signed("pre", json!(["Memory"]), "/gate")).await;
    put_hook(&f, "audit", signed("pre", json!(["Mem*"]), "/audit")).await;
    put_hook(&f, "shade", signed("post", json!(["Memory"]), "/shade")).await;
    put_hook(&f, "tail", signed("post", json!(["*"]), "/tail")).await;
    // A hook of another agent is never called for this one.
    put_hook(
        &f,
        "elsewhere",
        json!({"phase": "pre", "agents": ["other"], "tools": ["*"], "url": format!("{url}/elsewhere")}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "keeper",
        json!({"model": "mock-1", "tools": ["Memory"], "memory_scopes": ["run"]}),
    )
    .await;
    let _a = executor(&f);

    let turns = json!([
        [
            {"name": "Memory", "input": {"op": "set", "scope": "run", "key": "secret", "value": "hunter2"}},
            {"name": "Memory", "input": {"op": "delete", "scope": "run", "key": "secret"}}
        ],
        [{"name": "Memory", "input": {"op": "get", "scope": "run", "key": "secret"}}]
    ]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "keeper", "input": script(turns, "done")}),
    )
    .await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let ev = events(&f, &run).await;
    let ids: Vec<String> = ev
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .map(|e| e["data"]["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let (c1, c2, c3) = (&ids[0], &ids[1], &ids[2]);

    // c2 was denied: its tool never ran, and the model is told by whom and why.
    let r2 = result_of(&ev, c2);
    assert_eq!(r2["is_error"], true);
    assert_eq!(
        r2["content"],
        "denied by hook `gate`: deleting is not allowed"
    );
    // c1's input was rewritten: the tool stored `[redacted]`, which c3 read (the post hooks saw
    // it), and c3's result was rewritten for the model.
    assert_eq!(result_of(&ev, c1)["is_error"], false);
    let r3 = result_of(&ev, c3);
    assert_eq!(r3["content"], "[filtered by policy]");
    let shade = seen.calls_to("/shade");
    assert_eq!(shade.len(), 2, "one post call per call that ran");
    let read = shade.iter().find(|c| c["tool_use_id"] == *c3).unwrap();
    let result = read["result"].as_str().unwrap();
    assert!(
        result.contains("[redacted]") && !result.contains("hunter2"),
        "{result}"
    );
    assert_eq!(read["type"], "tool_use.post");
    assert_eq!(read["agent"], "keeper");
    assert_eq!(read["run_id"], run.as_str());
    assert_eq!(read["tenant"], "default");

    // Pre hooks in registration order, each seeing the input as the one before left it; the
    // deny ended c2's chain; post hooks in reverse.
    let audit = seen.calls_to("/audit");
    let audited = audit.iter().find(|c| c["tool_use_id"] == *c1).unwrap();
    assert_eq!(audited["input"]["value"], "[redacted]");
    assert!(
        audit.iter().all(|c| c["tool_use_id"] != *c2),
        "the deny ended the chain"
    );
    let order: Vec<String> = seen
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, b)| b["tool_use_id"] == *c3)
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(order, ["/gate", "/audit", "/tail", "/shade"]);
    assert!(seen.calls_to("/elsewhere").is_empty());
    // Every call was signed, and verified with the secret.
    assert!(!seen.calls.lock().unwrap().is_empty());
    assert_eq!(seen.bad_signatures.load(Ordering::SeqCst), 0);

    // Watchers saw each decision; the ledger holds them with the calls.
    let d = decisions(&ev);
    let has = |id: &str, hook: &str, phase: &str, decision: &str| {
        d.contains(&(id.to_owned(), hook.into(), phase.into(), decision.into()))
    };
    assert!(
        has(c1, "gate", "pre", "rewrite") && has(c1, "audit", "pre", "allow"),
        "{d:?}"
    );
    assert!(has(c2, "gate", "pre", "deny"), "{d:?}");
    assert!(
        has(c3, "shade", "post", "rewrite") && has(c3, "tail", "post", "allow"),
        "{d:?}"
    );
    let l1 = ledger_hooks(&f, &run, c1).await;
    assert_eq!(l1["pre"]["input"]["value"], "[redacted]", "{l1}");
    let l2 = ledger_hooks(&f, &run, c2).await;
    assert_eq!(
        l2["pre"]["denied"],
        "denied by hook `gate`: deleting is not allowed"
    );
    let l3 = ledger_hooks(&f, &run, c3).await;
    assert_eq!(l3["post"]["rewritten"], true, "{l3}");
    assert!(l3["pre"].is_object(), "pre and post are both kept: {l3}");
}

#[tokio::test]
async fn a_hook_failing_closed_with_its_receiver_down_denies_and_one_failing_open_allows() {
    let f = TestFleet::start_with(|c| {
        c.executor.http_private_exempt = vec!["127.0.0.1/32".into()];
        c.executor.hooks_cache_ms = 0;
    })
    .await;
    let down = format!("http://127.0.0.1:{}/gone", common::free_port());
    put_hook(
        &f,
        "strict",
        json!({"phase": "pre", "agents": ["strict"], "tools": ["Memory"], "url": down, "fail_mode": "closed"}),
    )
    .await;
    put_hook(
        &f,
        "lenient",
        json!({"phase": "pre", "agents": ["lenient"], "tools": ["Memory"], "url": down, "fail_mode": "open"}),
    )
    .await;
    let turns = json!([[{"name": "Memory", "input": {"op": "set", "scope": "run", "key": "k", "value": 1}}]]);
    for (agent, denied) in [("strict", true), ("lenient", false)] {
        put_agent(
            &f,
            &f.admin,
            agent,
            json!({"model": "mock-1", "tools": ["Memory"], "memory_scopes": ["run"]}),
        )
        .await;
        let run = create(
            &f,
            &f.admin,
            json!({"agent": agent, "input": script(turns.clone(), "done")}),
        )
        .await;
        stream(&f, &f.admin, &run, "", None).await;
        let ev = events(&f, &run).await;
        let id = ev.iter().find(|e| e["kind"] == "tool_call").unwrap()["data"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = result_of(&ev, &id);
        assert_eq!(r["is_error"], denied, "{agent}: {r}");
        let d = ev.iter().find(|e| e["kind"] == "hook_decision").unwrap();
        assert!(
            d["data"]["failure"]
                .as_str()
                .unwrap()
                .contains("unreachable"),
            "{d}"
        );
        if denied {
            let text = r["content"].as_str().unwrap();
            assert!(
                text.starts_with("denied by hook `strict`: its receiver failed"),
                "{text}"
            );
            assert_eq!(d["data"]["decision"], "deny");
        } else {
            assert_eq!(d["data"]["decision"], "allow");
        }
    }
}

#[tokio::test]
async fn loopback_and_metadata_hook_urls_are_refused_at_call_time_and_flagged_at_put() {
    // No exemption: the executors may not dial loopback or link-local addresses.
    let f = TestFleet::start_with(|c| c.executor.hooks_cache_ms = 0).await;
    let (url, seen) = receiver().await;
    let targets = [
        ("loop", format!("{url}/audit")),
        (
            "meta",
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
    ];
    for (name, target) in &targets {
        let r = put_hook(
            &f,
            name,
            json!({"phase": "pre", "agents": [*name], "tools": ["*"], "url": target}),
        )
        .await;
        let warnings = r["warnings"].as_array().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(warnings.len(), 1, "{r}");
        assert!(
            warnings[0]
                .as_str()
                .unwrap()
                .contains("executor.http_private_exempt"),
            "{r}"
        );
    }
    let turns = json!([[{"name": "Memory", "input": {"op": "get", "scope": "run", "key": "k"}}]]);
    for (name, _) in &targets {
        put_agent(
            &f,
            &f.admin,
            name,
            json!({"model": "mock-1", "tools": ["Memory"], "memory_scopes": ["run"]}),
        )
        .await;
        let run = create(
            &f,
            &f.admin,
            json!({"agent": name, "input": script(turns.clone(), "done")}),
        )
        .await;
        stream(&f, &f.admin, &run, "", None).await;
        let ev = events(&f, &run).await;
        let d = &ev.iter().find(|e| e["kind"] == "hook_decision").unwrap()["data"];
        assert_eq!(d["decision"], "deny", "{d}");
        assert!(
            d["failure"]
                .as_str()
                .unwrap()
                .contains("refused by the egress guard"),
            "{d}"
        );
        let id = d["tool_use_id"].as_str().unwrap();
        assert_eq!(result_of(&ev, id)["is_error"], true);
    }
    assert!(
        seen.calls.lock().unwrap().is_empty(),
        "nothing reached the receiver"
    );
}

#[tokio::test]
async fn a_replay_after_the_holder_is_killed_reuses_the_recorded_decision() {
    let f = TestFleet::start_with(|c| c.executor.embedded = false).await;
    let (url, seen) = receiver().await;
    put_hook(
        &f,
        "gate",
        json!({"phase": "pre", "agents": ["*"], "tools": ["HTTP"], "url": format!("{url}/gate"),
               "secret_env": SECRET_ENV}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "fetcher",
        json!({"model": "mock-1", "tools": ["HTTP"]}),
    )
    .await;
    let a = executor(&f);
    let b = executor(&f);
    let turns = json!([[{"name": "HTTP", "input": {"method": "GET", "url": format!("{url}/slow?from=model")}}]]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "fetcher", "input": script(turns, "done")}),
    )
    .await;
    // The pre hook answered (its decision committed), and the tool is under way: kill whoever
    // holds the run.
    tokio::time::timeout(Duration::from_secs(30), seen.slow_reached.notified())
        .await
        .expect("the HTTP call reached the receiver");
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&run).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let owner = owner.expect("an executor holds the run mid-call");
    let (mut victim, survivor) = if owner.starts_with(&format!("executor-{}-", a.0.id())) {
        (a, b)
    } else {
        (b, a)
    };
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    seen.released.store(true, Ordering::SeqCst);
    seen.slow_released.notify_waiters();

    let frames = stream(&f, &f.admin, &run, "", None).await;
    let done = &frames.last().unwrap().2;
    assert_eq!(done["data"]["status"], "succeeded", "{done}");
    // The call ran twice (it is a GET: safe to repeat), both times with the input the hook
    // rewrote; the hook was asked once.
    assert_eq!(*seen.slow.lock().unwrap(), ["from=hook", "from=hook"]);
    assert_eq!(
        seen.calls_to("/gate").len(),
        1,
        "the recorded decision was reused"
    );
    let ev = events(&f, &run).await;
    assert_eq!(decisions(&ev).len(), 1);
    let id = ev.iter().find(|e| e["kind"] == "tool_call").unwrap()["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = result_of(&ev, &id);
    assert_eq!(r["is_error"], false, "{r}");
    assert!(
        r["content"].as_str().unwrap().contains("slow answer"),
        "{r}"
    );
    let finisher = ev.last().unwrap()["data"]["executor"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        finisher.starts_with(&format!("executor-{}-", survivor.0.id())),
        "{finisher}"
    );
    let seqs: Vec<i64> = ev.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=i64::try_from(seqs.len()).unwrap()).collect::<Vec<_>>(),
        "no gap, no repeat"
    );
    drop(survivor);
}
