//! The `Evaluation` tool called by a scripted (`#mock`) model inside runs on a whole fleet: a
//! judge run submits verdicts on another agent's work (that agent's current version found by
//! name, one evaluation per task), another run of the tenant reads them back and aggregates them
//! per version — the aggregate `GET /v1/evaluations` answers too — another tenant's run sees
//! none of it and cannot name the first tenant's agents, and bad input is an error result that
//! says what to fix, writing nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::HashMap;

use common::{TestFleet, create, script, stream};
use serde_json::{Value, json};

async fn token(f: &TestFleet, tenant: &str) -> String {
    let (s, t) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": "root", "tenant": tenant, "subject": "root", "scopes": ["tenant:admin"]}),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

/// Defines agent `name`; its version (content hash).
async fn put_agent(f: &TestFleet, token: &str, name: &str, body: Value) -> String {
    let (s, r) = f.put(&format!("/v1/agents/{name}"), token, body).await;
    assert!(s == 200 || s == 201, "put agent {name}: {s} {r}");
    r["version"].as_str().unwrap().to_owned()
}

/// One call as the transcript has it: its input, its result and whether it failed.
struct Call {
    input: Value,
    content: String,
    is_error: bool,
}

impl Call {
    /// The result of a call that succeeded, as JSON.
    fn ok(&self) -> Value {
        assert!(!self.is_error, "{} failed: {}", self.input, self.content);
        serde_json::from_str(&self.content).unwrap()
    }

    /// The error text of a call that failed.
    fn refused(&self) -> &str {
        assert!(
            self.is_error,
            "{} should have failed: {}",
            self.input, self.content
        );
        &self.content
    }
}

/// Runs `turns` of `Evaluation` calls on `agent` of `token`'s tenant to the end; the run and its
/// calls in order.
async fn run_script(f: &TestFleet, token: &str, agent: &str, turns: Value) -> (String, Vec<Call>) {
    let run = create(
        f,
        token,
        json!({"agent": agent, "input": script(turns, "done")}),
    )
    .await;
    let frames = stream(f, token, &run, "", None).await;
    assert_eq!(
        frames.last().unwrap().2["data"]["status"],
        "succeeded",
        "{frames:?}"
    );
    let (s, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), token)
        .await;
    assert_eq!(s, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    let mut results: HashMap<&str, (String, bool)> = HashMap::new();
    for e in events.iter().filter(|e| e["kind"] == "tool_result") {
        results.insert(
            e["data"]["tool_use_id"].as_str().unwrap(),
            (
                e["data"]["content"].as_str().unwrap().to_owned(),
                e["data"]["is_error"].as_bool().unwrap(),
            ),
        );
    }
    let calls = events
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .map(|e| {
            assert_eq!(e["data"]["name"], "Evaluation");
            let (content, is_error) = results[e["data"]["id"].as_str().unwrap()].clone();
            Call {
                input: e["data"]["input"].clone(),
                content,
                is_error,
            }
        })
        .collect();
    (run, calls)
}

fn submit(body: Value) -> Value {
    let mut input = json!({"op": "submit"});
    input
        .as_object_mut()
        .unwrap()
        .extend(body.as_object().unwrap().clone());
    json!({"name": "Evaluation", "input": input})
}

fn call(input: Value) -> Value {
    json!({"name": "Evaluation", "input": input})
}

async fn pool(f: &TestFleet) -> sqlx::PgPool {
    sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn submitted_verdicts_aggregate_per_version_and_stay_in_their_tenant() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme").await;
    let beta = token(&f, "beta").await;
    let tools = json!({"model": "mock-1", "tools": ["Evaluation"]});
    let worker_v1 = put_agent(&f, &acme, "worker", json!({"model": "mock-1"})).await;
    let judge = put_agent(&f, &acme, "judge", tools.clone()).await;

    // A judge run of acme evaluates the worker's tasks and its own work.
    let (run_a, calls) = run_script(
        &f,
        &acme,
        "judge",
        json!([
            [submit(json!({
                "task": "t1", "verdict": "pass", "agent": "worker",
                "dimensions": {"correctness": 0.9, "note": "clean"}
            }))],
            [submit(
                json!({"task": "t2", "verdict": "fail", "agent": "worker", "score": 0.2})
            )],
            [submit(json!({"verdict": "inconclusive"}))],
            // The same task again, whatever the verdict: refused, the first one stays.
            [submit(
                json!({"task": "t1", "verdict": "fail", "agent": "worker"})
            )],
            [call(json!({"op": "get"}))]
        ]),
    )
    .await;
    let first = calls[0].ok();
    assert_eq!(first["recorded"], true, "{first}");
    assert!(first.get("replayed").is_none(), "{first}");
    let e = &first["evaluation"];
    assert_eq!(
        (
            &e["run_id"],
            &e["task"],
            &e["agent"],
            &e["version"],
            &e["emitter_role"],
            &e["verdict"],
            &e["score"],
            &e["attempt"]
        ),
        (
            &json!(run_a),
            &json!("t1"),
            &json!("worker"),
            &json!(worker_v1),
            &json!("agent"),
            &json!("pass"),
            &json!(1.0),
            &json!(0)
        ),
        "{e}"
    );
    assert_eq!(e["dimensions"]["correctness"], 0.9);
    assert_eq!(e["dimensions"]["note"], "clean");
    assert!(e["dimensions"]["tool_use_id"].is_string(), "{e}");
    let second = calls[1].ok();
    assert_eq!(
        (
            &second["evaluation"]["verdict"],
            &second["evaluation"]["score"]
        ),
        (&json!("fail"), &json!(0.2))
    );
    // Without `agent`: this run's own, at the version it runs.
    let own = calls[2].ok();
    assert_eq!(
        (
            &own["evaluation"]["agent"],
            &own["evaluation"]["version"],
            &own["evaluation"]["task"],
            &own["evaluation"]["score"]
        ),
        (&json!("judge"), &json!(judge), &json!(""), &json!(0.5))
    );
    let again = calls[3].refused();
    assert!(
        again.starts_with(
            "this run already submitted an evaluation of task `t1`: pass for `worker`"
        ),
        "{again}"
    );
    let listed = calls[4].ok();
    let tasks: Vec<&str> = listed["evaluations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["", "t2", "t1"], "newest first: {listed}");
    assert_eq!(listed["run_id"], run_a.as_str());

    // A new version of the worker: a later submission names it; another run reads and
    // aggregates what both wrote.
    let worker_v2 = put_agent(
        &f,
        &acme,
        "worker",
        json!({"model": "mock-1", "description": "v2"}),
    )
    .await;
    assert_ne!(worker_v1, worker_v2);
    let (_, calls) = run_script(
        &f,
        &acme,
        "judge",
        json!([
            [submit(
                json!({"task": "t1", "verdict": "pass", "agent": "worker"})
            )],
            [call(json!({"op": "aggregate", "agent": "worker"}))],
            [
                call(json!({"op": "aggregate", "agent": "worker", "version": worker_v1})),
                call(json!({"op": "get", "run_id": run_a})),
                call(json!({"op": "get", "run_id": run_a, "task": "t2"}))
            ]
        ]),
    )
    .await;
    assert_eq!(calls[0].ok()["evaluation"]["version"], worker_v2.as_str());
    let aggregate = calls[1].ok();
    let data = aggregate["data"].as_array().unwrap();
    assert_eq!(data.len(), 2, "{aggregate}");
    assert_eq!(
        (
            &data[0]["version"],
            &data[0]["total"],
            &data[0]["pass"],
            &data[0]["pass_rate"]
        ),
        (&json!(worker_v2), &json!(1), &json!(1), &json!(1.0)),
        "the newest version first: {aggregate}"
    );
    let v1 = &data[1];
    assert_eq!(
        (
            &v1["agent"],
            &v1["version"],
            &v1["total"],
            &v1["pass"],
            &v1["fail"],
            &v1["inconclusive"],
            &v1["pass_rate"],
            &v1["by_role"]
        ),
        (
            &json!("worker"),
            &json!(worker_v1),
            &json!(2),
            &json!(1),
            &json!(1),
            &json!(0),
            &json!(0.5),
            &json!({"agent": {"pass": 1, "fail": 1}})
        ),
        "{v1}"
    );
    assert!(
        (v1["mean_score"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{v1}"
    );
    // The same answer as the route's.
    let (s, route) = f.get("/v1/evaluations?agent=worker", &acme).await;
    assert_eq!(s, 200, "{route}");
    assert_eq!(route, aggregate);
    let only_v1 = calls[2].ok();
    assert_eq!(only_v1["data"], json!([v1]));
    let of_a = calls[3].ok();
    assert_eq!(of_a["evaluations"], listed["evaluations"]);
    let of_t2 = calls[4].ok();
    assert_eq!(
        of_t2["evaluations"],
        json!([listed["evaluations"][1].clone()])
    );

    // Another tenant: the same names, none of the data.
    put_agent(&f, &beta, "judge", tools).await;
    let (_, calls) = run_script(
        &f,
        &beta,
        "judge",
        json!([[
            call(json!({"op": "get", "run_id": run_a})),
            call(json!({"op": "aggregate", "agent": "worker"})),
            call(json!({"op": "aggregate", "agent": "judge"})),
            submit(json!({"verdict": "pass", "agent": "worker"}))
        ]]),
    )
    .await;
    assert_eq!(calls[0].ok(), json!({"run_id": run_a, "evaluations": []}));
    assert_eq!(calls[1].ok(), json!({"data": []}));
    assert_eq!(calls[2].ok(), json!({"data": []}));
    assert_eq!(
        calls[3].refused(),
        "agent `worker` is not defined in this tenant: name one of its agents, or leave `agent` out to evaluate this run's own (`judge`)"
    );
    let (s, route) = f.get("/v1/evaluations?agent=worker", &beta).await;
    assert_eq!((s, route), (200, json!({"data": []})));

    // Each accepted submission is one row, of acme.
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT tenant_id, task_id, agent_name FROM evaluations ORDER BY created_at",
    )
    .fetch_all(&pool(&f).await)
    .await
    .unwrap();
    let want = |t: &str, a: &str| ("acme".to_owned(), t.to_owned(), a.to_owned());
    assert_eq!(
        rows,
        [
            want("t1", "worker"),
            want("t2", "worker"),
            want("", "judge"),
            want("t1", "worker")
        ]
    );
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_an_error_result_that_says_what_to_fix() {
    let f = TestFleet::start().await;
    let acme = token(&f, "acme").await;
    put_agent(
        &f,
        &acme,
        "judge",
        json!({"model": "mock-1", "tools": ["Evaluation"]}),
    )
    .await;
    let cases = [
        (
            json!({"op": "rate"}),
            "`op` must be one of submit, get, aggregate, got \"rate\"",
        ),
        (
            json!({"op": "submit"}),
            "`verdict` (pass, fail or inconclusive) is required",
        ),
        (
            json!({"op": "submit", "verdict": "great"}),
            "`verdict` must be pass, fail or inconclusive, got \"great\"",
        ),
        (
            json!({"op": "submit", "verdict": "pass", "score": 2}),
            "`score` must be a number from 0 to 1, got 2",
        ),
        (
            json!({"op": "submit", "verdict": "pass", "dimensions": {"steps": [1, 2]}}),
            "`dimensions.steps` must be a number or a string, got an array",
        ),
        (
            json!({"op": "get", "run_id": "yesterday"}),
            "`run_id` must be a run id (a UUID), got \"yesterday\"",
        ),
        (
            json!({"op": "aggregate"}),
            "`agent` (the name of the agent whose evaluations to aggregate) is required",
        ),
    ];
    let turn: Vec<Value> = cases.iter().map(|(input, _)| call(input.clone())).collect();
    let (_, calls) = run_script(&f, &acme, "judge", json!([turn])).await;
    assert_eq!(calls.len(), cases.len());
    for (c, (input, want)) in calls.iter().zip(&cases) {
        assert_eq!(&c.input, input);
        assert_eq!(c.refused(), *want, "{input}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM evaluations")
        .fetch_one(&pool(&f).await)
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing is written");
    f.stop().await;
}
