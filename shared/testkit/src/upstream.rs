//! A fake OpenAI-compatible upstream speaking the real wire format: `/v1/chat/completions`
//! (JSON and SSE, tool calls, `stream_options.include_usage`), `/v1/embeddings`, `/v1/models`.
//! Behaviours are scripted per call; when the script is empty the default behaviour applies.
//! Chat answers are built from `weft_wire::openai` types (usage, deltas, tool calls).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt as _;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use weft_wire::openai::{self, ChatCompletionChunk, ChunkDelta, Logprobs, ToolCall, Usage};

/// `created` of every answer: fixed, so answers are the same from run to run.
const CREATED: u64 = 1_700_000_000;

/// What the upstream does for one call.
#[derive(Clone, Debug)]
pub enum Behavior {
    /// Reply with the last user message's text, prefixed by `echo: `.
    Echo,
    /// Reply with this text (streamed word by word).
    Text(String),
    /// Call one tool with these JSON arguments (streamed in fragments).
    ToolCall { name: String, arguments: String },
    /// Call several tools in one turn.
    ParallelToolCalls(Vec<(String, String)>),
    /// Call tools with these ids: `(id, name, JSON arguments)` (the others number their calls
    /// `call_<i>` in every answer).
    ToolCallsWithIds(Vec<(String, String, String)>),
    /// Answer with this status and an OpenAI error body, and `Retry-After` when given.
    Fail {
        status: u16,
        retry_after: Option<u64>,
    },
    /// Never answer (until the server stops).
    Stall,
    /// Wait until `open` is cancelled (or the server stops), then behave as `then`.
    Gated {
        open: CancellationToken,
        then: Box<Behavior>,
    },
    /// Start a stream, send one chunk, then break the connection.
    BreakMidStream,
    /// Answer 200 with a body that is not valid JSON (or SSE whose data is not JSON).
    Malformed,
    /// The upstream's own error about the model's output, as llama.cpp's server sends it: in a
    /// stream, after the first chunks, `data: {"error": {"code": 500, "message": …}}` and the
    /// end; not streamed, a 500 with that body.
    ErrorMidStream(String),
}

/// A request the upstream received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
    /// The body's bytes as they arrived.
    pub raw: Bytes,
    pub authorization: Option<String>,
}

/// Decides a call's behaviour from its request body; `None` leaves it to the script.
pub type Responder = Arc<dyn Fn(&Value) -> Option<Behavior> + Send + Sync>;

struct Inner {
    responder: Mutex<Option<Responder>>,
    calls: AtomicUsize,
    script: Mutex<VecDeque<Behavior>>,
    default: Mutex<Behavior>,
    recorded: Mutex<VecDeque<Recorded>>,
    stop: CancellationToken,
}

/// The running fake; stops when dropped.
pub struct FakeUpstream {
    /// Base URL including `/v1`, as a provider's `base_url`.
    pub base_url: String,
    pub addr: SocketAddr,
    inner: Arc<Inner>,
}

const RECORD_LIMIT: usize = 1024;

impl FakeUpstream {
    /// Starts on `127.0.0.1:0`.
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("literal address")).await
    }

    /// Starts on `addr` (the load generator picks a fixed port).
    pub async fn start_on(addr: SocketAddr) -> Self {
        let inner = Arc::new(Inner {
            responder: Mutex::new(None),
            calls: AtomicUsize::new(0),
            script: Mutex::new(VecDeque::new()),
            default: Mutex::new(Behavior::Echo),
            recorded: Mutex::new(VecDeque::new()),
            stop: CancellationToken::new(),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind the fake upstream");
        let addr = listener.local_addr().expect("local addr");
        let stop = inner.stop.clone();
        tokio::spawn(async move {
            use axum::serve::ListenerExt as _;
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            addr,
            inner,
        }
    }

    /// Queues behaviours for the next calls, in order.
    pub fn push(&self, b: Behavior) -> &Self {
        if let Ok(mut s) = self.inner.script.lock() {
            s.push_back(b);
        }
        self
    }

    /// Decides each call's behaviour from its request (before the script and the default).
    pub fn set_responder(&self, r: Responder) {
        if let Ok(mut x) = self.inner.responder.lock() {
            *x = Some(r);
        }
    }

    /// What calls do once the script is empty.
    pub fn set_default(&self, b: Behavior) {
        if let Ok(mut d) = self.inner.default.lock() {
            *d = b;
        }
    }

    /// Chat and embedding calls received so far.
    pub fn calls(&self) -> usize {
        self.inner.calls.load(Ordering::SeqCst)
    }

    /// The most recent requests, oldest first.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.inner
            .recorded
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stops serving; stalled calls are released.
    pub fn stop(&self) {
        self.inner.stop.cancel();
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.inner.stop.cancel();
    }
}

impl Inner {
    fn next(&self, path: &str, headers: &HeaderMap, body: &Value, raw: &Bytes) -> Behavior {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut r) = self.recorded.lock() {
            if r.len() >= RECORD_LIMIT {
                r.pop_front();
            }
            r.push_back(Recorded {
                path: path.to_owned(),
                body: body.clone(),
                raw: raw.clone(),
                authorization: headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            });
        }
        let responder = self.responder.lock().ok().and_then(|r| r.clone());
        if let Some(b) = responder.and_then(|r| r(body)) {
            return b;
        }
        let scripted = self.script.lock().ok().and_then(|mut s| s.pop_front());
        scripted.unwrap_or_else(|| {
            self.default
                .lock()
                .map(|d| d.clone())
                .unwrap_or(Behavior::Echo)
        })
    }
}

fn last_user_text(body: &Value) -> String {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(m) = msgs.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A whole completion as the fake writes it: [`openai::ChatCompletion`]'s shape, less the
/// fields the fake has always left out (`refusal`), so tests built on its answers see the same
/// JSON.
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'a str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: Usage,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    finish_reason: &'a str,
    logprobs: Option<Logprobs>,
}

/// The assistant's message: `content` is `null` when the answer is tool calls.
#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

/// A streamed chunk as the fake writes it: [`openai::ChatCompletionChunk`]'s shape without the
/// choice's `logprobs` and the `usage` placeholder, which the fake has never sent.
#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'a str,
    created: u64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: ChunkDelta<'a>,
    finish_reason: Option<&'a str>,
}

fn fail(status: u16, retry_after: Option<u64>) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (
        code,
        Json(json!({"error": {"message": format!("fake upstream failure {status}"), "type": "server_error", "code": null, "param": null}})),
    )
        .into_response();
    if let Some(s) = retry_after
        && let Ok(v) = s.to_string().parse()
    {
        resp.headers_mut().insert("retry-after", v);
    }
    resp
}

async fn chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return fail(400, None);
    };
    let mut behavior = inner.next("/v1/chat/completions", &headers, &req, &body);
    while let Behavior::Gated { open, then } = behavior {
        tokio::select! {
            () = open.cancelled() => {}
            () = inner.stop.cancelled() => return fail(503, None),
        }
        behavior = *then;
    }
    let model = req["model"].as_str().unwrap_or("fake").to_owned();
    let stream = req["stream"].as_bool().unwrap_or(false);
    let include_usage = req["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    let prompt_tokens = u64::try_from(body.len() / 4).unwrap_or(0).max(1);
    let calls: Vec<(String, String)> = match &behavior {
        Behavior::Fail {
            status,
            retry_after,
        } => return fail(*status, *retry_after),
        Behavior::Stall => {
            inner.stop.cancelled().await;
            return fail(503, None);
        }
        Behavior::Malformed if !stream => {
            return (
                StatusCode::OK,
                [("content-type", "application/json")],
                "{\"id\": \"x\", \"choices\": [",
            )
                .into_response();
        }
        Behavior::ErrorMidStream(m) if !stream => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": {"code": 500, "message": m, "type": "server_error"}})),
            )
                .into_response();
        }
        Behavior::ToolCall { name, arguments } => vec![(name.clone(), arguments.clone())],
        Behavior::ParallelToolCalls(v) => v.clone(),
        Behavior::ToolCallsWithIds(v) => v.iter().map(|(_, n, a)| (n.clone(), a.clone())).collect(),
        _ => vec![],
    };
    let text = match &behavior {
        Behavior::Echo => format!("echo: {}", last_user_text(&req)),
        Behavior::Text(t) => t.clone(),
        Behavior::BreakMidStream => "this stream breaks before it ends".to_owned(),
        Behavior::ErrorMidStream(_) => "<tool_call> {\"name\": \"Nope".to_owned(),
        _ => String::new(),
    };
    let completion_tokens = u64::try_from(text.split_whitespace().count() + calls.len() * 8)
        .unwrap_or(0)
        .max(1);
    let usage = Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    };
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let id = "chatcmpl-fake";
    let ids: Vec<String> = match &behavior {
        Behavior::ToolCallsWithIds(v) => v.iter().map(|(id, _, _)| id.clone()).collect(),
        _ => (0..calls.len()).map(|i| format!("call_{i}")).collect(),
    };
    if !stream {
        let tool_calls = calls
            .iter()
            .zip(&ids)
            .map(|((name, args), id)| ToolCall::whole(id, name, args))
            .collect();
        return Json(Completion {
            id,
            object: openai::COMPLETION,
            created: CREATED,
            model: &model,
            choices: [Choice {
                index: 0,
                message: Message {
                    role: "assistant",
                    content: calls.is_empty().then_some(text.as_str()),
                    tool_calls,
                },
                finish_reason: finish,
                logprobs: None,
            }],
            usage,
        })
        .into_response();
    }
    let chunk = |delta: ChunkDelta<'_>, finish: Option<&str>| {
        serde_json::to_string(&Chunk {
            id,
            object: openai::CHUNK,
            created: CREATED,
            model: &model,
            choices: [ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish,
            }],
        })
        .unwrap_or_default()
    };
    let mut frames: Vec<String> = vec![chunk(
        ChunkDelta {
            role: Some("assistant".into()),
            content: Some("".into()),
            ..ChunkDelta::default()
        },
        None,
    )];
    if matches!(behavior, Behavior::Malformed) {
        frames.push("{not json".to_owned());
    }
    for word in text.split_inclusive(' ') {
        frames.push(chunk(
            ChunkDelta {
                content: Some(word.into()),
                ..ChunkDelta::default()
            },
            None,
        ));
    }
    for (i, ((name, args), call_id)) in calls.iter().zip(&ids).enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        frames.push(chunk(
            ChunkDelta {
                tool_calls: vec![ToolCall::start(index, call_id, name)],
                ..ChunkDelta::default()
            },
            None,
        ));
        let mid = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(args.len(), |(b, _)| b);
        for part in [&args[..mid], &args[mid..]] {
            if !part.is_empty() {
                frames.push(chunk(
                    ChunkDelta {
                        tool_calls: vec![ToolCall::arguments(index, part)],
                        ..ChunkDelta::default()
                    },
                    None,
                ));
            }
        }
    }
    frames.push(chunk(ChunkDelta::default(), Some(finish)));
    if include_usage {
        let last = ChatCompletionChunk::usage(id, CREATED, &model, usage);
        frames.push(serde_json::to_string(&last).unwrap_or_default());
    }
    let breaks = matches!(behavior, Behavior::BreakMidStream);
    let mut out: Vec<Result<Bytes, std::io::Error>> = Vec::new();
    for (i, f) in frames.into_iter().enumerate() {
        if breaks && i == 2 {
            break;
        }
        if let Behavior::ErrorMidStream(m) = &behavior
            && i == 2
        {
            let e = json!({"error": {"code": 500, "message": m, "type": "server_error"}});
            out.push(Ok(Bytes::from(format!("data: {e}\n\n"))));
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures::stream::iter(out).boxed()))
                .unwrap_or_else(|_| fail(500, None));
        }
        out.push(Ok(Bytes::from(format!("data: {f}\n\n"))));
    }
    let body = if breaks {
        // Yield once so the server flushes the headers and first frames, then break: the client
        // sees a stream that started and then died, not a refused connection.
        let tail = futures::stream::once(async {
            tokio::task::yield_now().await;
            Err(std::io::Error::other("fake upstream breaks the stream"))
        });
        Body::from_stream(futures::stream::iter(out).chain(tail).boxed())
    } else {
        out.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
        Body::from_stream(futures::stream::iter(out).boxed())
    };
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap_or_else(|_| fail(500, None))
}

async fn embeddings(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return fail(400, None);
    };
    match inner.next("/v1/embeddings", &headers, &req, &body) {
        Behavior::Fail {
            status,
            retry_after,
        } => return fail(status, retry_after),
        Behavior::Malformed => return (StatusCode::OK, "nope").into_response(),
        _ => {}
    }
    let inputs: Vec<String> = match &req["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => vec![],
    };
    let dims = req["dimensions"].as_u64().unwrap_or(4);
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
            let v: Vec<f64> = (0..dims)
                .map(|d| f64::from(len) + (d as f64) / 10.0)
                .collect();
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    let tokens: u64 = inputs
        .iter()
        .map(|s| u64::try_from(s.len() / 4 + 1).unwrap_or(0))
        .sum();
    Json(json!({"object": "list", "data": data, "model": req["model"], "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})).into_response()
}

async fn models() -> Response {
    Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]})).into_response()
}
