//! The OpenAI-compatible routes: `/v1/chat/completions` (JSON and SSE), `/v1/embeddings`,
//! `/v1/models`. Requests are validated and converted to the router's contract here; answers
//! are assembled in OpenAI's exact wire format. No run row is written on this path.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_core::chat::{Answer, ChatEvent, ChatRequest, Sampling};
use weft_core::message::{ContentBlock, Message, Role, ToolSpec, Usage};
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;
use weft_wire::openai;

use crate::AppState;
use crate::dialect::{Dialect, KeepAlive, Sse, serve, to_json};
use crate::error::{ApiError, Shape};
use crate::extract::{OpenAiJson, ValidJson};

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

/// Validates the request and converts it to the chat contract.
pub(crate) fn to_chat(
    r: ChatCompletionRequest,
    headers: &HeaderMap,
) -> std::result::Result<(ChatRequest, bool, bool), Error> {
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
        tools.push(ToolSpec {
            name: t.function.name,
            description: t.function.description,
            parameters: t
                .function
                .parameters
                .map_or_else(openai::no_arguments_schema, Value::Object),
        });
    }
    let include_usage = r.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let stop = match r.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    let req = ChatRequest {
        model: r.model,
        messages: r.messages.into_iter().map(to_message).collect(),
        tools,
        // `null` is no choice (as over the gRPC hop).
        tool_choice: r.tool_choice.filter(|v| !v.is_null()),
        sampling: Sampling {
            temperature: r.temperature,
            top_p: r.top_p,
            // Both names mean the same cap; the newer one wins when both are sent.
            max_tokens: r.max_completion_tokens.or(r.max_tokens),
            stop,
            seed: r.seed,
            presence_penalty: r.presence_penalty,
            frequency_penalty: r.frequency_penalty,
        },
        response_format: r.response_format.map(Value::Object),
        // An empty id is no id (as over the gRPC hop).
        user: r.user.filter(|u| !u.is_empty()),
        extra: r.extra,
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream: r.stream,
    };
    Ok((req, r.stream, include_usage))
}

pub(crate) fn unix_now() -> u64 {
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
    let (req, _, include_usage) = to_chat(body, &headers).map_err(ApiError::openai)?;
    let dialect = OpenAi::new(req.model.clone(), include_usage);
    serve(&st, &p, req, dialect).await
}

fn usage_out(u: Usage) -> openai::Usage {
    openai::Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
    }
}

/// OpenAI's Chat Completions format: one call's `chat.completion`, or its
/// `chat.completion.chunk`s ending in `[DONE]`.
#[derive(Clone)]
pub(crate) struct OpenAi {
    id: String,
    created: u64,
    /// The model asked for, then the one the router chose.
    model: String,
    include_usage: bool,
    usage: Usage,
}

impl OpenAi {
    fn new(requested: String, include_usage: bool) -> Self {
        Self::with_id(completion_id(), unix_now(), requested, include_usage)
    }

    pub(crate) fn with_id(
        id: String,
        created: u64,
        requested: String,
        include_usage: bool,
    ) -> Self {
        Self {
            id,
            created,
            model: requested,
            include_usage,
            usage: Usage::default(),
        }
    }

    fn chunk(&self, out: &mut Sse, delta: openai::ChunkDelta<'_>, finish: Option<&str>) {
        let c = openai::ChatCompletionChunk::one(
            &self.id,
            self.created,
            &self.model,
            delta,
            finish,
            self.include_usage,
        );
        out.json(None, &c);
    }
}

impl Dialect for OpenAi {
    const SHAPE: Shape = Shape::OpenAi;
    const KEEPALIVE: KeepAlive = KeepAlive::None;

    fn answer(self, a: Answer) -> std::result::Result<String, Error> {
        let tool_calls: Vec<openai::ToolCall<'_>> = a
            .tool_calls()
            .map(|(id, name, args)| openai::ToolCall::whole(id, name, args))
            .collect();
        let text = a.text();
        let reasoning = a.reasoning();
        let fingerprint = format!("weft/{}", a.provider);
        let c = openai::ChatCompletion {
            id: Cow::Borrowed(&self.id),
            object: Cow::Borrowed(openai::COMPLETION),
            created: self.created,
            model: Cow::Borrowed(if a.model.is_empty() {
                &self.model
            } else {
                &a.model
            }),
            choices: vec![openai::Choice {
                index: 0,
                message: openai::AssistantMessage {
                    role: Cow::Borrowed("assistant"),
                    // `null` when the answer is only tool calls.
                    content: (!text.is_empty() || tool_calls.is_empty())
                        .then_some(Cow::Borrowed(text.as_str())),
                    refusal: None,
                    tool_calls,
                    reasoning_content: (!reasoning.is_empty())
                        .then_some(Cow::Borrowed(reasoning.as_str())),
                },
                finish_reason: Some(Cow::Borrowed(a.finish.as_openai())),
                logprobs: None,
            }],
            usage: Some(usage_out(a.usage)),
            system_fingerprint: Some(Cow::Borrowed(&fingerprint)),
        };
        to_json(&c)
    }

    fn event(&mut self, ev: ChatEvent, out: &mut Sse) {
        let delta = openai::ChunkDelta::default;
        match ev {
            ChatEvent::ProviderChosen { model, .. } => {
                self.model = model;
                let d = openai::ChunkDelta {
                    role: Some(Cow::Borrowed("assistant")),
                    content: Some(Cow::Borrowed("")),
                    ..delta()
                };
                self.chunk(out, d, None);
            }
            ChatEvent::TextDelta(t) => {
                let d = openai::ChunkDelta {
                    content: Some(Cow::Borrowed(&t)),
                    ..delta()
                };
                self.chunk(out, d, None);
            }
            ChatEvent::ReasoningDelta(t) => {
                let d = openai::ChunkDelta {
                    reasoning_content: Some(Cow::Borrowed(&t)),
                    ..delta()
                };
                self.chunk(out, d, None);
            }
            ChatEvent::ToolCallStart { index, id, name } => {
                let d = openai::ChunkDelta {
                    tool_calls: vec![openai::ToolCall::start(index, &id, &name)],
                    ..delta()
                };
                self.chunk(out, d, None);
            }
            ChatEvent::ToolCallDelta { index, arguments } => {
                let d = openai::ChunkDelta {
                    tool_calls: vec![openai::ToolCall::arguments(index, &arguments)],
                    ..delta()
                };
                self.chunk(out, d, None);
            }
            ChatEvent::Usage(u) => self.usage = u,
            ChatEvent::Finish(f) => self.chunk(out, delta(), Some(f.as_openai())),
            ChatEvent::Fallback(_) | ChatEvent::ReasoningSignature(_) => {}
        }
    }

    fn end(&mut self, finished: bool, out: &mut Sse) {
        if !finished {
            // The answer is incomplete: an error, and no `[DONE]` (a client must not take what
            // it has as the whole answer).
            self.error(&weft_core::chat::ended_early(), out);
            return;
        }
        if self.include_usage {
            let last = openai::ChatCompletionChunk::usage(
                &self.id,
                self.created,
                &self.model,
                usage_out(self.usage),
            );
            out.json(None, &last);
        }
        out.raw(None, "[DONE]");
    }

    fn error(&mut self, e: &Error, out: &mut Sse) {
        out.json(None, &e.openai_body());
    }
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
    let data = res
        .data
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let embedding = if b64 {
                let bytes: Vec<u8> = e.values.iter().flat_map(|f| f.to_le_bytes()).collect();
                openai::Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                openai::Vector::Float(&e.values)
            };
            openai::Embedding::new(i, embedding)
        })
        .collect();
    let u = res.usage.unwrap_or_default();
    let answer = openai::EmbeddingsAnswer {
        object: "list",
        data,
        model: if res.model.is_empty() {
            &requested
        } else {
            &res.model
        },
        usage: openai::EmbeddingsUsage {
            prompt_tokens: u.prompt_tokens,
            total_tokens: u.total_tokens,
        },
    };
    Ok((limits, axum::Json(answer)).into_response())
}

pub async fn models(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response> {
    let list = st.router_models(&p).await.map_err(ApiError::openai)?;
    let data = list
        .iter()
        .map(|m| openai::Model {
            id: &m.id,
            object: "model",
            created: 0,
            owned_by: &m.owned_by,
            weft_kind: &m.kind,
        })
        .collect();
    Ok(axum::Json(openai::ModelList {
        object: "list",
        data,
    })
    .into_response())
}
