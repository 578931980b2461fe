//! The native model gateway, `POST /v1/llm/chat`: one request and response shape across every
//! provider, in weft's own content blocks (`text`, `image`, `tool_use`, `tool_result`,
//! `reasoning`), answered as JSON or as SSE (`provider_fallback`, `provider_chosen`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `done`).
//!
//! It also holds what the block-based front doors share (this route and the Anthropic-compatible
//! `/v1/messages`): [`Blocks`] turns the router's flat event stream into numbered content blocks,
//! opened and closed in order, and [`collect`] assembles a whole answer from them.
//!
//! The native API is strict: an unknown field is a 400 that names it. Request fields weft does
//! not model go in `extra`, which is forwarded to the provider as is.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::{Stream, StreamExt as _};
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec};
use weft_core::{Error, ErrorCode, Principal, Scope};
use weft_proto::v1;

use crate::error::{ApiError, Shape};
use crate::extract::NativeJson;
use crate::{AppState, RouterChat};

type Result<T> = std::result::Result<T, ApiError>;

/// Keepalive comments on an idle native stream.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// The native gateway route (the bearer layer is added by the caller).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/llm/chat", post(chat_handler))
        .route_layer(axum::middleware::from_fn(require_llm_call))
}

/// `llm:call`, checked before the body is read, answered in weft's native shape.
async fn require_llm_call(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match check_llm_call(&req, Shape::Native) {
        None => next.run(req).await,
        Some(refusal) => refusal,
    }
}

/// The refusal for a request whose principal may not call models, in `shape`; `None` when it
/// may.
pub(crate) fn check_llm_call(req: &axum::extract::Request, shape: Shape) -> Option<Response> {
    let err = match req.extensions().get::<Principal>() {
        Some(p) => p.require(Scope::LlmCall).err()?,
        None => Error::unauthenticated("missing bearer token"),
    };
    Some(ApiError(err, shape).into_response())
}

// --- request ------------------------------------------------------------------------------------

/// `POST /v1/llm/chat`.
#[derive(Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct LlmChatRequest {
    model: String,
    messages: Vec<LlmMessage>,
    #[serde(default)]
    tools: Vec<LlmTool>,
    /// `"auto"`, `"none"`, `"required"` or `{"type": "tool", "name": …}`.
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    sampling: LlmSampling,
    /// OpenAI-style: `{"type": "json_object"}` or `{"type": "json_schema", "json_schema": …}`.
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
    /// Provider-specific request fields (`thinking`, `top_k`, `reasoning_effort`, …), forwarded
    /// unchanged to providers that have them.
    #[serde(default)]
    extra: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
struct LlmMessage {
    role: Role,
    #[serde(deserialize_with = "text_or_blocks")]
    content: Vec<LlmBlock>,
    #[serde(default)]
    name: Option<String>,
}

/// weft's content block, as JSON. A `tool_use` carries its arguments as a JSON object.
#[derive(Deserialize)]
#[serde(
    remote = "Self",
    tag = "type",
    rename_all = "snake_case",
    deny_unknown_fields
)]
enum LlmBlock {
    Text {
        text: String,
    },
    Image {
        url: String,
        #[serde(default)]
        detail: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, deserialize_with = "text_or_blocks")]
        content: Vec<LlmBlock>,
        #[serde(default)]
        is_error: bool,
    },
    Reasoning {
        text: String,
        #[serde(default)]
        signature: Option<String>,
    },
}

impl LlmBlock {
    fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Image { .. } => "image",
            Self::ToolUse { .. } => "tool_use",
            Self::ToolResult { .. } => "tool_result",
            Self::Reasoning { .. } => "reasoning",
        }
    }
}

/// `content` is a string (one text block) or an array of blocks.
fn text_or_blocks<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Vec<LlmBlock>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<LlmBlock>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array of content blocks")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Self::Value, E> {
            Ok(vec![LlmBlock::Text { text: s.to_owned() }])
        }

        fn visit_seq<A: SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

#[derive(Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
struct LlmTool {
    name: String,
    #[serde(default)]
    description: String,
    /// JSON schema of the arguments; an empty object schema when absent.
    #[serde(default)]
    parameters: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(remote = "Self", deny_unknown_fields)]
struct LlmSampling {
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_tokens: Option<u32>,
    #[serde(default)]
    stop: Vec<String>,
    seed: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
}

// Objects only: serde's derive would also read a struct (and an internally tagged enum) from a
// sequence of its fields, so `"sampling": [0.5]` or `"messages": [["user", "hi"]]` would pass.
weft_core::objects_only!(deserialize: LlmChatRequest, LlmMessage, LlmBlock, LlmTool, LlmSampling);

/// A 400 unless `v` is within `lo..=hi`.
pub(crate) fn range(
    name: &str,
    v: Option<f64>,
    lo: f64,
    hi: f64,
) -> std::result::Result<(), Error> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) => Err(Error::invalid(format!(
            "`{name}` must be between {lo} and {hi}, got {x}"
        ))
        .with_param(name)),
        _ => Ok(()),
    }
}

/// A request header as a string.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn invalid_at(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("`{path}` {msg}")).with_param(path)
}

/// A 400 from the JSON extractor, reworded when it is about an unknown field: the field's full
/// path, what is accepted there, and where provider-specific fields go.
pub(crate) fn strict(mut e: Error) -> Error {
    let Some((_, rest)) = e.message.split_once("unknown field `") else {
        return e;
    };
    let Some((field, tail)) = rest.split_once('`') else {
        return e;
    };
    // The path usually ends in the field already; where it stops at the enclosing value, add it.
    let at = match e.param.as_deref() {
        Some(p) if p.ends_with(field) => p.to_owned(),
        Some(p) if !p.is_empty() && p != "." => format!("{p}.{field}"),
        _ => field.to_owned(),
    };
    let expected = tail.trim_start_matches([',', ' ']);
    let expected = if expected.is_empty() {
        String::new()
    } else {
        format!(" ({expected})")
    };
    e.message = format!(
        "unknown field `{at}`{expected}; the native API accepts only documented fields \
         (GET /v1/openapi.json), and provider-specific request fields go in `extra`"
    );
    e.param = Some(at);
    e
}

/// A tool's argument schema, or an empty object schema.
pub(crate) fn schema_or_empty(s: Option<Value>) -> Value {
    s.unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

/// The router's OpenAI-style `tool_choice` for the native one.
fn tool_choice_json(
    choice: Option<Value>,
    tools: &[v1::ToolSpec],
) -> std::result::Result<String, Error> {
    let Some(choice) = choice else {
        return Ok(String::new());
    };
    let bad = || {
        Error::invalid(format!(
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {{\"type\": \"tool\", \"name\": \"…\"}}, got {choice}"
        ))
        .with_param("tool_choice")
    };
    match &choice {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
            Ok(choice.to_string())
        }
        Value::Object(o) if o.len() == 2 && o.get("type") == Some(&json!("tool")) => {
            let name = o.get("name").and_then(Value::as_str).ok_or_else(bad)?;
            named_tool_choice(name, tools, "tool_choice.name")
        }
        _ => Err(bad()),
    }
}

/// `{"type":"function","function":{"name"}}` for a tool the request offers.
pub(crate) fn named_tool_choice(
    name: &str,
    tools: &[v1::ToolSpec],
    param: &str,
) -> std::result::Result<String, Error> {
    if !tools.iter().any(|t| t.name == name) {
        return Err(invalid_at(
            param,
            format!("names tool {name:?}, which is not among the request's `tools`"),
        ));
    }
    Ok(json!({"type": "function", "function": {"name": name}}).to_string())
}

/// A nested block of a tool result: text or an image.
fn result_part(b: LlmBlock, path: &str) -> std::result::Result<ContentBlock, Error> {
    match b {
        LlmBlock::Text { text } => Ok(ContentBlock::Text { text }),
        LlmBlock::Image { url, detail } => Ok(ContentBlock::Image { url, detail }),
        other => Err(invalid_at(
            path,
            format!(
                "is a `{}` block; a tool result's content holds only text and image blocks",
                other.kind()
            ),
        )),
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::Developer => "developer",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Why a block cannot sit in a message of `role`, if it cannot.
fn misplaced(b: &LlmBlock, role: Role) -> Option<&'static str> {
    match (b, role) {
        (LlmBlock::ToolResult { .. }, Role::Tool) => None,
        (LlmBlock::ToolResult { .. }, _) => Some("send tool results in a message with role `tool`"),
        (_, Role::Tool) => Some(
            "a `tool` message carries only `tool_result` blocks ({\"type\": \"tool_result\", \"tool_use_id\", \"content\"})",
        ),
        (LlmBlock::ToolUse { .. } | LlmBlock::Reasoning { .. }, r) if r != Role::Assistant => {
            Some("only `assistant` messages carry tool calls and reasoning")
        }
        (LlmBlock::Image { .. }, r) if r != Role::User => {
            Some("images go in `user` messages (or in tool results)")
        }
        _ => None,
    }
}

/// One native message as weft's, checking which blocks each role may carry.
fn to_message(i: usize, m: LlmMessage) -> std::result::Result<Message, Error> {
    if m.content.is_empty() {
        return Err(invalid_at(
            &format!("messages[{i}].content"),
            "must not be empty; send a string or at least one content block",
        ));
    }
    let role = m.role;
    let mut content = Vec::with_capacity(m.content.len());
    for (j, b) in m.content.into_iter().enumerate() {
        let path = format!("messages[{i}].content[{j}]");
        if let Some(hint) = misplaced(&b, role) {
            return Err(invalid_at(
                &path,
                format!(
                    "is a `{}` block, which a `{}` message cannot carry; {hint}",
                    b.kind(),
                    role_name(role)
                ),
            ));
        }
        content.push(match b {
            LlmBlock::Text { text } => ContentBlock::Text { text },
            LlmBlock::Image { url, detail } => ContentBlock::Image { url, detail },
            LlmBlock::ToolUse { id, name, input } => {
                if !input.is_object() {
                    return Err(invalid_at(
                        &format!("{path}.input"),
                        format!("must be a JSON object (the tool's arguments), got {input}"),
                    ));
                }
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json: input.to_string(),
                }
            }
            LlmBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => ContentBlock::ToolResult {
                tool_use_id,
                content: content
                    .into_iter()
                    .enumerate()
                    .map(|(k, p)| result_part(p, &format!("{path}.content[{k}]")))
                    .collect::<std::result::Result<_, _>>()?,
                is_error,
            },
            LlmBlock::Reasoning { text, signature } => ContentBlock::Reasoning {
                text,
                signature: signature.filter(|s| !s.is_empty()),
            },
        });
    }
    Ok(Message {
        role,
        content,
        name: m.name,
    })
}

/// Validates the request and converts it to the router's contract.
pub(crate) fn to_proto(
    r: LlmChatRequest,
    headers: &HeaderMap,
) -> std::result::Result<v1::ChatRequest, Error> {
    if r.model.trim().is_empty() {
        return Err(Error::invalid(
            "`model` must not be empty; GET /v1/models lists the models, aliases and tiers you can use",
        )
        .with_param("model"));
    }
    if r.messages.is_empty() {
        return Err(
            Error::invalid("`messages` must contain at least one message").with_param("messages"),
        );
    }
    let s = &r.sampling;
    range("sampling.temperature", s.temperature, 0.0, 2.0)?;
    range("sampling.top_p", s.top_p, 0.0, 1.0)?;
    range("sampling.presence_penalty", s.presence_penalty, -2.0, 2.0)?;
    range("sampling.frequency_penalty", s.frequency_penalty, -2.0, 2.0)?;
    if s.max_tokens == Some(0) {
        return Err(invalid_at("sampling.max_tokens", "must be at least 1"));
    }
    if let Some(f) = r.response_format.as_ref().filter(|f| !f.is_object()) {
        return Err(invalid_at(
            "response_format",
            format!(
                "must be an object such as {{\"type\": \"json_object\"}} or {{\"type\": \"json_schema\", \"json_schema\": …}}, got {f}"
            ),
        ));
    }
    let mut tools = Vec::with_capacity(r.tools.len());
    for (i, t) in r.tools.into_iter().enumerate() {
        if t.name.trim().is_empty() {
            return Err(invalid_at(&format!("tools[{i}].name"), "must not be empty"));
        }
        if let Some(p) = t.parameters.as_ref().filter(|p| !p.is_object()) {
            return Err(invalid_at(
                &format!("tools[{i}].parameters"),
                format!("must be a JSON schema object, got {p}"),
            ));
        }
        tools.push(weft_proto::tool_to_proto(&ToolSpec {
            name: t.name,
            description: t.description,
            parameters: schema_or_empty(t.parameters),
        }));
    }
    let mut messages = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.into_iter().enumerate() {
        messages.push(weft_proto::message_to_proto(&to_message(i, m)?));
    }
    let tool_choice_json = tool_choice_json(r.tool_choice, &tools)?;
    let s = r.sampling;
    Ok(v1::ChatRequest {
        model: r.model,
        messages,
        tools,
        tool_choice_json,
        sampling: Some(v1::Sampling {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: s.stop,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
        }),
        response_format_json: r.response_format.map(|v| v.to_string()).unwrap_or_default(),
        user: r.user.unwrap_or_default(),
        extra_json: if r.extra.is_empty() {
            String::new()
        } else {
            Value::Object(r.extra).to_string()
        },
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream: r.stream,
    })
}

// --- from events to content blocks ----------------------------------------------------------------

/// How a content block begins.
pub(crate) enum Start {
    Text,
    Reasoning,
    ToolUse { id: String, name: String },
}

/// A piece of a content block.
pub(crate) enum Delta {
    Text(String),
    Reasoning(String),
    /// The provider's signature over the reasoning (it replaces any earlier one).
    Signature(String),
    /// A piece of a tool call's JSON arguments.
    InputJson(String),
}

/// One thing the router's stream said, in block terms.
pub(crate) enum Step {
    Fallback(v1::ProviderFallback),
    Chosen(v1::ProviderChosen),
    Start {
        index: u32,
        start: Start,
    },
    Delta {
        index: u32,
        delta: Delta,
    },
    Stop {
        index: u32,
    },
    Usage(v1::Usage),
    /// Always after the last block's `Stop`.
    Finish(FinishReason),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Reasoning,
    ToolUse,
}

/// Numbers the blocks of an answer as the router's events arrive: a block is opened when its
/// first piece comes, and closed when a piece of another kind (or the finish) comes, so at most
/// one block is open at a time and the indexes follow the order of the answer.
///
/// A provider that interleaves the arguments of parallel tool calls sends a piece for a call
/// whose block is already closed; it is reported against that block's index all the same (the
/// assembled answer is right; a stream then has a delta after that block's stop).
#[derive(Default)]
pub(crate) struct Blocks {
    open: Option<(u32, Open)>,
    next: u32,
    /// (the router's tool-call index, block index) of each tool call so far.
    calls: Vec<(u32, u32)>,
    last_reasoning: Option<u32>,
}

impl Blocks {
    fn close(&mut self, out: &mut Vec<Step>) {
        if let Some((index, _)) = self.open.take() {
            out.push(Step::Stop { index });
        }
    }

    fn start(&mut self, kind: Open, start: Start, out: &mut Vec<Step>) -> u32 {
        self.close(out);
        let index = self.next;
        self.next += 1;
        self.open = Some((index, kind));
        out.push(Step::Start { index, start });
        index
    }

    /// The open block of `kind`, opening one when the open block is of another kind.
    fn ensure(&mut self, kind: Open, start: fn() -> Start, out: &mut Vec<Step>) -> u32 {
        match self.open {
            Some((i, k)) if k == kind => i,
            _ => self.start(kind, start(), out),
        }
    }

    /// Translates one router event into steps.
    pub(crate) fn step(&mut self, ev: v1::ChatEvent, out: &mut Vec<Step>) {
        use v1::chat_event::Event as E;
        match ev.event {
            Some(E::ProviderFallback(f)) => out.push(Step::Fallback(f)),
            Some(E::ProviderChosen(c)) => out.push(Step::Chosen(c)),
            Some(E::TextDelta(t)) if !t.text.is_empty() => {
                let index = self.ensure(Open::Text, || Start::Text, out);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Text(t.text),
                });
            }
            Some(E::ReasoningDelta(t)) if !t.text.is_empty() => {
                let index = self.ensure(Open::Reasoning, || Start::Reasoning, out);
                self.last_reasoning = Some(index);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Reasoning(t.text),
                });
            }
            Some(E::ReasoningSignature(s)) => {
                let index = match (self.open, self.last_reasoning) {
                    (Some((i, Open::Reasoning)), _) | (_, Some(i)) => i,
                    _ => self.start(Open::Reasoning, Start::Reasoning, out),
                };
                self.last_reasoning = Some(index);
                out.push(Step::Delta {
                    index,
                    delta: Delta::Signature(s.signature),
                });
            }
            Some(E::ToolCallStart(s)) => {
                let index = self.start(
                    Open::ToolUse,
                    Start::ToolUse {
                        id: s.id,
                        name: s.name,
                    },
                    out,
                );
                self.calls.push((s.index, index));
            }
            Some(E::ToolCallDelta(d)) if !d.arguments.is_empty() => {
                match self.calls.iter().rev().find(|c| c.0 == d.index) {
                    Some(&(_, index)) => out.push(Step::Delta {
                        index,
                        delta: Delta::InputJson(d.arguments),
                    }),
                    None => tracing::warn!(
                        call = d.index,
                        "tool-call arguments arrived before the call started; dropped"
                    ),
                }
            }
            Some(E::Usage(u)) => out.push(Step::Usage(u)),
            Some(E::Finish(f)) => {
                self.close(out);
                out.push(Step::Finish(weft_proto::finish_from_proto(f.reason)));
            }
            // Empty pieces open no block.
            Some(E::TextDelta(_) | E::ReasoningDelta(_) | E::ToolCallDelta(_)) | None => {}
        }
    }
}

/// A block of an assembled answer.
pub(crate) enum Assembled {
    Text(String),
    Reasoning {
        text: String,
        signature: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        /// The arguments as the model produced them (JSON text, possibly invalid).
        input_json: String,
    },
}

/// A whole answer, read from the router's stream.
pub(crate) struct Collected {
    pub provider: String,
    pub model: String,
    pub fallbacks: Vec<v1::ProviderFallback>,
    pub blocks: Vec<Assembled>,
    pub usage: v1::Usage,
    pub finish: FinishReason,
}

/// The error for a stream that ended without its finish.
pub(crate) fn ended_early() -> Error {
    Error::new(
        ErrorCode::UpstreamError,
        "the provider's answer ended before it was complete; retry the request",
    )
}

/// Reads the router's stream to its end and assembles the answer.
pub(crate) async fn collect(
    events: &mut weft_proto::router_api::ChatEvents,
) -> std::result::Result<Collected, Error> {
    let mut machine = Blocks::default();
    let mut out = Collected {
        provider: String::new(),
        model: String::new(),
        fallbacks: Vec::new(),
        blocks: Vec::new(),
        usage: v1::Usage::default(),
        finish: FinishReason::Stop,
    };
    let mut finished = false;
    let mut steps = Vec::new();
    while let Some(ev) = events.next().await {
        let ev = ev?;
        machine.step(ev, &mut steps);
        for step in steps.drain(..) {
            match step {
                Step::Fallback(f) => out.fallbacks.push(f),
                Step::Chosen(c) => {
                    out.provider = c.provider;
                    out.model = c.model;
                }
                Step::Start { start, .. } => out.blocks.push(match start {
                    Start::Text => Assembled::Text(String::new()),
                    Start::Reasoning => Assembled::Reasoning {
                        text: String::new(),
                        signature: None,
                    },
                    Start::ToolUse { id, name } => Assembled::ToolUse {
                        id,
                        name,
                        input_json: String::new(),
                    },
                }),
                Step::Delta { index, delta } => {
                    let block = usize::try_from(index)
                        .ok()
                        .and_then(|i| out.blocks.get_mut(i));
                    match (block, delta) {
                        (Some(Assembled::Text(t)), Delta::Text(d))
                        | (Some(Assembled::Reasoning { text: t, .. }), Delta::Reasoning(d))
                        | (Some(Assembled::ToolUse { input_json: t, .. }), Delta::InputJson(d)) => {
                            t.push_str(&d);
                        }
                        (Some(Assembled::Reasoning { signature, .. }), Delta::Signature(s)) => {
                            *signature = Some(s);
                        }
                        _ => {}
                    }
                }
                Step::Stop { .. } => {}
                Step::Usage(u) => out.usage = u,
                Step::Finish(f) => {
                    out.finish = f;
                    finished = true;
                }
            }
        }
    }
    if finished {
        Ok(out)
    } else {
        Err(ended_early())
    }
}

/// A tool call's arguments as a JSON object (`{}` for none); an error naming the tool when the
/// model produced something else.
pub(crate) fn tool_input(name: &str, input_json: &str) -> std::result::Result<Value, Error> {
    if input_json.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(input_json) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(Error::new(
            ErrorCode::UpstreamError,
            format!(
                "the model produced arguments for tool `{name}` that are not a JSON object; retry \
                 the request (a streamed answer passes the raw arguments through)"
            ),
        )),
    }
}

/// A stream fed by a task through a bounded channel; the task stops when the client goes away
/// (its next send fails).
pub(crate) fn channel_stream<F, Fut>(
    f: F,
) -> impl Stream<Item = std::result::Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(32);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// An SSE event named `name` with a JSON body.
pub(crate) fn sse_event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

// --- the handler ----------------------------------------------------------------------------------

#[derive(Serialize)]
struct UsageOut {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
}

impl From<v1::Usage> for UsageOut {
    fn from(u: v1::Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        }
    }
}

fn fallback_json(f: &v1::ProviderFallback) -> Value {
    json!({"provider": f.provider, "model": f.model, "code": f.code, "message": f.message})
}

fn finish_name(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

fn block_json(b: Assembled) -> std::result::Result<Value, Error> {
    Ok(match b {
        Assembled::Text(text) => json!({"type": "text", "text": text}),
        Assembled::Reasoning { text, signature } => {
            let mut v = json!({"type": "reasoning", "text": text});
            if let Some(s) = signature {
                v["signature"] = Value::String(s);
            }
            v
        }
        Assembled::ToolUse {
            id,
            name,
            input_json,
        } => {
            let input = tool_input(&name, &input_json)?;
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
    })
}

fn response_id() -> String {
    format!("llm_{}", uuid::Uuid::now_v7().simple())
}

/// `POST /v1/llm/chat`.
#[tracing::instrument(skip_all)]
pub async fn chat_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    body: std::result::Result<NativeJson<LlmChatRequest>, ApiError>,
) -> Result<Response> {
    let body = body
        .map_err(|ApiError(e, _)| ApiError::native(strict(e)))?
        .0;
    let req = to_proto(body, &headers).map_err(ApiError::native)?;
    let stream = req.stream;
    let RouterChat {
        mut events,
        headers: limits,
    } = st.router_chat(&p, req).await.map_err(ApiError::native)?;
    if stream {
        let sse = Sse::new(stream_events(events)).keep_alive(KeepAlive::new().interval(KEEPALIVE));
        return Ok((limits, sse).into_response());
    }
    let c = collect(&mut events).await.map_err(ApiError::native)?;
    let content = c
        .blocks
        .into_iter()
        .map(block_json)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(ApiError::native)?;
    let body = json!({
        "id": response_id(),
        "provider": c.provider,
        "model": c.model,
        "fallbacks": c.fallbacks.iter().map(fallback_json).collect::<Vec<_>>(),
        "message": {"role": "assistant", "content": content},
        "finish_reason": finish_name(c.finish),
        "usage": UsageOut::from(c.usage),
    });
    Ok((limits, axum::Json(body)).into_response())
}

/// The native SSE events for the router's stream.
fn stream_events(
    mut events: weft_proto::router_api::ChatEvents,
) -> impl Stream<Item = std::result::Result<Event, Infallible>> {
    channel_stream(move |tx| async move {
        let mut machine = Blocks::default();
        let mut usage = v1::Usage::default();
        let mut finished = false;
        let mut steps = Vec::new();
        while let Some(item) = events.next().await {
            let ev = match item {
                Ok(ev) => ev,
                Err(e) => {
                    let _ = tx.send(sse_event("error", &e.native_body())).await;
                    return;
                }
            };
            machine.step(ev, &mut steps);
            for step in steps.drain(..) {
                let out = match step {
                    Step::Fallback(f) => sse_event("provider_fallback", &fallback_json(&f)),
                    Step::Chosen(c) => sse_event(
                        "provider_chosen",
                        &json!({"provider": c.provider, "model": c.model}),
                    ),
                    Step::Start { index, start } => {
                        let block = match start {
                            Start::Text => json!({"type": "text"}),
                            Start::Reasoning => json!({"type": "reasoning"}),
                            Start::ToolUse { id, name } => {
                                json!({"type": "tool_use", "id": id, "name": name})
                            }
                        };
                        sse_event(
                            "content_block_start",
                            &json!({"index": index, "block": block}),
                        )
                    }
                    Step::Delta { index, delta } => {
                        let delta = match delta {
                            Delta::Text(t) => json!({"type": "text_delta", "text": t}),
                            Delta::Reasoning(t) => json!({"type": "reasoning_delta", "text": t}),
                            Delta::Signature(s) => {
                                json!({"type": "signature_delta", "signature": s})
                            }
                            Delta::InputJson(j) => {
                                json!({"type": "input_json_delta", "partial_json": j})
                            }
                        };
                        sse_event(
                            "content_block_delta",
                            &json!({"index": index, "delta": delta}),
                        )
                    }
                    Step::Stop { index } => {
                        sse_event("content_block_stop", &json!({"index": index}))
                    }
                    Step::Usage(u) => {
                        usage = u;
                        continue;
                    }
                    Step::Finish(f) => {
                        finished = true;
                        sse_event(
                            "message_delta",
                            &json!({"finish_reason": finish_name(f), "usage": UsageOut::from(usage)}),
                        )
                    }
                };
                if tx.send(out).await.is_err() {
                    return;
                }
            }
        }
        let last = if finished {
            sse_event("done", &json!({}))
        } else {
            sse_event("error", &ended_early().native_body())
        };
        let _ = tx.send(last).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(e: v1::chat_event::Event) -> v1::ChatEvent {
        v1::ChatEvent { event: Some(e) }
    }

    fn shape(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Fallback(_) => "fallback".into(),
                Step::Chosen(_) => "chosen".into(),
                Step::Start { index, start } => format!(
                    "start {index} {}",
                    match start {
                        Start::Text => "text",
                        Start::Reasoning => "reasoning",
                        Start::ToolUse { .. } => "tool_use",
                    }
                ),
                Step::Delta { index, .. } => format!("delta {index}"),
                Step::Stop { index } => format!("stop {index}"),
                Step::Usage(_) => "usage".into(),
                Step::Finish(_) => "finish".into(),
            })
            .collect()
    }

    #[test]
    fn blocks_open_and_close_in_order() {
        use v1::chat_event::Event as E;
        let mut m = Blocks::default();
        let mut out = Vec::new();
        for e in [
            E::ProviderChosen(v1::ProviderChosen::default()),
            E::ReasoningDelta(v1::ReasoningDelta { text: "hm".into() }),
            E::ReasoningSignature(v1::ReasoningSignature {
                signature: "sig".into(),
            }),
            E::TextDelta(v1::TextDelta { text: "".into() }),
            E::TextDelta(v1::TextDelta { text: "a".into() }),
            E::TextDelta(v1::TextDelta { text: "b".into() }),
            E::ToolCallStart(v1::ToolCallStart {
                index: 0,
                id: "c0".into(),
                name: "f".into(),
            }),
            E::ToolCallDelta(v1::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            }),
            E::ToolCallStart(v1::ToolCallStart {
                index: 1,
                id: "c1".into(),
                name: "g".into(),
            }),
            E::ToolCallDelta(v1::ToolCallDelta {
                index: 0,
                arguments: " ".into(),
            }),
            E::Usage(v1::Usage::default()),
            E::Finish(v1::Finish { reason: 3 }),
        ] {
            m.step(ev(e), &mut out);
        }
        assert_eq!(
            shape(&out),
            [
                "chosen",
                "start 0 reasoning",
                "delta 0",
                "delta 0",
                "stop 0",
                "start 1 text",
                "delta 1",
                "delta 1",
                "stop 1",
                "start 2 tool_use",
                "delta 2",
                "stop 2",
                "start 3 tool_use",
                // A late piece of call 0 still goes to its block.
                "delta 2",
                "usage",
                "stop 3",
                "finish",
            ]
        );
    }

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let e = strict(
            crate::extract::parse::<LlmChatRequest>(
                br#"{"model":"m","messages":[],"temprature":1}"#,
            )
            .err()
            .unwrap(),
        );
        assert_eq!(e.param.as_deref(), Some("temprature"));
        assert!(e.message.contains("`extra`"), "{}", e.message);
        assert!(e.message.contains("`sampling`"), "{}", e.message);
        let e = strict(
            crate::extract::parse::<LlmChatRequest>(
                br#"{"model":"m","messages":[],"sampling":{"temp":1}}"#,
            )
            .err()
            .unwrap(),
        );
        assert_eq!(e.param.as_deref(), Some("sampling.temp"));
    }

    #[test]
    fn tool_arguments_must_be_an_object() {
        assert_eq!(tool_input("f", "").unwrap(), json!({}));
        assert_eq!(tool_input("f", r#"{"a":1}"#).unwrap(), json!({"a": 1}));
        let e = tool_input("f", r#"{"a":"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::UpstreamError);
        assert!(e.message.contains("`f`"));
        assert!(tool_input("f", "[1]").is_err());
    }

    #[test]
    fn struct_fields_accept_only_objects() {
        use crate::extract::parse;
        let ok = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"sampling":{"temperature":0.5}}"#;
        assert!(parse::<LlmChatRequest>(ok.as_bytes()).is_ok());
        // serde's derive would read each of these as the fields in declaration order.
        for (body, at) in [
            (
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"sampling":[0.5]}"#,
                "sampling",
            ),
            (r#"{"model":"m","messages":[["user","hi"]]}"#, "messages[0]"),
            (
                r#"{"model":"m","messages":[{"role":"user","content":[["text","hi"]]}]}"#,
                "messages[0].content[0]",
            ),
            (
                r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[["f"]]}"#,
                "tools[0]",
            ),
        ] {
            let e = parse::<LlmChatRequest>(body.as_bytes())
                .err()
                .expect("refused");
            assert_eq!(e.param.as_deref(), Some(at), "{body}: {}", e.message);
            assert!(e.message.contains("JSON object"), "{body}: {}", e.message);
        }
        let e = parse::<LlmChatRequest>(br#"["m", []]"#)
            .err()
            .expect("refused");
        assert!(e.message.contains("JSON object"), "{}", e.message);
    }
}
