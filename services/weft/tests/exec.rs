//! The `Exec` tool from inside a run, against a whole fleet (gateway → executor → bubblewrap →
//! substrate): a (mock) model runs commands over a named volume; the files a command makes,
//! changes and deletes come back as ONE change of source `Exec` (symlinks refused); the network,
//! writes outside the checkout and a command past its time are stopped and reported; a `ro`
//! binding is mounted read-only; an edit made to the volume while a command runs is a conflict,
//! never clobbered; and with `volumes.exec.enabled` off the tool refuses in words the model
//! can act on.
//!
//! bubblewrap must run on the machine: these tests fail (they do not skip) where it cannot.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{TestFleet, create, put_agent, script, stream};
use serde_json::{Value, json};

/// The tool calls of a finished run in order: (id, name, the result as JSON, is_error), and
/// the `file_changed` events.
async fn tool_calls(f: &TestFleet, run: &str) -> (Vec<(String, String, Value, bool)>, Vec<Value>) {
    let (_, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    let events = page["events"].as_array().unwrap();
    let mut results: HashMap<String, (Value, bool)> = HashMap::new();
    for e in events.iter().filter(|e| e["kind"] == "tool_result") {
        let text = e["data"]["content"].as_str().unwrap();
        results.insert(
            e["data"]["tool_use_id"].as_str().unwrap().to_owned(),
            (
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
                e["data"]["is_error"].as_bool().unwrap(),
            ),
        );
    }
    let calls = events
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .map(|e| {
            let id = e["data"]["id"].as_str().unwrap().to_owned();
            let (result, is_error) = results[&id].clone();
            let name = e["data"]["name"].as_str().unwrap().to_owned();
            (id, name, result, is_error)
        })
        .collect();
    let changed = events
        .iter()
        .filter(|e| e["kind"] == "file_changed")
        .map(|e| e["data"].clone())
        .collect();
    (calls, changed)
}

/// A fleet with `Exec` on, its scratch checkouts under a directory of the test's own.
async fn fleet(enabled: bool) -> (TestFleet, PathBuf) {
    let scratch = std::env::temp_dir().join(format!("weft-exec-it-{}", uuid::Uuid::now_v7()));
    let dir = scratch.clone();
    let f = TestFleet::start_with(move |c| {
        c.volumes.exec.enabled = enabled;
        c.volumes.exec.scratch_dir = Some(dir);
    })
    .await;
    (f, scratch)
}

async fn put_file(f: &TestFleet, volume: &str, path: &str, body: &str) {
    let r = f
        .http
        .put(format!("{}/v1/volumes/{volume}/files/{path}", f.url))
        .bearer_auth(&f.admin)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

async fn get_file(f: &TestFleet, volume: &str, path: &str) -> (u16, String) {
    let r = f
        .http
        .get(format!("{}/v1/volumes/{volume}/files/{path}", f.url))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn new_volume(f: &TestFleet, name: &str) {
    let (s, v) = f.post("/v1/volumes", &f.admin, json!({"name": name})).await;
    assert!(s == 200 || s == 201, "{s} {v}");
}

/// Runs agent `agent` on the script `turns` to its end.
async fn run(f: &TestFleet, agent: &str, turns: Value) -> String {
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
    run
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commands_files_come_back_as_one_change_and_escapes_are_stopped() {
    let (f, scratch) = fleet(true).await;
    new_volume(&f, "ws").await;
    put_file(&f, "ws", "src/in.txt", "hello\n").await;
    put_agent(
        &f,
        &f.admin,
        "coder",
        json!({"model": "mock-1", "tools": ["Exec"], "volumes": [{"name": "ws"}]}),
    )
    .await;
    let turns = json!([
        [{"name": "Exec", "input": {"command":
            "mkdir -p out && tr a-z A-Z < src/in.txt > out/up.txt && seq 3 > out/n.txt \
             && rm src/in.txt && ln -s /etc/passwd leak && echo made"}}],
        [{"name": "Exec", "input": {"command":
            "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=5)' \
             || echo offline; echo x > /usr/weft-escape || echo read-only; echo x > ../escape \
             || echo root-read-only"}}],
        [{"name": "Exec", "input": {"command": "echo start; sleep 30", "timeout_s": 1}}],
        [{"name": "Exec", "input": {"command": "for i in $(seq 1000); do sleep 5 & done; wait"}}]
    ]);
    let run = run(&f, "coder", turns).await;
    let (calls, changed) = tool_calls(&f, &run).await;
    assert_eq!(calls.len(), 4, "{calls:?}");

    // 1. The files come back, the symlink does not.
    let (id, name, made, is_error) = &calls[0];
    assert_eq!((name.as_str(), *is_error), ("Exec", false), "{made}");
    assert_eq!(made["exit_code"], 0, "{made}");
    assert_eq!(made["stdout"], "made\n");
    assert_eq!(made["timed_out"], false);
    let paths: Vec<&str> = made["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["out/n.txt", "out/up.txt", "src/in.txt"], "{made}");
    let up = made["changed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "out/up.txt")
        .unwrap();
    assert!(up["diff"].as_str().unwrap().contains("+HELLO"), "{up}");
    assert!(
        made["changed"][2]["sha256"].is_null(),
        "src/in.txt was deleted: {made}"
    );
    assert_eq!(
        made["refused"],
        json!(["refused on sync: `leak` is a symlink"])
    );
    assert_eq!(
        get_file(&f, "ws", "out/up.txt").await,
        (200, "HELLO\n".into())
    );
    assert_eq!(
        get_file(&f, "ws", "out/n.txt").await,
        (200, "1\n2\n3\n".into())
    );
    assert_eq!(get_file(&f, "ws", "src/in.txt").await.0, 404);
    assert_eq!(get_file(&f, "ws", "leak").await.0, 404);
    // One change for the whole command, keyed by the call, in the changelog and transcript.
    let (s, list) = f.get("/v1/volumes/ws/changes", &f.admin).await;
    assert_eq!(s, 200, "{list}");
    let execs: Vec<&Value> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["source"] == "Exec")
        .collect();
    assert_eq!(execs.len(), 1, "{list}");
    assert_eq!(execs[0]["id"], made["change_id"]);
    assert_eq!(execs[0]["run_id"], run.as_str());
    assert_eq!(execs[0]["tool_use_id"], id.as_str());
    assert_eq!(execs[0]["files"].as_array().unwrap().len(), 3);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["change_id"], made["change_id"]);
    assert_eq!(changed[0]["volume"], "ws");

    // 2. No network, nothing writable outside the checkout; nothing to sync.
    let (_, _, closed, is_error) = &calls[1];
    assert!(!is_error, "{closed}");
    assert_eq!(
        closed["stdout"], "offline\nread-only\nroot-read-only\n",
        "{closed}"
    );
    assert!(
        closed["stderr"]
            .as_str()
            .unwrap()
            .contains("Network is unreachable"),
        "{closed}"
    );
    assert_eq!(closed["changed"], json!([]));
    assert!(!Path::new("/usr/weft-escape").exists());

    // 3. Past its time: killed and said.
    let (_, _, late, _) = &calls[2];
    assert_eq!(late["timed_out"], true, "{late}");
    assert_eq!(late["stdout"], "start\n");
    assert!(
        late["limit"].as_str().unwrap().contains("timeout_s"),
        "{late}"
    );

    // 4. A fork bomb: bounded by the process limit, and said.
    let (_, _, bomb, _) = &calls[3];
    assert_eq!(bomb["timed_out"], false, "{bomb}");
    assert!(
        bomb["limit"].as_str().unwrap().contains("processes"),
        "{bomb}"
    );

    // Every scratch checkout is gone.
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    f.stop().await;
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_binding_is_mounted_read_only_and_a_concurrent_edit_is_a_conflict() {
    let (f, scratch) = fleet(true).await;
    new_volume(&f, "docs").await;
    put_file(&f, "docs", "a.txt", "one\n").await;
    put_agent(
        &f,
        &f.admin,
        "reader",
        json!({"model": "mock-1", "tools": ["Exec"], "volumes": [{"name": "docs", "mode": "ro"}]}),
    )
    .await;
    let turns = json!([[{"name": "Exec", "input": {"command": "cat a.txt; echo two > a.txt; touch b.txt"}}]]);
    let run_id = run(&f, "reader", turns).await;
    let (calls, changed) = tool_calls(&f, &run_id).await;
    let (_, _, ro, is_error) = &calls[0];
    assert!(!is_error, "{ro}");
    assert_eq!(ro["read_only"], true, "{ro}");
    assert_eq!(ro["stdout"], "one\n");
    assert!(
        ro["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{ro}"
    );
    assert!(changed.is_empty());
    assert_eq!(get_file(&f, "docs", "a.txt").await, (200, "one\n".into()));
    assert_eq!(get_file(&f, "docs", "b.txt").await.0, 404);

    // A writer whose command waits for a go-ahead the test gives once the checkout is made and
    // the file has been changed in the volume behind it.
    put_agent(
        &f,
        &f.admin,
        "writer",
        json!({"model": "mock-1", "tools": ["Exec"], "volumes": [{"name": "docs"}]}),
    )
    .await;
    let turns = json!([[{"name": "Exec", "input": {"command":
        "while [ ! -e go ]; do sleep 0.05; done; rm go; echo mine > a.txt; echo new > c.txt"}}]]);
    let run_id = create(
        &f,
        &f.admin,
        json!({"agent": "writer", "input": script(turns, "done")}),
    )
    .await;
    let checkout = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(dir) = std::fs::read_dir(&scratch)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.join("a.txt").exists())
            {
                return dir;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the checkout is made");
    put_file(&f, "docs", "a.txt", "theirs\n").await;
    std::fs::write(checkout.join("go"), b"").unwrap();
    let frames = stream(&f, &f.admin, &run_id, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (calls, changed) = tool_calls(&f, &run_id).await;
    let (_, _, conflict, is_error) = &calls[0];
    assert!(is_error, "{conflict}");
    assert_eq!(conflict["exit_code"], 0, "{conflict}");
    let why = conflict["sync_error"].as_str().unwrap();
    assert!(
        why.contains("a.txt") && why.contains("changed while the command ran"),
        "{why}"
    );
    assert!(changed.is_empty());
    // Theirs is kept, and nothing of the command's work landed.
    assert_eq!(
        get_file(&f, "docs", "a.txt").await,
        (200, "theirs\n".into())
    );
    assert_eq!(get_file(&f, "docs", "c.txt").await.0, 404);
    f.stop().await;
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_turned_off_refuses_in_words_the_model_can_act_on() {
    let (f, _) = fleet(false).await;
    put_agent(
        &f,
        &f.admin,
        "coder",
        json!({"model": "mock-1", "tools": ["Exec"], "volumes": [{"name": "run"}]}),
    )
    .await;
    let turns = json!([[{"name": "Exec", "input": {"command": "echo hi > a.txt"}}]]);
    let run_id = run(&f, "coder", turns).await;
    let (calls, _) = tool_calls(&f, &run_id).await;
    let (_, _, said, is_error) = &calls[0];
    assert!(is_error);
    let said = said.as_str().unwrap();
    assert!(
        said.starts_with("Exec is turned off on this deployment"),
        "{said}"
    );
    assert!(
        said.contains("volumes.exec.enabled") && said.contains("Write"),
        "{said}"
    );
    f.stop().await;
}
