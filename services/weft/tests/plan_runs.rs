//! Suite A of the plan harness (docs/harness.md): plan runs on a real fleet with scripted `#mock`
//! models per role. Each case asserts the exact sequence of the run's plan events and its final
//! state. Scripts ride where each role reads first: a planner's or replanner's in its agent's
//! system prompt (or in its own previous answer, which a retry shows it first), a task
//! attempt's in the task's description (or in the feedback it carries), a verifier's in the
//! task's acceptance (or in the attempt's answer, which it reads first).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::Duration;

use common::{Proc, TestFleet, executor_process, put_agent};
use futures::StreamExt as _;
use serde_json::{Value, json};

const FILE_TOOLS: &[&str] = &["Read", "Write", "Edit", "Glob", "List"];

/// `#mock` with this reply.
fn says(reply: &str) -> String {
    format!("#mock {}", json!({"reply": reply}))
}

/// `#mock`: write `files` in one turn, then reply.
fn writes(files: &[(&str, &str)], reply: &str) -> String {
    let calls: Vec<Value> = files
        .iter()
        .map(|(p, c)| json!({"name": "Write", "input": {"path": p, "content": c}}))
        .collect();
    format!("#mock {}", json!({"turns": [calls], "reply": reply}))
}

fn verdict(kind: &str, reason: &str, feedback: &str) -> String {
    json!({"verdict": kind, "reason_code": reason, "confidence": 0.9, "issues": [], "missing": [], "feedback": feedback})
        .to_string()
}

fn task(id: &str, description: String) -> Value {
    json!({"id": id, "description": description})
}

/// A fleet with a named volume `ws` and the agents every case uses: `lead` (the plan run's
/// own), `worker` (does tasks), `checker` (verifies), `planner` and `replanner` (scripted by
/// `planner_script` / `replanner_script`).
async fn fleet(planner_script: &str, replanner_script: &str) -> TestFleet {
    fleet_with(planner_script, replanner_script, |_| {}).await
}

async fn fleet_with(
    planner_script: &str,
    replanner_script: &str,
    tweak: impl FnOnce(&mut weft_config::Config),
) -> TestFleet {
    let f = TestFleet::start_with(tweak).await;
    agents(&f, planner_script, replanner_script, "mock-1").await;
    f
}

async fn agents(f: &TestFleet, planner_script: &str, replanner_script: &str, model: &str) {
    let (status, body) = f.post("/v1/volumes", &f.admin, json!({"name": "ws"})).await;
    assert!(status == 201 || status == 200, "{status} {body}");
    let bind = json!([{"name": "ws"}]);
    for (name, prompt, tools) in [
        ("lead", "", FILE_TOOLS),
        ("worker", "", FILE_TOOLS),
        ("checker", "", &["Read", "List"][..]),
        ("planner", planner_script, &[][..]),
        ("replanner", replanner_script, &[][..]),
    ] {
        put_agent(
            f,
            &f.admin,
            name,
            json!({"model": model, "tools": tools, "volumes": bind, "system_prompt": prompt}),
        )
        .await;
    }
}

/// Starts a plan run of `lead` with `plan` (roles defaulted to the agents above).
async fn start(f: &TestFleet, plan: Value) -> String {
    let mut plan = plan;
    let p = plan.as_object_mut().unwrap();
    p.entry("planner").or_insert(json!("planner"));
    p.entry("replanner").or_insert(json!("replanner"));
    p.entry("verifier").or_insert(json!("checker"));
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

/// Every persisted event of `run`, once it finished.
async fn finished(f: &TestFleet, run: &str) -> Vec<Value> {
    let frames = common::stream_until(f, &f.admin, run, "", None, "run_finished").await;
    assert_eq!(frames.last().unwrap().1, "run_finished");
    events(f, run).await
}

async fn events(f: &TestFleet, run: &str) -> Vec<Value> {
    let (status, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    assert_eq!(status, 200, "{page}");
    page["data"].as_array().unwrap().clone()
}

/// The plan events as `kind[:task:attempt][:detail]` lines.
fn plan_sequence(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            let d = &e["data"];
            let s = match e["kind"].as_str().unwrap() {
                "plan_proposed" => format!(
                    "plan_proposed:v{}:{}",
                    d["version"],
                    d["source"].as_str().unwrap()
                ),
                "plan_rejected" => format!("plan_rejected:{}", d["source"].as_str().unwrap()),
                "plan_accepted" => format!("plan_accepted:v{}", d["version"]),
                "plan_awaiting_approval" => format!("plan_awaiting_approval:v{}", d["version"]),
                "task_started" => format!(
                    "task_started:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"]
                ),
                "task_checked" => format!(
                    "task_checked:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"]
                ),
                "verifier_unreadable" => format!(
                    "verifier_unreadable:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"]
                ),
                "task_verified" => format!(
                    "task_verified:{}:{}:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"],
                    d["tier"].as_str().unwrap(),
                    d["verdict"]["verdict"].as_str().unwrap()
                ),
                "task_retrying" => format!(
                    "task_retrying:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"]
                ),
                "task_finished" => format!(
                    "task_finished:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["status"].as_str().unwrap()
                ),
                "task_control" => format!(
                    "task_control:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["action"].as_str().unwrap()
                ),
                "outcome_stale" => format!(
                    "outcome_stale:{}:{}",
                    d["task"].as_str().unwrap(),
                    d["attempt"]
                ),
                "plan_stalled" => "plan_stalled".to_owned(),
                "replan_requested" => format!("replan_requested:{}", d["replan"]),
                "budget_exhausted" => format!("budget_exhausted:{}", d["budget"].as_str().unwrap()),
                "run_finished" => format!(
                    "run_finished:{}:{}",
                    d["status"].as_str().unwrap(),
                    d["stop_reason"].as_str().unwrap()
                ),
                _ => return None,
            };
            Some(s)
        })
        .collect()
}

fn data_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| &e["data"])
        .collect()
}

async fn file(f: &TestFleet, path: &str) -> Option<String> {
    let r = f
        .http
        .get(format!("{}/v1/volumes/ws/files/{path}", f.url))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    match r.status().as_u16() {
        200 => Some(r.text().await.unwrap()),
        404 => None,
        s => panic!("reading {path}: {s}"),
    }
}

#[tokio::test]
async fn an_executor_that_claims_done_but_wrote_nothing_fails_its_checks() {
    let f = fleet("", "").await;
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": format!("Write out.txt.\n{}", says("done")),
                          "checks": [{"check": "exists", "path": "out.txt"}], "critical": true}],
               "limits": {"max_replans": 0}}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:fail",
            "task_retrying:a:2",
            "task_started:a:2",
            "task_checked:a:2",
            "task_verified:a:2:checks:fail",
            "task_finished:a:failed",
            "run_finished:failed:error",
        ]
    );
    let verified = data_of(&ev, "task_verified");
    assert_eq!(verified[0]["verdict"]["reason_code"], "missing");
    assert_eq!(verified[0]["verdict"]["missing"], json!(["out.txt"]));
    // The retry carried what the checks found.
    let retry = data_of(&ev, "task_retrying");
    assert!(
        retry[0]["feedback"].as_str().unwrap().contains("out.txt"),
        "{}",
        retry[0]
    );
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("critical task `a` failed"),
        "{r}"
    );
    f.stop().await;
}

#[tokio::test]
async fn partial_work_is_sent_back_with_the_verifiers_feedback_and_completed() {
    let f = fleet("", "").await;
    let pass = says(&verdict("pass", "ok", ""));
    let second = writes(&[("b.txt", "B")], &format!("wrote b.txt too\n{pass}"));
    let fail = json!({"verdict": "fail", "reason_code": "incomplete", "confidence": 0.8,
                      "issues": [{"path": "b.txt", "message": "b.txt is missing"}], "missing": ["b.txt"],
                      "feedback": format!("write b.txt as well\n{second}")})
    .to_string();
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": format!("Write a.txt and b.txt.\n{}", writes(&[("a.txt", "A")], "wrote a.txt")),
                          "checks": [{"check": "exists", "path": "a.txt"}], "verify": "llm",
                          "acceptance": format!("both a.txt and b.txt exist\n{}", says(&fail))}]}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:llm:fail",
            "task_retrying:a:2",
            "task_started:a:2",
            "task_checked:a:2",
            "task_verified:a:2:llm:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    assert_eq!(file(&f, "a.txt").await.as_deref(), Some("A"));
    assert_eq!(file(&f, "b.txt").await.as_deref(), Some("B"));
    // Both verdicts are evaluations of the worker's definition (here: the run's own agent).
    let (status, evals) = f.get("/v1/evaluations?agent=lead", &f.admin).await;
    assert_eq!(status, 200, "{evals}");
    let agg = &evals["data"][0];
    assert_eq!(
        (agg["total"].as_u64(), agg["pass"].as_u64()),
        (Some(2), Some(1)),
        "{evals}"
    );
    f.stop().await;
}

fn simple_plan() -> String {
    json!({"tasks": [{"id": "a", "description": format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")),
                      "checks": [{"check": "non_empty", "path": "a.txt"}]}]})
    .to_string()
}

#[tokio::test]
async fn malformed_plan_json_goes_back_to_the_planner() {
    // The planner's first answer is no plan; shown it again with the errors, it answers one.
    let planner = says(&format!(
        "Here is my plan: {{tasks: [oops\n{}",
        says(&simple_plan())
    ));
    let f = fleet(&planner, "").await;
    let run = start(&f, json!({})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_rejected:planner",
            "plan_proposed:v1:planner",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    let rejected = data_of(&ev, "plan_rejected");
    assert!(
        rejected[0]["errors"][0].as_str().unwrap().contains("tasks"),
        "{}",
        rejected[0]
    );
    f.stop().await;
}

#[tokio::test]
async fn a_cycle_is_refused_naming_it_until_the_planner_runs_out_of_tries() {
    let cyclic = json!({"tasks": [{"id": "a", "description": "x", "depends_on": ["b"]},
                                  {"id": "b", "description": "y", "depends_on": ["a"]}]})
    .to_string();
    let f = fleet(&says(&cyclic), "").await;
    let run = start(&f, json!({})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_rejected:planner",
            "plan_rejected:planner",
            "plan_rejected:planner",
            "run_finished:failed:error",
        ]
    );
    for r in data_of(&ev, "plan_rejected") {
        assert_eq!(
            r["errors"],
            json!(["the dependencies form a cycle: a -> b -> a; break it"]),
            "{r}"
        );
    }
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no valid plan in 3 tries") && message.contains("a -> b -> a"),
        "{r}"
    );
    f.stop().await;
}

#[tokio::test]
async fn an_unknown_dependency_is_refused_and_fixed() {
    let bad =
        json!({"tasks": [{"id": "a", "description": "x", "depends_on": ["setup"]}]}).to_string();
    let planner = says(&format!("{bad}\n{}", says(&simple_plan())));
    let f = fleet(&planner, "").await;
    let run = start(&f, json!({})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev)[..3],
        [
            "plan_rejected:planner",
            "plan_proposed:v1:planner",
            "plan_accepted:v1"
        ]
    );
    assert_eq!(
        data_of(&ev, "plan_rejected")[0]["errors"],
        json!(["task `a` depends on unknown task `setup`: depend only on ids of this plan"])
    );
    assert_eq!(
        plan_sequence(&ev).last().unwrap(),
        "run_finished:succeeded:end_turn"
    );
    f.stop().await;
}

#[tokio::test]
async fn an_unreadable_verifier_answer_reverifies_and_never_reexecutes() {
    let f = fleet("", "").await;
    let acceptance = format!(
        "a.txt holds A\n{}",
        says(&format!("LGTM!\n{}", says(&verdict("pass", "ok", ""))))
    );
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")),
                          "verify": "llm", "acceptance": acceptance}]}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "verifier_unreadable:a:1",
            "task_verified:a:1:llm:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    let unreadable = data_of(&ev, "verifier_unreadable");
    assert_eq!(unreadable[0]["try_no"], 1);
    // Two verifier runs, one task run.
    let verified = data_of(&ev, "task_verified");
    assert_ne!(
        verified[0]["verifier_run_ids"][0],
        unreadable[0]["verifier_run_id"]
    );
    f.stop().await;
}

#[tokio::test]
async fn a_verifier_that_wrongly_passes_is_recorded_as_a_pass() {
    // The worker writes nothing; a verifier that does not look passes it anyway. The harness
    // records what the verifier said — the hidden truth (no file) is for the evaluation to find.
    let f = fleet("", "").await;
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": format!("Write a.txt.\n{}", says("done")),
                          "verify": "llm", "acceptance": format!("a.txt exists\n{}", says(&verdict("pass", "ok", "")))}]}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:llm:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    assert_eq!(file(&f, "a.txt").await, None);
    let (_, evals) = f.get("/v1/evaluations?agent=lead", &f.admin).await;
    assert_eq!(
        evals["data"][0]["by_role"]["verifier"]["pass"], 1,
        "{evals}"
    );
    f.stop().await;
}

#[tokio::test]
async fn a_verifier_that_wrongly_fails_costs_a_retry_then_stops_for_no_progress() {
    let f = fleet("", "").await;
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")),
                          "checks": [{"check": "exists", "path": "a.txt"}], "verify": "llm", "critical": true,
                          "acceptance": format!("a.txt holds A\n{}", says(&verdict("fail", "incorrect", "a.txt is wrong")))}],
               "limits": {"max_replans": 0}}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:llm:fail",
            "task_retrying:a:2",
            "task_started:a:2",
            "task_checked:a:2",
            "task_verified:a:2:llm:fail",
            "task_finished:a:failed",
            "run_finished:failed:error",
        ]
    );
    // The work was right all along.
    assert_eq!(file(&f, "a.txt").await.as_deref(), Some("A"));
    f.stop().await;
}

/// Task `a` fails for good (its worker writes nothing its check wants, twice); the replanner's
/// plan fixes it.
fn failing_a(critical: bool) -> Value {
    json!({"id": "a", "description": format!("Write x.txt.\n{}", says("done")),
           "checks": [{"check": "exists", "path": "x.txt"}], "critical": critical})
}

fn fixed_a(critical: bool) -> Value {
    json!({"id": "a", "description": format!("Write x.txt.\n{}", writes(&[("x.txt", "X")], "done")),
           "checks": [{"check": "exists", "path": "x.txt"}], "critical": critical})
}

#[tokio::test]
async fn a_replan_that_drops_an_id_is_refused() {
    let dropping =
        json!({"tasks": [task("b", format!("Other work.\n{}", says("done")))]}).to_string();
    let good = json!({"tasks": [fixed_a(true)]}).to_string();
    let replanner = says(&format!("{dropping}\n{}", says(&good)));
    let f = fleet("", &replanner).await;
    let run = start(
        &f,
        json!({"tasks": [failing_a(true)], "limits": {"max_replans": 1}}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:fail",
            "task_retrying:a:2",
            "task_started:a:2",
            "task_checked:a:2",
            "task_verified:a:2:checks:fail",
            "task_finished:a:failed",
            "replan_requested:1",
            "plan_rejected:replanner",
            "plan_proposed:v2:replanner",
            "plan_accepted:v2",
            "task_started:a:3",
            "task_checked:a:3",
            "task_verified:a:3:checks:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    let rejected = data_of(&ev, "plan_rejected");
    assert!(
        rejected[0]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().contains("drops task `a`")),
        "{}",
        rejected[0]
    );
    let (status, plan) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["version"], 2);
    assert_eq!(plan["tasks"][0]["status"], "passed");
    assert_eq!(plan["tasks"][0]["attempts"].as_array().unwrap().len(), 3);
    f.stop().await;
}

#[tokio::test]
async fn a_stalled_plan_is_replanned() {
    let b = task(
        "b",
        format!("Write y.txt.\n{}", writes(&[("y.txt", "Y")], "done")),
    );
    let mut b_dep = b.clone();
    b_dep["depends_on"] = json!(["a"]);
    let good = json!({"tasks": [fixed_a(false), b_dep.clone()]}).to_string();
    let f = fleet("", &says(&good)).await;
    let run = start(
        &f,
        json!({"tasks": [failing_a(false), b_dep], "limits": {"max_replans": 1}}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:fail",
            "task_retrying:a:2",
            "task_started:a:2",
            "task_checked:a:2",
            "task_verified:a:2:checks:fail",
            "task_finished:a:failed",
            "plan_stalled",
            "replan_requested:1",
            "plan_proposed:v2:replanner",
            "plan_accepted:v2",
            "task_started:a:3",
            "task_checked:a:3",
            "task_verified:a:3:checks:pass",
            "task_finished:a:passed",
            "task_started:b:1",
            "task_checked:b:1",
            "task_verified:b:1:checks:pass",
            "task_finished:b:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    assert_eq!(data_of(&ev, "plan_stalled")[0]["blocked"], json!(["b"]));
    f.stop().await;
}

#[tokio::test]
async fn a_token_budget_ends_the_run_cleanly_between_batches() {
    let f = fleet("", "").await;
    let a = task(
        "a",
        format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")),
    );
    let mut b = task(
        "b",
        format!("Write b.txt.\n{}", writes(&[("b.txt", "B")], "done")),
    );
    b["depends_on"] = json!(["a"]);
    let run = start(&f, json!({"tasks": [a, b], "limits": {"max_tokens": 1}})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:pass",
            "task_finished:a:passed",
            "budget_exhausted:tokens",
            "run_finished:failed:budget_exhausted",
        ]
    );
    assert_eq!(file(&f, "b.txt").await, None);
    f.stop().await;
}

#[tokio::test]
async fn approving_a_stale_plan_version_is_412_and_the_current_one_runs() {
    let f = fleet("", "").await;
    let run = start(
        &f,
        json!({"approval": "before_execute",
               "tasks": [task("a", format!("Write a.txt.\n{}", writes(&[("a.txt", "A")], "done")))]}),
    )
    .await;
    let parked = common::wait_event(&f, &f.admin, &run, 1, "plan_awaiting_approval").await;
    assert_eq!(parked["status"], "awaiting_input", "{parked}");
    let put = |if_match: &'static str| {
        f.http
            .put(format!("{}/v1/runs/{run}/plan", f.url))
            .bearer_auth(&f.admin)
            .header("if-match", if_match)
            .json(&json!({}))
            .send()
    };
    assert_eq!(put("\"2\"").await.unwrap().status(), 412);
    let ok = put("\"1\"").await.unwrap();
    assert_eq!(ok.status(), 200);
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_awaiting_approval:v1",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    assert_eq!(
        data_of(&ev, "plan_accepted")[0]["approved_by"],
        "bootstrap-admin"
    );
    f.stop().await;
}

#[tokio::test]
async fn killing_an_executor_mid_task_duplicates_no_child_and_no_write() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        common::slow_model(c, 600);
    })
    .await;
    agents(&f, "", "", "mock/slow").await;
    let a = executor_process(&f, &[]);
    let b = executor_process(&f, &[]);
    let two_turns = |path: &str| {
        let calls = json!([[{"name": "Write", "input": {"path": path, "content": path}}],
                           [{"name": "Read", "input": {"path": path}}]]);
        format!(
            "Write {path}.\n#mock {}",
            json!({"turns": calls, "reply": "done"})
        )
    };
    let tasks: Vec<Value> = ["p.txt", "q.txt", "r.txt"]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"id": format!("t{i}"), "description": two_turns(p), "writes": [p],
                   "checks": [{"check": "exists", "path": p}]})
        })
        .collect();
    let run = start(&f, json!({"tasks": tasks, "limits": {"max_parallel": 3}})).await;
    // Once a task's sub-run has written its file (a model turn still to come), kill the
    // executor holding it.
    let child = first_task_write(&f, &run).await;
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM runs WHERE id = $1")
        .bind(uuid::Uuid::parse_str(&child).unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    let owner = owner.expect("an executor holds the task's sub-run");
    let (mut victim, survivor): (Proc, Proc) =
        if owner.starts_with(&format!("executor-{}-", a.0.id())) {
            (a, b)
        } else {
            (b, a)
        };
    victim.0.kill().unwrap();
    victim.0.wait().unwrap();
    let ev = finished(&f, &run).await;
    let seq = plan_sequence(&ev);
    assert_eq!(
        seq.last().unwrap(),
        "run_finished:succeeded:end_turn",
        "{seq:?}"
    );
    // One sub-run per (task, attempt), and each started once.
    let started = data_of(&ev, "task_started");
    assert_eq!(started.len(), 3, "{seq:?}");
    let children: Vec<(String,)> = sqlx::query_as(
        "SELECT idempotency_key FROM runs WHERE parent_run_id = $1 ORDER BY idempotency_key",
    )
    .bind(uuid::Uuid::parse_str(&run).unwrap())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(children.len(), 3, "{children:?}");
    // Each file written once: one change per file in the volume's changelog.
    let (status, changes) = f.get("/v1/volumes/ws/changes?limit=100", &f.admin).await;
    assert_eq!(status, 200, "{changes}");
    let changes = changes["data"].as_array().unwrap();
    assert_eq!(changes.len(), 3, "{changes:?}");
    drop(survivor);
    f.stop().await;
}

/// The child run id of the first task whose sub-run wrote its file.
async fn first_task_write(f: &TestFleet, run: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no task wrote its file in time"
        );
        for s in data_of(&events(f, run).await, "task_started") {
            let child = s["child_run_id"].as_str().unwrap().to_owned();
            if events(f, &child)
                .await
                .iter()
                .any(|e| e["kind"] == "file_changed")
            {
                return child;
            }
        }
        // Wait on the run's own stream for its next event rather than polling blind.
        let r = common::open_stream(f, run).await;
        let mut s = eventsource_stream::EventStream::new(r.bytes_stream());
        let _ = tokio::time::timeout(Duration::from_millis(300), s.next()).await;
    }
}

/// Three voters, each its own agent with its own scripted verdict (pass, fail, inconclusive),
/// and `writer`, whose script (write a.txt) rides in its system prompt: a script in a task's
/// description would be the first one its voters read.
async fn split_vote_agents(f: &TestFleet) {
    for (name, v) in [
        ("v-pass", verdict("pass", "ok", "")),
        ("v-fail", verdict("fail", "incorrect", "wrong")),
        ("v-unsure", verdict("inconclusive", "cannot_verify", "")),
    ] {
        put_agent(
            f,
            &f.admin,
            name,
            json!({"model": "mock-1", "tools": ["Read"], "volumes": [{"name": "ws"}], "system_prompt": says(&v)}),
        )
        .await;
    }
    put_agent(
        f,
        &f.admin,
        "writer",
        json!({"model": "mock-1", "tools": FILE_TOOLS, "volumes": [{"name": "ws"}],
               "system_prompt": writes(&[("a.txt", "A")], "done")}),
    )
    .await;
}

/// Task `a`, verified by a vote of the three voters above, which splits.
fn split_task() -> Value {
    json!({"id": "a", "description": "Write a.txt.", "agent": "writer", "verify": "vote", "votes": 3})
}

/// Waits (from `from_seq`) for `run` to park: the `awaiting_input` event's seq, and the run.
async fn parked_after(f: &TestFleet, run: &str, from_seq: i64) -> (i64, Value) {
    let frames = common::stream_until(
        f,
        &f.admin,
        run,
        &format!("?from_seq={from_seq}"),
        None,
        "awaiting_input",
    )
    .await;
    let seq = frames.last().unwrap().0;
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    (seq, r)
}

async fn control(f: &TestFleet, run: &str, task: &str, action: &str) {
    let (status, body) = f
        .post(
            &format!("/v1/runs/{run}/plan/tasks/{task}/{action}"),
            &f.admin,
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{action} {task}: {body}");
}

#[tokio::test]
async fn a_split_vote_asks_a_person_whose_answer_settles_it() {
    let f = fleet("", "").await;
    split_vote_agents(&f).await;
    let run = start(
        &f,
        json!({"voters": ["v-pass", "v-fail", "v-unsure"], "tasks": [split_task()]}),
    )
    .await;
    let parked = common::wait_event(&f, &f.admin, &run, 1, "awaiting_input").await;
    assert_eq!(parked["status"], "awaiting_input", "{parked}");
    let interrupt = parked["pending_interrupt"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(interrupt, "int_vote:a:1");
    let (status, body) = f
        .post(
            &format!("/v1/runs/{run}/interrupts/{interrupt}"),
            &f.admin,
            json!({"answer": "pass"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:human:pass",
            "task_finished:a:passed",
            "run_finished:succeeded:end_turn",
        ]
    );
    let split = data_of(&ev, "vote_split");
    assert_eq!(
        (split[0]["pass"].as_u64(), split[0]["fail"].as_u64()),
        (Some(1), Some(1))
    );
    // The person's verdict is an evaluation of the definition that did the work.
    let (_, evals) = f.get("/v1/evaluations?agent=writer", &f.admin).await;
    assert_eq!(evals["data"][0]["by_role"]["human"]["pass"], 1, "{evals}");
    f.stop().await;
}

#[tokio::test]
async fn a_retry_or_skip_of_the_task_a_person_is_asked_about_settles_the_question() {
    let f = fleet("", "").await;
    split_vote_agents(&f).await;
    let run = start(
        &f,
        json!({"voters": ["v-pass", "v-fail", "v-unsure"], "tasks": [split_task()]}),
    )
    .await;
    let (seq, parked) = parked_after(&f, &run, 1).await;
    assert_eq!(
        parked["pending_interrupt"]["id"], "int_vote:a:1",
        "{parked}"
    );
    // A retry instead of an answer: the split attempt is dropped and one more runs (and splits).
    control(&f, &run, "a", "retry").await;
    let (_, parked) = parked_after(&f, &run, seq + 1).await;
    assert_eq!(
        parked["pending_interrupt"]["id"], "int_vote:a:2",
        "{parked}"
    );
    // The first question was withdrawn: it can no longer be answered.
    let (status, _) = f
        .post(
            &format!("/v1/runs/{run}/interrupts/int_vote:a:1"),
            &f.admin,
            json!({"answer": "pass"}),
        )
        .await;
    assert!(status >= 400, "{status}");
    // A skip instead of an answer ends the task; the run goes on (and here ends).
    control(&f, &run, "a", "skip").await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_control:a:retry",
            "task_started:a:2",
            "task_checked:a:2",
            "task_control:a:skip",
            "task_finished:a:skipped",
            "run_finished:succeeded:end_turn",
        ]
    );
    assert_eq!(data_of(&ev, "vote_split").len(), 2);
    // Nobody judged either attempt: no human evaluation was recorded.
    let (_, evals) = f.get("/v1/evaluations?agent=writer", &f.admin).await;
    assert_eq!(evals["data"], json!([]), "{evals}");
    f.stop().await;
}

#[tokio::test]
async fn a_control_of_another_task_wakes_a_run_parked_on_a_split_vote_which_asks_again() {
    let f = fleet("", "").await;
    split_vote_agents(&f).await;
    let b = json!({"id": "b", "description": format!("Write x.txt.\n{}", says("done")),
                   "checks": [{"check": "exists", "path": "x.txt"}]});
    let run = start(
        &f,
        json!({"voters": ["v-pass", "v-fail", "v-unsure"], "tasks": [split_task(), b],
               "limits": {"max_attempts": 1}}),
    )
    .await;
    // `a` split and `b` failed: nothing else can run, so the run asks about `a`.
    let (seq, parked) = parked_after(&f, &run, 1).await;
    assert_eq!(
        parked["pending_interrupt"]["id"], "int_vote:a:1",
        "{parked}"
    );
    // A retry of `b` wakes the run though a question is pending; `b` fails again, and the run
    // asks about `a` again, the same question.
    control(&f, &run, "b", "retry").await;
    let (_, parked) = parked_after(&f, &run, seq + 1).await;
    let interrupt = parked["pending_interrupt"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(interrupt, "int_vote:a:1", "{parked}");
    let (status, body) = f
        .post(
            &format!("/v1/runs/{run}/interrupts/{interrupt}"),
            &f.admin,
            json!({"answer": "pass"}),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let ev = finished(&f, &run).await;
    let seq = plan_sequence(&ev);
    let of = |task: &str| -> Vec<String> {
        seq.iter()
            .filter(|s| s.split(':').nth(1) == Some(task))
            .cloned()
            .collect()
    };
    assert_eq!(
        of("a"),
        [
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:human:pass",
            "task_finished:a:passed",
        ]
    );
    assert_eq!(
        of("b"),
        [
            "task_started:b:1",
            "task_checked:b:1",
            "task_verified:b:1:checks:fail",
            "task_finished:b:failed",
            "task_control:b:retry",
            "task_started:b:2",
            "task_checked:b:2",
            "task_verified:b:2:checks:fail",
            "task_finished:b:failed",
        ]
    );
    assert_eq!(seq.last().unwrap(), "run_finished:succeeded:end_turn");
    // The question was put twice, with one answer.
    assert_eq!(data_of(&ev, "interruption").len(), 2);
    f.stop().await;
}

#[tokio::test]
async fn a_task_that_never_ends_is_stopped_at_the_wall_time_budget() {
    let f = fleet_with("", "", common::stalling_model).await;
    // Its answer starts at once, then stalls for a minute between words.
    put_agent(
        &f,
        &f.admin,
        "sleeper",
        json!({"model": "mock/slow", "tools": [], "volumes": [{"name": "ws"}]}),
    )
    .await;
    let started = std::time::Instant::now();
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": "Take your time.", "agent": "sleeper"}],
               "limits": {"max_wall_s": 2}}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "budget_exhausted:wall_time",
            "run_finished:failed:budget_exhausted",
        ]
    );
    // The task's sub-run was stopped with the run.
    let child = data_of(&ev, "task_started")[0]["child_run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    finished(&f, &child).await;
    let (_, c) = f.get(&format!("/v1/runs/{child}"), &f.admin).await;
    assert_eq!(c["status"], "cancelled", "{c}");
    f.stop().await;
}

#[tokio::test]
async fn a_role_sub_run_cannot_ask_a_person_nobody_watches() {
    let f = fleet("", "").await;
    // An agent that would stop to ask a question: as a task's agent, the tool is not its own.
    let ask = json!({"name": "Interruption", "input": {"op": "ask", "question": "Which file?"}});
    put_agent(
        &f,
        &f.admin,
        "asker",
        json!({"model": "mock-1", "tools": ["Interruption", "Write"], "volumes": [{"name": "ws"}],
               "system_prompt": format!("#mock {}", json!({"turns": [[ask]], "reply": "done"}))}),
    )
    .await;
    let run = start(
        &f,
        json!({"tasks": [{"id": "a", "description": "Write a.txt.", "agent": "asker"}]}),
    )
    .await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev).last().unwrap(),
        "run_finished:succeeded:end_turn"
    );
    let child = data_of(&ev, "task_started")[0]["child_run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let id: uuid::Uuid = child.parse().unwrap();
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let spec: Value = sqlx::query_scalar("SELECT spec FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(spec["tools"], json!(["Write"]), "{spec}");
    f.stop().await;
}

#[tokio::test]
async fn the_token_budget_counts_the_sub_runs_of_a_tasks_sub_run_and_is_the_runs_usage() {
    let f = fleet("", "").await;
    // `big` reads a long system prompt (about 6000 tokens a turn); `boss` spawns it and reads
    // little itself.
    put_agent(
        &f,
        &f.admin,
        "big",
        json!({"model": "mock-1", "tools": [], "system_prompt": "filler ".repeat(3500)}),
    )
    .await;
    let spawn = json!({"name": "Agent", "input": {"op": "spawn", "agent": "big", "input": "hi"}});
    put_agent(
        &f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent"],
               "system_prompt": format!("#mock {}", json!({"turns": [[spawn]], "reply": "done"}))}),
    )
    .await;
    let a = json!({"id": "a", "description": "Delegate.", "agent": "boss"});
    let mut b = task(
        "b",
        format!("Write b.txt.\n{}", writes(&[("b.txt", "B")], "done")),
    );
    b["depends_on"] = json!(["a"]);
    let run = start(&f, json!({"tasks": [a, b], "limits": {"max_tokens": 3000}})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev),
        [
            "plan_proposed:v1:caller",
            "plan_accepted:v1",
            "task_started:a:1",
            "task_checked:a:1",
            "task_verified:a:1:checks:pass",
            "task_finished:a:passed",
            "budget_exhausted:tokens",
            "run_finished:failed:budget_exhausted",
        ]
    );
    // The task's own sub-run used little: its sub-run's tokens are what ran the budget out.
    let own = data_of(&ev, "task_checked")[0]["tokens"].as_u64().unwrap();
    assert!(own < 3000, "{own}");
    let exhausted = data_of(&ev, "budget_exhausted")[0]["used"]
        .as_u64()
        .unwrap();
    assert!(exhausted >= 3000, "{exhausted}");
    // The plan run's usage is its sub-runs', all of them; the plan view says the same.
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    let total = r["usage"]["total_tokens"].as_u64().unwrap();
    assert_eq!(total, exhausted, "{r}");
    let (_, plan) = f.get(&format!("/v1/runs/{run}/plan"), &f.admin).await;
    assert_eq!(plan["tokens"].as_u64(), Some(total), "{plan}");
    assert_eq!(file(&f, "b.txt").await, None);
    f.stop().await;
}

#[tokio::test]
async fn a_process_takes_its_excluded_tools_by_glob_from_every_sub_run_below_the_plan() {
    let f = fleet("", "").await;
    let spawn =
        json!({"name": "Agent", "input": {"op": "spawn", "agent": "helper", "input": "help"}});
    put_agent(
        &f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent", "Write", "HTTP"],
               "system_prompt": format!("#mock {}", json!({"turns": [[spawn]], "reply": "done"}))}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "tools": ["Write", "HTTP", "Interruption"]}),
    )
    .await;
    let (status, body) = f
        .put(
            "/v1/processes/delegate",
            &f.admin,
            json!({"description": "Delegate the work",
                   "phases": [{"id": "a", "description": "Delegate.", "agent": "boss"}],
                   "tools": {"excluded": ["HT*"]}}),
        )
        .await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let run = start(&f, json!({"process": "delegate"})).await;
    let ev = finished(&f, &run).await;
    assert_eq!(
        plan_sequence(&ev).last().unwrap(),
        "run_finished:succeeded:end_turn"
    );
    let child = data_of(&ev, "task_started")[0]["child_run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pool = sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap();
    let tools_of = async |sql: &'static str| -> Vec<Value> {
        let specs: Vec<Value> = sqlx::query_scalar(sql)
            .bind(uuid::Uuid::parse_str(&child).unwrap())
            .fetch_all(&pool)
            .await
            .unwrap();
        specs.iter().map(|s| s["tools"].clone()).collect()
    };
    // The task's sub-run lost `HTTP` to the glob; the sub-run it made lost it too, and cannot
    // ask a person either.
    assert_eq!(
        tools_of("SELECT spec FROM runs WHERE id = $1").await,
        [json!(["Agent", "Write"])]
    );
    assert_eq!(
        tools_of("SELECT spec FROM runs WHERE parent_run_id = $1").await,
        [json!(["Write"])]
    );
    f.stop().await;
}
