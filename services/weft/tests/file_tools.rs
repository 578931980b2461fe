//! The file tools (`Read`, `Write`, `Edit`, `Glob`, `Grep`, `Move`, `Delete`, `List`) called by a
//! scripted (`#mock`) model inside runs on a whole fleet: a run works on its own volume (exact
//! and whitespace-tolerant edits, an ambiguous one refused, diffs in results and in
//! `file_changed` events, the volume purged when the run ends); bindings decide what a run may
//! touch (none, not bound, read-only, a sub-run never wider than its parent); and a call
//! repeated after a crash finds the change it made instead of making another.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{TestFleet, create, put_agent, script, stream};
use serde_json::{Value, json};

const FILE_TOOLS: [&str; 8] = [
    "Read", "Write", "Edit", "Glob", "Grep", "Move", "Delete", "List",
];

/// A finished run's tool calls in order: (name, input, content, is_error), and its events.
async fn results(f: &TestFleet, run: &str) -> (Vec<(String, Value, String, bool)>, Vec<Value>) {
    let (_, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    let events = page["events"].as_array().unwrap().clone();
    let mut by_id: HashMap<String, (String, bool)> = HashMap::new();
    for e in events.iter().filter(|e| e["kind"] == "tool_result") {
        by_id.insert(
            e["data"]["tool_use_id"].as_str().unwrap().to_owned(),
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
            let (content, is_error) = by_id[e["data"]["id"].as_str().unwrap()].clone();
            (
                e["data"]["name"].as_str().unwrap().to_owned(),
                e["data"]["input"].clone(),
                content,
                is_error,
            )
        })
        .collect();
    (calls, events)
}

/// The result of call `i`, which must have succeeded, as JSON (or a JSON string).
fn ok(calls: &[(String, Value, String, bool)], i: usize) -> Value {
    assert!(!calls[i].3, "call {i} failed: {:?}", calls[i]);
    serde_json::from_str(&calls[i].2).unwrap_or(Value::String(calls[i].2.clone()))
}

/// The error text of call `i`, which must have failed.
fn refused(calls: &[(String, Value, String, bool)], i: usize) -> &str {
    assert!(calls[i].3, "call {i} should have failed: {:?}", calls[i]);
    &calls[i].2
}

async fn pool(f: &TestFleet) -> sqlx::PgPool {
    sqlx::PgPool::connect(f.config.database.url.expose())
        .await
        .unwrap()
}

/// Runs `input` on `agent` to the end; (calls, events).
async fn run_script(
    f: &TestFleet,
    agent: &str,
    turns: Value,
) -> (String, Vec<(String, Value, String, bool)>, Vec<Value>) {
    let run = create(
        f,
        &f.admin,
        json!({"agent": agent, "input": script(turns, "done")}),
    )
    .await;
    let frames = stream(f, &f.admin, &run, "", None).await;
    assert_eq!(
        frames.last().unwrap().2["data"]["status"],
        "succeeded",
        "{frames:?}"
    );
    let (calls, events) = results(f, &run).await;
    (run, calls, events)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_writes_edits_greps_moves_and_reads_its_own_volume() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "coder",
        json!({"model": "mock-1", "tools": FILE_TOOLS, "volumes": [{"name": "run"}]}),
    )
    .await;
    let turns = json!([
        [
            {"name": "Write", "input": {"path": "notes/a.txt", "content": "alpha\n    beta  gamma\ndelta\n"}},
            {"name": "Write", "input": {"path": "src/x.py", "content": "x = 1\ny = 2\nx = 1\n"}}
        ],
        // Exact.
        [{"name": "Edit", "input": {"path": "notes/a.txt", "edits": [{"old": "alpha", "new": "ALPHA"}]}}],
        // Spacing and indentation wrong: one candidate ignoring whitespace.
        [{"name": "Edit", "input": {"path": "notes/a.txt", "edits": [{"old": "beta gamma\n", "new": "BETA GAMMA\n"}]}}],
        // Two candidates ignoring whitespace: refused, nothing written.
        [{"name": "Edit", "input": {"path": "src/x.py", "edits": [
            {"old": "y = 2", "new": "y = 3"},
            {"old": "x  =  1", "new": "x = 9"}
        ]}}],
        [
            {"name": "Grep", "input": {"pattern": "BETA", "mode": "content"}},
            {"name": "Grep", "input": {"pattern": "x = 1", "mode": "count"}},
            {"name": "Glob", "input": {"pattern": "**/*.txt"}},
            {"name": "List", "input": {}}
        ],
        [
            {"name": "Move", "input": {"from": "notes/a.txt", "to": "notes/b.txt"}},
            {"name": "Delete", "input": {"path": "src/x.py"}}
        ],
        [
            {"name": "Read", "input": {"path": "notes/b.txt"}},
            {"name": "List", "input": {"path": "notes"}},
            {"name": "Read", "input": {"path": "src/x.py"}},
            {"name": "Write", "input": {"path": "../escape.txt", "content": "x"}}
        ]
    ]);
    let (run, calls, events) = run_script(&f, "coder", turns).await;
    assert_eq!(calls.len(), 15, "{calls:?}");

    let w = ok(&calls, 0);
    assert_eq!(w["path"], "notes/a.txt");
    assert_eq!(w["size"], 28);
    assert_eq!(w["sha256"].as_str().unwrap().len(), 64, "{w}");
    assert!(w["diff"].as_str().unwrap().contains("+alpha"), "{w}");
    let e = ok(&calls, 2);
    assert!(e["diff"].as_str().unwrap().contains("-alpha"), "{e}");
    assert!(e["diff"].as_str().unwrap().contains("+ALPHA"), "{e}");
    assert!(e.get("fuzzy").is_none(), "an exact edit: {e}");
    assert_ne!(e["sha256"], w["sha256"]);
    let fz = ok(&calls, 3);
    assert_eq!(fz["fuzzy"], true, "{fz}");
    let amb = refused(&calls, 4);
    assert!(amb.contains("edits[1].old"), "{amb}");
    assert!(amb.contains("ignoring whitespace"), "{amb}");
    assert!(amb.contains("no edit was made"), "{amb}");

    let grep = ok(&calls, 5);
    assert_eq!(grep["lines"], "notes/a.txt:2:    BETA GAMMA\n", "{grep}");
    let count = ok(&calls, 6);
    assert_eq!(count["counts"], json!([{"path": "src/x.py", "count": 2}]));
    let glob = ok(&calls, 7);
    assert_eq!(glob["files"][0]["path"], "notes/a.txt", "{glob}");
    assert_eq!(glob["files"].as_array().unwrap().len(), 1);
    let root = ok(&calls, 8);
    let names: Vec<&str> = root["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes", "src"], "{root}");
    assert_eq!(root["entries"][0]["dir"], true);

    let mv = ok(&calls, 9);
    assert_eq!(
        (&mv["from"], &mv["to"]),
        (&json!("notes/a.txt"), &json!("notes/b.txt"))
    );
    assert_eq!(mv["sha256"], fz["sha256"]);
    assert_eq!(ok(&calls, 10)["deleted"], true);
    let read = ok(&calls, 11);
    assert_eq!(
        read, "     1\tALPHA\n     2\t    BETA GAMMA\n     3\tdelta\n",
        "the exact edit, then the fuzzy one re-indented"
    );
    let notes = ok(&calls, 12);
    assert_eq!(notes["entries"], json!([{"name": "b.txt", "size": 27}]));
    assert!(refused(&calls, 13).contains("src/x.py"));
    let escape = refused(&calls, 14);
    assert!(escape.contains("`path`"), "{escape}");

    // The transcript shows each change's diff, before the call's result.
    let changed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "file_changed")
        .collect();
    assert_eq!(changed.len(), 6, "2 writes, 2 edits, a move, a delete");
    let first = &changed[0]["data"];
    assert_eq!(first["volume"], "run");
    assert!(first["change_id"].as_str().is_some_and(|c| !c.is_empty()));
    let pos = |kind: &str, id: &str| {
        events
            .iter()
            .position(|e| e["kind"] == kind && e["data"]["tool_use_id"] == id)
            .unwrap()
    };
    let id = first["tool_use_id"].as_str().unwrap();
    assert!(pos("file_changed", id) < pos("tool_result", id));
    let edit = changed
        .iter()
        .find(|e| {
            e["data"]["files"][0]["diff"]
                .as_str()
                .unwrap()
                .contains("+ALPHA")
        })
        .unwrap();
    assert_eq!(edit["data"]["files"][0]["path"], "notes/a.txt");

    // The run's volume went with it (a root run's, purged when it ends).
    let db = pool(&f).await;
    let root: uuid::Uuid = run.parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM volumes WHERE root_run_id = $1")
            .bind(root)
            .fetch_one(&db)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run's volume was not purged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bindings_decide_what_a_run_may_touch() {
    let f = TestFleet::start().await;
    let (status, body) = f
        .post("/v1/volumes", &f.admin, json!({"name": "docs"}))
        .await;
    assert!(status == 201 || status == 200, "{body}");
    let r = f
        .http
        .put(format!("{}/v1/volumes/docs/files/guide.md", f.url))
        .bearer_auth(&f.admin)
        .body("# Guide\nrule one\n")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    put_agent(
        &f,
        &f.admin,
        "reader",
        json!({"model": "mock-1", "tools": FILE_TOOLS, "volumes": [{"name": "docs", "mode": "ro"}]}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "bare",
        json!({"model": "mock-1", "tools": FILE_TOOLS}),
    )
    .await;
    let turns = json!([[
        {"name": "Read", "input": {"path": "guide.md"}},
        {"name": "Write", "input": {"path": "guide.md", "content": "mine now"}},
        {"name": "Edit", "input": {"path": "guide.md", "edits": [{"old": "one", "new": "two"}]}},
        {"name": "Delete", "input": {"path": "guide.md", "volume": "docs"}},
        {"name": "Read", "input": {"path": "guide.md", "volume": "secret"}}
    ]]);
    let (_, calls, _) = run_script(&f, "reader", turns).await;
    assert_eq!(ok(&calls, 0), "     1\t# Guide\n     2\trule one\n");
    for i in 1..=3 {
        assert_eq!(
            refused(&calls, i),
            "volume `docs` is bound read-only to this run"
        );
    }
    assert_eq!(
        refused(&calls, 4),
        "volume `secret` is not bound; bound: docs"
    );
    let r = f
        .http
        .get(format!("{}/v1/volumes/docs/files/guide.md", f.url))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "# Guide\nrule one\n", "unchanged");

    let turns = json!([[
        {"name": "Write", "input": {"path": "a.txt", "content": "x"}},
        {"name": "List", "input": {}}
    ]]);
    let (_, calls, _) = run_script(&f, "bare", turns).await;
    for i in 0..2 {
        assert_eq!(
            refused(&calls, i),
            "no volume is bound to this run; the agent definition's `volumes` must bind one (e.g. {\"name\": \"run\"})"
        );
    }
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_run_shares_the_run_volume_and_never_widens_its_parents_bindings() {
    let f = TestFleet::start().await;
    for name in ["docs", "other"] {
        let (status, body) = f.post("/v1/volumes", &f.admin, json!({"name": name})).await;
        assert!(status == 201 || status == 200, "{body}");
    }
    // The child asks for more than its parent has: `other` (unbound above) and `docs` writable
    // (read-only above).
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "tools": FILE_TOOLS, "volumes": [
            {"name": "run"}, {"name": "docs", "mode": "rw"}, {"name": "other"}
        ]}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent", "Read"], "volumes": [
            {"name": "run", "default": true}, {"name": "docs", "mode": "ro"}
        ]}),
    )
    .await;
    let child = script(
        json!([[
            {"name": "Write", "input": {"path": "from-child.txt", "content": "hello parent\n"}},
            {"name": "Write", "input": {"path": "x.txt", "content": "x", "volume": "docs"}},
            {"name": "List", "input": {"volume": "other"}}
        ]]),
        "child done",
    );
    let turns = json!([
        [{"name": "Agent", "input": {"op": "spawn", "agent": "helper", "input": child}}],
        [{"name": "Read", "input": {"path": "from-child.txt"}}]
    ]);
    let (_, calls, _) = run_script(&f, "boss", turns).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(
        ok(&calls, 1),
        "     1\thello parent\n",
        "one volume per run tree"
    );
    let (_, list) = f.get("/v1/runs?agent=helper&limit=5", &f.admin).await;
    let sub = list["runs"][0]["run_id"].as_str().unwrap().to_owned();
    let (sub_calls, _) = results(&f, &sub).await;
    assert_eq!(sub_calls.len(), 3, "{sub_calls:?}");
    ok(&sub_calls, 0);
    assert_eq!(
        refused(&sub_calls, 1),
        "volume `docs` is bound read-only to this run"
    );
    assert_eq!(
        refused(&sub_calls, 2),
        "volume `other` is not bound; bound: run, docs"
    );
    f.stop().await;
}

/// A `weft up` of `f`'s deployment (sweeping every 200 ms for runs stranded 1 s) dies right
/// after the first file change of a run of `agent` (tools `tools`, bound to volume `shared`)
/// doing `call` committed, before the run recorded the call's result. The survivor resumes the
/// run and runs the call again (it is idempotent). Returns the fleet, the run, the call's
/// result and the run's events, after checking that the changelog has one row for the call.
async fn repeated_after_a_crash(
    shared: &[(&str, &str)],
    tools: &[&str],
    call: Value,
) -> (TestFleet, String, Value, Vec<Value>) {
    let f = TestFleet::start_with(|c| {
        c.executor.sweep_interval_ms = 200;
        c.executor.sweep_after_ms = 1_000;
    })
    .await;
    let (status, body) = f
        .post("/v1/volumes", &f.admin, json!({"name": "shared"}))
        .await;
    assert!(status == 201 || status == 200, "{body}");
    for (path, content) in shared {
        let r = f
            .http
            .put(format!("{}/v1/volumes/shared/files/{path}", f.url))
            .bearer_auth(&f.admin)
            .body(content.to_string())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    put_agent(
        &f,
        &f.admin,
        "crasher",
        json!({"model": "mock-1", "tools": tools, "volumes": [{"name": "shared"}]}),
    )
    .await;
    let port = common::free_port();
    let mut dying = common::up_process(
        &f,
        port,
        &[
            ("WEFT_FAULT_ABORT_AT", "file_change_applied"),
            ("WEFT_EXECUTOR__LEASE_TTL_MS", "1000"),
            ("WEFT_EXECUTOR__HEARTBEAT_MS", "200"),
        ],
    );
    common::wait_for_port(port).await;
    let input = script(json!([[call]]), "done");
    // Created on the dying process (its own executor takes it), which aborts mid-call; the
    // answer may or may not have left before it did.
    let _ = f
        .http
        .post(format!("http://127.0.0.1:{port}/v1/runs"))
        .bearer_auth(&f.admin)
        .json(&json!({"agent": "crasher", "input": input}))
        .send()
        .await;
    let status = tokio::task::spawn_blocking(move || dying.0.wait().unwrap())
        .await
        .unwrap();
    assert!(!status.success(), "the process aborted: {status:?}");

    let db = pool(&f).await;
    let run: uuid::Uuid = sqlx::query_scalar("SELECT id FROM runs WHERE agent_name = 'crasher'")
        .fetch_one(&db)
        .await
        .unwrap();
    let frames = stream(&f, &f.admin, &run.to_string(), "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (calls, events) = results(&f, &run.to_string()).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    let result = ok(&calls, 0);
    let changed = events
        .iter()
        .filter(|e| e["kind"] == "file_changed")
        .count();
    assert_eq!(changed, 1, "{events:?}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM volume_changes WHERE run_id = $1")
        .bind(run)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 1, "one change row for the call");
    let (status, page) = f
        .get(
            &format!("/v1/volumes/shared/changes?run_id={run}&limit=100"),
            &f.admin,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["data"].as_array().unwrap().len(), 1, "{page}");
    (f, run.to_string(), result, events)
}

/// The file at `path` of volume `shared`.
async fn shared_file(f: &TestFleet, path: &str) -> String {
    let r = f
        .http
        .get(format!("{}/v1/volumes/shared/files/{path}", f.url))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.text().await.unwrap()
}

/// A `Write` repeated after a crash: the substrate hands back the change the first attempt
/// made (`replayed`), and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_repeated_after_a_crash_is_one_change() {
    let (f, _, w, _) = repeated_after_a_crash(
        &[],
        &["Write"],
        json!({"name": "Write", "input": {"path": "once.txt", "content": "once\n"}}),
    )
    .await;
    assert_eq!(w["replayed"], true, "{w}");
    assert_eq!(w["path"], "once.txt");
    assert_eq!(shared_file(&f, "once.txt").await, "once\n");
    f.stop().await;
}

/// An `Edit` repeated after a crash finds the file at its change's `after_sha`, where the text
/// it replaced is gone: it answers the change it made (`replayed`) rather than an error, and
/// the edit is in the file once.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_repeated_after_a_crash_answers_the_change_it_made() {
    let (f, _, e, _) = repeated_after_a_crash(
        &[("doc.txt", "alpha\nbeta\n")],
        &["Edit"],
        json!({"name": "Edit", "input": {"path": "doc.txt", "edits": [{"old": "alpha", "new": "omega"}]}}),
    )
    .await;
    assert_eq!(e["replayed"], true, "{e}");
    assert!(e["diff"].as_str().unwrap().contains("+omega"), "{e}");
    assert_eq!(shared_file(&f, "doc.txt").await, "omega\nbeta\n");
    f.stop().await;
}
