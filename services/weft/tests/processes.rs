//! Processes on a whole fleet (docs/harness.md, "Processes"): a process is a versioned
//! definition of its tenant only (another tenant can neither read it nor run it, and cannot
//! tell it exists); a plan run naming a `strict` process runs its phases as the plan, with the
//! process's limits narrowed by the caller's, its persona and tools recorded in the run's spec;
//! a `guided` process's phases are stored for the planner; what `POST /v1/runs` refuses of a
//! process run; and `weft process test` passing one case and failing another.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::{TestFleet, put_agent};
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

/// A fleet with a volume `ws` and agents `lead` (file tools; does the phases) and `checker`
/// (reads only).
async fn fleet() -> TestFleet {
    let f = TestFleet::start().await;
    agents(&f, &f.admin).await;
    f
}

/// Volume `ws` and agents `lead` and `checker` in the tenant of `token`.
async fn agents(f: &TestFleet, token: &str) {
    let (status, body) = f.post("/v1/volumes", token, json!({"name": "ws"})).await;
    assert!(status == 201 || status == 200, "{status} {body}");
    for (name, tools) in [("lead", FILE_TOOLS), ("checker", &["Read", "List"][..])] {
        put_agent(
            f,
            token,
            name,
            json!({"model": "mock-1", "tools": tools, "volumes": [{"name": "ws"}]}),
        )
        .await;
    }
}

/// A strict process of two phases, each writing its deliverable through a `#mock` script, with
/// a case that expects what happens and one that expects the opposite.
fn report_process() -> Value {
    json!({
        "description": "two files, one after the other",
        "persona": "You are careful and brief.",
        "phases": [
            {"id": "a", "description": format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")),
             "deliverables": ["a.txt"]},
            {"id": "b", "description": format!("Write b.txt.\n{}", writes(&[("b.txt", "B")], "done")),
             "depends_on": ["a"], "deliverables": ["b.txt"],
             "checks": [{"check": "matches", "path": "b.txt", "pattern": "^B$"}], "final": true}
        ],
        "tools": {"required": ["Write"], "excluded": ["HTTP"]},
        "limits": {"max_attempts": 2, "max_tokens": 1_000_000},
        "tests": [
            {"name": "both-pass", "input": "Write both files.", "expect": {"status": "succeeded", "passed": ["a", "b"]}},
            {"name": "expects-failure", "input": "Write both files.", "expect": {"status": "failed"}}
        ]
    })
}

async fn put_process(f: &TestFleet, token: &str, name: &str, body: Value) -> (u16, Value) {
    f.put(&format!("/v1/processes/{name}"), token, body).await
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

/// `POST /v1/runs` of a plan run of `agent` with `plan`, as `token`.
async fn create(f: &TestFleet, token: &str, agent: &str, plan: Value) -> (u16, Value) {
    f.post(
        "/v1/runs",
        token,
        json!({"agent": agent, "mode": "plan", "input": "Write both files.", "plan": plan}),
    )
    .await
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

// Multi-threaded: the test database pool is used here and closed from `TestDb`'s drop.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_is_a_versioned_definition_another_tenant_can_neither_see_nor_use() {
    let f = fleet().await;
    let (s, v1) = put_process(&f, &f.admin, "report", report_process()).await;
    assert_eq!(s, 201, "{v1}");
    assert_eq!(
        (v1["number"].as_u64(), v1["created"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(v1["content"]["phase_mode"], "strict", "{v1}");
    // The same content is the same version; new content the next one.
    let (s, again) = put_process(&f, &f.admin, "report", report_process()).await;
    assert_eq!((s, &again["version"]), (200, &v1["version"]), "{again}");
    let mut changed = report_process();
    changed["description"] = json!("two files, described again");
    let (s, v2) = put_process(&f, &f.admin, "report", changed).await;
    assert_eq!((s, v2["number"].as_u64()), (201, Some(2)), "{v2}");
    let (s, versions) = f.get("/v1/processes/report/versions", &f.admin).await;
    assert_eq!(s, 200, "{versions}");
    assert_eq!(versions["data"].as_array().unwrap().len(), 2, "{versions}");
    let (s, list) = f.get("/v1/processes", &f.admin).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["data"][0]["name"], "report", "{list}");
    assert_eq!(list["data"][0]["description"], "two files, described again");
    let (s, back) = f
        .post(
            "/v1/processes/report/activate",
            &f.admin,
            json!({"version": 1}),
        )
        .await;
    assert_eq!(
        (s, &back["active_version"]),
        (200, &v1["version"]),
        "{back}"
    );

    // Phases that are no plan are refused, every error at once.
    let (s, e) = put_process(
        &f,
        &f.admin,
        "broken",
        json!({"description": "d", "phases": [
            {"id": "a", "description": "x", "depends_on": ["b"]},
            {"id": "b", "description": "y", "depends_on": ["a"], "deliverables": ["../up"]}
        ]}),
    )
    .await;
    assert_400(s, &e, "phases[1].deliverables", "deliverable `../up`");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the dependencies form a cycle: a -> b -> a"),
        "{e}"
    );

    // Tenant B has an agent `lead` of its own, and no process: A's is unknown to it, in the
    // very words a process that never existed gets.
    let beta = token(
        &f,
        "beta",
        "bea",
        &["tenant:admin", "runs:create", "runs:read"],
    )
    .await;
    agents(&f, &beta).await;
    let (s, b) = f.get("/v1/processes/report", &beta).await;
    let (gs, gb) = f.get("/v1/processes/ghost", &beta).await;
    assert_eq!((s, gs), (404, 404), "{b} {gb}");
    assert_eq!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .replace("report", "ghost"),
        gb["error"]["message"].as_str().unwrap()
    );
    let (s, list) = f.get("/v1/processes", &beta).await;
    assert_eq!(
        (s, list["data"].as_array().unwrap().len()),
        (200, 0),
        "{list}"
    );
    let (s, b) = create(&f, &beta, "lead", json!({"process": "report"})).await;
    assert_400(s, &b, "plan.process", "unknown process `report`");
    let (_, gb) = create(&f, &beta, "lead", json!({"process": "ghost"})).await;
    assert_eq!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .replace("report", "ghost"),
        gb["error"]["message"].as_str().unwrap()
    );
    // B's own process of the same name is B's, and leaves A's as it was.
    let mut own = report_process();
    own["description"] = json!("B's own");
    let (s, bv) = put_process(&f, &beta, "report", own).await;
    assert_eq!((s, bv["number"].as_u64()), (201, Some(1)), "{bv}");
    let (s, a) = f.get("/v1/processes/report", &f.admin).await;
    assert_eq!((s, &a["version"]), (200, &v1["version"]), "{a}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strict_process_runs_its_phases_as_the_plan() {
    let f = fleet().await;
    let (s, v) = put_process(&f, &f.admin, "report", report_process()).await;
    assert_eq!(s, 201, "{v}");
    // The caller narrows `max_parallel`; `max_attempts` left at its default is the process's.
    let (s, run) = create(
        &f,
        &f.admin,
        "lead",
        json!({"process": "report", "limits": {"max_parallel": 1, "max_tokens": 5_000_000}}),
    )
    .await;
    assert_eq!(s, 201, "{run}");
    let run = run["run_id"].as_str().unwrap().to_owned();

    let plan = &spec_of(&f, &run).await["plan"];
    assert_eq!(plan["process"], "report", "{plan}");
    assert_eq!(plan["phase_mode"], "strict", "{plan}");
    // The version it was created from is recorded, as the process's content hash.
    assert!(v["version"].as_str().unwrap().starts_with("sha256:"), "{v}");
    assert_eq!(plan["process_version"], v["version"], "{plan}");
    assert_eq!(plan["persona"], "You are careful and brief.", "{plan}");
    assert_eq!(plan["tools_required"], json!(["Write"]), "{plan}");
    assert_eq!(plan["tools_excluded"], json!(["HTTP"]), "{plan}");
    assert_eq!(plan.get("phases"), None, "{plan}");
    assert_eq!(
        (
            &plan["limits"]["max_parallel"],
            &plan["limits"]["max_attempts"],
            &plan["limits"]["max_tokens"]
        ),
        (&json!(1), &json!(2), &json!(1_000_000)),
        "{plan}"
    );
    let tasks = plan["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{plan}");
    assert_eq!(tasks[0]["writes"], json!(["a.txt"]), "{plan}");
    assert_eq!(
        tasks[1]["checks"],
        json!([{"check": "exists", "path": "b.txt"}, {"check": "matches", "path": "b.txt", "pattern": "^B$"}]),
        "{plan}"
    );

    let frames = common::stream_until(&f, &f.admin, &run, "", None, "run_finished").await;
    assert_eq!(frames.last().unwrap().1, "run_finished");
    let (s, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!((s, &r["status"]), (200, &json!("succeeded")), "{r}");
    let (s, view) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(s, 200, "{view}");
    let statuses: Vec<(&str, &str)> = view["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(statuses, vec![("a", "passed"), ("b", "passed")], "{view}");
    assert_eq!(
        (&view["process"], &view["process_version"]),
        (&json!("report"), &v["version"]),
        "{view}"
    );
    let (s, events) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    assert_eq!(s, 200, "{events}");
    let proposed: Vec<&Value> = events["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "plan_proposed")
        .collect();
    assert_eq!(proposed.len(), 1, "{events}");
    assert_eq!(proposed[0]["data"]["source"], "caller", "{events}");
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn creating_a_process_run_refuses_what_cannot_run_and_stores_a_guided_outline() {
    let f = fleet().await;
    let (s, v) = put_process(&f, &f.admin, "report", report_process()).await;
    assert_eq!(s, 201, "{v}");
    let task = json!({"id": "a", "description": "x"});
    let (s, b) = create(
        &f,
        &f.admin,
        "lead",
        json!({"process": "report", "tasks": [task]}),
    )
    .await;
    assert_400(
        s,
        &b,
        "plan.tasks",
        "`plan.process` and `plan.tasks` are two plans",
    );
    // What the gateway sets from the process cannot come from the caller.
    for (field, value) in [
        ("phases", json!([task])),
        ("process_version", json!("sha256:00")),
        ("phase_mode", json!("guided")),
        ("persona", json!("someone else")),
        ("tools_required", json!(["Write"])),
        ("tools_excluded", json!(["Write"])),
    ] {
        let mut plan = json!({"process": "report"});
        plan[field] = value;
        let (s, b) = create(&f, &f.admin, "lead", plan).await;
        assert_400(
            s,
            &b,
            &format!("plan.{field}"),
            "is set by weft from `plan.process`",
        );
    }
    let (s, b) = create(&f, &f.admin, "lead", json!({"process": "nope"})).await;
    assert_400(s, &b, "plan.process", "unknown process `nope`");
    // The process requires `Write`, which `checker` lacks.
    let (s, b) = create(&f, &f.admin, "checker", json!({"process": "report"})).await;
    assert_400(
        s,
        &b,
        "plan.process",
        "requires tool `Write`, which agent `checker` (doing phase `a`) does not have",
    );
    // A caller's limits narrow the process's plan too: two phases exceed `max_tasks: 1`.
    let (s, b) = create(
        &f,
        &f.admin,
        "lead",
        json!({"process": "report", "limits": {"max_tasks": 1}}),
    )
    .await;
    assert_400(s, &b, "plan.process", "more than `max_tasks` (1)");
    // A retired process cannot be run.
    let (s, b) = f
        .post("/v1/processes/report/retire", &f.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = create(&f, &f.admin, "lead", json!({"process": "report"})).await;
    assert_400(s, &b, "plan.process", "process `report` is retired");

    // A guided process's phases go to the planner, not into `tasks`; a phase verified by a
    // model needs a verifier.
    let mut guided = report_process();
    guided["phase_mode"] = json!("guided");
    guided["verification"] = json!({"default_verify": "llm"});
    let (s, v) = put_process(&f, &f.admin, "guided", guided).await;
    assert_eq!(s, 201, "{v}");
    let (s, b) = create(&f, &f.admin, "lead", json!({"process": "guided"})).await;
    assert_400(s, &b, "plan.verifier", "needs a verifier agent");
    let (s, run) = create(
        &f,
        &f.admin,
        "lead",
        json!({"process": "guided", "verifier": "checker", "approval": "before_execute"}),
    )
    .await;
    assert_eq!(s, 201, "{run}");
    let run = run["run_id"].as_str().unwrap().to_owned();
    let plan = &spec_of(&f, &run).await["plan"];
    assert_eq!(plan["phase_mode"], "guided", "{plan}");
    assert_eq!(plan.get("tasks"), None, "{plan}");
    let phases = plan["phases"].as_array().unwrap();
    assert_eq!(
        phases
            .iter()
            .map(|t| (t["id"].as_str().unwrap(), t["verify"].as_str().unwrap()))
            .collect::<Vec<_>>(),
        vec![("a", "llm"), ("b", "llm")],
        "{plan}"
    );
    let (s, b) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(s == 200 || s == 202 || s == 409, "{s} {b}");
    f.stop().await;
}

/// `weft process test <name>` against `f`: its exit code and standard output.
async fn process_test(f: &TestFleet, name: &str) -> (Option<i32>, String) {
    let mut cmd = common::weft_command(f);
    cmd.args([
        "process",
        "test",
        name,
        "--agent",
        "lead",
        "--timeout",
        "120",
    ])
    .args(["--url", &f.url, "--token", &f.admin])
    .env_remove("WEFT_TOKEN")
    .stdout(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn weft_process_test_passes_a_case_and_fails_another() {
    let f = fleet().await;
    let (s, v) = put_process(&f, &f.admin, "report", report_process()).await;
    assert_eq!(s, 201, "{v}");
    let (code, out) = process_test(&f, "report").await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], "PASS both-pass", "{out}");
    assert!(
        lines[1].starts_with("FAIL expects-failure: the run succeeded, expected failed (run "),
        "{out}"
    );
    assert_eq!(code, Some(1), "{out}");

    // Only the case that holds: exit 0.
    let mut ok = report_process();
    ok["tests"] = json!([{"name": "both-pass", "input": "Write both files.", "expect": {"passed": ["a", "b"]}}]);
    let (s, v) = put_process(&f, &f.admin, "report", ok).await;
    assert_eq!(s, 201, "{v}");
    let (code, out) = process_test(&f, "report").await;
    assert_eq!((code, out.as_str()), (Some(0), "PASS both-pass\n"));

    // A process that does not exist cannot be tested.
    let (code, out) = process_test(&f, "ghost").await;
    assert_eq!((code, out.as_str()), (Some(1), ""));
    f.stop().await;
}
