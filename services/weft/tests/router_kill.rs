//! A router process killed mid-stream: the client gets a clean error event, and the usage of
//! every call that completed is in the `usage` table.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestFleet, free_port, wait_for_port};
use futures::StreamExt as _;
use serde_json::json;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `weft router` process of `f`'s deployment with the mock models `mock-1` and `slow`.
async fn start_router(f: &TestFleet) -> (Proc, u16) {
    let c = &f.config;
    let dir = std::env::temp_dir().join(format!("{}-router", f.db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg_file = dir.join("router.toml");
    std::fs::write(
        &cfg_file,
        "[router.providers.mock]\nkind = \"mock\"\n[router.providers.mock.models.mock-1]\n\
         [router.providers.mock.models.slow]\ntoken_delay_ms = 100\n",
    )
    .unwrap();
    let port = free_port();
    let router = Proc(
        Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["router", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(&cfg_file)
            .env("WEFT_NATS__PREFIX", &c.nats.prefix)
            .env("WEFT_REDIS__PREFIX", &c.redis.prefix)
            .env(
                "WEFT_AUTH__INTERNAL_JWT_SECRET",
                c.auth.internal_jwt_secret.as_ref().unwrap().expose(),
            )
            .env("WEFT_TELEMETRY__LOG_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
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
