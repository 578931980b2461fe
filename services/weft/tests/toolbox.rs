//! The agent's toolbox from inside a run: `Memory`, `Channel` and `Skill` called by a (mock)
//! model. Scope ids come from the run (a model cannot name another's), the agent's
//! `memory_scopes`, channel grants and `skills` are allowlists, channel traffic shows in the
//! transcript, and what the tools write is what the HTTP routes read back.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::collections::HashMap;

use common::{TestFleet, create, put_agent, script, stream};
use serde_json::{Value, json};

/// The results of a finished run's tool calls by the calls' order: (name, input, content,
/// is_error), and the kinds of all its events.
async fn results(f: &TestFleet, run: &str) -> (Vec<(String, Value, String, bool)>, Vec<String>) {
    let (_, page) = f
        .get(&format!("/v1/runs/{run}/events?limit=1000"), &f.admin)
        .await;
    let events = page["events"].as_array().unwrap();
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
    let kinds = events
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    (calls, kinds)
}

fn skill_dir() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("weft-toolbox-{}", uuid::Uuid::now_v7()));
    let dir = root.join("pdf-forms");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: pdf-forms\ndescription: Fill PDF forms\n---\nList the fields, then fill them one by one.\n",
    )
    .unwrap();
    std::fs::write(dir.join("reference.md"), "field types: text, checkbox").unwrap();
    root
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_remembers_publishes_reads_and_loads_skills_within_its_grants() {
    let skills = skill_dir();
    let dir = skills.clone();
    let f = TestFleet::start_with(move |c| c.substrate.skills_dir = Some(dir)).await;
    let (_, me) = f.get("/v1/me", &f.admin).await;
    let subject = me["subject"].as_str().unwrap().to_owned();
    for (name, scope) in [("team.news", "tenant"), ("other.news", "tenant")] {
        let (status, body) = f
            .put(
                &format!("/v1/channels/{name}"),
                &f.admin,
                json!({"scope": scope}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    put_agent(
        &f,
        &f.admin,
        "worker",
        json!({
            "model": "mock-1",
            "tools": ["Memory", "Channel", "Skill"],
            "memory_scopes": ["user", "agent"],
            "channels": {"publish": ["team.*"], "subscribe": ["team.*"]},
            "skills": ["pdf-forms"],
        }),
    )
    .await;
    let turns = json!([
        [
            {"name": "Memory", "input": {"op": "set", "scope": "user", "key": "fav", "value": "teal"}},
            {"name": "Memory", "input": {"op": "incr", "scope": "agent", "key": "n", "by": 2}},
            {"name": "Channel", "input": {"op": "publish", "channel": "team.news", "payload": {"hello": 1}}},
            {"name": "Skill", "input": {"op": "list"}}
        ],
        [
            // A model cannot name a scope id: `scope_id` is not the tool's to take.
            {"name": "Memory", "input": {"op": "get", "scope": "user", "scope_id": "mallory", "key": "fav"}},
            {"name": "Channel", "input": {"op": "read", "channel": "team.news"}},
            {"name": "Skill", "input": {"op": "load", "name": "pdf-forms"}}
        ],
        [
            {"name": "Memory", "input": {"op": "set", "scope": "tenant", "key": "x", "value": 1}},
            {"name": "Channel", "input": {"op": "publish", "channel": "other.news", "payload": 1}},
            {"name": "Channel", "input": {"op": "read", "channel": "other.news"}},
            {"name": "Skill", "input": {"op": "load", "name": "secret-skill"}}
        ]
    ]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "worker", "input": script(turns, "done")}),
    )
    .await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (calls, kinds) = results(&f, &run).await;
    assert_eq!(calls.len(), 11, "{calls:?}");
    let ok = |i: usize| -> Value {
        assert!(!calls[i].3, "call {i} failed: {:?}", calls[i]);
        serde_json::from_str(&calls[i].2).unwrap_or(Value::String(calls[i].2.clone()))
    };
    assert_eq!(ok(0)["entry"]["value"], "teal");
    assert_eq!(ok(1)["entry"]["value"], 2);
    assert_eq!(ok(2)["published"], true);
    assert_eq!(
        ok(3)["skills"],
        json!([{"name": "pdf-forms", "description": "Fill PDF forms"}])
    );
    // The user scope is the run's own subject, whatever scope id the model wrote.
    assert_eq!(ok(4)["entry"]["value"], "teal");
    let read = ok(5);
    assert_eq!(read["messages"][0]["payload"], json!({"hello": 1}));
    let body = ok(6);
    let body = body.as_str().unwrap();
    assert!(
        body.contains("List the fields, then fill them one by one."),
        "{body}"
    );
    assert!(body.contains("reference.md"), "{body}");
    // Outside the grants: each is an error result naming why, and nothing was written.
    for (i, needle) in [
        (7, "scope `tenant` is not allowed"),
        (8, "may not publish to channel `other.news`"),
        (9, "may not read channel `other.news`"),
        (10, "skill `secret-skill` is not available"),
    ] {
        assert!(calls[i].3, "call {i} should fail: {:?}", calls[i]);
        assert!(calls[i].2.contains(needle), "call {i}: {}", calls[i].2);
    }
    assert!(kinds.contains(&"channel_publish".to_owned()), "{kinds:?}");
    assert!(kinds.contains(&"channel_delivery".to_owned()), "{kinds:?}");

    // What the tools wrote is what the HTTP routes read.
    let (status, e) = f
        .get(&format!("/v1/memory/user/{subject}/fav"), &f.admin)
        .await;
    assert_eq!((status, &e["value"]), (200, &json!("teal")), "{e}");
    let (status, e) = f.get("/v1/memory/agent/worker/n", &f.admin).await;
    assert_eq!((status, &e["value"]), (200, &json!(2)), "{e}");
    let (status, _) = f
        .get(
            &format!("/v1/memory/tenant/{}/x", me["tenant"].as_str().unwrap()),
            &f.admin,
        )
        .await;
    assert_eq!(status, 404);
    let (_, peek) = f.get("/v1/channels/other.news/peek", &f.admin).await;
    assert_eq!(
        peek["messages"],
        json!([]),
        "nothing was published outside the grants"
    );

    // The skill the Skill tool loaded is the boot-loaded one, with the hash `weft hash skill`
    // prints for its folder.
    let (status, s) = f.get("/v1/skills/pdf-forms", &f.admin).await;
    assert_eq!(status, 200, "{s}");
    let hash = weft_substrate::hash_skill_dir(&skills.join("pdf-forms")).unwrap();
    assert_eq!(s["version"], json!(hash), "{s}");
    let _ = std::fs::remove_dir_all(&skills);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_run_cannot_publish_beyond_its_parents_grants() {
    let f = TestFleet::start().await;
    for name in ["a.b.c", "x"] {
        let (status, body) = f
            .put(
                &format!("/v1/channels/{name}"),
                &f.admin,
                json!({"scope": "tenant"}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    // The child's own grants cover `x` and `a.b.*`; its parent's only `a.*`.
    let child_turns = json!([[
        {"name": "Channel", "input": {"op": "publish", "channel": "a.b.c", "payload": "from child"}},
        {"name": "Channel", "input": {"op": "publish", "channel": "x", "payload": "widened"}}
    ]]);
    put_agent(
        &f,
        &f.admin,
        "child",
        json!({
            "model": "mock-1",
            "tools": ["Channel"],
            "channels": {"publish": ["a.b.*", "x"]},
        }),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "parent",
        json!({"model": "mock-1", "tools": ["Agent"], "channels": {"publish": ["a.*"]}}),
    )
    .await;
    let spawn = json!([[{"name": "Agent", "input": {"op": "spawn", "agent": "child", "input": script(child_turns, "ok")}}]]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "parent", "input": script(spawn, "done")}),
    )
    .await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let (_, inside) = f.get("/v1/channels/a.b.c/peek", &f.admin).await;
    assert_eq!(inside["messages"].as_array().unwrap().len(), 1, "{inside}");
    let (_, outside) = f.get("/v1/channels/x/peek", &f.admin).await;
    assert_eq!(outside["messages"], json!([]), "{outside}");
}
