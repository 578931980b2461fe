//! A fake upstream that replays recorded provider fixtures byte for byte: the server behind the
//! driver conformance suite (`services/router/tests/conformance.rs`) and the
//! `weft-fake-upstream` binary used by the black-box tests.
//!
//! One fixture directory per provider kind (`services/router/tests/fixtures/<kind>/`) holds the
//! bodies the provider sends on the wire (`text.json`, `text.stream`, `tool_call.json`, …).
//! A [`FixtureServer`] serves one kind. It answers any method and path, records every request,
//! and replies with the next queued [`Serve`] or, when none is queued, in *auto* mode: it picks
//! the fixture from the request itself (stream or not, tools offered, last message a tool result)
//! and answers embedding calls with deterministic vectors in the provider's format.
//! [`serve_all`] serves every kind at once under a path prefix per kind (`/openai/v1/…`).
//!
//! Streamed fixtures are sent one SSE event (or NDJSON line) per body chunk with a yield between
//! chunks, so a client sees them arrive in pieces as it would from a real provider.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A provider wire format that has a fixture directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Openai,
    Anthropic,
    Gemini,
    Deepseek,
    Ollama,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Self; 5] = [
        Self::Openai,
        Self::Anthropic,
        Self::Gemini,
        Self::Deepseek,
        Self::Ollama,
    ];

    /// The kind's name as in config (`openai`, …) and as its fixture directory is named.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Deepseek => "deepseek",
            Self::Ollama => "ollama",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What a provider's `base_url` adds to the server root, following each kind's convention:
    /// `openai` includes `/v1`, `gemini` includes `/v1beta`, the others are the host.
    pub fn base_path(self) -> &'static str {
        match self {
            Self::Openai => "/v1",
            Self::Gemini => "/v1beta",
            Self::Anthropic | Self::Deepseek | Self::Ollama => "",
        }
    }

    /// The content type of this kind's streamed answers.
    pub fn stream_content_type(self) -> &'static str {
        match self {
            Self::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        }
    }
}

/// One scripted answer: `file` from the kind's fixture directory, with this status and headers.
#[derive(Clone, Debug)]
pub struct Serve {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// A file name inside the kind's fixture directory, e.g. `text.stream`.
    pub file: String,
    /// Send the first half of the file's bytes, then fail the body so the connection is aborted
    /// mid-response.
    pub cut_and_abort: bool,
}

impl Serve {
    /// `file` with status 200 and no extra headers.
    pub fn file(file: impl Into<String>) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            file: file.into(),
            cut_and_abort: false,
        }
    }

    /// The same answer with another status.
    #[must_use]
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// The same answer with one more header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same answer cut after half its bytes, then aborted.
    #[must_use]
    pub fn cut_and_abort(mut self) -> Self {
        self.cut_and_abort = true;
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// Path and query, relative to the kind's root (without the `/<kind>` prefix of
    /// [`serve_all`]).
    pub path: String,
    /// Header names lowercase, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when empty, a JSON string when it is not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Recorded requests kept per kind; older ones are dropped.
const RECORD_LIMIT: usize = 1024;

/// One kind's fixtures, script and recorded requests.
struct KindState {
    kind: Kind,
    dir: PathBuf,
    queue: Mutex<VecDeque<Serve>>,
    recorded: Mutex<VecDeque<RecordedRequest>>,
}

impl KindState {
    fn new(kind: Kind, dir: PathBuf) -> Self {
        Self {
            kind,
            dir,
            queue: Mutex::new(VecDeque::new()),
            recorded: Mutex::new(VecDeque::new()),
        }
    }

    async fn respond(
        &self,
        method: &Method,
        path: String,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Response {
        let body = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
        };
        let bare_path = path.split('?').next().unwrap_or_default().to_owned();
        if let Ok(mut r) = self.recorded.lock() {
            if r.len() >= RECORD_LIMIT {
                r.pop_front();
            }
            r.push_back(RecordedRequest {
                method: method.to_string(),
                path,
                headers: headers
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.as_str().to_owned(),
                            String::from_utf8_lossy(v.as_bytes()).into_owned(),
                        )
                    })
                    .collect(),
                body: body.clone(),
            });
        }
        let scripted = self.queue.lock().ok().and_then(|mut q| q.pop_front());
        let serve = match scripted {
            Some(s) => s,
            None => {
                if let Some(resp) = embedding(self.kind, &bare_path, &body) {
                    return resp;
                }
                Serve::file(auto_file(self.kind, &bare_path, &body))
            }
        };
        serve_file(self.kind, &self.dir, &serve).await
    }
}

/// A fixture server for one provider kind on `127.0.0.1:0`; stops when dropped.
pub struct FixtureServer {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:<port>`, without the kind's base path.
    pub url: String,
    state: Arc<KindState>,
    stop: CancellationToken,
}

impl FixtureServer {
    /// Serves `kind` from its fixture directory `dir` (the directory holding `text.json`, …).
    pub async fn start(kind: Kind, dir: impl Into<PathBuf>) -> Self {
        let state = Arc::new(KindState::new(kind, dir.into()));
        let app = axum::Router::new()
            .fallback(one_kind)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fixture server");
        let addr = listener.local_addr().expect("local addr");
        let stop = CancellationToken::new();
        tokio::spawn(serve(listener, app, stop.clone().cancelled_owned()));
        Self {
            addr,
            url: format!("http://{addr}"),
            state,
            stop,
        }
    }

    /// The fixture directory of `kind` in a crate: `<manifest_dir>/tests/fixtures/<kind>`. Pass
    /// `env!("CARGO_MANIFEST_DIR")` of the crate whose tests own the fixtures.
    pub fn fixture_dir(manifest_dir: &str, kind: Kind) -> PathBuf {
        Path::new(manifest_dir)
            .join("tests")
            .join("fixtures")
            .join(kind.name())
    }

    /// The kind served.
    pub fn kind(&self) -> Kind {
        self.state.kind
    }

    /// The fixture directory served.
    pub fn dir(&self) -> &Path {
        &self.state.dir
    }

    /// The `base_url` a provider of this kind is configured with to reach this server.
    pub fn base_url(&self) -> String {
        format!("{}{}", self.url, self.state.kind.base_path())
    }

    /// Queues the answer to the next request; requests with nothing queued are answered in auto
    /// mode.
    pub fn push(&self, serve: Serve) {
        if let Ok(mut q) = self.state.queue.lock() {
            q.push_back(serve);
        }
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .recorded
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stops serving.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serves every kind whose directory exists under `root` (`root/openai`, `root/anthropic`, …) in
/// auto mode, each under its own prefix: `http://ADDR/<kind>/…`. Returns when `shutdown`
/// completes.
pub async fn serve_all(
    listener: tokio::net::TcpListener,
    root: &Path,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let kinds: Arc<Vec<Arc<KindState>>> = Arc::new(
        Kind::ALL
            .into_iter()
            .map(|k| Arc::new(KindState::new(k, root.join(k.name()))))
            .collect(),
    );
    let app = axum::Router::new().fallback(all_kinds).with_state(kinds);
    serve(listener, app, shutdown).await;
}

async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
}

fn path_and_query(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned())
}

async fn one_kind(
    State(state): State<Arc<KindState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state
        .respond(&method, path_and_query(&uri), &headers, &body)
        .await
}

async fn all_kinds(
    State(kinds): State<Arc<Vec<Arc<KindState>>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let full = path_and_query(&uri);
    let trimmed = full.trim_start_matches('/');
    let (name, rest) = trimmed
        .find(['/', '?'])
        .map_or((trimmed, ""), |i| trimmed.split_at(i));
    let Some(state) = Kind::parse(name).and_then(|k| kinds.iter().find(|s| s.kind == k)) else {
        return error_response(
            StatusCode::NOT_FOUND,
            &format!(
                "no provider kind `{name}`: paths start with /openai, /anthropic, /gemini, /deepseek or /ollama"
            ),
        );
    };
    let rest = if rest.starts_with('/') {
        rest.to_owned()
    } else {
        format!("/{rest}")
    };
    state.respond(&method, rest, &headers, &body).await
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "fixture_server_error"}}).to_string();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

/// Answers `serve` from `dir`, streaming `.stream` files event by event.
async fn serve_file(kind: Kind, dir: &Path, serve: &Serve) -> Response {
    let path = dir.join(&serve.file);
    let bytes = match tokio::fs::read(&path).await {
        Ok(b) => b,
        Err(e) => {
            let msg = format!(
                "fixture {} is missing or unreadable ({e}); every provider kind needs the files listed in services/router/tests/conformance.rs",
                path.display()
            );
            eprintln!("fixture server: {msg}");
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, &msg);
        }
    };
    let is_stream = serve.file.ends_with(".stream");
    let content_type = if is_stream {
        kind.stream_content_type()
    } else if serve.file.ends_with(".json") {
        "application/json"
    } else {
        "application/octet-stream"
    };
    let status = StatusCode::from_u16(serve.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder()
        .status(status)
        .header("content-type", content_type);
    for (k, v) in &serve.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let sent = if serve.cut_and_abort {
        &bytes[..bytes.len() / 2]
    } else {
        &bytes[..]
    };
    let delimiter: &[u8] = match kind {
        Kind::Ollama => b"\n",
        _ => b"\n\n",
    };
    let chunks: Vec<Bytes> = if is_stream || serve.cut_and_abort {
        split_after(sent, delimiter)
    } else {
        vec![Bytes::copy_from_slice(sent)]
    };
    let chunks = futures::stream::iter(chunks).then(|c| async move {
        // Let the server write each piece before the next one: events arrive one by one.
        tokio::task::yield_now().await;
        Ok::<_, std::io::Error>(c)
    });
    let body = if serve.cut_and_abort {
        let abort = futures::stream::once(async {
            tokio::task::yield_now().await;
            Err(std::io::Error::other(
                "fixture server aborts the response mid-way",
            ))
        });
        Body::from_stream(chunks.chain(abort))
    } else {
        Body::from_stream(chunks)
    };
    builder.body(body).unwrap_or_else(|e| {
        error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("fixture server: bad scripted header: {e}"),
        )
    })
}

/// `bytes` split after each `delimiter`, the delimiters kept.
fn split_after(bytes: &[u8], delimiter: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + delimiter.len() <= bytes.len() {
        if &bytes[i..i + delimiter.len()] == delimiter {
            i += delimiter.len();
            out.push(Bytes::copy_from_slice(&bytes[start..i]));
            start = i;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        out.push(Bytes::copy_from_slice(&bytes[start..]));
    }
    out
}

/// The fixture auto mode answers a chat request with.
pub fn auto_file(kind: Kind, path: &str, body: &Value) -> &'static str {
    let stream = match kind {
        Kind::Gemini => path.contains(":streamGenerateContent"),
        Kind::Ollama => body["stream"].as_bool().unwrap_or(true),
        Kind::Openai | Kind::Anthropic | Kind::Deepseek => {
            body["stream"].as_bool().unwrap_or(false)
        }
    };
    let tools_offered =
        body["tools"].as_array().is_some_and(|t| !t.is_empty()) && !tools_off(kind, body);
    let last_is_tool_result = match kind {
        Kind::Openai | Kind::Deepseek | Kind::Ollama => body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool"),
        Kind::Anthropic => body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_array())
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result")),
        Kind::Gemini => body["contents"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(|c| c["parts"].as_array())
            .is_some_and(|p| p.iter().any(|p| p.get("functionResponse").is_some())),
    };
    match (last_is_tool_result, tools_offered, stream) {
        (true, _, false) => "after_tool.json",
        (true, _, true) => "text.stream",
        (false, true, false) => "tool_call.json",
        (false, true, true) => "tool_call.stream",
        (false, false, false) => "text.json",
        (false, false, true) => "text.stream",
    }
}

/// Whether the request forbids tool calls (`tool_choice` none, or Gemini's mode `NONE`).
fn tools_off(kind: Kind, body: &Value) -> bool {
    match kind {
        Kind::Gemini => body
            .pointer("/toolConfig/functionCallingConfig/mode")
            .and_then(Value::as_str)
            .is_some_and(|m| m.eq_ignore_ascii_case("none")),
        Kind::Anthropic => body["tool_choice"]["type"] == "none",
        Kind::Openai | Kind::Deepseek | Kind::Ollama => body["tool_choice"] == "none",
    }
}

/// Deterministic embeddings in the provider's format, when `path` is an embedding call.
fn embedding(kind: Kind, path: &str, body: &Value) -> Option<Response> {
    let texts = |v: &Value| -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let dims = |v: &Value| v.as_u64().unwrap_or(8).clamp(1, 4096);
    let tokens = |ts: &[String]| -> u64 {
        ts.iter()
            .map(|s| u64::try_from(s.len().div_ceil(4).max(1)).unwrap_or(u64::MAX))
            .sum()
    };
    let v = match kind {
        Kind::Openai if path.ends_with("/embeddings") => {
            let inputs = texts(&body["input"]);
            let d = dims(&body["dimensions"]);
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, s)| json!({"object": "embedding", "index": i, "embedding": vector(s, d)}))
                .collect();
            let n = tokens(&inputs);
            json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": n, "total_tokens": n}})
        }
        Kind::Gemini if path.ends_with(":batchEmbedContents") => {
            let embeddings: Vec<Value> = body["requests"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    let text = gemini_text(&r["content"]);
                    json!({"values": vector(&text, dims(&r["outputDimensionality"]))})
                })
                .collect();
            json!({"embeddings": embeddings})
        }
        Kind::Gemini if path.ends_with(":embedContent") => {
            let text = gemini_text(&body["content"]);
            json!({"embedding": {"values": vector(&text, dims(&body["outputDimensionality"]))}})
        }
        Kind::Ollama if path.ends_with("/api/embed") => {
            let inputs = texts(&body["input"]);
            let d = dims(&body["dimensions"]);
            let embeddings: Vec<Value> = inputs.iter().map(|s| json!(vector(s, d))).collect();
            json!({"model": body["model"], "embeddings": embeddings, "total_duration": 0, "load_duration": 0, "prompt_eval_count": tokens(&inputs)})
        }
        _ => return None,
    };
    Some(
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .unwrap_or_default(),
    )
}

fn gemini_text(content: &Value) -> String {
    content["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// A deterministic vector for `s` with values in [-1, 1), rounded to 6 decimals.
fn vector(s: &str, dims: u64) -> Vec<f64> {
    let seed = s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (0..dims)
        .map(|i| {
            let mut z = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            // 20 random bits as a fraction: exact in f64.
            let unit = f64::from(u32::try_from(z >> 44).unwrap_or(0)) / f64::from(1_u32 << 20);
            ((unit * 2.0 - 1.0) * 1e6).round() / 1e6
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_split_after_each_event() {
        let parts = split_after(b"data: a\n\ndata: b\n\ndata: c", b"\n\n");
        assert_eq!(
            parts,
            vec![
                Bytes::from("data: a\n\n"),
                Bytes::from("data: b\n\n"),
                Bytes::from("data: c")
            ]
        );
    }

    #[test]
    fn auto_mode_picks_the_fixture_from_the_request() {
        let tools = json!([{"type": "function"}]);
        let f = |k, p: &str, b: Value| auto_file(k, p, &b);
        assert_eq!(
            f(
                Kind::Openai,
                "/v1/chat/completions",
                json!({"messages": []})
            ),
            "text.json"
        );
        assert_eq!(
            f(Kind::Openai, "/", json!({"stream": true, "tools": tools})),
            "tool_call.stream"
        );
        assert_eq!(
            f(
                Kind::Openai,
                "/",
                json!({"tools": tools, "messages": [{"role": "tool"}]})
            ),
            "after_tool.json"
        );
        assert_eq!(f(Kind::Ollama, "/api/chat", json!({})), "text.stream");
        assert_eq!(
            f(
                Kind::Gemini,
                "/v1beta/models/m:streamGenerateContent",
                json!({})
            ),
            "text.stream"
        );
        assert_eq!(
            f(
                Kind::Anthropic,
                "/v1/messages",
                json!({"tools": tools, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})
            ),
            "after_tool.json"
        );
        assert_eq!(
            f(
                Kind::Deepseek,
                "/",
                json!({"tools": tools, "tool_choice": "none"})
            ),
            "text.json"
        );
    }

    #[test]
    fn vectors_are_deterministic() {
        assert_eq!(vector("a", 8), vector("a", 8));
        assert_ne!(vector("a", 8), vector("b", 8));
        assert!(vector("a", 8).iter().all(|x| (-1.0..1.0).contains(x)));
    }
}
