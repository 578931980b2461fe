//! The OpenAI-compatible routes: `/v1/chat/completions` (JSON and SSE), `/v1/embeddings`,
//! `/v1/models`. Requests are validated and converted to the router's contract here; answers
//! are assembled in OpenAI's exact wire format. No run row is written on this path.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec};
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;

use crate::error::ApiError;
use crate::extract::{OpenAiJson, ValidJson};
use crate::{AppState, RouterChat};

type Result<T> = std::result::Result<T, ApiError>;

#[derive(Deserialize)]
pub struct ChatCompletionRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Vec<ToolDef>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    response_format: Option<Map<String, Value>>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    n: Option<u32>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Default)]
#[serde(remote = "Self")]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
#[serde(remote = "Self", tag = "role", rename_all = "snake_case")]
enum ChatMessage {
    System {
        content: Content,
        #[serde(default)]
        name: Option<String>,
    },
    Developer {
        content: Content,
        #[serde(default)]
        name: Option<String>,
    },
    User {
        content: Content,
        #[serde(default)]
        name: Option<String>,
    },
    Assistant {
        #[serde(default)]
        content: Option<Content>,
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        reasoning_content: Option<String>,
    },
    Tool {
        content: Content,
        tool_call_id: String,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
#[serde(try_from = "RawPart")]
enum Part {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

/// A part as sent. Read through this rather than as an internally tagged enum, whose derived
/// tag would also take the variant's number (`"type": 0` for `text`).
#[derive(Deserialize)]
#[serde(remote = "Self")]
struct RawPart {
    #[serde(rename = "type")]
    kind: PartKind,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    image_url: Option<ImageUrl>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum PartKind {
    Text,
    ImageUrl,
}

impl TryFrom<RawPart> for Part {
    type Error = String;

    fn try_from(p: RawPart) -> std::result::Result<Self, String> {
        match (p.kind, p.text, p.image_url) {
            (PartKind::Text, Some(text), _) => Ok(Self::Text { text }),
            (PartKind::ImageUrl, _, Some(image_url)) => Ok(Self::ImageUrl { image_url }),
            (PartKind::Text, None, _) => Err("a `text` part needs `text`".into()),
            (PartKind::ImageUrl, _, None) => Err("an `image_url` part needs `image_url`".into()),
        }
    }
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ImageUrl {
    url: String,
    #[serde(default)]
    detail: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ToolCall {
    id: String,
    #[serde(default, rename = "type")]
    _kind: Option<String>,
    function: FunctionCall,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct FunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ToolDef {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionDef,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct FunctionDef {
    name: String,
    #[serde(default)]
    description: String,
    /// A JSON schema: an object (anything else is a 400 naming it).
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

// Request parts are JSON objects only: serde's derive would also read one from an array of its
// fields (`["user", "hi"]` as a message).
weft_core::objects_only!(
    deserialize: StreamOptions,
    ChatMessage,
    RawPart,
    ImageUrl,
    ToolCall,
    FunctionCall,
    ToolDef,
    FunctionDef,
    EmbeddingsRequest,
);

fn content_blocks(c: Content) -> Vec<ContentBlock> {
    match c {
        Content::Text(t) => vec![ContentBlock::Text { text: t }],
        Content::Parts(parts) => parts
            .into_iter()
            .map(|p| match p {
                Part::Text { text } => ContentBlock::Text { text },
                Part::ImageUrl { image_url } => ContentBlock::Image {
                    url: image_url.url,
                    detail: image_url.detail,
                },
            })
            .collect(),
    }
}

fn to_message(m: ChatMessage) -> Message {
    let msg = |role, content, name| Message {
        role,
        content,
        name,
    };
    match m {
        ChatMessage::System { content, name } => msg(Role::System, content_blocks(content), name),
        ChatMessage::Developer { content, name } => {
            msg(Role::Developer, content_blocks(content), name)
        }
        ChatMessage::User { content, name } => msg(Role::User, content_blocks(content), name),
        ChatMessage::Assistant {
            content,
            tool_calls,
            name,
            reasoning_content,
        } => {
            let mut blocks = Vec::new();
            if let Some(r) = reasoning_content.filter(|r| !r.is_empty()) {
                blocks.push(ContentBlock::Reasoning {
                    text: r,
                    signature: None,
                });
            }
            blocks.extend(content.map(content_blocks).unwrap_or_default());
            blocks.extend(tool_calls.into_iter().map(|c| ContentBlock::ToolUse {
                id: c.id,
                name: c.function.name,
                input_json: c.function.arguments,
            }));
            msg(Role::Assistant, blocks, name)
        }
        ChatMessage::Tool {
            content,
            tool_call_id,
        } => msg(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                tool_use_id: tool_call_id,
                content: content_blocks(content),
                is_error: false,
            }],
            None,
        ),
    }
}

fn range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> std::result::Result<(), Error> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(Error::invalid(format!(
            "`{name}` must be between {lo} and {hi}, got {x}"
        ))
        .with_param(name)),
        _ => Ok(()),
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Validates the request and converts it to the router's contract.
pub(crate) fn to_proto(
    r: ChatCompletionRequest,
    headers: &HeaderMap,
) -> std::result::Result<(v1::ChatRequest, bool, bool), Error> {
    if r.model.trim().is_empty() {
        return Err(Error::invalid(
            "`model` must not be empty; GET /v1/models lists the models you can use",
        )
        .with_param("model"));
    }
    if r.messages.is_empty() {
        return Err(
            Error::invalid("`messages` must contain at least one message").with_param("messages"),
        );
    }
    if let Some(n) = r.n.filter(|n| *n != 1) {
        return Err(Error::invalid(format!(
            "`n` must be 1 (weft returns one choice per request), got {n}"
        ))
        .with_param("n"));
    }
    range("temperature", r.temperature, 0.0, 2.0)?;
    range("top_p", r.top_p, 0.0, 1.0)?;
    range("presence_penalty", r.presence_penalty, -2.0, 2.0)?;
    range("frequency_penalty", r.frequency_penalty, -2.0, 2.0)?;
    for (name, v) in [
        ("max_tokens", r.max_tokens),
        ("max_completion_tokens", r.max_completion_tokens),
    ] {
        if v == Some(0) {
            return Err(Error::invalid(format!("`{name}` must be at least 1")).with_param(name));
        }
    }
    let mut tools = Vec::with_capacity(r.tools.len());
    for (i, t) in r.tools.into_iter().enumerate() {
        if t.kind != "function" {
            return Err(Error::invalid(format!(
                "`tools[{i}].type` must be \"function\", got {:?}",
                t.kind
            ))
            .with_param(format!("tools[{i}].type")));
        }
        if t.function.name.is_empty() {
            return Err(
                Error::invalid(format!("`tools[{i}].function.name` must not be empty"))
                    .with_param(format!("tools[{i}].function.name")),
            );
        }
        tools.push(weft_proto::tool_to_proto(&ToolSpec {
            name: t.function.name,
            description: t.function.description,
            parameters: t.function.parameters.map_or_else(
                || json!({"type": "object", "properties": {}}),
                Value::Object,
            ),
        }));
    }
    let include_usage = r.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let stop = match r.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    let json_str = |v: Option<Value>| v.map(|v| v.to_string()).unwrap_or_default();
    let req = v1::ChatRequest {
        model: r.model,
        messages: r
            .messages
            .into_iter()
            .map(to_message)
            .map(|m| weft_proto::message_to_proto(&m))
            .collect(),
        tools,
        tool_choice_json: json_str(r.tool_choice),
        sampling: Some(v1::Sampling {
            temperature: r.temperature,
            top_p: r.top_p,
            // Both names mean the same cap; the newer one wins when both are sent.
            max_tokens: r.max_completion_tokens.or(r.max_tokens),
            stop,
            seed: r.seed,
            presence_penalty: r.presence_penalty,
            frequency_penalty: r.frequency_penalty,
        }),
        response_format_json: json_str(r.response_format.map(Value::Object)),
        user: r.user.unwrap_or_default(),
        extra_json: if r.extra.is_empty() {
            String::new()
        } else {
            Value::Object(r.extra).to_string()
        },
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream: r.stream,
    };
    Ok((req, r.stream, include_usage))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::now_v7().simple())
}

/// The OpenAI routes all need `llm:call`; checked before the body is read, so a token without
/// it gets its 403 whatever it sent.
pub async fn require_llm_call(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match req
        .extensions()
        .get::<Principal>()
        .map(|p| p.require(Scope::LlmCall))
    {
        Some(Ok(())) => next.run(req).await,
        Some(Err(e)) => ApiError::openai(e).into_response(),
        None => ApiError::openai(Error::unauthenticated("missing bearer token")).into_response(),
    }
}

pub async fn chat_completions(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    ValidJson(body): OpenAiJson<ChatCompletionRequest>,
) -> Result<Response> {
    let (req, stream, include_usage) = to_proto(body, &headers).map_err(ApiError::openai)?;
    let requested_model = req.model.clone();
    let RouterChat {
        mut events,
        headers: limits,
    } = st.router_chat(&p, req).await.map_err(ApiError::openai)?;
    if stream {
        return Ok((limits, sse(events, requested_model, include_usage)).into_response());
    }
    let mut acc = Assembled::default();
    while let Some(ev) = events.next().await {
        let ev = ev.map_err(ApiError::openai)?;
        acc.apply(ev);
    }
    Ok((limits, axum::Json(acc.into_completion(&requested_model))).into_response())
}

/// A non-streamed answer, assembled from events.
#[derive(Default)]
struct Assembled {
    provider: String,
    model: String,
    text: String,
    reasoning: String,
    /// (id, name, arguments) by index.
    calls: Vec<(u32, String, String, String)>,
    usage: Option<v1::Usage>,
    finish: Option<FinishReason>,
}

impl Assembled {
    fn apply(&mut self, ev: v1::ChatEvent) {
        use v1::chat_event::Event as E;
        match ev.event {
            Some(E::ProviderChosen(c)) => {
                self.provider = c.provider;
                self.model = c.model;
            }
            Some(E::TextDelta(t)) => self.text.push_str(&t.text),
            Some(E::ReasoningDelta(t)) => self.reasoning.push_str(&t.text),
            Some(E::ToolCallStart(s)) => self.calls.push((s.index, s.id, s.name, String::new())),
            Some(E::ToolCallDelta(d)) => {
                if let Some(c) = self.calls.iter_mut().find(|c| c.0 == d.index) {
                    c.3.push_str(&d.arguments);
                }
            }
            Some(E::Usage(u)) => self.usage = Some(u),
            Some(E::Finish(f)) => self.finish = Some(weft_proto::finish_from_proto(f.reason)),
            Some(E::ProviderFallback(_) | E::ReasoningSignature(_)) | None => {}
        }
    }

    fn into_completion(self, requested: &str) -> Value {
        let tool_calls: Vec<Value> = self
            .calls
            .iter()
            .map(|(_, id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
        let mut message = json!({
            "role": "assistant",
            "content": if self.text.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(self.text) },
            "refusal": null,
        });
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = Value::String(self.reasoning);
        }
        let u = self.usage.unwrap_or_default();
        json!({
            "id": completion_id(),
            "object": "chat.completion",
            "created": unix_now(),
            "model": if self.model.is_empty() { requested.to_owned() } else { self.model },
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": self.finish.unwrap_or(FinishReason::Stop).as_openai(),
                "logprobs": null,
            }],
            "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens},
            "system_fingerprint": format!("weft/{}", self.provider),
        })
    }
}

fn sse(
    mut events: weft_proto::router_api::ChatEvents,
    requested: String,
    include_usage: bool,
) -> Sse<impl Stream<Item = std::result::Result<Event, Infallible>>> {
    use v1::chat_event::Event as E;
    let id = completion_id();
    let created = unix_now();
    let stream = async_stream(move |tx| async move {
        let mut model = requested;
        let mut usage: Option<v1::Usage> = None;
        let chunk = |model: &str, delta: Value, finish: Option<&str>| {
            let mut c = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
            });
            if include_usage {
                c["usage"] = Value::Null;
            }
            Event::default().data(c.to_string())
        };
        while let Some(item) = events.next().await {
            let ev = match item {
                Ok(ev) => ev,
                Err(e) => {
                    let _ = tx
                        .send(Event::default().data(e.openai_body().to_string()))
                        .await;
                    return;
                }
            };
            let out = match ev.event {
                Some(E::ProviderChosen(c)) => {
                    model = c.model;
                    Some(chunk(
                        &model,
                        json!({"role": "assistant", "content": ""}),
                        None,
                    ))
                }
                Some(E::TextDelta(t)) => Some(chunk(&model, json!({"content": t.text}), None)),
                Some(E::ReasoningDelta(t)) => {
                    Some(chunk(&model, json!({"reasoning_content": t.text}), None))
                }
                Some(E::ToolCallStart(s)) => Some(chunk(
                    &model,
                    json!({"tool_calls": [{"index": s.index, "id": s.id, "type": "function", "function": {"name": s.name, "arguments": ""}}]}),
                    None,
                )),
                Some(E::ToolCallDelta(d)) => Some(chunk(
                    &model,
                    json!({"tool_calls": [{"index": d.index, "function": {"arguments": d.arguments}}]}),
                    None,
                )),
                Some(E::Usage(u)) => {
                    usage = Some(u);
                    None
                }
                Some(E::Finish(f)) => {
                    let reason = weft_proto::finish_from_proto(f.reason).as_openai();
                    Some(chunk(&model, json!({}), Some(reason)))
                }
                Some(E::ProviderFallback(_) | E::ReasoningSignature(_)) | None => None,
            };
            if let Some(ev) = out
                && tx.send(ev).await.is_err()
            {
                return;
            }
        }
        if include_usage {
            let u = usage.unwrap_or_default();
            let last = json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                "usage": {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.total_tokens},
            });
            let _ = tx.send(Event::default().data(last.to_string())).await;
        }
        let _ = tx.send(Event::default().data("[DONE]")).await;
    });
    Sse::new(stream)
}

/// A stream fed by a task through a bounded channel (the task stops when the client goes away).
fn async_stream<F, Fut>(f: F) -> impl Stream<Item = std::result::Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(32);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
pub struct EmbeddingsRequest {
    model: String,
    input: EmbedInput,
    #[serde(default)]
    encoding_format: Option<EncodingFormat>,
    #[serde(default)]
    dimensions: Option<u32>,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum EmbedInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum EncodingFormat {
    Float,
    Base64,
}

pub async fn embeddings(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    ValidJson(body): OpenAiJson<EmbeddingsRequest>,
) -> Result<Response> {
    let input = match body.input {
        EmbedInput::One(s) => vec![s],
        EmbedInput::Many(v) => v,
    };
    let bytes = input.iter().map(String::len).sum();
    weft_core::limits::check_embed_request(input.len(), bytes, body.dimensions)
        .map_err(ApiError::openai)?;
    let requested = body.model.clone();
    let req = v1::EmbedRequest {
        model: body.model,
        input,
        dimensions: body.dimensions,
        user: body.user.unwrap_or_default(),
        provider_hint: header(&headers, "x-weft-provider"),
        tier_hint: header(&headers, "x-weft-tier"),
    };
    let (res, limits) = st.router_embed(&p, req).await.map_err(ApiError::openai)?;
    let b64 = body.encoding_format == Some(EncodingFormat::Base64);
    let data: Vec<Value> = res
        .data
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let embedding = if b64 {
                let bytes: Vec<u8> = e.values.iter().flat_map(|f| f.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(e.values)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let u = res.usage.unwrap_or_default();
    Ok((
        limits,
        axum::Json(json!({
            "object": "list",
            "data": data,
            "model": if res.model.is_empty() { requested } else { res.model },
            "usage": {"prompt_tokens": u.prompt_tokens, "total_tokens": u.total_tokens},
        })),
    )
        .into_response())
}

pub async fn models(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response> {
    let list = st.router_models(&p).await.map_err(ApiError::openai)?;
    let data: Vec<Value> = list
        .into_iter()
        .map(|m| json!({"id": m.id, "object": "model", "created": 0, "owned_by": m.owned_by, "weft_kind": m.kind}))
        .collect();
    Ok(axum::Json(json!({"object": "list", "data": data})).into_response())
}
