//! The holes of the hardening review (issue 9), each shut by a test that failed before the fix:
//! embeddings bounds, NUL in model output and in stored strings, exact admission accounting
//! (interrupts, sub-runs), who may see and revoke which token, bounded run streams and JSON
//! errors for bad query strings.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

mod common;

use std::time::Duration;

use common::{
    TestFleet, create, fan_out, peak_overlap, put_agent, script, slow_model, stalling_model,
    stream, stream_until,
};
use serde_json::{Value, json};

// --- 1. embeddings are bounded ------------------------------------------------------------------

#[tokio::test]
async fn embeddings_bound_dimensions_inputs_and_answer_size() {
    let f = TestFleet::start_with(|c| {
        if let Some(weft_config::ProviderConfig::Mock(m)) = c.router.providers.get_mut("mock") {
            m.models.insert(
                "wide".into(),
                weft_config::MockModelConfig {
                    embedding_dims: 4096,
                    ..Default::default()
                },
            );
        }
    })
    .await;
    let embed = |body: Value| {
        let f = &f;
        async move { f.post("/v1/embeddings", &f.admin, body).await }
    };
    let (s, e) =
        embed(json!({"model": "mock-1", "input": "x", "dimensions": 300_000_000u32})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "dimensions");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    let many: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
    let (s, e) = embed(json!({"model": "mock-1", "input": many})).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "input");
    // inputs × dimensions over the answer bound, known before the call.
    let some: Vec<String> = (0..2048).map(|i| i.to_string()).collect();
    let (s, e) = embed(json!({"model": "mock-1", "input": some, "dimensions": 8192})).await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("fewer"),
        "{e}"
    );
    // ... and known only from the provider's default size: the router refuses the answer.
    let wide: Vec<String> = (0..512).map(|i| i.to_string()).collect();
    let (s, e) = embed(json!({"model": "mock/wide", "input": wide})).await;
    assert_eq!(s, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("fewer"),
        "{e}"
    );
    // The bounds leave room for real work.
    let (s, e) = embed(json!({"model": "mock-1", "input": some, "dimensions": 256})).await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(e["data"].as_array().unwrap().len(), 2048);
}

// --- 2. NUL in model output ---------------------------------------------------------------------

#[tokio::test]
async fn a_nul_in_model_output_is_stored_by_the_rule_and_the_run_finishes() {
    let f = TestFleet::start_with(|c| c.gateway.tenant_max_concurrent_runs = 1).await;
    put_agent(
        &f,
        &f.admin,
        "ctx",
        json!({"model": "mock-1", "tools": ["Context"]}),
    )
    .await;
    // A reply with a NUL, and a tool call whose name and input hold one.
    let input = script(
        json!([[{"name": "Con\u{0}text", "input": {"op": "ti\u{0}me"}}]]),
        "bad\u{0}reply",
    );
    let run = create(&f, &f.admin, json!({"agent": "ctx", "input": input})).await;
    let frames = stream(&f, &f.admin, &run, "", None).await;
    let last = &frames.last().unwrap().2;
    assert_eq!(last["data"]["status"], "succeeded", "{frames:?}");
    let chosen = frames
        .iter()
        .filter(|(_, k, _)| k == "provider_chosen")
        .count();
    assert_eq!(chosen, 2, "one model call per turn, no retries: {frames:?}");
    let call = frames.iter().find(|(_, k, _)| k == "tool_call").unwrap();
    assert_eq!(call.2["data"]["name"], "Con\u{FFFD}text");
    assert_eq!(call.2["data"]["input"]["op"], "ti\u{FFFD}me");
    let result = frames.iter().find(|(_, k, _)| k == "tool_result").unwrap();
    assert_eq!(result.2["data"]["is_error"], true, "an unknown tool");
    let (_, events) = f.get(&format!("/v1/runs/{run}/events"), &f.admin).await;
    let reply = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(
        reply["data"]["message"]["content"][0]["text"],
        "bad\u{FFFD}reply"
    );
    // Its slot was given back: the next run of this tenant (cap 1) is admitted.
    let (s, r) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "ctx", "input": "next"}),
        )
        .await;
    assert_eq!(s, 201, "{r}");
}

// --- 3. interrupts never release someone else's slot --------------------------------------------

#[tokio::test]
async fn answering_a_made_up_interrupt_keeps_the_running_runs_slot() {
    let f = TestFleet::start_with(|c| {
        c.gateway.tenant_max_concurrent_runs = 1;
        stalling_model(c);
    })
    .await;
    put_agent(&f, &f.admin, "slow", json!({"model": "mock/slow"})).await;
    let run = create(&f, &f.admin, json!({"agent": "slow", "input": "hold"})).await;
    stream_until(&f, &f.admin, &run, "", None, "provider_chosen").await;
    for _ in 0..3 {
        let (s, e) = f
            .post(
                &format!("/v1/runs/{run}/interrupts/made-up"),
                &f.admin,
                json!({"answer": "x"}),
            )
            .await;
        assert_eq!(s, 404, "{e}");
    }
    let (s, e) = f
        .post(
            "/v1/runs",
            &f.admin,
            json!({"agent": "slow", "input": "second"}),
        )
        .await;
    assert_eq!(s, 429, "the running run still holds the only slot: {e}");
    assert_eq!(e["error"]["code"], "tenant_concurrency_exhausted");
    let (s, _) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(s == 200 || s == 202);
}

// --- 6. sub-runs count against the tenant's cap -------------------------------------------------

#[tokio::test]
async fn sub_runs_count_against_the_tenant_cap_without_deadlocking_their_parent() {
    let f = TestFleet::start_with(|c| {
        c.gateway.tenant_max_concurrent_runs = 2;
        slow_model(c, 150);
    })
    .await;
    let (_, _, children) = fan_out(&f, 8, 8).await;
    for c in &children {
        assert_eq!(c["status"], "succeeded", "{c}");
    }
    // Working lifetimes (started → finished) of the sub-runs: never more than the cap at once
    // (their parent lent its slot while it waited on them).
    let peak = peak_overlap(&children, "started_at");
    assert!(peak <= 2, "at most the tenant cap of 2 at once, saw {peak}");
}

// --- 4. nobody sees or revokes a token that holds more than they do -----------------------------

#[tokio::test]
async fn a_tenant_admin_cannot_see_or_revoke_an_admin_token() {
    let f = TestFleet::start().await;
    let (s, t) = f.mint(&f.admin, "default", &["tenant:admin"]).await;
    assert_eq!(s, 201, "{t}");
    let tadmin = t["token"].as_str().unwrap().to_owned();
    let (_, all) = f.get("/v1/tokens", &f.admin).await;
    let boot = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["bootstrap"] == true)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, list) = f.get("/v1/tokens", &tadmin).await;
    assert_eq!(s, 200);
    let listed = list["data"].as_array().unwrap();
    assert!(!listed.is_empty(), "its own token is listed: {list}");
    assert!(
        listed
            .iter()
            .all(|t| !t["scopes"].as_array().unwrap().contains(&json!("admin"))),
        "no admin token is listed for a tenant admin: {list}"
    );
    let r = f
        .http
        .delete(format!("{}/v1/tokens/{boot}", f.url))
        .bearer_auth(&tadmin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let (s, me) = f.get("/v1/me", &f.admin).await;
    assert_eq!(s, 200, "the operator is not locked out: {me}");
}

// --- 5. NUL in stored strings is a 400 naming the field -----------------------------------------

#[tokio::test]
async fn a_nul_in_any_stored_string_is_a_400_naming_it() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "plain", json!({"model": "mock-1"})).await;
    let cases = [
        (
            "/v1/tokens",
            json!({"name": "a\u{0}b", "subject": "s", "scopes": ["llm:call"]}),
            "name",
        ),
        (
            "/v1/tokens",
            json!({"name": "n", "subject": "s\u{0}", "scopes": ["llm:call"]}),
            "subject",
        ),
        (
            "/v1/runs",
            json!({"agent": "plain", "input": "x\u{0}y"}),
            "input",
        ),
        (
            "/v1/runs",
            json!({"agent": "plain", "input": "x", "metadata": {"k": ["ok", "\u{0}"]}}),
            "metadata.k[1]",
        ),
        (
            "/v1/runs",
            json!({"agent": "plain", "input": "x", "idempotency_key": "\u{0}"}),
            "idempotency_key",
        ),
    ];
    for (path, body, param) in cases {
        let (s, e) = f.post(path, &f.admin, body).await;
        assert_eq!(s, 400, "{path} {param}: {e}");
        assert_eq!(e["error"]["param"], param, "{e}");
        assert_eq!(e["error"]["code"], "invalid_request");
    }
    for (field, value) in [("description", "d\u{0}"), ("system_prompt", "p\u{0}")] {
        let r = f
            .http
            .put(format!("{}/v1/agents/nul", f.url))
            .bearer_auth(&f.admin)
            .json(&json!({"model": "mock-1", field: value}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["param"], field, "{e}");
    }
    let (s, e) = f.get("/v1/runs?agent=a%00b", &f.admin).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"]["param"], "agent");
}

// --- 7. run streams are bounded per principal ---------------------------------------------------

#[tokio::test]
async fn run_streams_are_capped_per_principal() {
    let f = TestFleet::start_with(|c| {
        c.gateway.max_streams_per_principal = 2;
        stalling_model(c);
    })
    .await;
    put_agent(&f, &f.admin, "slow", json!({"model": "mock/slow"})).await;
    let run = create(&f, &f.admin, json!({"agent": "slow", "input": "hold"})).await;
    let open = || {
        f.http
            .get(format!("{}/v1/runs/{run}/stream", f.url))
            .bearer_auth(&f.admin)
            .send()
    };
    let a = open().await.unwrap();
    let b = open().await.unwrap();
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let c = open().await.unwrap();
    assert_eq!(c.status(), 429);
    assert!(c.headers().contains_key("retry-after"));
    let e: Value = c.json().await.unwrap();
    assert_eq!(e["error"]["code"], "rate_limited");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_streams_per_principal")
    );
    // Another principal is not affected.
    let (_, t) = f
        .mint(&f.admin, "default", &["runs:read", "runs:create"])
        .await;
    let (s, r) = f
        .post(
            "/v1/runs",
            t["token"].as_str().unwrap(),
            json!({"agent": "slow", "input": "x", "stream": false}),
        )
        .await;
    assert_eq!(s, 201, "{r}");
    // A client that goes away frees its slot once the gateway notices: each try is itself the
    // check (a 429 costs the server nothing), bounded by a deadline.
    drop(a);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let reopened = loop {
        let again = open().await.unwrap();
        if again.status() == 200 {
            break again;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot was never freed"
        );
    };
    // A stream that ends (its run finished) has freed its slot by the time its client reads
    // the end: no retry needed.
    let (s, _) = f
        .post(&format!("/v1/runs/{run}/cancel"), &f.admin, json!({}))
        .await;
    assert!(s == 200 || s == 202);
    for done in [b, reopened] {
        done.bytes().await.unwrap();
    }
    let (x, y) = (open().await.unwrap(), open().await.unwrap());
    assert_eq!((x.status().as_u16(), y.status().as_u16()), (200, 200));
}

// --- 9. query-string errors are JSON with `param` -----------------------------------------------

#[tokio::test]
async fn query_string_errors_are_native_json_naming_the_parameter() {
    let f = TestFleet::start().await;
    put_agent(&f, &f.admin, "plain", json!({"model": "mock-1"})).await;
    let run = create(&f, &f.admin, json!({"agent": "plain", "input": "hi"})).await;
    for q in ["from_seq=9223372036854775808", "from_seq=null", "limit=1.5"] {
        let r = f
            .http
            .get(format!("{}/v1/runs/{run}/events?{q}", f.url))
            .bearer_auth(&f.admin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{q}");
        assert_eq!(
            r.headers()["content-type"].to_str().unwrap(),
            "application/json",
            "{q}"
        );
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], "invalid_request", "{q}: {e}");
        assert_eq!(
            e["error"]["param"],
            q.split('=').next().unwrap(),
            "{q}: {e}"
        );
    }
}

// --- 10. an early refusal keeps the connection usable -------------------------------------------

/// One answer read off `conn`: its status, its head (lowercased) and its body, or `None` when the
/// connection closed (or was reset) before a whole answer arrived.
async fn read_answer(conn: &mut tokio::net::TcpStream) -> Option<(u16, String, String)> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + len {
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                return Some((status, head, body));
            }
        }
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Sends `line` with `token` and a JSON body of about `body_kib` KiB over a new connection,
/// headers and body in two writes as urllib3 sends them; the connection and the answer.
async fn refused_early(
    f: &TestFleet,
    line: &str,
    token: Option<&str>,
    body_kib: usize,
) -> (tokio::net::TcpStream, (u16, String, String)) {
    use tokio::io::AsyncWriteExt as _;
    let addr = f.url.trim_start_matches("http://");
    let body = format!("{{\"reason\":\"{}\"}}", "x".repeat(body_kib * 1024));
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.set_nodelay(true).unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!(
        "{line} HTTP/1.1\r\nhost: {addr}\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before taking it all.
    let _ = conn.write_all(body.as_bytes()).await;
    let answer = tokio::time::timeout(Duration::from_secs(30), read_answer(&mut conn))
        .await
        .unwrap()
        .expect("no answer");
    (conn, answer)
}

/// A request refused before its body is read (a NUL in the path, no token, no such route, MCP
/// without a token) used to leave the body unread; hyper then closed the connection after the
/// answer without `connection: close`, and a client reusing it at once (urllib3 writes headers
/// and body apart) had its next request reset. A small body is now read first and the same
/// connection answers the next request; a large one unread gets `connection: close`.
#[tokio::test]
async fn a_request_refused_before_its_body_is_read_leaves_the_connection_usable() {
    use tokio::io::AsyncWriteExt as _;
    let f = TestFleet::start().await;
    let admin = Some(f.admin.as_str());
    let cases = [
        ("POST /v1/runs/a%00b/cancel", admin, 400),
        ("POST /v1/runs", None, 401),
        ("POST /v1/no-such-route", admin, 404),
        ("POST /mcp", None, 401),
    ];
    for (line, token, want) in cases {
        let (mut conn, (status, _, text)) = refused_early(&f, line, token, 48).await;
        assert_eq!(status, want, "{line}: {text}");
        let next = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
        let _ = conn.write_all(next).await;
        let again = tokio::time::timeout(Duration::from_secs(30), read_answer(&mut conn))
            .await
            .unwrap();
        assert_eq!(
            again.map(|(s, _, _)| s),
            Some(200),
            "{line}: the connection was closed after the refusal"
        );
    }
    // A body over the read-ahead bound, refused unread: the answer says the connection closes.
    for (line, token, want) in cases {
        let (_, (status, head, text)) = refused_early(&f, line, token, 256).await;
        assert_eq!(status, want, "{line}: {text}");
        assert!(
            head.lines().any(|l| l == "connection: close"),
            "{line}: a refusal before a large body was read must say `connection: close`: {head}"
        );
    }
    // A body read to its end keeps the connection: the answer does not say close.
    let (_, (status, head, text)) = refused_early(&f, "POST /v1/runs", admin, 256).await;
    assert_eq!(status, 400, "{text}");
    assert!(!head.contains("connection: close"), "{head}");
}
