//! Plan runs over HTTP against a whole fleet: what `POST /v1/runs` refuses of a `mode: "plan"`
//! body (a cycle named, an unknown or another tenant's agent as a role, `plan` without the
//! mode…) and what it stores (a loop run's spec without `plan`); the plan routes' answers for a
//! loop run, another tenant and another user (404 everywhere, an empty evaluation list); and
//! the approval of a parked plan through `PUT /v1/runs/{id}/plan` with `If-Match` (428
//! without it, 412 for a stale version, 200 and the run proceeds), an edit as a new version,
//! and retry/skip refused where they cannot apply.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::{TestFleet, put_agent};
use reqwest::Method;
use serde_json::{Value, json};

const FILE_TOOLS: &[&str] = &["Read", "Write", "Edit", "Glob", "List"];

/// `#mock`: write `files` in one turn, then reply.
fn writes(files: &[(&str, &str)], reply: &str) -> String {
    let calls: Vec<Value> = files
        .iter()
        .map(|(p, c)| json!({"name": "Write", "input": {"path": p, "content": c}}))
        .collect();
    format!("#mock {}", json!({"turns": [calls], "reply": reply}))
}

/// A task that writes `file` and checks it exists.
fn writing_task(id: &str, file: &str) -> Value {
    json!({"id": id, "description": format!("Write {file}.\n{}", writes(&[(file, "done")], "done")),
           "checks": [{"check": "non_empty", "path": file}]})
}

/// A fleet with a volume `ws` and agents `lead` (the plan run's own, doing its tasks) and
/// `checker` (a verifier).
async fn fleet() -> TestFleet {
    let f = TestFleet::start().await;
    let (status, body) = f.post("/v1/volumes", &f.admin, json!({"name": "ws"})).await;
    assert!(status == 201 || status == 200, "{status} {body}");
    for (name, tools) in [("lead", FILE_TOOLS), ("checker", &["Read", "List"][..])] {
        put_agent(
            &f,
            &f.admin,
            name,
            json!({"model": "mock-1", "tools": tools, "volumes": [{"name": "ws"}]}),
        )
        .await;
    }
    f
}

async fn token(f: &TestFleet, tenant: &str, subject: &str, scopes: &[&str]) -> String {
    let (s, t) = f
        .post(
            "/v1/tokens",
            &f.admin,
            json!({"name": subject, "tenant": tenant, "subject": subject, "scopes": scopes}),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

/// One request with extra headers: status, headers and JSON body.
async fn send(
    f: &TestFleet,
    method: Method,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = f
        .http
        .request(method, format!("{}{path}", f.url))
        .bearer_auth(token);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

async fn put_plan(
    f: &TestFleet,
    run: &str,
    if_match: Option<&str>,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let headers: Vec<(&str, &str)> = if_match.map(|m| ("if-match", m)).into_iter().collect();
    send(
        f,
        Method::PUT,
        &format!("/v1/runs/{run}/plan"),
        &f.admin,
        &headers,
        Some(body),
    )
    .await
}

fn etag(h: &reqwest::header::HeaderMap) -> Option<&str> {
    h.get("etag").and_then(|v| v.to_str().ok())
}

/// A plan run of `lead` with `plan`.
async fn start(f: &TestFleet, plan: Value) -> String {
    let (status, body) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "lead", "mode": "plan", "input": "Do the work.", "plan": plan}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().unwrap().to_owned()
}

/// The spec stored with run `run`.
async fn spec_of(f: &TestFleet, run: &str) -> Value {
    let id: uuid::Uuid = run.parse().unwrap();
    sqlx::query_scalar("SELECT spec FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&f.db.pool)
        .await
        .unwrap()
}

fn assert_400(status: u16, body: &Value, param: &str, says: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(says), "{message:?} does not say {says:?}");
}

/// Every plan route of `run`: (method, path, If-Match).
fn plan_routes(run: &str) -> Vec<(Method, String, Option<&'static str>)> {
    vec![
        (Method::GET, format!("/v1/runs/{run}/plan"), None),
        (Method::GET, format!("/v1/runs/{run}/plan/versions/1"), None),
        (Method::PUT, format!("/v1/runs/{run}/plan"), Some("\"1\"")),
        (
            Method::POST,
            format!("/v1/runs/{run}/plan/tasks/a/retry"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/runs/{run}/plan/tasks/a/skip"),
            None,
        ),
    ]
}

async fn call(
    f: &TestFleet,
    token: &str,
    (method, path, if_match): &(Method, String, Option<&'static str>),
) -> (u16, Value) {
    let headers: Vec<(&str, &str)> = if_match.map(|m| ("if-match", m)).into_iter().collect();
    let body = (*method == Method::PUT).then(|| json!({}));
    let (s, _, b) = send(f, method.clone(), path, token, &headers, body).await;
    (s, b)
}

// Multi-threaded: the test database pool is used here and closed from `TestDb`'s drop.
#[tokio::test(flavor = "multi_thread")]
async fn creating_a_plan_run_refuses_what_cannot_run_and_stores_the_plan() {
    let f = fleet().await;
    let other = token(
        &f,
        "beta",
        "bea",
        &["tenant:admin", "runs:create", "runs:read"],
    )
    .await;
    // Tenant beta has an agent `spy`; to acme it is no agent at all.
    put_agent(&f, &other, "spy", json!({"model": "mock-1"})).await;
    let post = |body: Value| f.post("/v1/runs", &f.admin, body);
    let plan_run =
        |plan: Value| json!({"agent": "lead", "mode": "plan", "input": "Do it.", "plan": plan});

    let (s, b) = post(json!({"agent": "lead", "input": "hi", "plan": {}})).await;
    assert_400(s, &b, "plan", "mode");
    let (s, b) = post(json!({"agent": "lead", "mode": "plan"})).await;
    assert_400(
        s,
        &b,
        "input",
        "`input` is the plan's goal: give it with mode \"plan\"",
    );
    let (s, b) = post(json!({"agent": "lead", "mode": "plan", "input": "  "})).await;
    assert_400(s, &b, "input", "the plan's goal");
    let (s, b) =
        post(json!({"agent": "lead", "mode": "plan", "input": "x", "interactive": true})).await;
    assert_400(s, &b, "interactive", "interactive");
    // Every error of the given plan at once; the cycle is named.
    let (s, b) = post(plan_run(json!({"tasks": [
        {"id": "a", "description": "A", "depends_on": ["b"]},
        {"id": "b", "description": "B", "depends_on": ["a"]},
        {"id": "c", "description": "C", "depends_on": ["nowhere"]},
    ]})))
    .await;
    assert_400(s, &b, "plan.tasks", "a -> b -> a");
    assert_400(s, &b, "plan.tasks", "unknown task `nowhere`");
    assert_400(s, &b, "plan.tasks", "; ");
    let (s, b) = post(plan_run(json!({"verifier": "nobody"}))).await;
    assert_400(
        s,
        &b,
        "plan.verifier",
        "plan.verifier: unknown agent `nobody`",
    );
    let (s, b) = post(plan_run(json!({"planner": "spy"}))).await;
    assert_400(s, &b, "plan.planner", "plan.planner: unknown agent `spy`");
    let (s, b) = post(plan_run(json!({"tasks": [
        {"id": "a", "description": "A", "agent": "lead"},
        {"id": "b", "description": "B", "agent": "ghost"},
    ]})))
    .await;
    assert_400(s, &b, "plan.tasks[1].agent", "unknown agent `ghost`");
    let (s, b) = post(plan_run(
        json!({"tasks": [{"id": "a", "description": "A", "verify": "llm"}]}),
    ))
    .await;
    assert_400(s, &b, "plan.verifier", "verifier");
    // The contract's own types refuse the rest before any of this.
    let (s, b) = post(plan_run(json!({"limits": {"max_parallel": 2, "bogus": 1}}))).await;
    assert_eq!(s, 400, "{b}");
    assert_eq!(b["error"]["param"], "plan.limits.bogus", "{b}");

    // A loop run's spec has no `plan` (and no `mode`): as it was before plan runs.
    let (s, loop_run) = post(json!({"agent": "lead", "input": "hi"})).await;
    assert_eq!(s, 201, "{loop_run}");
    let spec = spec_of(&f, loop_run["run_id"].as_str().unwrap()).await;
    assert!(
        spec.get("plan").is_none() && spec.get("mode").is_none(),
        "{spec}"
    );
    // A plan run's holds its plan, defaults filled in.
    let run = start(
        &f,
        json!({"verifier": "checker", "approval": "before_execute", "tasks": [writing_task("a", "a.txt")]}),
    )
    .await;
    let spec = spec_of(&f, &run).await;
    assert_eq!(spec["plan"]["verifier"], "checker", "{spec}");
    assert_eq!(spec["plan"]["approval"], "before_execute", "{spec}");
    assert_eq!(spec["plan"]["tasks"][0]["id"], "a", "{spec}");
    assert_eq!(spec["plan"]["limits"]["max_parallel"], 4, "{spec}");
    let (s, b) = post(json!({"agent": "lead", "mode": "plan", "input": "Plan it."})).await;
    assert_eq!(s, 201, "{b}");
    let spec = spec_of(&f, b["run_id"].as_str().unwrap()).await;
    assert_eq!(spec["plan"]["limits"]["max_tasks"], 20, "{spec}");
    f.stop().await;
}

#[tokio::test]
async fn a_loop_run_has_no_plan() {
    let f = fleet().await;
    let (s, run) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "lead", "input": "hi"}),
        )
        .await;
    assert_eq!(s, 201, "{run}");
    let run = run["run_id"].as_str().unwrap();
    for route in plan_routes(run) {
        let (s, b) = call(&f, &f.admin, &route).await;
        assert_eq!(s, 404, "{} {}: {b}", route.0, route.1);
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a plan run"),
            "{b}"
        );
    }
    f.stop().await;
}

#[tokio::test]
async fn another_tenants_plan_run_and_evaluations_are_not_found() {
    let f = fleet().await;
    let run = start(
        &f,
        json!({"approval": "before_execute", "tasks": [writing_task("a", "a.txt")]}),
    )
    .await;
    common::wait_event(&f, &f.admin, &run, 1, "plan_awaiting_approval").await;
    let (s, plan) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(s, 200, "{plan}");

    let beta = token(
        &f,
        "beta",
        "bea",
        &["tenant:admin", "runs:create", "runs:read"],
    )
    .await;
    // Another user of the same tenant, without `tenant:admin`, sees only its own runs.
    let bob = token(&f, "default", "bob", &["runs:create", "runs:read"]).await;
    let ghost = "019300aa-0000-7000-8000-000000000000";
    for who in [&beta, &bob] {
        for (route, unknown) in plan_routes(&run).iter().zip(plan_routes(ghost)) {
            let (s, b) = call(&f, who, route).await;
            assert_eq!(s, 404, "{} {}: {b}", route.0, route.1);
            // Just as for a run that never existed: nothing says it does.
            let (_, nb) = call(&f, who, &unknown).await;
            assert_eq!(
                b["error"]["message"].as_str().unwrap().replace(&run, ghost),
                nb["error"]["message"].as_str().unwrap(),
                "{} {}",
                route.0,
                route.1
            );
        }
    }
    // The plan is untouched: still waiting for its approval.
    let (s, again) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!((s, &again["approved_by"]), (200, &Value::Null), "{again}");

    let (s, b) = f.get("/v1/evaluations?agent=lead", &beta).await;
    assert_eq!((s, b), (200, json!({"data": []})));
    let (s, b) = f.get("/v1/evaluations", &f.admin).await;
    assert_400(s, &b, "agent", "`agent` is required");
    f.stop().await;
}

#[tokio::test]
async fn approving_a_parked_plan_takes_if_match_and_lets_the_run_proceed() {
    let f = fleet().await;
    let run = start(
        &f,
        json!({"approval": "before_execute", "tasks": [writing_task("a", "a.txt")]}),
    )
    .await;
    let parked = common::wait_event(&f, &f.admin, &run, 1, "plan_awaiting_approval").await;
    assert_eq!(parked["status"], "awaiting_input", "{parked}");

    let (s, h, plan) = send(
        &f,
        Method::GET,
        &format!("/v1/runs/{run}/plan"),
        &f.admin,
        &[],
        None,
    )
    .await;
    assert_eq!(s, 200, "{plan}");
    assert_eq!(etag(&h), Some("\"1\""));
    assert_eq!(plan["version"], 1);
    assert_eq!(plan["status"], "proposed");
    assert_eq!(plan["run_status"], "awaiting_input");
    assert_eq!(plan["approved_by"], Value::Null);
    assert_eq!(plan["tasks"][0]["id"], "a");
    assert_eq!(plan["tasks"][0]["status"], "pending");
    assert_eq!(plan["tasks"][0]["attempts"], json!([]));

    // Nothing to retry yet, and no such task: refused without touching the run.
    let (s, b) = f
        .post(
            &format!("/v1/runs/{run}/plan/tasks/a/retry"),
            &f.admin,
            json!({}),
        )
        .await;
    assert_eq!(s, 409, "{b}");
    let (s, b) = f
        .post(
            &format!("/v1/runs/{run}/plan/tasks/zz/skip"),
            &f.admin,
            json!({}),
        )
        .await;
    assert_eq!(s, 404, "{b}");

    let (s, _, b) = put_plan(&f, &run, None, json!({})).await;
    assert_eq!(s, 428, "{b}");
    assert_eq!(b["error"]["code"], "precondition_required", "{b}");
    assert_eq!(b["error"]["param"], "If-Match", "{b}");
    let (s, _, b) = put_plan(&f, &run, Some("\"one\""), json!({})).await;
    assert_400(s, &b, "If-Match", "plan version");
    let (s, _, b) = put_plan(&f, &run, Some("\"0\""), json!({})).await;
    assert_eq!(s, 412, "{b}");
    assert_eq!(b["error"]["code"], "precondition_failed", "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("current version is 1"),
        "{b}"
    );
    // An edit is held to the validator, every error at once.
    let (s, _, b) = put_plan(
        &f,
        &run,
        Some("\"1\""),
        json!({"tasks": [{"id": "a", "description": "A", "depends_on": ["a"]}]}),
    )
    .await;
    assert_400(s, &b, "tasks", "depends on itself");
    let (s, b) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(
        b["status"], "awaiting_input",
        "refusals leave it parked: {s} {b}"
    );

    let (s, h, approved) = put_plan(&f, &run, Some("W/\"1\""), json!({})).await;
    assert_eq!(s, 200, "{approved}");
    assert_eq!(etag(&h), Some("\"1\""));
    assert_eq!(approved["version"], 1);
    assert_eq!(approved["approved_by"], "bootstrap-admin");
    // Approved once: a second approval finds nothing waiting.
    let (s, _, b) = put_plan(&f, &run, Some("1"), json!({})).await;
    assert_eq!(s, 409, "{b}");

    // The run proceeds to its end, and the plan shows how it went.
    let frames = common::stream_until(&f, &f.admin, &run, "", None, "run_finished").await;
    let finished = &frames.last().unwrap().2["data"];
    assert_eq!(finished["status"], "succeeded", "{finished}");
    let (s, plan) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(s, 200, "{plan}");
    assert_eq!(plan["status"], "accepted", "{plan}");
    assert_eq!(plan["run_status"], "succeeded", "{plan}");
    assert_eq!(plan["tasks"][0]["status"], "passed", "{plan}");
    let attempt = &plan["tasks"][0]["attempts"][0];
    assert_eq!(attempt["attempt"], 1, "{plan}");
    assert_eq!(attempt["checks"][0]["passed"], true, "{plan}");
    let (s, v1) = f
        .get(&format!("/v1/runs/{run}/plan/versions/1"), &f.admin)
        .await;
    assert_eq!((s, &v1["version"]), (200, &json!(1)), "{v1}");
    let (s, b) = f
        .get(&format!("/v1/runs/{run}/plan/versions/2"), &f.admin)
        .await;
    assert_eq!(s, 404, "{b}");
    let (s, b) = f
        .get(&format!("/v1/runs/{run}/plan/versions/two"), &f.admin)
        .await;
    assert_400(s, &b, "version", "plan version number");
    // An ended run takes no more controls.
    for action in ["retry", "skip"] {
        let (s, b) = f
            .post(
                &format!("/v1/runs/{run}/plan/tasks/a/{action}"),
                &f.admin,
                json!({}),
            )
            .await;
        assert_eq!(s, 409, "{action}: {b}");
    }
    // Its verdicts are evaluations of the agent that did the task, in this tenant only.
    let (s, evals) = f.get("/v1/evaluations?agent=lead", &f.admin).await;
    assert_eq!(s, 200, "{evals}");
    let agg = &evals["data"][0];
    assert_eq!(agg["agent"], "lead", "{evals}");
    assert!(agg["total"].as_u64().unwrap() >= 1, "{evals}");
    assert_eq!(agg["pass_rate"], 1.0, "{evals}");
    let (s, one) = f
        .get(
            &format!(
                "/v1/evaluations?agent=lead&version={}",
                agg["version"].as_str().unwrap()
            ),
            &f.admin,
        )
        .await;
    assert_eq!((s, &one["data"]), (200, &evals["data"]), "{one}");
    f.stop().await;
}

#[tokio::test]
async fn an_edited_plan_is_a_new_version_and_runs() {
    let f = fleet().await;
    let run = start(
        &f,
        json!({"approval": "before_execute", "tasks": [writing_task("a", "a.txt")]}),
    )
    .await;
    common::wait_event(&f, &f.admin, &run, 1, "plan_awaiting_approval").await;
    let (s, h, edited) = put_plan(
        &f,
        &run,
        Some("\"1\""),
        json!({"tasks": [writing_task("a", "a.txt"), {
            "id": "b", "depends_on": ["a"], "checks": [{"check": "non_empty", "path": "b.txt"}],
            "description": format!("Write b.txt.\n{}", writes(&[("b.txt", "B")], "done"))}]}),
    )
    .await;
    assert_eq!(s, 200, "{edited}");
    assert_eq!(etag(&h), Some("\"2\""));
    assert_eq!(edited["version"], 2);
    assert_eq!(edited["approved_by"], "bootstrap-admin");
    assert_eq!(edited["tasks"].as_array().unwrap().len(), 2, "{edited}");
    let frames = common::stream_until(&f, &f.admin, &run, "", None, "run_finished").await;
    let accepted: Vec<&Value> = frames
        .iter()
        .filter(|(_, k, _)| k == "plan_accepted")
        .map(|(_, _, d)| &d["data"]["version"])
        .collect();
    assert_eq!(accepted, [&json!(2)], "{frames:?}");
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (_, plan) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(plan["version"], 2, "{plan}");
    assert_eq!(plan["tasks"][1]["status"], "passed", "{plan}");
    let (_, old) = f
        .get(&format!("/v1/runs/{run}/plan/versions/1"), &f.admin)
        .await;
    assert_eq!(old["status"], "superseded", "{old}");
    f.stop().await;
}
