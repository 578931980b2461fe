//! A router process killed mid-stream: the client gets a clean error event, and the usage of
//! every call that completed is in the `usage` table. A router killed in the middle of a run's
//! model turn: the turn is done again once a router answers, and the run ends with every event
//! once and its tool result recorded once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::{Duration, Instant};

use common::{Proc, TestFleet, executor_process, free_port, put_agent, wait_for_port};
use futures::StreamExt as _;
use serde_json::json;

/// A `weft router` process of `f`'s deployment with the mock models `mock-1` and `slow`.
async fn start_router(f: &TestFleet) -> (Proc, u16) {
    start_router_on(f, free_port()).await
}

/// [`start_router`] on a given port (a router started again where the last one listened).
async fn start_router_on(f: &TestFleet, port: u16) -> (Proc, u16) {
    let dir = std::env::temp_dir().join(format!("{}-router", f.db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_file = dir.join("router.toml");
    std::fs::write(
        &cfg_file,
        "[router.providers.mock]\nkind = \"mock\"\n[router.providers.mock.models.mock-1]\n\
         [router.providers.mock.models.slow]\ntoken_delay_ms = 100\n",
    )
    .unwrap();
    let router = Proc(
        common::weft_command(f)
            .args(["router", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(&cfg_file)
            .spawn()
            .unwrap(),
    );
    wait_for_port(port).await;
    (router, port)
}

/// A gateway of `f`'s deployment that reaches the router on `port` over the network; its URL.
async fn start_gateway(
    f: &TestFleet,
    port: u16,
    stop: &tokio_util::sync::CancellationToken,
) -> (
    String,
    tokio::task::JoinHandle<Result<(), weft_gateway::GatewayError>>,
) {
    let c = &f.config;
    let mut gc = c.clone();
    gc.gateway.router_url = format!("http://127.0.0.1:{port}");
    gc.gateway.substrate_url = format!("http://{}", f.fleet.substrate_addr);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let jwt = weft_auth::InternalJwt::from_secret(
        c.auth
            .internal_jwt_secret
            .as_ref()
            .unwrap()
            .expose()
            .as_bytes(),
    );
    let gateway = tokio::spawn(weft_gateway::run(listener, gc, jwt, stop.clone()));
    (url, gateway)
}

/// Waits until `tenant` has `want` chat rows with outcome `ok` in `usage` (or 20 s passed).
async fn usage_rows(f: &TestFleet, tenant: &str, want: i64) -> i64 {
    let pool = sqlx::PgPool::connect(&f.db.url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM usage WHERE tenant_id = $1 AND kind = 'chat' AND outcome = 'ok'",
        )
        .bind(tenant)
        .fetch_one(&pool)
        .await
        .unwrap();
        if n >= want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn killing_the_router_mid_stream_ends_the_stream_cleanly_and_keeps_finished_usage() {
    let f = TestFleet::start().await;
    let (router, port) = start_router(&f).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (url, gateway) = start_gateway(&f, port, &stop).await;

    let (s, t) = f.mint(&f.admin, "acme", &["llm:call"]).await;
    assert_eq!(s, 201, "{t}");
    let token = t["token"].as_str().unwrap().to_owned();
    let chat = |model: &str, stream: bool| {
        f.http
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(&token)
            .json(&json!({
                "model": model,
                "stream": stream,
                "messages": [{"role": "user", "content": "one two three four five six seven eight nine ten eleven twelve"}],
            }))
            .send()
    };
    for _ in 0..3 {
        let r = chat("mock-1", false).await.unwrap();
        assert_eq!(r.status(), 200);
    }

    let r = chat("slow", true).await.unwrap();
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut seen = String::from_utf8_lossy(&body.next().await.unwrap().unwrap()).into_owned();
    assert!(seen.contains("data: {"), "{seen}");
    let mut router = router;
    router.0.kill().unwrap();
    router.0.wait().unwrap();
    // The rest of the stream: an error event, then the end; never a hang.
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(b) => seen.push_str(&String::from_utf8_lossy(&b)),
                Err(e) => panic!("the stream broke instead of ending with an error event: {e}"),
            }
        }
    })
    .await;
    assert!(rest.is_ok(), "the stream did not end: {seen}");
    let error_frame = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .find(|v| v.get("error").is_some())
        .unwrap_or_else(|| panic!("no error event in {seen}"));
    assert!(error_frame["error"]["message"].is_string(), "{error_frame}");
    assert!(
        !seen.contains("\"finish_reason\":\"stop\""),
        "a killed stream must not claim to be complete: {seen}"
    );

    // Every completed call's record reaches the table (written by the gateways' usage writer).
    assert_eq!(
        usage_rows(&f, "acme", 3).await,
        3,
        "usage rows of the completed calls"
    );
    let pool = sqlx::PgPool::connect(&f.db.url).await.unwrap();
    let (input, output): (i64, i64) = sqlx::query_as(
        "SELECT sum(input_tokens)::bigint, sum(output_tokens)::bigint FROM usage WHERE tenant_id = 'acme'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(input > 0 && output > 0);

    stop.cancel();
    let _ = gateway.await;
    f.stop().await;
}

/// Usage records leave the caller's path (acknowledged by JetStream after the answer is sent),
/// but a router killed the instant its last answer arrived still leaves every record.
#[tokio::test]
async fn a_router_killed_right_after_answering_keeps_every_usage_record() {
    let f = TestFleet::start().await;
    let (mut router, port) = start_router(&f).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (url, gateway) = start_gateway(&f, port, &stop).await;
    let (s, t) = f.mint(&f.admin, "kill9", &["llm:call"]).await;
    assert_eq!(s, 201, "{t}");
    let token = t["token"].as_str().unwrap().to_owned();
    const CALLS: i64 = 200;
    let calls = (0..CALLS).map(|i| {
        f.http
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(&token)
            .json(&json!({
                "model": "mock-1",
                "messages": [{"role": "user", "content": format!("call {i}")}],
            }))
            .send()
    });
    let answers = futures::future::join_all(calls).await;
    // SIGKILL at once: no drain, no chance to finish acks in flight.
    router.0.kill().unwrap();
    router.0.wait().unwrap();
    for r in answers {
        assert_eq!(r.unwrap().status(), 200);
    }
    assert_eq!(
        usage_rows(&f, "kill9", CALLS).await,
        CALLS,
        "every answered call has its usage row"
    );
    stop.cancel();
    let _ = gateway.await;
    f.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_router_killed_mid_turn_costs_the_run_that_turn_only() {
    let f = TestFleet::start_with(|c| {
        c.executor.embedded = false;
        common::slow_model(c, 0);
    })
    .await;
    let (mut router, port) = start_router(&f).await;
    let _executor = executor_process(
        &f,
        &[(
            "WEFT_EXECUTOR__ROUTER_URL",
            format!("http://127.0.0.1:{port}"),
        )],
    );
    put_agent(
        &f,
        &f.admin,
        "worker",
        json!({"model": "mock/slow", "tools": ["Context"]}),
    )
    .await;
    // A tool turn, then a reply of twenty slow words (100 ms each).
    let input = common::script(
        json!([[{"name": "Context", "input": {"op": "time"}}]]),
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty",
    );
    let run = common::create(&f, &f.admin, json!({"agent": "worker", "input": input})).await;
    // The second turn is streaming once a text delta follows the tool result.
    let resp = common::open_stream(&f, &run).await;
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    while !seen
        .split("event: tool_result")
        .nth(1)
        .is_some_and(|after| after.contains("event: text_delta"))
    {
        let chunk = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the run streams")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(body);
    router.0.kill().unwrap();
    router.0.wait().unwrap();
    // The executor keeps the run (an infrastructure failure, not the model's) and does the
    // turn again once a router answers where the last one was.
    let (_router, _) = start_router_on(&f, port).await;
    let frames = common::stream(&f, &f.admin, &run, "", None).await;
    let (_, kind, last) = frames.last().unwrap();
    assert_eq!(kind, "run_finished");
    assert_eq!(last["data"]["status"], "succeeded", "{last}");
    let count = |k: &str| frames.iter().filter(|(_, kind, _)| kind == k).count();
    assert_eq!(count("tool_result"), 1, "{frames:?}");
    assert_eq!(count("tool_call"), 1, "{frames:?}");
    let seqs: Vec<i64> = common::persisted(&frames).iter().map(|(s, _)| *s).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "every event once, in order: {seqs:?}"
    );
    let pool = sqlx::PgPool::connect(&f.db.url).await.unwrap();
    let ledger: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tool_ledger WHERE run_id = $1::uuid AND status = 'finished'",
    )
    .bind(&run)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(ledger, 1, "the tool's result is recorded once");
}
