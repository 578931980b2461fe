//! The Anthropic-compatible front door: `POST /v1/messages` (JSON, or SSE with Anthropic's event
//! names) and `POST /v1/messages/count_tokens`, so Anthropic SDKs and Claude Code can use weft as
//! their base URL and reach any provider: `model` is resolved by weft's router (a model, an alias
//! or `tier:<name>`), with the `x-weft-provider` / `x-weft-tier` hints as on the OpenAI routes.
//!
//! How the Messages API maps onto weft's request:
//! - `system` (a string or text blocks) becomes one system message; `cache_control` marks are
//!   accepted and not forwarded (weft's message model has no cache marks; providers that cache
//!   automatically still do).
//! - A user message's `tool_result` blocks become weft `tool` messages, one per result, in
//!   order; its other blocks stay in user messages around them. Images become URLs (`data:` URLs
//!   for base64 sources). `thinking` blocks become signed reasoning; `redacted_thinking` blocks
//!   are dropped, since no provider but the one that made them can read them.
//! - `max_tokens` is required, as by Anthropic. `stop_sequences` → stop, `metadata.user_id` →
//!   user, `tool_choice` → its OpenAI-style equivalent (`any` is `required`), and
//!   `disable_parallel_tool_use` → `parallel_tool_calls: false`. `top_k`, `thinking` and any
//!   top-level field weft does not model are forwarded as provider extras.
//! - Server tools (a `tools[]` entry with a `type` such as `web_search_…`) and document-like
//!   blocks are refused with a 400: they run inside Anthropic's API, not at a provider weft
//!   calls.
//!
//! Answers: `stop_reason` is `end_turn`, `max_tokens`, `tool_use` or `refusal` (weft does not
//! know which stop sequence matched, so a stop sequence reads as `end_turn` and `stop_sequence`
//! is always null). `usage.input_tokens` excludes cached tokens, as Anthropic counts them. A
//! stream's `message_start` carries zero usage, since weft learns usage at the end; the real
//! numbers come in `message_delta.usage`, which the SDKs merge into the final message.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value};
use weft_core::chat::{
    Answer, Blocks, ChatEvent, ChatRequest, Delta, Sampling, Start, Step, ended_early,
};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};
use weft_core::{Error, Principal};
use weft_wire::anthropic::Block;
use weft_wire::anthropic::write::{self as wire, Event};
use weft_wire::openai::ToolChoice;

use crate::AppState;
use crate::dialect::{Dialect, KeepAlive, Sse, serve, to_json};
use crate::error::{ApiError, Shape, anthropic_type};
use crate::extract::{OpenAiJson, invalid_at, typed};
use crate::llm::{header, named_tool_choice, range, require_model, tool_input};

type Result<T> = std::result::Result<T, ApiError>;

/// `ping` events on an idle stream, as Anthropic sends them.
const PING: Duration = Duration::from_secs(15);

/// Tokens counted for each image by `count_tokens` (its size is not known here; this is about a
/// one-megapixel image by Anthropic's published rule of width × height / 750).
const IMAGE_TOKENS: u64 = 1600;

/// `llm:call`, checked before the body is read, answered in Anthropic's shape.
pub async fn require_llm_call(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::llm::check_llm_call(&req, Shape::Anthropic) {
        None => next.run(req).await,
        Some(refusal) => refusal,
    }
}

// --- request ------------------------------------------------------------------------------------

/// `POST /v1/messages` (and `/v1/messages/count_tokens`, which ignores `max_tokens`).
#[derive(Deserialize, Clone)]
pub struct MessagesRequest {
    model: String,
    #[serde(default)]
    max_tokens: Option<u32>,
    messages: Vec<InMessage>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    top_k: Option<u32>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    thinking: Option<Value>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Deserialize, Clone)]
#[serde(remote = "Self")]
struct InMessage {
    role: String,
    content: Value,
}

#[derive(Deserialize, Clone)]
#[serde(remote = "Self")]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct TextIn {
    text: String,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ImageIn {
    source: ImageSource,
}

#[derive(Deserialize)]
#[serde(remote = "Self", tag = "type", rename_all = "snake_case")]
enum ImageSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ToolUseIn {
    id: String,
    name: String,
    #[serde(default)]
    input: Value,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ToolResultIn {
    tool_use_id: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ThinkingIn {
    thinking: String,
    #[serde(default)]
    signature: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ToolIn {
    name: String,
    #[serde(default)]
    description: Option<String>,
    input_schema: Value,
}

#[derive(Deserialize)]
#[serde(remote = "Self", tag = "type", rename_all = "snake_case")]
enum ToolChoiceIn {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

// Objects only: serde's derive would also read these from a sequence of their fields
// (`"messages": [["user", "hi"]]`).
weft_core::objects_only!(
    deserialize: InMessage,
    Metadata,
    TextIn,
    ImageIn,
    ImageSource,
    ToolUseIn,
    ToolResultIn,
    ThinkingIn,
    ToolIn,
    ToolChoiceIn,
);

/// A block's `type`.
fn block_type(v: &Value, path: &str) -> std::result::Result<String, Error> {
    let Some(block) = v.as_object() else {
        return Err(invalid_at(
            path,
            format!(
                "must be a content block, an object with a `type` such as {{\"type\": \"text\", \"text\": \"…\"}}, got {v}"
            ),
        ));
    };
    match block.get("type") {
        Some(Value::String(t)) => Ok(t.clone()),
        None => Err(invalid_at(
            &format!("{path}.type"),
            "is missing; each content block is an object with a `type` such as \"text\"",
        )),
        Some(other) => Err(invalid_at(
            &format!("{path}.type"),
            format!("must be a string such as \"text\", got {other}"),
        )),
    }
}

/// `content`'s blocks (a string, which is one text block, is read by the caller).
fn block_list(content: Value, path: &str) -> std::result::Result<Vec<Value>, Error> {
    match content {
        Value::Array(items) if items.is_empty() => Err(invalid_at(
            path,
            "must not be empty; send a string or at least one content block",
        )),
        Value::Array(items) => Ok(items),
        other => Err(invalid_at(
            path,
            format!("must be a string or an array of content blocks, got {other}"),
        )),
    }
}

/// A text or image block (the blocks any message, and a tool result, may hold).
fn plain_block(ty: &str, v: Value, path: &str) -> std::result::Result<ContentBlock, Error> {
    match ty {
        "text" => Ok(ContentBlock::Text {
            text: typed::<TextIn>(v, path)?.text,
        }),
        "image" => {
            let url = match typed::<ImageIn>(v, path)?.source {
                ImageSource::Base64 { media_type, data } => {
                    format!("data:{media_type};base64,{data}")
                }
                ImageSource::Url { url } => url,
            };
            Ok(ContentBlock::Image { url, detail: None })
        }
        "document" | "search_result" => Err(invalid_at(
            &format!("{path}.type"),
            format!(
                "\"{ty}\" is not supported by weft's Anthropic-compatible API (providers other \
                 than Anthropic have no such block); send its text as a text block"
            ),
        )),
        _ => Err(invalid_at(
            &format!("{path}.type"),
            format!(
                "\"{ty}\" is not supported here; weft accepts text, image, tool_use, tool_result, \
                 thinking and redacted_thinking blocks (server-tool blocks run only inside \
                 Anthropic's API)"
            ),
        )),
    }
}

fn tool_result(v: Value, path: &str) -> std::result::Result<ContentBlock, Error> {
    let r: ToolResultIn = typed(v, path)?;
    let content = match r.content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![ContentBlock::Text { text }],
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (k, item) in items.into_iter().enumerate() {
                let p = format!("{path}.content[{k}]");
                let ty = block_type(&item, &p)?;
                if !matches!(ty.as_str(), "text" | "image" | "document" | "search_result") {
                    return Err(invalid_at(
                        &format!("{p}.type"),
                        format!(
                            "\"{ty}\" cannot be part of a tool result; use text or image blocks"
                        ),
                    ));
                }
                out.push(plain_block(&ty, item, &p)?);
            }
            out
        }
        Some(other) => {
            return Err(invalid_at(
                &format!("{path}.content"),
                format!("must be a string or an array of text/image blocks, got {other}"),
            ));
        }
    };
    Ok(ContentBlock::ToolResult {
        tool_use_id: r.tool_use_id,
        content,
        is_error: r.is_error.unwrap_or(false),
    })
}

/// A user message: its `tool_result` blocks become `tool` messages in place, the rest stays
/// in user messages around them.
fn user_messages(
    content: Value,
    path: &str,
    out: &mut Vec<Message>,
) -> std::result::Result<(), Error> {
    if let Value::String(text) = content {
        out.push(Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text }],
            name: None,
        });
        return Ok(());
    }
    let mut pending: Vec<ContentBlock> = Vec::new();
    let flush = |pending: &mut Vec<ContentBlock>, out: &mut Vec<Message>| {
        if !pending.is_empty() {
            out.push(Message {
                role: Role::User,
                content: std::mem::take(pending),
                name: None,
            });
        }
    };
    for (j, item) in block_list(content, path)?.into_iter().enumerate() {
        let p = format!("{path}[{j}]");
        let ty = block_type(&item, &p)?;
        match ty.as_str() {
            "tool_result" => {
                flush(&mut pending, out);
                out.push(Message {
                    role: Role::Tool,
                    content: vec![tool_result(item, &p)?],
                    name: None,
                });
            }
            "tool_use" | "thinking" | "redacted_thinking" => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!("\"{ty}\" blocks belong in `assistant` messages"),
                ));
            }
            _ => pending.push(plain_block(&ty, item, &p)?),
        }
    }
    flush(&mut pending, out);
    Ok(())
}

fn assistant_message(content: Value, path: &str) -> std::result::Result<Option<Message>, Error> {
    if let Value::String(text) = content {
        return Ok(Some(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text }],
            name: None,
        }));
    }
    let mut blocks = Vec::new();
    for (j, item) in block_list(content, path)?.into_iter().enumerate() {
        let p = format!("{path}[{j}]");
        let ty = block_type(&item, &p)?;
        match ty.as_str() {
            "tool_use" => {
                let t: ToolUseIn = typed(item, &p)?;
                let input_json = match t.input {
                    Value::Null => "{}".to_owned(),
                    Value::Object(o) => Value::Object(o).to_string(),
                    other => {
                        return Err(invalid_at(
                            &format!("{p}.input"),
                            format!("must be a JSON object (the tool's arguments), got {other}"),
                        ));
                    }
                };
                blocks.push(ContentBlock::ToolUse {
                    id: t.id,
                    name: t.name,
                    input_json,
                });
            }
            "thinking" => {
                let t: ThinkingIn = typed(item, &p)?;
                blocks.push(ContentBlock::Reasoning {
                    text: t.thinking,
                    signature: t.signature.filter(|s| !s.is_empty()),
                });
            }
            // Encrypted reasoning only its maker can read; no provider weft routes to by
            // another route could use it.
            "redacted_thinking" => {}
            "tool_result" => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    "\"tool_result\" blocks belong in the `user` message after the tool call",
                ));
            }
            "image" => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    "\"image\" blocks belong in `user` messages",
                ));
            }
            _ => blocks.push(plain_block(&ty, item, &p)?),
        }
    }
    Ok((!blocks.is_empty()).then_some(Message {
        role: Role::Assistant,
        content: blocks,
        name: None,
    }))
}

/// `system` and `messages` as weft messages.
fn to_messages(
    system: Option<Value>,
    messages: Vec<InMessage>,
) -> std::result::Result<Vec<Message>, Error> {
    if messages.is_empty() {
        return Err(
            Error::invalid("`messages` must contain at least one message").with_param("messages"),
        );
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    match system {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if !s.is_empty() {
                out.push(Message {
                    role: Role::System,
                    content: vec![ContentBlock::Text { text: s }],
                    name: None,
                });
            }
        }
        Some(Value::Array(items)) => {
            let mut content = Vec::with_capacity(items.len());
            for (k, item) in items.into_iter().enumerate() {
                let p = format!("system[{k}]");
                let ty = block_type(&item, &p)?;
                if ty != "text" {
                    return Err(invalid_at(
                        &format!("{p}.type"),
                        format!(
                            "must be \"text\" (the system prompt holds text blocks), got {ty:?}"
                        ),
                    ));
                }
                content.push(plain_block(&ty, item, &p)?);
            }
            if !content.is_empty() {
                out.push(Message {
                    role: Role::System,
                    content,
                    name: None,
                });
            }
        }
        Some(other) => {
            return Err(invalid_at(
                "system",
                format!("must be a string or an array of text blocks, got {other}"),
            ));
        }
    }
    for (i, m) in messages.into_iter().enumerate() {
        let path = format!("messages[{i}].content");
        match m.role.as_str() {
            "user" => user_messages(m.content, &path, &mut out)?,
            "assistant" => out.extend(assistant_message(m.content, &path)?),
            "system" => {
                return Err(invalid_at(
                    &format!("messages[{i}].role"),
                    "is \"system\"; the Messages API takes the system prompt in the top-level `system` field",
                ));
            }
            other => {
                return Err(invalid_at(
                    &format!("messages[{i}].role"),
                    format!("must be \"user\" or \"assistant\", got {other:?}"),
                ));
            }
        }
    }
    Ok(out)
}

/// The request's client tools; server tools are refused.
fn to_tools(tools: Option<Vec<Value>>) -> std::result::Result<Vec<ToolSpec>, Error> {
    let tools = tools.unwrap_or_default();
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.into_iter().enumerate() {
        let p = format!("tools[{i}]");
        let kind = match t.get("type") {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) => Some(k.as_str()),
            Some(other) => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!("must be \"custom\" (or left out) for a client tool, got {other}"),
                ));
            }
        };
        match kind {
            None | Some("custom") => {}
            Some(kind) => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!(
                        "is {kind:?}, one of Anthropic's server tools, which run inside \
                         Anthropic's API and which weft cannot run for other providers; define a \
                         client tool (`name`, `description`, `input_schema`) and run it yourself"
                    ),
                ));
            }
        }
        let t: ToolIn = typed(t, &p)?;
        if t.name.trim().is_empty() {
            return Err(invalid_at(&format!("{p}.name"), "must not be empty"));
        }
        if !t.input_schema.is_object() {
            return Err(invalid_at(
                &format!("{p}.input_schema"),
                format!("must be a JSON schema object, got {}", t.input_schema),
            ));
        }
        out.push(ToolSpec {
            name: t.name,
            description: t.description.unwrap_or_default(),
            parameters: t.input_schema,
        });
    }
    Ok(out)
}

/// What `/v1/messages` and `/v1/messages/count_tokens` both check beyond the types: the bounds
/// on the numbers, and that `thinking` (forwarded as is) is an object.
fn check_fields(r: &MessagesRequest) -> std::result::Result<(), Error> {
    if r.max_tokens == Some(0) {
        return Err(invalid_at("max_tokens", "must be at least 1"));
    }
    range("temperature", r.temperature, 0.0, 1.0)?;
    range("top_p", r.top_p, 0.0, 1.0)?;
    match &r.thinking {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(other) => Err(invalid_at(
            "thinking",
            format!(
                "must be an object such as {{\"type\": \"enabled\", \"budget_tokens\": 1024}}, got {other}"
            ),
        )),
    }
}

/// Validates the request and converts it to the router's contract.
pub(crate) fn to_chat(
    r: MessagesRequest,
    headers: &HeaderMap,
) -> std::result::Result<ChatRequest, Error> {
    require_model(&r.model)?;
    let Some(max_tokens) = r.max_tokens else {
        return Err(Error::invalid(
            "`max_tokens` is required: the most tokens the answer may have (e.g. 1024), as in \
             Anthropic's Messages API",
        )
        .with_param("max_tokens"));
    };
    check_fields(&r)?;
    let messages = to_messages(r.system, r.messages)?;
    let tools = to_tools(r.tools)?;
    let mut extra = r.extra;
    let tool_choice = match r.tool_choice {
        None | Some(Value::Null) => None,
        Some(v) => {
            let (json, no_parallel) = match typed::<ToolChoiceIn>(v, "tool_choice")? {
                ToolChoiceIn::Auto {
                    disable_parallel_tool_use,
                } => (ToolChoice::Auto.to_value(), disable_parallel_tool_use),
                ToolChoiceIn::Any {
                    disable_parallel_tool_use,
                } => (ToolChoice::Required.to_value(), disable_parallel_tool_use),
                ToolChoiceIn::Tool {
                    name,
                    disable_parallel_tool_use,
                } => (
                    named_tool_choice(&name, &tools, "tool_choice.name")?,
                    disable_parallel_tool_use,
                ),
                ToolChoiceIn::None => (ToolChoice::None.to_value(), None),
            };
            if no_parallel == Some(true) {
                extra.insert("parallel_tool_calls".into(), Value::Bool(false));
            }
            Some(json)
        }
    };
    if let Some(k) = r.top_k {
        extra.insert("top_k".into(), Value::from(k));
    }
    if let Some(t) = r.thinking {
        extra.insert("thinking".into(), t);
    }
    let stream = r.stream.unwrap_or(false);
    Ok(ChatRequest {
        model: r.model,
        messages,
        tools,
        tool_choice,
        sampling: Sampling {
            temperature: r.temperature,
            top_p: r.top_p,
            max_tokens: Some(max_tokens),
            stop: r.stop_sequences.unwrap_or_default(),
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
        },
        response_format: None,
        // An empty id is no id (as over the gRPC hop).
        user: r.metadata.and_then(|m| m.user_id).filter(|u| !u.is_empty()),
        extra,
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream,
    })
}

// --- answers --------------------------------------------------------------------------------------

fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

fn stop_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
    }
}

/// Anthropic's usage: `input_tokens` counts only the uncached input.
fn usage_out(u: &Usage) -> wire::Usage {
    wire::Usage {
        input_tokens: u
            .prompt_tokens
            .saturating_sub(u.cache_read_tokens)
            .saturating_sub(u.cache_write_tokens),
        cache_creation_input_tokens: u.cache_write_tokens,
        cache_read_input_tokens: u.cache_read_tokens,
        output_tokens: u.completion_tokens,
    }
}

/// An answer's block; `None` for images and tool results, which an answer never holds (the
/// chat contract's assembler makes only text, reasoning and tool calls).
fn block_out(b: &ContentBlock) -> std::result::Result<Option<Block<'_>>, Error> {
    Ok(Some(match b {
        ContentBlock::Text { text } => Block::Text { text },
        ContentBlock::Reasoning { text, signature } => Block::Thinking {
            thinking: text,
            signature: signature.as_deref().unwrap_or_default(),
        },
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
        } => Block::ToolUse {
            id: id.into(),
            name,
            input: tool_input(name, input_json)?,
        },
        ContentBlock::Image { .. } | ContentBlock::ToolResult { .. } => return Ok(None),
    }))
}

/// The error event, which is also the body of an error answer.
fn error_event(e: &Error) -> Event<'_> {
    Event::Error {
        error: wire::ErrorDetail {
            kind: anthropic_type(e.code),
            message: &e.message,
        },
    }
}

/// A stream event, under its own name.
fn send(out: &mut Sse, event: &Event<'_>) {
    out.json(Some(event.name()), event);
}

/// The JSON extractor's rejection, in Anthropic's shape.
fn anthropic(
    r: std::result::Result<OpenAiJson<MessagesRequest>, ApiError>,
) -> Result<MessagesRequest> {
    r.map(|b| b.0)
        .map_err(|ApiError(e, _)| ApiError::anthropic(e))
}

/// `POST /v1/messages`.
#[tracing::instrument(skip_all)]
pub async fn messages_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    body: std::result::Result<OpenAiJson<MessagesRequest>, ApiError>,
) -> Result<Response> {
    let req = to_chat(anthropic(body)?, &headers).map_err(ApiError::anthropic)?;
    let dialect = Anthropic::new(message_id(), req.model.clone());
    serve(&st, &p, req, dialect).await
}

/// Anthropic's Messages format: the `message` object, or its stream from `message_start` to
/// `message_stop`.
#[derive(Clone)]
pub(crate) struct Anthropic {
    id: String,
    /// The model asked for: Anthropic's answer names it (not the one the router chose).
    requested: String,
    blocks: Blocks,
    steps: Vec<Step>,
    usage: Usage,
}

impl Anthropic {
    pub(crate) fn new(id: String, requested: String) -> Self {
        Self {
            id,
            requested,
            blocks: Blocks::default(),
            steps: Vec::new(),
            usage: Usage::default(),
        }
    }
}

impl Dialect for Anthropic {
    const SHAPE: Shape = Shape::Anthropic;
    const KEEPALIVE: KeepAlive = KeepAlive::Event(PING, "ping", r#"{"type":"ping"}"#);

    fn answer(self, a: Answer) -> std::result::Result<String, Error> {
        let mut content = Vec::with_capacity(a.blocks.len());
        for b in &a.blocks {
            content.extend(block_out(b)?);
        }
        to_json(&wire::Message::new(
            &self.id,
            &self.requested,
            content,
            Some(stop_reason(a.finish)),
            usage_out(&a.usage),
        ))
    }

    fn open(&mut self, out: &mut Sse) {
        let message = wire::Message::new(
            &self.id,
            &self.requested,
            Vec::new(),
            None,
            usage_out(&Usage::default()),
        );
        send(out, &Event::MessageStart { message });
    }

    fn event(&mut self, ev: ChatEvent, out: &mut Sse) {
        self.blocks.step(ev, &mut self.steps);
        for step in self.steps.drain(..) {
            match step {
                Step::Fallback(_) | Step::Chosen { .. } => {}
                Step::Usage(u) => self.usage = u,
                Step::Start { index, start } => {
                    let content_block = match &start {
                        Start::Text => Block::Text { text: "" },
                        Start::Reasoning => Block::Thinking {
                            thinking: "",
                            signature: "",
                        },
                        Start::ToolUse { id, name } => Block::ToolUse {
                            id: id.into(),
                            name,
                            input: Value::Object(Map::new()),
                        },
                    };
                    send(
                        out,
                        &Event::ContentBlockStart {
                            index,
                            content_block,
                        },
                    );
                }
                Step::Delta { index, delta } => {
                    let delta = match &delta {
                        Delta::Text(text) => wire::Delta::TextDelta { text },
                        Delta::Reasoning(thinking) => wire::Delta::ThinkingDelta { thinking },
                        Delta::Signature(signature) => wire::Delta::SignatureDelta { signature },
                        Delta::InputJson(partial_json) => {
                            wire::Delta::InputJsonDelta { partial_json }
                        }
                    };
                    send(out, &Event::ContentBlockDelta { index, delta });
                }
                Step::Stop { index } => send(out, &Event::ContentBlockStop { index }),
                Step::Finish(f) => send(
                    out,
                    &Event::MessageDelta {
                        delta: wire::MessageDelta {
                            stop_reason: Some(stop_reason(f)),
                            stop_sequence: None,
                        },
                        usage: usage_out(&self.usage),
                    },
                ),
            }
        }
    }

    fn end(&mut self, finished: bool, out: &mut Sse) {
        if finished {
            send(out, &Event::MessageStop);
        } else {
            self.error(&ended_early(), out);
        }
    }

    fn error(&mut self, e: &Error, out: &mut Sse) {
        send(out, &error_event(e));
    }
}

// --- count_tokens ---------------------------------------------------------------------------------

/// Characters of everything a block sends to the model (images are counted apart).
fn block_chars(b: &ContentBlock, images: &mut u64) -> usize {
    match b {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => text.chars().count(),
        ContentBlock::Image { .. } => {
            *images += 1;
            0
        }
        ContentBlock::ToolUse {
            name, input_json, ..
        } => name.chars().count() + input_json.chars().count(),
        ContentBlock::ToolResult { content, .. } => {
            content.iter().map(|c| block_chars(c, images)).sum()
        }
    }
}

/// An estimate of the input tokens: a quarter of the characters of the text, tool calls, tool
/// results and tool definitions, plus [`IMAGE_TOKENS`] per image. It is not the provider's
/// tokenizer (weft routes to many); it is meant for budgeting, as Claude Code uses it.
fn estimate_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let mut images = 0;
    let mut chars: usize = messages
        .iter()
        .flat_map(|m| &m.content)
        .map(|b| block_chars(b, &mut images))
        .sum();
    chars += tools
        .iter()
        .map(|t| {
            t.name.chars().count()
                + t.description.chars().count()
                + t.parameters.to_string().chars().count()
        })
        .sum::<usize>();
    let text = u64::try_from(chars).unwrap_or(u64::MAX).div_ceil(4);
    text.saturating_add(images.saturating_mul(IMAGE_TOKENS))
        .max(1)
}

/// `POST /v1/messages/count_tokens`: an estimate (see [`estimate_tokens`]); the request is
/// validated as `/v1/messages` validates it, except that `max_tokens` is not needed.
#[tracing::instrument(skip_all)]
pub async fn count_tokens_handler(
    body: std::result::Result<OpenAiJson<MessagesRequest>, ApiError>,
) -> Result<Response> {
    let r = anthropic(body)?;
    // Validated exactly as /v1/messages validates it (`tool_choice`, `thinking`, the bounds …),
    // except that `max_tokens` may be left out.
    let mut check = r.clone();
    check.max_tokens.get_or_insert(1);
    to_chat(check, &HeaderMap::new()).map_err(ApiError::anthropic)?;
    let messages = to_messages(r.system, r.messages).map_err(ApiError::anthropic)?;
    let tools = to_tools(r.tools).map_err(ApiError::anthropic)?;
    Ok(axum::Json(wire::TokenCount {
        input_tokens: estimate_tokens(&messages, &tools),
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: Value) -> MessagesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn tool_results_become_tool_messages_in_order() {
        let r = parse(json!({
            "model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}},
                    {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                     "content": [{"type": "text", "text": "two"}]},
                    {"type": "text", "text": "go on"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                ]},
            ],
        }));
        let m = to_messages(r.system, r.messages).unwrap();
        let roles: Vec<Role> = m.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::User
            ]
        );
        assert_eq!(m[2].content.len(), 3, "redacted thinking is dropped");
        assert_eq!(
            m[2].content[1],
            ContentBlock::ToolUse {
                id: "t1".into(),
                name: "a".into(),
                input_json: r#"{"x":1}"#.into()
            }
        );
        assert_eq!(
            m[4].content[0],
            ContentBlock::ToolResult {
                tool_use_id: "t2".into(),
                content: vec![ContentBlock::text("two")],
                is_error: true
            }
        );
        assert_eq!(
            m[5].content[1],
            ContentBlock::Image {
                url: "data:image/png;base64,AAAA".into(),
                detail: None
            }
        );
    }

    #[test]
    fn request_fields_map_onto_the_router_contract() {
        let r = parse(json!({
            "model": "m", "max_tokens": 64, "temperature": 0.5, "top_k": 5,
            "stop_sequences": ["END"], "metadata": {"user_id": "u1"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "service_tier": "auto",
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [{"role": "user", "content": "x"}],
        }));
        let p = to_chat(r, &HeaderMap::new()).unwrap();
        let s = p.sampling;
        assert_eq!(s.max_tokens, Some(64));
        assert_eq!(s.stop, ["END"]);
        assert_eq!(p.user.as_deref(), Some("u1"));
        assert_eq!(p.tool_choice, Some(json!("required")));
        assert_eq!(
            Value::Object(p.extra),
            json!({"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 1024},
                   "service_tier": "auto", "parallel_tool_calls": false})
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases = [
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
                    {"type": "document", "source": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                       "tools": [{"name": "a", "input_schema": {}}],
                       "tool_choice": {"type": "tool", "name": "b"}}),
                "tool_choice.name",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "temperature": 1.5,
                       "messages": [{"role": "user", "content": "x"}]}),
                "temperature",
            ),
            (
                json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
            ),
        ];
        for (body, param) in cases {
            let e = to_chat(parse(body.clone()), &HeaderMap::new()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(e.message.contains(param), "{}", e.message);
        }
    }

    #[test]
    fn usage_excludes_cached_input_and_tokens_are_estimated() {
        let u = Usage {
            prompt_tokens: 100,
            completion_tokens: 7,
            total_tokens: 107,
            cache_read_tokens: 60,
            cache_write_tokens: 10,
        };
        assert_eq!(
            serde_json::to_value(usage_out(&u)).unwrap(),
            json!({"input_tokens": 30, "output_tokens": 7, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 60})
        );
        let m = vec![Message {
            role: Role::User,
            content: vec![ContentBlock::text("x".repeat(40))],
            name: None,
        }];
        assert_eq!(estimate_tokens(&m, &[]), 10);
    }

    #[test]
    fn count_tokens_checks_what_messages_checks() {
        // The document gives both routes the same request schema (max_tokens aside).
        let count = |body: Value| {
            let req = Ok(crate::extract::ValidJson(parse(body)));
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(count_tokens_handler(req))
        };
        let hi = json!([{"role": "user", "content": "hi"}]);
        for (extra, at) in [
            (json!({"temperature": 5}), "temperature"),
            (json!({"top_p": -1}), "top_p"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"thinking": 5}), "thinking"),
            (json!({"tool_choice": [null, null]}), "tool_choice"),
            (
                json!({"tool_choice": {"type": "tool", "name": "nope"}}),
                "tool_choice.name",
            ),
        ] {
            let mut body = json!({"model": "m", "messages": hi});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let e = count(body.clone()).expect_err("refused");
            assert_eq!(e.0.param.as_deref(), Some(at), "{body}: {}", e.0.message);
        }
        let ok = count(json!({"model": "m", "messages": hi})).expect("counted");
        assert_eq!(ok.status(), 200);
    }

    #[test]
    fn objects_only_and_errors_name_the_inner_field() {
        let e = crate::extract::parse::<MessagesRequest>(
            br#"{"model":"m","max_tokens":5,"messages":[["user","hi"]]}"#,
        )
        .err()
        .expect("refused");
        assert_eq!(e.param.as_deref(), Some("messages[0]"), "{}", e.message);
        assert!(e.message.contains("JSON object"), "{}", e.message);
        let e = crate::extract::parse::<MessagesRequest>(
            br#"{"model":"m","max_tokens":5,"messages":[],"metadata":["u"]}"#,
        )
        .err()
        .expect("refused");
        assert_eq!(e.param.as_deref(), Some("metadata"), "{}", e.message);
        let r = parse(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "text", "text": 5}]}
        ]}));
        let e = to_messages(r.system, r.messages).unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("messages[0].content[0].text"),
            "{}",
            e.message
        );
        for (content, at) in [
            (json!([[]]), "messages[0].content[0]"),
            (json!([{"type": 5}]), "messages[0].content[0].type"),
        ] {
            let r = parse(json!({"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": content}
            ]}));
            let e = to_messages(r.system, r.messages).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(at), "{}", e.message);
        }
        let e = to_tools(Some(vec![
            json!({"type": 5, "name": "f", "input_schema": {}}),
        ]))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].type"), "{}", e.message);
        let r = parse(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "image", "source": ["url", "https://x"]}]}
        ]}));
        let e = to_messages(r.system, r.messages).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0].source"));
    }
}
