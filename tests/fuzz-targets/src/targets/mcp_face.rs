//! `/mcp`, weft's MCP server face, as the gateway serves it (`weft_gateway::fuzzing::mcp_door`:
//! the gateway's checks and error shapes, rmcp's streamable HTTP service, the bridge's `Face`),
//! with weft's API replaced by a recording stub. Input: a selector byte, the HTTP body (a
//! JSON-RPC message), and optionally `\0`, a chunk-size byte and a body every API call answers
//! with (its status from the chunk-size byte's high bit: 200 or 400), delivered in chunks of
//! that size.
//!
//! The selector: bits 0-1 the `MCP-Protocol-Version` header (none, 2025-11-25, 2026-07-28,
//! 2025-06-18), bit 2 an explicit `Accept`, bit 3 an unknown `Mcp-Session-Id` instead of the
//! `Mcp-Method`/`Mcp-Name` headers an SDK client derives from the body, bits 4-5 the
//! caller's scopes (tenant admin; runs; memory and channels; `llm:call` only), bits 6-7 the
//! method (POST, POST, GET, DELETE).
//!
//! Beyond "no panic": no answer is a 5xx, nor hangs; every error answer is JSON (weft's error
//! shape, or a JSON-RPC error object); every API call carries the caller's token, is one the
//! caller's scopes allow, and has a path whose segments are the ones the face meant (no `.` or
//! `..` segment that a URL parser would fold, which would call another route); and the answer
//! does not depend on how the API's body was cut into chunks. `WEFT_FUZZ_DEBUG=1` prints the calls
//! and the answer of each input (to reproduce one).
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use weft_core::{Principal, Scope, Scopes, TenantId};
use weft_mcp_face::{Caller, Face, UpResponse, Upstream};

const BEARER: &str = "wft_fuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuzzfuz";

/// One call the face made to weft's API.
#[derive(Debug)]
struct Call {
    method: Method,
    path: String,
    bearer: String,
}

/// weft's API, answering every call with `answer` (status, chunk size, body) when given, or
/// with what the API would say to a tenant with one agent, one skill and runs that succeed.
#[derive(Clone)]
struct Stub {
    calls: Arc<Mutex<Vec<Call>>>,
    answer: Option<(u16, usize, Bytes)>,
}

const RUN_STREAM: &str = "event: run_started\ndata: {\"seq\":1,\"data\":{\"agent\":\"triage\"}}\n\n\
event: text_delta\ndata: {\"seq\":2,\"data\":{\"text\":\"do\"}}\n\n\
event: assistant_message\ndata: {\"seq\":3,\"data\":{\"content\":[{\"type\":\"text\",\"text\":\"done \u{e9}t\u{e9}\"}]}}\n\n\
: keepalive\n\n\
event: run_finished\ndata: {\"seq\":4,\"data\":{\"status\":\"succeeded\",\"stop_reason\":\"end_turn\"}}\n\n";

fn canned(method: &Method, path: &str, body: Option<&Value>) -> (u16, HeaderMap, Bytes) {
    let mut headers = HeaderMap::new();
    let json = |v: Value| Bytes::from(v.to_string());
    let (status, body) = match (method.as_str(), path) {
        ("GET", "/v1/agents") => (
            200,
            json(json!({"data": [
                {"name": "triage", "description": "Triage issues", "retired": false},
                {"name": "old", "description": "", "retired": true},
                {"name": "plain"}
            ]})),
        ),
        ("GET", "/v1/skills") => (
            200,
            json(
                json!({"data": [{"name": "pdf", "description": "Read PDFs"}, {"name": "gone", "retired": true}]}),
            ),
        ),
        ("GET", p) if p.starts_with("/v1/skills/") => (
            200,
            json(json!({"content": {"description": "Read PDFs", "body": "Step 1."}})),
        ),
        ("POST", "/v1/runs") if body.is_some_and(|b| b["stream"] == true) => {
            headers.insert("x-weft-run-id", HeaderValue::from_static("run_1"));
            (200, Bytes::from_static(RUN_STREAM.as_bytes()))
        }
        ("POST", "/v1/runs") => (201, json(json!({"run_id": "run_1", "status": "queued"}))),
        ("GET", p) if p.starts_with("/v1/memory/") => (
            404,
            json(json!({"error": {"code": "not_found", "message": "no such key"}})),
        ),
        _ => (200, json(json!({"ok": true}))),
    };
    (status, headers, body)
}

impl Upstream for Stub {
    fn call(
        &self,
        method: Method,
        path: String,
        bearer: String,
        body: Option<Value>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        let (status, headers, bytes, chunk) = match &self.answer {
            Some((status, chunk, bytes)) => (*status, HeaderMap::new(), bytes.clone(), *chunk),
            None => {
                let (s, h, b) = canned(&method, &path, body.as_ref());
                (s, h, b, 0)
            }
        };
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(Call {
                method,
                path,
                bearer,
            });
        }
        let chunks: Vec<Result<Bytes, String>> = if chunk == 0 {
            vec![Ok(bytes)]
        } else {
            bytes
                .chunks(chunk)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect()
        };
        async move {
            Ok(UpResponse {
                status,
                headers,
                body: futures::stream::iter(chunks).boxed(),
            })
        }
        .boxed()
    }
}

fn principal(bits: u8) -> Principal {
    let scopes = match bits & 3 {
        0 => vec![Scope::TenantAdmin],
        1 => vec![Scope::RunsCreate, Scope::RunsRead],
        2 => vec![
            Scope::MemoryRead,
            Scope::ChannelsPublish,
            Scope::ChannelsRead,
        ],
        _ => vec![Scope::LlmCall],
    };
    Principal {
        tenant: TenantId::parse("acme").unwrap_or_else(|e| panic!("{}", e.message)),
        subject: "fuzz".into(),
        scopes: Scopes::new(scopes),
        token_id: Some("tok_1".into()),
        agent: None,
    }
}

/// The scopes of which a call to `method path` needs one (empty: none), as the face's tool
/// table says; `None` for a call the face has no business making.
fn needs(method: &Method, path: &str) -> Option<&'static [Scope]> {
    use Scope::*;
    let path = path.split('?').next().unwrap_or_default();
    let scopes: &'static [Scope] = match method.as_str() {
        "POST" if path == "/v1/runs" => &[RunsCreate],
        "POST"
            if path.starts_with("/v1/runs/")
                && (path.ends_with("/cancel") || path.ends_with("/input")) =>
        {
            &[RunsCreate]
        }
        "GET" if path == "/v1/runs" || path.starts_with("/v1/runs/") => &[RunsCreate, RunsRead],
        "GET" if path.starts_with("/v1/memory/") => &[MemoryRead, MemoryWrite],
        "PUT" if path.starts_with("/v1/memory/") => &[MemoryWrite],
        "POST" if path == "/v1/memory/search" => &[MemoryRead, MemoryWrite],
        "POST" if path.starts_with("/v1/channels/") && path.ends_with("/publish") => {
            &[ChannelsPublish]
        }
        "POST" if path.starts_with("/v1/channels/") && path.ends_with("/read") => &[ChannelsRead],
        "GET" if path == "/v1/agents" || path.starts_with("/v1/agents/") => &[RunsCreate, RunsRead],
        "PUT" if path.starts_with("/v1/agents/") => &[TenantAdmin],
        "GET" if path == "/v1/skills" || path.starts_with("/v1/skills/") => &[],
        _ => return None,
    };
    Some(scopes)
}

/// A segment a URL parser folds away (WHATWG URL: `.`, `..`, with `%2e` for a dot).
fn is_dot_segment(s: &str) -> bool {
    let s = s.to_ascii_lowercase().replace("%2e", ".");
    s == "." || s == ".."
}

fn check_call(call: &Call, p: &Principal) {
    assert_eq!(
        call.bearer, BEARER,
        "an API call without the caller's token"
    );
    let Some(needed) = needs(&call.method, &call.path) else {
        panic!("an unexpected API call: {} {}", call.method, call.path);
    };
    assert!(
        needed.is_empty() || needed.iter().any(|s| p.has(*s)),
        "{} {} made for a caller with {}",
        call.method,
        call.path,
        p.scopes
    );
    assert!(
        call.path.parse::<http::uri::PathAndQuery>().is_ok(),
        "not a path: {:?}",
        call.path
    );
    let path = call.path.split('?').next().unwrap_or_default();
    assert!(
        !path.split('/').any(is_dot_segment),
        "{} {}: a dot segment, which a URL parser folds into another route",
        call.method,
        call.path
    );
}

/// What came back: the status, the content type, and the JSON-RPC messages of the body.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    json: bool,
    messages: Vec<Value>,
}

fn messages(body: &[u8], json: bool) -> Vec<Value> {
    if json {
        return serde_json::from_slice(body).into_iter().collect();
    }
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// The headers an SDK client derives from the body (SEP-2243, required from 2026-07-28):
/// `Mcp-Method`, and `Mcp-Name` for the methods that name something.
fn standard_headers(body: &[u8]) -> Vec<(&'static str, HeaderValue)> {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    let Some(method) = v["method"].as_str() else {
        return Vec::new();
    };
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => "",
    };
    let encode = |s: &str| {
        let plain = s.bytes().all(|b| (0x20..=0x7e).contains(&b))
            && !s.starts_with([' ', '\t'])
            && !s.ends_with([' ', '\t'])
            && !s.starts_with("=?base64?");
        if plain || s.is_empty() {
            s.to_owned()
        } else {
            format!("=?base64?{}?=", STANDARD.encode(s))
        }
    };
    let mut out = Vec::new();
    if let Ok(m) = HeaderValue::from_str(&encode(method)) {
        out.push(("mcp-method", m));
    }
    if let Some(Ok(n)) = v["params"][key]
        .as_str()
        .map(|n| HeaderValue::from_str(&encode(n)))
    {
        out.push(("mcp-name", n));
    }
    out
}

async fn serve(selector: u8, body: &[u8], stub: Stub, p: &Principal) -> Answer {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let cfg = weft_config::McpServerFaceConfig::default();
    let door = weft_gateway::fuzzing::mcp_door(
        Face::new(Arc::new(stub)),
        &cfg,
        64 * 1024,
        shutdown.clone(),
    );
    let method = match selector >> 6 {
        2 => Method::GET,
        3 => Method::DELETE,
        _ => Method::POST,
    };
    let mut req = Request::builder()
        .method(method)
        .uri("/mcp")
        .header(http::header::HOST, "localhost")
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(v) = [
        None,
        Some("2025-11-25"),
        Some("2026-07-28"),
        Some("2025-06-18"),
    ][usize::from(selector & 3)]
    {
        req = req.header("mcp-protocol-version", v);
    }
    if selector & 4 != 0 {
        req = req.header(http::header::ACCEPT, "application/json, text/event-stream");
    }
    if selector & 8 != 0 {
        req = req.header("mcp-session-id", "fuzz-session-unknown");
    } else {
        for (name, value) in standard_headers(body) {
            req = req.header(name, value);
        }
    }
    let mut req = match req.body(axum::body::Body::from(body.to_vec())) {
        Ok(r) => r,
        Err(e) => panic!("request: {e}"),
    };
    req.extensions_mut().insert(Caller {
        principal: Some(p.clone()),
        bearer: BEARER.into(),
    });
    let answered = tokio::time::timeout(Duration::from_secs(5), async move {
        let Ok(resp) = door.oneshot(req).await;
        let (parts, body) = resp.into_parts();
        let bytes = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => panic!("the answer's body broke: {e}"),
        };
        (parts, bytes)
    })
    .await;
    shutdown.cancel();
    let Ok((parts, bytes)) = answered else {
        panic!("no answer within 5 s");
    };
    let status = parts.status.as_u16();
    let json = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    assert!(
        status < 500,
        "{status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    if status >= 400 {
        // weft's shape, or a JSON-RPC error object from rmcp (passed through as it is JSON).
        let v: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let weft = v["error"]["code"].is_string();
        let json_rpc = v["jsonrpc"] == "2.0" && v["error"]["code"].is_i64();
        assert!(
            json && (weft || json_rpc) && v["error"]["message"].is_string(),
            "{status} is not an error shape: {}",
            String::from_utf8_lossy(&bytes)
        );
    }
    Answer {
        status,
        json,
        messages: messages(&bytes, json),
    }
}

fn serve_once(selector: u8, body: &[u8], answer: Option<(u16, usize, Bytes)>) -> Answer {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let p = principal(selector >> 4);
    let stub = Stub {
        calls: Arc::default(),
        answer,
    };
    let calls = Arc::clone(&stub.calls);
    let answer = rt.block_on(serve(selector, body, stub, &p));
    drop(rt);
    if let Ok(calls) = calls.lock() {
        if std::env::var_os("WEFT_FUZZ_DEBUG").is_some() {
            eprintln!("calls: {calls:?}\nanswer: {answer:?}");
        }
        for call in calls.iter() {
            check_call(call, &p);
        }
    }
    answer
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    let (body, tail) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let Some([chunking, upstream @ ..]) = tail else {
        serve_once(*selector, body, None);
        return;
    };
    let status = if chunking & 0x80 == 0 { 200 } else { 400 };
    let upstream = Bytes::copy_from_slice(upstream);
    let whole = serve_once(*selector, body, Some((status, 0, upstream.clone())));
    let size = usize::from(chunking & 0x7f).max(1);
    let chunked = serve_once(*selector, body, Some((status, size, upstream)));
    assert_eq!(
        whole, chunked,
        "cutting the API's answer into {size}-byte chunks changed it"
    );
}
