//! Agent runs end to end on a fleet on port 0 against the machine's Postgres, NATS and Redis:
//! tool calls and the transcript, re-attach, cancel through another gateway, interactive runs
//! moving between executors, sub-run fan-out caps, admission, idempotency and tenancy.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use common::{
    TestFleet, create, fan_out, mock_model, peak_overlap, persisted, put_agent, script, slow_model,
    stalling_model, stream, stream_until, wait_event,
};
use futures::StreamExt as _;
use serde_json::{Value, json};

#[tokio::test]
async fn a_run_with_tool_calls_completes_with_an_ordered_complete_transcript() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "system_prompt": "be brief", "tools": ["Context"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}, {"name": "Context", "input": {"op": "self"}}], [{"name": "Context", "input": {"op": "time"}}]]),
        "all done",
    );
    let run = create(&f, &f.admin, json!({"agent": "helper", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let kinds: Vec<String> = persisted(&frames).into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "user_input",
            "provider_chosen",
            "assistant_message",
            "tool_call",
            "tool_call",
            "usage",
            "tool_result",
            "tool_result",
            "provider_chosen",
            "assistant_message",
            "tool_call",
            "usage",
            "tool_result",
            "provider_chosen",
            "assistant_message",
            "usage",
            "run_finished"
        ]
    );
    let seqs: Vec<i64> = persisted(&frames).into_iter().map(|(s, _)| s).collect();
    assert_eq!(
        seqs,
        (1..=18).collect::<Vec<_>>(),
        "seqs are contiguous from 1"
    );
    // The Context tool really ran: `self` names this agent and its version.
    let self_result = frames
        .iter()
        .find(|(_, k, d)| {
            k == "tool_result" && d["data"]["content"].as_str().unwrap().contains("\"agent\"")
        })
        .unwrap();
    let content: Value =
        serde_json::from_str(self_result.2["data"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["agent"], "helper");
    assert!(content["version"].as_str().unwrap().starts_with("sha256:"));
    let last = &frames.last().unwrap().2["data"];
    assert_eq!(last["status"], "succeeded");
    assert_eq!(last["stop_reason"], "end_turn");
    let (_, r) = f.get(&format!("/v1/runs/{run}"), &f.admin).await;
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["iterations"], 3);
    assert!(r["usage"]["total_tokens"].as_u64().unwrap() > 0);
    // The persisted transcript page agrees with the stream.
    let (_, page) = f.get(&format!("/v1/runs/{run}/events"), &f.admin).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 18);
    assert_eq!(page["events"][17]["kind"], "run_finished");
}

#[tokio::test]
async fn re_attaching_from_a_middle_seq_yields_exactly_the_remaining_events() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "ok",
    );
    let run = create(&f, &f.admin, json!({"agent": "helper", "input": input})).await;
    let all = persisted(&stream(&f, &f.admin, &run, "", None).await);
    let n = i64::try_from(all.len()).unwrap();
    assert!(n > 8);
    let from_query = persisted(&stream(&f, &f.admin, &run, "?from_seq=5", None).await);
    assert_eq!(from_query, all[4..].to_vec());
    let from_header = persisted(&stream(&f, &f.admin, &run, "", Some("6")).await);
    assert_eq!(
        from_header,
        all[6..].to_vec(),
        "Last-Event-ID 6 resumes at 7"
    );
}

#[tokio::test]
async fn the_sse_form_of_create_streams_the_run() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "helper", json!({"model": "mock-1"})).await;
    let r = f
        .http
        .post(format!("{}/v1/runs", f.url))
        .bearer_auth(&f.admin)
        .json(&json!({"agent": "helper", "input": "hello", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    let mut kinds = Vec::new();
    let mut text = String::new();
    while let Some(ev) = events.next().await {
        let ev = ev.unwrap();
        let data: Value = serde_json::from_str(&ev.data).unwrap();
        if ev.event == "text_delta" {
            text.push_str(data["data"]["text"].as_str().unwrap());
        } else {
            kinds.push(ev.event.clone());
        }
        if ev.event == "run_finished" {
            break;
        }
    }
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_finished"));
    assert!(kinds.contains(&"assistant_message".to_owned()));
}

#[tokio::test]
async fn cancel_sent_through_a_second_gateway_stops_a_run_held_by_an_executor() {
    let a = TestFleet::start_with(stalling_model).await;
    put_agent(&a, &a.admin, "sleepy", json!({"model": "mock/slow"})).await;
    // A second fleet on the same database, NATS and Redis, with no executor of its own.
    let b = a.join(|c| c.executor.embedded = false).await;
    let run = create(
        &a,
        &a.admin,
        json!({"agent": "sleepy", "input": "take your time"}),
    )
    .await;
    // `provider_chosen` is written by the executor holding the run, as its model turn starts.
    wait_event(&a, &a.admin, &run, 1, "provider_chosen").await;
    let (status, r) = b
        .post(
            &format!("/v1/runs/{run}/cancel"),
            &a.admin,
            json!({"reason": "changed my mind"}),
        )
        .await;
    assert!(status == 202 || status == 200, "{status} {r}");
    let frames = stream(&b, &a.admin, &run, "", None).await;
    let last = &frames.last().unwrap().2["data"];
    assert_eq!(last["status"], "cancelled");
    assert_eq!(last["stop_reason"], "cancelled");
    assert_eq!(
        last["executor"]
            .as_str()
            .map(|e| e.starts_with("executor-")),
        Some(true),
        "the executor acknowledged it"
    );
}

#[tokio::test]
async fn a_stream_open_on_a_parked_run_hears_its_cancel() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "chat", json!({"model": "mock-1"})).await;
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "chat", "input": "first", "interactive": true}),
    )
    .await;
    wait_event(&f, &f.admin, &run, 1, "awaiting_input").await;
    // A watcher attached after the park: once it has replayed the park it tails live events.
    let r = common::open_stream(&f, &run).await;
    assert_eq!(r.status(), 200);
    let mut events = eventsource_stream::EventStream::new(r.bytes_stream());
    while let Some(ev) = events.next().await {
        if ev.unwrap().event == "awaiting_input" {
            break;
        }
    }
    // No executor holds a parked run: the gateway ends it, and must tell the watcher.
    let (status, _) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert_eq!(status, 200);
    let finished = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            let ev = ev.unwrap();
            if ev.event == "run_finished" {
                return serde_json::from_str::<Value>(&ev.data).unwrap();
            }
        }
        panic!("the stream ended without run_finished");
    })
    .await
    .expect("the open stream never heard the run end");
    assert_eq!(finished["data"]["status"], "cancelled");
}

#[tokio::test]
async fn an_interactive_run_parks_and_finishes_on_another_executor() {
    let a = TestFleet::start().await;
    put_agent(&a, &a.admin, "chat", json!({"model": "mock-1"})).await;
    let run = create(
        &a,
        &a.admin,
        json!({"agent": "chat", "input": "first", "interactive": true}),
    )
    .await;
    let parked = wait_event(&a, &a.admin, &run, 1, "awaiting_input").await;
    assert_eq!(parked["iterations"], 1);
    let (_, page) = a.get(&format!("/v1/runs/{run}/events"), &a.admin).await;
    let first_executor = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "awaiting_input")
        .unwrap()["data"]["executor"]
        .as_str()
        .unwrap()
        .to_owned();
    // The first fleet (and its executor) goes away; a new one takes the input.
    let b = a.join(|_| {}).await;
    a.stop().await;
    let (status, r) = b
        .post(
            &format!("/v1/runs/{run}/input"),
            &b.admin,
            json!({"text": "second"}),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    let first_park = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "awaiting_input")
        .unwrap()["seq"]
        .as_i64()
        .unwrap();
    let done = wait_event(&b, &b.admin, &run, first_park + 1, "awaiting_input").await;
    assert_eq!(done["iterations"], 2);
    let (_, page) = b.get(&format!("/v1/runs/{run}/events"), &b.admin).await;
    let events = page["events"].as_array().unwrap();
    let executors: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "awaiting_input")
        .map(|e| e["data"]["executor"].as_str().unwrap())
        .collect();
    assert_eq!(executors.len(), 2);
    assert_eq!(executors[0], first_executor);
    assert_ne!(
        executors[1], first_executor,
        "the second turn ran on another executor"
    );
    let inputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "user_input")
        .collect();
    assert_eq!(inputs[1]["data"]["text"], "second");
    // Cancel ends a parked run without an executor.
    let (status, r) = b
        .post(&format!("/v1/runs/{run}/cancel"), &b.admin, json!({}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "cancelled");
}

#[tokio::test]
async fn a_sub_run_fan_out_respects_the_concurrency_cap() {
    let f = TestFleet::start_with(|c| slow_model(c, 150)).await;
    let (run, frames, children) = fan_out(&f, 5, 2).await;
    let result = frames.iter().find(|(_, k, _)| k == "tool_result").unwrap();
    let content: Value =
        serde_json::from_str(result.2["data"]["content"].as_str().unwrap()).unwrap();
    let results = content["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    for r in results {
        assert_eq!(r["status"], "succeeded", "{r}");
        assert!(
            r["output"].as_str().unwrap().starts_with("echo: job"),
            "{r}"
        );
    }
    for c in &children {
        assert_eq!(c["parent_run_id"].as_str(), Some(run.as_str()));
    }
    // Children's lifetimes (created → finished) never overlap more than 2 deep.
    let peak = peak_overlap(&children, "created_at");
    assert!(peak <= 2, "at most 2 children at once, saw {peak}");
    assert_eq!(peak, 2, "the cap was reached (5 children, slow model)");
}

#[tokio::test]
async fn idempotency_keys_return_the_same_run() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "helper", json!({"model": "mock-1"})).await;
    let body = json!({"agent": "helper", "input": "once", "idempotency_key": "k-1"});
    let (s1, r1) = f.post("/v1/runs", &f.admin, body.clone()).await;
    let (s2, r2) = f.post("/v1/runs", &f.admin, body).await;
    assert_eq!((s1, s2), (201, 200));
    assert_eq!(r1["run_id"], r2["run_id"]);
}

/// Transcript events of `f`'s runs whose input was `text` (a refused run leaves none).
async fn runs_with_input(f: &TestFleet, text: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM run_events WHERE kind = 'user_input' AND data->>'text' = $1",
    )
    .bind(text)
    .fetch_one(&f.db.pool)
    .await
    .unwrap()
}

// Multi-thread: the test reads the database through `TestDb`'s pool.
#[tokio::test(flavor = "multi_thread")]
async fn admission_is_per_tenant_and_fails_closed_without_redis() {
    let f = TestFleet::start_with(|c| {
        stalling_model(c);
        c.gateway.tenant_max_concurrent_runs = 1;
    })
    .await;
    put_agent(&f, &f.admin, "sleepy", json!({"model": "mock/slow"})).await;
    let run = create(&f, &f.admin, json!({"agent": "sleepy", "input": "1"})).await;
    let r = f
        .http
        .post(format!("{}/v1/runs", f.url))
        .bearer_auth(&f.admin)
        .json(&json!({"agent": "sleepy", "input": "2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "tenant_concurrency_exhausted");
    // Admitted beside its insert, the refused run was deleted: nothing of it is left (the
    // orphaned events would be, without the run row).
    assert_eq!(runs_with_input(&f, "1").await, 1);
    assert_eq!(runs_with_input(&f, "2").await, 0);
    let orphans: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_events e WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = e.run_id)",
    )
    .fetch_one(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0);
    // Refused lately, the tenant is admitted before the insert: refused again, still nothing.
    let (status, _) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "sleepy", "input": "2b"}),
        )
        .await;
    assert_eq!(status, 429);
    assert_eq!(runs_with_input(&f, "2b").await, 0);
    // Cancelling frees the slot.
    f.post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "cancelled");
    let (status, _) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "sleepy", "input": "3"}),
        )
        .await;
    assert_eq!(status, 201);

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let g = f
        .join(move |c| c.redis.url = weft_config::Secret::new(format!("redis://{closed}")))
        .await;
    let (status, body) = g
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "sleepy", "input": "4"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "admission_unavailable");
    assert_eq!(runs_with_input(&f, "4").await, 0);
}

#[tokio::test]
async fn another_tenants_run_is_a_404_and_scopes_are_enforced() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "helper", json!({"model": "mock-1"})).await;
    let run = create(&f, &f.admin, json!({"agent": "helper", "input": "mine"})).await;
    let (_, t) = f
        .mint(&f.admin, "other", &["runs:create", "runs:read"])
        .await;
    let other = t["token"].as_str().unwrap().to_owned();
    for path in [
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{run}/stream"),
    ] {
        let (status, _) = f.get(&path, &other).await;
        assert_eq!(status, 404, "GET {path}");
    }
    for (path, body) in [
        (format!("/v1/runs/{run}/cancel"), json!({})),
        (format!("/v1/runs/{run}/input"), json!({"text": "x"})),
        (
            format!("/v1/runs/{run}/interrupts/int_x"),
            json!({"answer": "x"}),
        ),
    ] {
        let (status, _) = f.post(&path, &other, body).await;
        assert_eq!(status, 404, "POST {path}");
    }
    let (_, list) = f.get("/v1/runs", &other).await;
    assert_eq!(list["runs"].as_array().unwrap().len(), 0);
    let (_, t) = f.mint(&f.admin, "default", &["runs:read"]).await;
    let reader = t["token"].as_str().unwrap().to_owned();
    let (status, body) = f
        .post(
            "/v1/runs",
            &reader,
            json!({"agent": "helper", "input": "x"}),
        )
        .await;
    assert_eq!(status, 403, "{body}");
    let (_, t) = f.mint(&f.admin, "default", &["runs:create"]).await;
    let writer = t["token"].as_str().unwrap().to_owned();
    let (status, _) = f.get(&format!("/v1/runs/{run}"), &writer).await;
    assert_eq!(status, 403, "reading needs runs:read");
}

#[tokio::test]
async fn max_iterations_stops_a_looping_agent() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "loop",
        json!({"model": "mock-1", "tools": ["Context"], "max_iterations": 2}),
    )
    .await;
    let call = json!([{"name": "Context", "input": {"op": "time"}}]);
    let input = script(json!([call.clone(), call.clone(), call]), "never");
    let run = create(&f, &f.admin, json!({"agent": "loop", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let last = &frames.last().unwrap().2["data"];
    assert_eq!(last["stop_reason"], "max_iterations");
    assert_eq!(last["iterations"], 2);
}

#[tokio::test]
async fn an_interruption_parks_the_run_until_it_is_answered() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "asker",
        json!({"model": "mock-1", "tools": ["Interruption"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Interruption", "input": {"op": "ask", "question": "which colour?"}}]]),
        "thanks",
    );
    let run = create(&f, &f.admin, json!({"agent": "asker", "input": input})).await;
    let parked = wait_event(&f, &f.admin, &run, 1, "awaiting_input").await;
    let iid = parked["pending_interrupt"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(parked["pending_interrupt"]["question"], "which colour?");
    let (status, _) = f
        .post(
            &format!("/v1/runs/{run}/interrupts/nope"),
            &f.admin,
            json!({"answer": "x"}),
        )
        .await;
    assert_eq!(status, 404);
    let (status, r) = f
        .post(
            &format!("/v1/runs/{run}/interrupts/{iid}"),
            &f.admin,
            json!({"answer": "blue"}),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let result = frames.iter().find(|(_, k, _)| k == "tool_result").unwrap();
    assert!(
        result.2["data"]["content"]
            .as_str()
            .unwrap()
            .contains("blue")
    );
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_sub_runs() {
    let f = TestFleet::start_with(stalling_model).await;
    put_agent(&f, &f.admin, "sleepy", json!({"model": "mock/slow"})).await;
    put_agent(
        &f,
        &f.admin,
        "boss",
        json!({"model": "mock-1", "tools": ["Agent"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Agent", "input": {"op": "spawn", "agent": "sleepy", "input": "zzz"}}]]),
        "never",
    );
    let run = create(&f, &f.admin, json!({"agent": "boss", "input": input})).await;
    // The parent records the child; the child's `provider_chosen` says an executor holds it.
    let frames = stream_until(&f, &f.admin, &run, "", None, "sub_run_started").await;
    let child = frames.last().unwrap().2["data"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_event(&f, &f.admin, &child, 1, "provider_chosen").await;
    let (status, _) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(status == 200 || status == 202);
    let parent = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(parent.last().unwrap().2["data"]["status"], "cancelled");
    stream(&f, &f.admin, &child, "", None).await;
    let (_, c) = f.get(&format!("/v1/runs/{child}"), &f.admin).await;
    assert_eq!(c["status"], "cancelled");
    assert_eq!(c["stop_reason"], "cancelled");
}

#[tokio::test]
async fn tools_are_default_deny_and_callers_only_narrow() {
    let f = TestFleet::start().await;
    put_agent(
        &f,
        &f.admin,
        "helper",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    // The model asks for a tool the agent does not list: it gets an error result, not a call.
    let input = script(
        json!([[{"name": "HTTP", "input": {"method": "GET", "url": "http://example.com/"}}]]),
        "ok",
    );
    let run = create(&f, &f.admin, json!({"agent": "helper", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let result = &frames
        .iter()
        .find(|(_, k, _)| k == "tool_result")
        .unwrap()
        .2["data"];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("not available"),
        "{result}"
    );
    // A caller may narrow the agent's tools to none, and asking for more than the agent has
    // does not widen them.
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "ok",
    );
    let run = create(
        &f,
        &f.admin,
        json!({"agent": "helper", "input": input, "tools": ["HTTP"]}),
    )
    .await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let started = &frames[0].2["data"];
    assert_eq!(started["tools"], json!([]));
    let result = &frames
        .iter()
        .find(|(_, k, _)| k == "tool_result")
        .unwrap()
        .2["data"];
    assert_eq!(result["is_error"], true);
}

#[tokio::test]
async fn the_http_tool_in_a_run_refuses_private_addresses() {
    let f = TestFleet::start_with(|c| c.executor.allowed_hosts = vec!["*".into()]).await;
    put_agent(
        &f,
        &f.admin,
        "fetcher",
        json!({"model": "mock-1", "tools": ["HTTP"]}),
    )
    .await;
    let calls: Vec<Value> = [
        "http://127.0.0.1:9/",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/",
        "http://localhost:9/",
    ]
    .iter()
    .map(|u| json!({"name": "HTTP", "input": {"method": "GET", "url": u}}))
    .collect();
    let input = script(json!([calls]), "ok");
    let run = create(&f, &f.admin, json!({"agent": "fetcher", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let results: Vec<&Value> = frames
        .iter()
        .filter(|(_, k, _)| k == "tool_result")
        .map(|(_, _, d)| &d["data"])
        .collect();
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r["is_error"], true, "{r}");
    }
}

#[tokio::test]
async fn a_fallback_during_a_run_is_recorded_in_its_transcript() {
    let f = TestFleet::start_with(|c| {
        let mut models = std::collections::BTreeMap::new();
        models.insert(
            "down".to_owned(),
            weft_config::MockModelConfig {
                error_rate_500: 1.0,
                ..Default::default()
            },
        );
        c.router.providers.insert(
            "flaky".into(),
            weft_config::ProviderConfig::Mock(weft_config::MockProviderConfig { models }),
        );
        c.router.aliases.insert(
            "resilient".into(),
            vec!["flaky/down".into(), "mock/mock-1".into()],
        );
    })
    .await;
    put_agent(&f, &f.admin, "fb", json!({"model": "resilient"})).await;
    let run = create(&f, &f.admin, json!({"agent": "fb", "input": "hello"})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let kinds: Vec<&str> = frames
        .iter()
        .map(|(_, k, _)| k.as_str())
        .filter(|k| *k != "text_delta")
        .collect();
    let fb = kinds
        .iter()
        .position(|k| *k == "provider_fallback")
        .expect("a provider_fallback event");
    assert_eq!(kinds[fb + 1], "provider_chosen", "{kinds:?}");
    let data = &frames
        .iter()
        .find(|(_, k, _)| k == "provider_fallback")
        .unwrap()
        .2["data"];
    assert_eq!(data["provider"], "flaky");
    assert_eq!(data["code"], "upstream_error");
    assert_eq!(frames.last().unwrap().2["data"]["stop_reason"], "end_turn");
}

/// The value beside the `nth` event of `kind` in `rows` (`(kind, value)` by seq).
fn nth_of<T: Clone + std::fmt::Debug>(rows: &[(String, T)], kind: &str, nth: usize) -> T {
    rows.iter()
        .filter(|(k, _)| k == kind)
        .nth(nth)
        .unwrap_or_else(|| panic!("no {kind} #{nth} in {rows:?}"))
        .1
        .clone()
}

/// The transaction that wrote each event of `run`, by seq: `(kind, xmin)`.
async fn commits(f: &TestFleet, run: &str) -> Vec<(String, String)> {
    let run: uuid::Uuid = run.parse().unwrap();
    sqlx::query_as::<_, (String, String)>(
        "SELECT kind, xmin::text FROM run_events WHERE run_id = $1 ORDER BY seq",
    )
    .bind(run)
    .fetch_all(&f.db.pool)
    .await
    .unwrap()
}

// Multi-thread: the test reads the database through `TestDb`'s pool, whose drop closes it from
// another thread while blocking this one.
#[tokio::test(flavor = "multi_thread")]
async fn provider_chosen_goes_with_a_quick_turn_and_on_its_own_before_text_or_a_slow_turn() {
    let f = TestFleet::start_with(|c| {
        // Wide margins both ways: a quick turn ends well within the hold even on a loaded
        // machine, and a paced one outlasts it.
        c.executor.step_hold_ms = 1_000;
        // A tool-call turn on it streams for about 3 × 600 ms, with no text.
        mock_model(
            c,
            "paced",
            weft_config::MockModelConfig {
                token_delay_ms: 600,
                ..Default::default()
            },
        );
    })
    .await;
    put_agent(
        &f,
        &f.admin,
        "quick",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    put_agent(
        &f,
        &f.admin,
        "paced",
        json!({"model": "mock/paced", "tools": ["Context"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "all done now",
    );

    // Quick: the tool-call turn commits provider_chosen with its message; the text turn commits
    // it on its own, and the stream shows it before the first text_delta.
    let run = create(&f, &f.admin, json!({"agent": "quick", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let kinds: Vec<&str> = frames.iter().map(|(_, k, _)| k.as_str()).collect();
    let second_chosen = kinds.iter().rposition(|k| *k == "provider_chosen").unwrap();
    let first_delta = kinds.iter().position(|k| *k == "text_delta").unwrap();
    assert!(second_chosen < first_delta, "{kinds:?}");
    let c = commits(&f, &run).await;
    let at = |kind: &str, nth: usize| nth_of(&c, kind, nth);
    assert_eq!(
        at("provider_chosen", 0),
        at("assistant_message", 0),
        "a quick turn without text commits its provider_chosen with its message: {c:?}"
    );
    assert_ne!(
        at("provider_chosen", 1),
        at("assistant_message", 1),
        "a turn that streams text commits provider_chosen first: {c:?}"
    );
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");

    // Paced: the tool-call turn outlasts the hold, so provider_chosen is committed on its own.
    let run = create(&f, &f.admin, json!({"agent": "paced", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let c = commits(&f, &run).await;
    let chosen = c.iter().find(|(k, _)| k == "provider_chosen").unwrap();
    let message = c.iter().find(|(k, _)| k == "assistant_message").unwrap();
    assert_ne!(
        chosen.1, message.1,
        "a turn still streaming after the hold commits provider_chosen on its own: {c:?}"
    );
}

// Multi-thread: as above.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_calls_result_goes_with_the_next_step_and_a_text_turn_with_the_finish() {
    let f = TestFleet::start_with(|c| {
        // As above: wide margins both ways.
        c.executor.step_hold_ms = 1_000;
        mock_model(
            c,
            "paced",
            weft_config::MockModelConfig {
                token_delay_ms: 600,
                ..Default::default()
            },
        );
        // Its first byte comes well after the hold.
        mock_model(
            c,
            "late",
            weft_config::MockModelConfig {
                latency_ms: 3_000,
                ..Default::default()
            },
        );
    })
    .await;
    for (name, model) in [
        ("quick", "mock-1"),
        ("paced", "mock/paced"),
        ("late", "mock/late"),
    ] {
        put_agent(
            &f,
            &f.admin,
            name,
            json!({"model": model, "tools": ["Context", "HTTP"]}),
        )
        .await;
    }
    let input = script(
        json!([
            // Effectful (a POST; refused here, no host is allowed): its result at once.
            [{"name": "HTTP", "input": {"method": "POST", "url": "http://127.0.0.1:9/x"}}],
            // Read-only: each result goes with the next step.
            [{"name": "Context", "input": {"op": "time"}}],
            [{"name": "Context", "input": {"op": "time"}}]
        ]),
        "all done now",
    );
    let run = create(&f, &f.admin, json!({"agent": "quick", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let c = commits(&f, &run).await;
    let at = |kind: &str, nth: usize| nth_of(&c, kind, nth);
    assert_ne!(
        at("tool_result", 0),
        at("assistant_message", 1),
        "an effectful call's result is committed at once: {c:?}"
    );
    assert_eq!(
        at("tool_result", 1),
        at("assistant_message", 2),
        "a read-only call's result goes with the next turn when it ends within the hold: {c:?}"
    );
    assert_eq!(
        at("tool_result", 2),
        at("provider_chosen", 3),
        "or with the provider events a text turn writes before its first text_delta: {c:?}"
    );
    assert_ne!(
        at("provider_chosen", 3),
        at("assistant_message", 3),
        "{c:?}"
    );
    assert_eq!(
        at("assistant_message", 3),
        at("run_finished", 0),
        "a turn without tool calls is committed with the finish: {c:?}"
    );
    // Each call is recorded once, finished.
    let ledger: Vec<(String, String)> = sqlx::query_as(
        "SELECT tool, status FROM tool_ledger WHERE run_id = $1 ORDER BY started_at",
    )
    .bind(run.parse::<uuid::Uuid>().unwrap())
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    assert_eq!(ledger.len(), 3, "{ledger:?}");
    assert!(ledger.iter().all(|(_, s)| s == "finished"), "{ledger:?}");
    // The stream showed every event once, in seq order.
    let seqs: Vec<i64> = frames
        .iter()
        .filter(|(_, k, _)| k != "text_delta")
        .map(|(seq, _, _)| *seq)
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(seqs.len(), c.len(), "{seqs:?} against {c:?}");

    // Paced: the next turn (tool calls, no text) outlasts the hold, so the result deferred
    // before it is committed when the hold is over, with the turn's provider_chosen, ahead of
    // its message.
    let input = script(
        json!([
            [{"name": "Context", "input": {"op": "time"}}],
            [{"name": "Context", "input": {"op": "time"}}]
        ]),
        "done",
    );
    let run = create(&f, &f.admin, json!({"agent": "paced", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let c = commits(&f, &run).await;
    let at = |kind: &str, nth: usize| nth_of(&c, kind, nth);
    assert_eq!(at("tool_result", 0), at("provider_chosen", 1), "{c:?}");
    assert_ne!(
        at("tool_result", 0),
        at("assistant_message", 1),
        "a result waits no longer than the hold: {c:?}"
    );

    // Late: the router answers the next turn (at the provider's first byte) about 2 s after
    // the hold is over, and the result does not wait for it: it is committed that much before
    // the turn's provider_chosen (half of it is the margin asserted).
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "done",
    );
    let run = create(&f, &f.admin, json!({"agent": "late", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let times: Vec<(String, f64)> = sqlx::query_as(
        "SELECT kind, extract(epoch FROM created_at)::float8 FROM run_events WHERE run_id = $1 ORDER BY seq",
    )
    .bind(run.parse::<uuid::Uuid>().unwrap())
    .fetch_all(&f.db.pool)
    .await
    .unwrap();
    let when = |kind: &str, nth: usize| nth_of(&times, kind, nth);
    assert!(
        when("provider_chosen", 1) - when("tool_result", 0) >= 1.0,
        "a result waits no longer than the hold, even for the router to answer: {times:?}"
    );
}

// Multi-thread: as above.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_step_hold_each_result_and_turn_commits_on_its_own() {
    let f = TestFleet::start_with(|c| c.executor.step_hold_ms = 0).await;
    put_agent(
        &f,
        &f.admin,
        "quick",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    let input = script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "all done now",
    );
    let run = create(&f, &f.admin, json!({"agent": "quick", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    assert_eq!(frames.last().unwrap().2["data"]["status"], "succeeded");
    let c = commits(&f, &run).await;
    let at = |kind: &str, nth: usize| nth_of(&c, kind, nth);
    assert_ne!(
        at("provider_chosen", 0),
        at("assistant_message", 0),
        "{c:?}"
    );
    assert_ne!(at("tool_result", 0), at("provider_chosen", 1), "{c:?}");
    assert_ne!(at("assistant_message", 1), at("run_finished", 0), "{c:?}");
}

/// The stream of `run` on `f` as the client reads it, one entry per body chunk: the `(seq, kind)`
/// of every frame in it. Each chunk ends on a frame boundary.
async fn chunks(f: &TestFleet, run: &str) -> Vec<Vec<(i64, String)>> {
    let mut r = common::open_stream(f, run).await;
    assert_eq!(r.status(), 200);
    let mut out = Vec::new();
    loop {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(60), r.chunk())
            .await
            .expect("the stream ended in time")
            .unwrap();
        let Some(chunk) = chunk else { break };
        let text = std::str::from_utf8(&chunk).unwrap();
        assert!(text.ends_with("\n\n"), "a chunk ends on a frame: {text:?}");
        let mut frames = Vec::new();
        for frame in text.split_terminator("\n\n") {
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::to_owned)
            };
            if let (Some(id), Some(kind)) = (field("id: "), field("event: ")) {
                frames.push((id.parse().unwrap(), kind));
            }
        }
        let done = frames.iter().any(|(_, k)| k == "run_finished");
        out.push(frames);
        if done {
            break;
        }
    }
    out
}

/// Asserts that the events each transaction wrote for `run` reached the client in one chunk, and
/// that some transaction wrote several (so a stream written an event at a time would fail).
async fn each_commit_in_one_chunk(f: &TestFleet, run: &str, chunks: &[Vec<(i64, String)>]) {
    let c = commits(f, run).await;
    let chunk_of = |seq: i64| {
        chunks
            .iter()
            .position(|ch| ch.iter().any(|(s, _)| *s == seq))
            .unwrap_or_else(|| panic!("seq {seq} never streamed: {chunks:?}"))
    };
    let mut several = false;
    for (i, (_, xmin)) in c.iter().enumerate() {
        let Some(j) = c[..i].iter().rposition(|(_, x)| x == xmin) else {
            continue;
        };
        several = true;
        let (a, b) = (i64::try_from(j).unwrap() + 1, i64::try_from(i).unwrap() + 1);
        assert_eq!(
            chunk_of(a),
            chunk_of(b),
            "seqs {a} and {b} were committed together but streamed apart: {c:?} {chunks:?}"
        );
    }
    assert!(several, "no commit wrote several events: {c:?}");
}

// Multi-thread: the test reads the database through `TestDb`'s pool.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_s_events_reach_the_client_in_one_write_from_memory_and_from_nats() {
    let a = TestFleet::start_with(|c| {
        // Each word of the text turns 50 ms apart: the streams are open before the run ends.
        mock_model(
            c,
            "paced",
            weft_config::MockModelConfig {
                token_delay_ms: 50,
                ..Default::default()
            },
        );
    })
    .await;
    let b = a.join(|_| {}).await;
    put_agent(
        &a,
        &a.admin,
        "paced",
        json!({"model": "mock/paced", "tools": ["Context"]}),
    )
    .await;
    let input = script(
        json!([
            [{"name": "Context", "input": {"op": "time"}}, {"name": "Context", "input": {"op": "time"}}],
            [{"name": "Context", "input": {"op": "time"}}]
        ]),
        "the three calls are done",
    );
    let run = create(&a, &a.admin, json!({"agent": "paced", "input": input})).await;
    // `a` works the run: its stream reads the steps from memory; `b`'s from NATS.
    let (here, there) = tokio::join!(chunks(&a, &run), chunks(&b, &run));
    for got in [&here, &there] {
        let seqs: Vec<i64> = got.iter().flatten().map(|(s, _)| *s).collect();
        assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "in seq order: {got:?}"
        );
        each_commit_in_one_chunk(&a, &run, got).await;
    }
}

#[tokio::test]
async fn the_run_list_filters_by_creation_time() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "helper", json!({"model": "mock-1"})).await;
    let before = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let id = create(&f, &f.admin, json!({"agent": "helper", "input": "hi"})).await;
    let after = time::OffsetDateTime::now_utc() + time::Duration::minutes(1);
    let rfc = |t: time::OffsetDateTime| {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    let ids = |v: &Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (s, all) = f
        .get(&format!("/v1/runs?since={}", rfc(before)), &f.admin)
        .await;
    assert_eq!(s, 200, "{all}");
    assert_eq!(ids(&all), vec![id]);
    let (s, none) = f
        .get(&format!("/v1/runs?since={}", rfc(after)), &f.admin)
        .await;
    assert_eq!((s, ids(&none).len()), (200, 0), "{none}");
    let (s, bad) = f.get("/v1/runs?since=yesterday", &f.admin).await;
    assert_eq!(s, 400, "{bad}");
    assert_eq!(bad["error"]["param"], "since");
}
