//! The `HTTP` tool against local servers: private and loopback addresses are refused (directly,
//! through DNS and through redirects) unless exempt, the allowlist is checked before any
//! connection, and the size and time caps hold.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "integration tests: a panic is how a test fails"
)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use axum::serve::ListenerExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use weft_config::ExecutorConfig;
use weft_executor::tools::ToolOutput;
use weft_executor::tools::http::{HostAllowlist, HttpTool};

/// A local HTTP server that counts the TCP connections it accepts and the requests it serves.
struct TestServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl TestServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&requests);
        let app = Router::new()
            .route("/hello", get(|| async { "hello from the test server" }))
            .route("/big", get(|| async { "0123456789".repeat(1000) }))
            .route("/accents", get(|| async { "é".repeat(100) }))
            .route("/binary", get(|| async { vec![0xffu8, 0xfe, 0x00, 0x80] }))
            .route("/echo", any(echo))
            .route("/redirect", any(redirect))
            .route(
                "/loop",
                get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/loop")]) }),
            )
            .layer(axum::middleware::from_fn(
                move |req: Request, next: axum::middleware::Next| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    next.run(req)
                },
            ));
        let accepted = Arc::clone(&connections);
        let listener = listener.tap_io(move |tcp| {
            accepted.fetch_add(1, Ordering::SeqCst);
            tcp.set_nodelay(true).unwrap();
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            connections,
            requests,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `/redirect` answering `status` with `Location: to`.
    fn redirect_url(&self, to: &str, status: u16) -> String {
        self.url(&format!("/redirect?status={status}&to={}", encode(to)))
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn echo(method: Method, headers: HeaderMap, body: String) -> axum::Json<Value> {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    axum::Json(json!({
        "method": method.as_str(),
        "content_type": header("content-type"),
        "authorization": header("authorization"),
        "x_test": header("x-test"),
        "x_api_key": header("x-api-key"),
        "cookie": header("cookie"),
        "body": body,
    }))
}

async fn redirect(Query(q): Query<HashMap<String, String>>) -> impl IntoResponse {
    let status = StatusCode::from_u16(q["status"].parse().unwrap()).unwrap();
    (status, [(header::LOCATION, q["to"].clone())])
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn tool_with(exempt: &[&str], timeout_ms: u64, max_bytes: usize) -> HttpTool {
    let cfg = ExecutorConfig {
        http_private_exempt: exempt.iter().map(|s| (*s).to_owned()).collect(),
        http_timeout_ms: timeout_ms,
        http_max_bytes: max_bytes,
        ..ExecutorConfig::default()
    };
    HttpTool::new(&cfg).unwrap()
}

/// The tool as an operator trusting loopback 127.0.0.1 (only) would configure it.
fn local_tool() -> HttpTool {
    tool_with(&["127.0.0.1/32"], 10_000, 1024 * 1024)
}

fn allow(patterns: &[&str]) -> HostAllowlist {
    HostAllowlist::new(patterns)
}

fn get_input(url: &str) -> Value {
    json!({"method": "GET", "url": url})
}

fn ok_json(out: &ToolOutput) -> Value {
    assert!(
        !out.is_error,
        "expected a result, got the error {:?}",
        out.text
    );
    serde_json::from_str(&out.text).unwrap()
}

#[track_caller]
fn assert_error(out: &ToolOutput, wants: &[&str]) {
    assert!(out.is_error, "expected an error, got {:?}", out.text);
    for want in wants {
        assert!(
            out.text.contains(want),
            "{:?} should mention {want:?}",
            out.text
        );
    }
}

#[tokio::test]
async fn private_and_loopback_addresses_are_refused_before_connecting() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    // Every host is allowed, no range is exempt: only the address check can refuse.
    let tool = tool_with(&[], 10_000, 1024);
    let any = allow(&["*"]);
    let cases = [
        (
            format!("http://127.0.0.1:{port}/hello"),
            vec!["refused: not an allowed address"],
        ),
        (
            "http://169.254.169.254/latest/meta-data".to_owned(),
            vec!["refused: not an allowed address"],
        ),
        (
            "http://10.0.0.1/".to_owned(),
            vec!["refused: not an allowed address"],
        ),
        (
            format!("http://[::1]:{port}/hello"),
            vec!["refused: not an allowed address"],
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/hello"),
            vec!["refused: not an allowed address"],
        ),
        // Another spelling of 127.0.0.1.
        (
            format!("http://0x7f.1:{port}/hello"),
            vec!["refused: not an allowed address"],
        ),
        // A name, so this goes through the resolver.
        (
            format!("http://localhost:{port}/hello"),
            vec!["refused: not an allowed address"],
        ),
    ];
    for (url, wants) in cases {
        let out = tool.call(&get_input(&url), &any).await;
        assert_error(&out, &wants);
        // Only that it was refused: never the address, its class, or the name's resolution.
        assert_eq!(out.text, "refused: not an allowed address", "{url}");
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn a_name_that_does_not_resolve_reads_like_a_refused_one() {
    // Were these two told apart, the tool would say which internal names exist.
    let tool = tool_with(&[], 10_000, 1024);
    let any = allow(&["*"]);
    let refused = tool.call(&get_input("http://localhost:9/x"), &any).await;
    let unresolved = tool
        .call(&get_input("http://no-such-host.invalid:9/x"), &any)
        .await;
    assert!(refused.is_error && unresolved.is_error);
    assert_eq!(refused.text, "refused: not an allowed address");
    assert_eq!(unresolved.text, refused.text);
}

#[tokio::test]
async fn an_exempt_range_is_reachable() {
    let server = TestServer::start().await;
    let out = local_tool()
        .call(&get_input(&server.url("/hello")), &allow(&["127.0.0.1"]))
        .await;
    let res = ok_json(&out);
    assert_eq!(res["status"], 200);
    assert_eq!(res["body"], "hello from the test server");
    assert_eq!(res["body_encoding"], "utf-8");
    assert_eq!(res["truncated"], false);
    assert_eq!(res["headers"]["content-type"], "text/plain; charset=utf-8");
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_host_off_the_allowlist_is_refused_before_connecting() {
    let server = TestServer::start().await;
    let tool = local_tool();
    let out = tool
        .call(
            &get_input(&server.url("/hello")),
            &allow(&["api.example.com", "*.127.0.0.1"]),
        )
        .await;
    assert_error(&out, &["host `127.0.0.1` is not on this run's allowlist"]);
    let out = tool
        .call(&get_input(&server.url("/hello")), &allow(&[]))
        .await;
    assert_error(&out, &["allowlist is empty"]);
    assert_eq!(server.connections(), 0);
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn redirects_to_non_public_addresses_are_refused() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    // The targets are on the allowlist, so the refusal can only come from the address check.
    let allowed = allow(&["127.0.0.1", "127.0.0.2", "10.0.0.1", "169.254.169.254"]);
    let tool = local_tool();
    let cases = [
        (
            "http://10.0.0.1/".to_owned(),
            "refused: not an allowed address",
        ),
        (
            format!("http://127.0.0.2:{port}/hello"),
            "refused: not an allowed address",
        ),
        (
            "http://169.254.169.254/".to_owned(),
            "refused: not an allowed address",
        ),
    ];
    for (i, (target, want)) in cases.into_iter().enumerate() {
        let out = tool
            .call(&get_input(&server.redirect_url(&target, 302)), &allowed)
            .await;
        assert_error(&out, &["redirect from", "refused", want]);
        // Only the redirecting request reached a server.
        assert_eq!(server.requests(), i + 1);
    }
}

#[tokio::test]
async fn a_redirect_off_the_allowlist_is_refused() {
    let server = TestServer::start().await;
    let out = local_tool()
        .call(
            &get_input(&server.redirect_url("https://elsewhere.example/", 307)),
            &allow(&["127.0.0.1"]),
        )
        .await;
    assert_error(
        &out,
        &[
            "redirect from",
            "host `elsewhere.example` is not on this run's allowlist",
        ],
    );
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let server = TestServer::start().await;
    let tool = local_tool();
    let allowed = allow(&["127.0.0.1"]);

    let res = ok_json(
        &tool
            .call(&get_input(&server.redirect_url("/hello", 302)), &allowed)
            .await,
    );
    assert_eq!(res["body"], "hello from the test server");
    assert_eq!(server.requests(), 2);

    let out = tool.call(&get_input(&server.url("/loop")), &allowed).await;
    assert_error(&out, &["stopped after 5 redirects"]);
    assert_eq!(server.requests(), 2 + 6);
}

#[tokio::test]
async fn redirects_rewrite_the_method_like_browsers_and_drop_credentials_across_origins() {
    let server = TestServer::start().await;
    let other = TestServer::start().await;
    let tool = local_tool();
    let allowed = allow(&["127.0.0.1"]);
    let post = |url: String| {
        json!({
            "method": "POST",
            "url": url,
            "headers": {"authorization": "Bearer t", "x-test": "custom", "x-api-key": "k", "cookie": "c=1"},
            "body": {"a": 1}
        })
    };

    // 303 turns a POST into a bodiless GET.
    let res = ok_json(
        &tool
            .call(&post(server.redirect_url("/echo", 303)), &allowed)
            .await,
    );
    let echoed: Value = serde_json::from_str(res["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "GET");
    assert_eq!(echoed["body"], "");
    assert_eq!(echoed["content_type"], Value::Null);
    assert_eq!(
        echoed["authorization"], "Bearer t",
        "same origin keeps credentials"
    );
    assert_eq!(echoed["x_api_key"], "k");
    assert_eq!(echoed["x_test"], "custom");

    // 307 repeats it as it was, but not the credentials to another origin.
    let res = ok_json(
        &tool
            .call(
                &post(server.redirect_url(&other.url("/echo"), 307)),
                &allowed,
            )
            .await,
    );
    let echoed: Value = serde_json::from_str(res["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["body"], r#"{"a":1}"#);
    assert_eq!(echoed["content_type"], "application/json");
    // Every header that may carry a credential stays behind: custom ones included.
    assert_eq!(echoed["authorization"], Value::Null);
    assert_eq!(echoed["x_api_key"], Value::Null);
    assert_eq!(echoed["cookie"], Value::Null);
    assert_eq!(echoed["x_test"], Value::Null);
    assert_eq!(other.requests(), 1);
}

#[tokio::test]
async fn post_sends_strings_as_is_and_objects_as_json() {
    let server = TestServer::start().await;
    let tool = local_tool();
    let allowed = allow(&["127.0.0.1"]);
    let input = json!({
        "method": "POST",
        "url": server.url("/echo"),
        "headers": {"content-type": "text/plain"},
        "body": "plain text"
    });
    let res = ok_json(&tool.call(&input, &allowed).await);
    let echoed: Value = serde_json::from_str(res["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["content_type"], "text/plain");
    assert_eq!(echoed["body"], "plain text");
    assert_eq!(res["headers"]["content-type"], "application/json");
}

#[tokio::test]
async fn the_body_is_cut_at_the_size_cap() {
    let server = TestServer::start().await;
    let allowed = allow(&["127.0.0.1"]);
    let tool = tool_with(&["127.0.0.1/32"], 10_000, 1000);

    let res = ok_json(&tool.call(&get_input(&server.url("/big")), &allowed).await);
    assert_eq!(res["truncated"], true);
    assert_eq!(res["body"], "0123456789".repeat(100));
    assert!(res["note"].as_str().unwrap().contains("1000 bytes"));

    let res = ok_json(&tool.call(&get_input(&server.url("/hello")), &allowed).await);
    assert_eq!(res["truncated"], false);

    // A cut in the middle of a character leaves text, not base64.
    let tool = tool_with(&["127.0.0.1/32"], 10_000, 101);
    let res = ok_json(
        &tool
            .call(&get_input(&server.url("/accents")), &allowed)
            .await,
    );
    assert_eq!(res["truncated"], true);
    assert_eq!(res["body_encoding"], "utf-8");
    assert_eq!(res["body"], "é".repeat(50));
}

#[tokio::test]
async fn a_binary_body_comes_back_as_base64() {
    let server = TestServer::start().await;
    let res = ok_json(
        &local_tool()
            .call(&get_input(&server.url("/binary")), &allow(&["127.0.0.1"]))
            .await,
    );
    assert_eq!(res["body_encoding"], "base64");
    assert_eq!(res["body"], "//4AgA==");
}

/// A server that accepts connections and reports each, answering with `reply` (if any) and then
/// nothing more, holding the socket open.
async fn stalling_server(reply: Option<&'static [u8]>) -> (SocketAddr, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let _ = tx.try_send(());
            if let Some(reply) = reply {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                sock.write_all(reply).await.unwrap();
            }
            held.push(sock);
        }
    });
    (addr, rx)
}

/// A broken time cap fails the test instead of hanging it.
async fn bounded(call: impl std::future::Future<Output = ToolOutput>) -> ToolOutput {
    tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the tool's own time cap should have ended the call")
}

#[tokio::test]
async fn the_time_cap_fires_against_a_server_that_never_answers() {
    let (addr, mut accepted) = stalling_server(None).await;
    let tool = tool_with(&["127.0.0.1/32"], 300, 1024);
    let out = bounded(tool.call(
        &get_input(&format!("http://{addr}/")),
        &allow(&["127.0.0.1"]),
    ))
    .await;
    assert_error(&out, &["timed out after 300 ms"]);
    // It connected: the timeout, not a refusal, ended the call.
    tokio::time::timeout(Duration::from_secs(5), accepted.recv())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_time_cap_covers_the_body() {
    let (addr, mut accepted) = stalling_server(Some(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\nonly part",
    ))
    .await;
    let tool = tool_with(&["127.0.0.1/32"], 300, 1024);
    let out = bounded(tool.call(
        &get_input(&format!("http://{addr}/")),
        &allow(&["127.0.0.1"]),
    ))
    .await;
    assert_error(&out, &["timed out after 300 ms", "body included"]);
    tokio::time::timeout(Duration::from_secs(5), accepted.recv())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn connect_failures_are_errors_the_model_can_read() {
    // Bind then drop, so nothing listens on the port.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = local_tool()
        .call(
            &get_input(&format!("http://127.0.0.1:{port}/")),
            &allow(&["127.0.0.1"]),
        )
        .await;
    assert_error(&out, &["could not connect to http://127.0.0.1:"]);
}
