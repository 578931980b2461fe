//! Long runs: a 200-turn run with large tool results stays under a small model window through
//! automatic compaction, on two executor processes, one SIGKILLed after the first compaction
//! while the provider holds its next request: the survivor's request is byte-identical. Recall
//! then reads back a fact compaction removed, by words and by seq. And a search never crosses
//! users or tenants.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    TestFleet, all_events, all_events_as, create, executor_process, finished, finished_as,
    kill_holder, put_agent, script,
};
use serde_json::{Value, json};
use weft_testkit::{Behavior, FakeUpstream};

/// Model turns reading blobs before the run recalls one.
const TURNS: usize = 200;
/// The window the router reports for `up/long`, in tokens.
const WINDOW: usize = 8192;

/// The blob a turn reads: its number and a word found nowhere else.
fn blob(i: usize) -> String {
    format!(
        "BLOB {i}: the code word is zq{i}x. {}",
        "filler text ".repeat(700)
    )
}

/// The content of the last tool message of an OpenAI request, and the call id it answers.
fn last_tool(body: &Value) -> Option<(String, String)> {
    let m = body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")?;
    let content = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    Some((m["tool_call_id"].as_str()?.to_owned(), content))
}

/// What the scripted model does next: read blob 0..TURNS one per turn (the blob number comes
/// from the last result, so the script survives compaction), then search for blob 7's word,
/// read the hit back by seq, and answer.
fn next_turn(body: &Value) -> Behavior {
    let call = |id: String, name: &str, input: Value| {
        Behavior::ToolCallsWithIds(vec![(id, name.to_owned(), input.to_string())])
    };
    let read = |i: usize| {
        call(
            format!("t{i}"),
            "Memory",
            json!({"op": "get", "scope": "agent", "key": format!("blob-{i}")}),
        )
    };
    let Some((id, content)) = last_tool(body) else {
        return read(0);
    };
    match id.as_str() {
        "recall_search" => {
            let hits: Value = serde_json::from_str(&content).unwrap_or(Value::Null);
            let seq = hits["hits"]
                .as_array()
                .and_then(|h| h.iter().find(|h| h["kind"] == "tool_result"))
                .and_then(|h| h["seq"].as_i64())
                .unwrap_or(1);
            call(
                "recall_range".into(),
                "Recall",
                json!({"op": "range", "from_seq": seq}),
            )
        }
        "recall_range" => Behavior::Text("recalled".into()),
        _ => {
            let i: usize = id.trim_start_matches('t').parse().unwrap_or(0);
            if i + 1 < TURNS {
                read(i + 1)
            } else {
                call(
                    "recall_search".into(),
                    "Recall",
                    json!({"op": "search", "query": "zq7x"}),
                )
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_run_compacts_survives_a_kill_byte_for_byte_and_recalls_what_it_folded() {
    let up = FakeUpstream::start().await;
    // 0: answer; 1: hold the next request of the run's model (and note it); 2: answer again.
    let phase = Arc::new(AtomicU8::new(0));
    let holding = Arc::new(tokio::sync::Notify::new());
    let held: Arc<Mutex<Option<Vec<u8>>>> = Arc::new(Mutex::new(None));
    let summaries = Arc::new(AtomicUsize::new(0));
    {
        let (phase, summaries, holding) = (phase.clone(), summaries.clone(), holding.clone());
        up.set_responder(Arc::new(move |body: &Value| {
            if body["model"] == "summ" {
                let n = summaries.fetch_add(1, Ordering::SeqCst) + 1;
                return Some(Behavior::Text(format!(
                    "Summary {n}: the agent reads the blobs in order, one per turn."
                )));
            }
            if phase
                .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                holding.notify_one();
                return Some(Behavior::Stall);
            }
            Some(next_turn(body))
        }));
    }
    let base_url = up.base_url.clone();
    let f = TestFleet::start_with(move |c| {
        c.executor.embedded = false;
        c.router.providers.insert(
            "up".into(),
            weft_config::ProviderConfig::Openai(weft_config::HttpProviderConfig {
                models: vec!["long".into(), "summ".into()],
                max_retries: 0,
                ..weft_config::HttpProviderConfig::new(base_url)
            }),
        );
        c.router
            .context_windows
            .insert("up/long".into(), u32::try_from(WINDOW).unwrap());
    })
    .await;
    put_agent(
        &f,
        &f.admin,
        "long",
        json!({
            "model": "up/long",
            "tools": ["Memory", "Recall"],
            "memory_scopes": ["agent"],
            "max_iterations": 1000,
            "compaction": {"auto_percent": 60, "keep_turns": 3, "model": "up/summ", "result_max_bytes": 1024}
        }),
    )
    .await;
    for i in 0..TURNS {
        let (s, e) = f
            .put(
                &format!("/v1/memory/agent/long/blob-{i}"),
                &f.admin,
                json!({"value": blob(i)}),
            )
            .await;
        assert_eq!(s, 200, "{e}");
    }
    let a = executor_process(&f, &[]);
    let b = executor_process(&f, &[]);
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "long", "input": "Read every blob, then find the code word of blob 7."}),
    )
    .await;

    // After the first compaction, hold the run's next model request, and kill the executor
    // that sent it: the other one takes the run over and sends its own.
    let compacted = common::wait_event(&f, &f.admin, &run, 1, "context_compacted").await;
    assert_eq!(compacted["status"], "running", "{compacted}");
    phase.store(1, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(60), holding.notified())
        .await
        .expect("a request was held");
    let recorded = up.recorded();
    let held_at = recorded
        .iter()
        .rposition(|r| r.body["model"] == "long")
        .unwrap();
    *held.lock().unwrap() = Some(recorded[held_at].raw.to_vec());
    let (victim, _survivor) = kill_holder(&f, &run, a, b).await;

    let done = finished(&f, &run).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["stop_reason"], "end_turn", "{done}");

    // The survivor's first request of the run's model is the held one, byte for byte.
    let recorded = up.recorded();
    let held = held.lock().unwrap().clone().unwrap();
    let again = recorded[held_at + 1..]
        .iter()
        .find(|r| r.body["model"] == "long")
        .expect("the survivor called the model");
    assert_eq!(
        std::str::from_utf8(&again.raw).unwrap(),
        std::str::from_utf8(&held).unwrap(),
        "the new executor's prompt differs from what the killed one sent"
    );
    let events = all_events(&f, &run).await;
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "run_finished", "{last}");
    let by = last["data"]["executor"].as_str().unwrap();
    assert!(
        !by.starts_with(&format!("executor-{victim}-")),
        "the killed executor finished the run: {by}"
    );

    // Every prompt stayed under the window: its bytes over 3 (an estimate that errs high) are
    // below it, every turn and every compaction.
    let long: Vec<_> = recorded
        .iter()
        .filter(|r| r.body["model"] == "long")
        .collect();
    assert!(long.len() > TURNS, "{} model requests", long.len());
    let biggest = long.iter().map(|r| r.raw.len()).max().unwrap();
    assert!(
        biggest / 3 < WINDOW,
        "a prompt of {biggest} bytes reached the {WINDOW}-token window"
    );

    // The transcript: many compactions, each an event that says what it did; every turn's
    // result whole (8 KiB blobs, though the model saw 1 KiB of each).
    let compactions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "context_compacted")
        .map(|e| &e["data"])
        .collect();
    assert!(compactions.len() >= 10, "{} compactions", compactions.len());
    for c in &compactions {
        assert_eq!(c["trigger"], "auto", "{c}");
        assert!(
            c["after_tokens"].as_u64() < c["before_tokens"].as_u64(),
            "{c}"
        );
        assert!(
            c["summary"].as_str().unwrap().starts_with("Summary "),
            "{c}"
        );
        assert!(c["folded_turns"].as_u64().unwrap() >= 1, "{c}");
    }
    assert!(summaries.load(Ordering::SeqCst) >= compactions.len());
    let result_of = |id: &str| {
        events
            .iter()
            .find(|e| e["kind"] == "tool_result" && e["data"]["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("no result for {id}"))
    };
    let seven = result_of("t7");
    let seven_text = seven["data"]["content"].as_str().unwrap();
    assert!(
        seven_text.contains("zq7x") && seven_text.len() > 8000,
        "{seven_text:.100}"
    );

    // Blob 7 had been compacted away when the run searched for its word: the request that made
    // the search call does not hold it.
    let searching = long
        .iter()
        .rev()
        .find(|r| last_tool(&r.body).is_some_and(|(id, _)| id == format!("t{}", TURNS - 1)))
        .unwrap();
    assert!(
        !std::str::from_utf8(&searching.raw)
            .unwrap()
            .contains("zq7x"),
        "blob 7 was still in the model's view"
    );
    // Recall found it by its words (the hit names blob 7's result's seq), and read it back by
    // seq exactly as the transcript holds it.
    let search: Value = serde_json::from_str(
        result_of("recall_search")["data"]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let hit = search["hits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["kind"] == "tool_result")
        .unwrap_or_else(|| panic!("{search}"));
    assert_eq!(hit["seq"], seven["seq"], "{search}");
    assert_eq!(hit["run_id"], run.as_str());
    assert!(hit["snippet"].as_str().unwrap().contains("zq7x"), "{hit}");
    let range = result_of("recall_range");
    assert_eq!(range["data"]["content"].as_str().unwrap(), seven_text);
    // The same search over HTTP.
    let (s, http) = f
        .get(&format!("/v1/runs/{run}/search?q=zq7x"), &f.admin)
        .await;
    assert_eq!(s, 200, "{http}");
    assert!(
        http["hits"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["seq"] == seven["seq"]),
        "{http}"
    );
}

/// A search looks at the runs of the run's own user in its own tenant, from the tool and over
/// HTTP; another user's or tenant's runs are never searched, and another user cannot search.
#[tokio::test]
async fn recall_never_crosses_users_or_tenants() {
    let f = TestFleet::start().await;
    let user = ["runs:create", "runs:read"];
    let alice = token(&f, "acme", "alice", &user).await;
    let bob = token(&f, "acme", "bob", &user).await;
    let eve = token(&f, "beta", "eve", &user).await;
    for tenant in ["acme", "beta"] {
        let admin = token(&f, tenant, "root", &["tenant:admin"]).await;
        put_agent(
            &f,
            &admin,
            "rec",
            json!({"model": "mock-1", "tools": ["Recall"]}),
        )
        .await;
    }
    // Each user's first run mentions their own password.
    let mut firsts = Vec::new();
    for (who, name) in [(&alice, "alice"), (&bob, "bob"), (&eve, "eve")] {
        let run = create(
            &f,
            who,
            json!({"agent": "rec", "input": format!("#mock {{\"reply\": \"noted\"}}\nthe password is swordfish {name}")}),
        )
        .await;
        finished_as(&f, who, &run).await;
        firsts.push(run);
    }
    // Alice's second run recalls across her runs.
    let search = script(
        json!([[{"name": "Recall", "input": {"op": "search", "query": "swordfish", "scope": "user"}}]]),
        "done",
    );
    let run = create(&f, &alice, json!({"agent": "rec", "input": search})).await;
    let done = finished_as(&f, &alice, &run).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let events = all_events_as(&f, &alice, &run).await;
    let result = events.iter().find(|e| e["kind"] == "tool_result").unwrap();
    let hits: Value = serde_json::from_str(result["data"]["content"].as_str().unwrap()).unwrap();
    let runs_hit: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["run_id"].as_str().unwrap())
        .collect();
    assert!(runs_hit.contains(&firsts[0].as_str()), "{hits}");
    assert!(
        !runs_hit.contains(&firsts[1].as_str()),
        "bob's run was searched: {hits}"
    );
    assert!(
        !runs_hit.contains(&firsts[2].as_str()),
        "eve's run was searched: {hits}"
    );
    let text = result["data"]["content"].as_str().unwrap();
    assert!(
        text.contains("alice") && !text.contains("bob") && !text.contains("eve"),
        "{text}"
    );

    // Over HTTP: the same scope from alice's run; bob and eve cannot search it at all.
    let (s, http) = f
        .get(
            &format!("/v1/runs/{run}/search?q=swordfish&scope=user"),
            &alice,
        )
        .await;
    assert_eq!(s, 200, "{http}");
    for h in http["hits"].as_array().unwrap() {
        assert!(
            h["run_id"] == firsts[0].as_str() || h["run_id"] == run.as_str(),
            "{http}"
        );
    }
    assert!(!http["hits"].as_array().unwrap().is_empty(), "{http}");
    for who in [&bob, &eve] {
        let (s, e) = f
            .get(
                &format!("/v1/runs/{run}/search?q=swordfish&scope=user"),
                who,
            )
            .await;
        assert_eq!(s, 404, "{e}");
    }
    // Bob's own search finds only his.
    let (s, mine) = f
        .get(
            &format!("/v1/runs/{}/search?q=swordfish&scope=user", firsts[1]),
            &bob,
        )
        .await;
    assert_eq!(s, 200, "{mine}");
    let all: std::collections::BTreeSet<&str> = mine["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(all, [firsts[1].as_str()].into(), "{mine}");
    // A missing query is a 400 naming the field.
    let (s, e) = f.get(&format!("/v1/runs/{run}/search"), &alice).await;
    assert_eq!((s, e["error"]["param"].as_str()), (400, Some("q")), "{e}");
}

/// Compaction on demand: a parked interactive run compacts when asked and parks again; a
/// running one refuses with 409; `Context {op: compact}` compacts before the next turn, and
/// `Context {op: self}` reports the context's size. `Interruption {op: notify}` is a notice.
#[tokio::test]
async fn compaction_on_demand_and_notices() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "chat",
        json!({"model": "mock-1", "tools": ["Context", "Interruption"],
               "compaction": {"keep_turns": 1, "window_tokens": 100000}}),
    )
    .await;
    let input = script(
        json!([
            [{"name": "Context", "input": {"op": "self"}}],
            [{"name": "Interruption", "input": {"op": "notify", "message": "halfway there"}}],
            [{"name": "Context", "input": {"op": "compact"}}],
            [{"name": "Context", "input": {"op": "time"}}]
        ]),
        "parked",
    );
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "chat", "input": input, "interactive": true}),
    )
    .await;
    let parked = common::wait_event(&f, &f.admin, &run, 1, "awaiting_input").await;
    assert_eq!(parked["status"], "awaiting_input", "{parked}");
    let events = all_events(&f, &run).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    // The self-requested compaction happened before the next turn.
    let requested = kinds
        .iter()
        .position(|k| *k == "compaction_requested")
        .unwrap();
    let compacted = kinds
        .iter()
        .position(|k| *k == "context_compacted")
        .unwrap();
    assert!(requested < compacted, "{kinds:?}");
    let c = &events[compacted]["data"];
    assert_eq!(c["trigger"], "self", "{c}");
    assert_eq!(c["folded_turns"], 2, "{c}");
    let notice = events.iter().find(|e| e["kind"] == "notice").unwrap();
    assert_eq!(notice["data"]["message"], "halfway there");
    let own = events.iter().find(|e| e["kind"] == "tool_result").unwrap();
    let own: Value = serde_json::from_str(own["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(own["context"]["window_tokens"], 100_000, "{own}");
    assert!(
        own["context"]["estimated_tokens"].as_u64().unwrap() > 0,
        "{own}"
    );

    // Manual: the parked run wakes, compacts and parks again.
    let (s, r) = f
        .post(&format!("/v1/runs/{run}/compact"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 202, "{r}");
    let after = r["after_seq"].as_i64().unwrap();
    common::wait_event(&f, &f.admin, &run, after + 1, "awaiting_input").await;
    let events = all_events(&f, &run).await;
    let manual: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "context_compacted" && e["seq"].as_i64().unwrap() > after)
        .collect();
    assert_eq!(manual.len(), 1, "{events:?}");
    assert_eq!(manual[0]["data"]["trigger"], "manual");

    // A finished run refuses.
    let (s, _) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(s == 200 || s == 202);
    finished(&f, &run).await;
    let (s, e) = f
        .post(&format!("/v1/runs/{run}/compact"), &f.admin, json!({}))
        .await;
    assert_eq!(s, 409, "{e}");
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
