//! The native model gateway, `POST /v1/llm/chat`: one request and response shape across every
//! provider, in weft's own content blocks (`text`, `image`, `tool_use`, `tool_result`,
//! `reasoning`), answered as JSON or as SSE (`provider_fallback`, `provider_chosen`,
//! `content_block_start` / `_delta` / `_stop`, `message_delta`, `done`).
//!
//! It also holds what the front doors share: [`collect`] reads a whole answer with the chat
//! contract's one assembler, and the block-based doors (this route and the Anthropic-compatible
//! `/v1/messages`) number the router's flat events into content blocks with
//! `weft_core::chat::Blocks`.
//!
//! The native API is strict: an unknown field is a 400 that names it. Request fields weft does
//! not model go in `extra`, which is forwarded to the provider as is.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value};
use weft_core::chat::{
    Answer, Blocks, ChatEvent, ChatRequest, Delta, Fallback, Sampling, Start, Step,
};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};
use weft_core::{Error, ErrorCode, Principal, Scope};
use weft_wire::openai::ToolChoice;

use crate::error::{ApiError, Shape};
use crate::extract::{NativeJson, invalid_at};

use crate::AppState;
use crate::dialect::{Dialect, KeepAlive, Sse, serve, to_json};

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

pub use weft_api::llm::LlmChatRequest;
use weft_api::llm::{
    LlmAnswerMessage, LlmBlockDelta, LlmBlockHead, LlmBlockStart, LlmBlockStop, LlmChatResponse,
    LlmContentBlock as LlmBlock, LlmDelta, LlmDone, LlmFallback, LlmFinishReason, LlmMessage,
    LlmMessageDelta, LlmProviderChosen, LlmRole, LlmUsage,
};

/// The contract's role as weft-core's.
fn role(r: LlmRole) -> Role {
    match r {
        LlmRole::System => Role::System,
        LlmRole::Developer => Role::Developer,
        LlmRole::User => Role::User,
        LlmRole::Assistant => Role::Assistant,
        LlmRole::Tool => Role::Tool,
    }
}

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

/// A 400 for an empty `model`, pointing at the list of what may be named.
pub(crate) fn require_model(model: &str) -> std::result::Result<(), Error> {
    if model.trim().is_empty() {
        return Err(Error::invalid(
            "`model` must not be empty; GET /v1/models lists the models, aliases and tiers you can use",
        )
        .with_param("model"));
    }
    Ok(())
}

/// A request header as a string.
pub(crate) fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
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
    s.unwrap_or_else(weft_wire::openai::no_arguments_schema)
}

/// The router's OpenAI-style `tool_choice` for the native one.
fn tool_choice(
    choice: Option<Value>,
    tools: &[ToolSpec],
) -> std::result::Result<Option<Value>, Error> {
    let Some(choice) = choice else {
        return Ok(None);
    };
    let bad = || {
        Error::invalid(format!(
            "`tool_choice` must be \"auto\", \"none\", \"required\" or {{\"type\": \"tool\", \"name\": \"…\"}}, got {choice}"
        ))
        .with_param("tool_choice")
    };
    match &choice {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(Some(choice)),
        Value::Object(o)
            if o.len() == 2 && o.get("type").and_then(Value::as_str) == Some("tool") =>
        {
            let name = o.get("name").and_then(Value::as_str).ok_or_else(bad)?;
            named_tool_choice(name, tools, "tool_choice.name").map(Some)
        }
        _ => Err(bad()),
    }
}

/// `{"type":"function","function":{"name"}}` for a tool the request offers.
pub(crate) fn named_tool_choice(
    name: &str,
    tools: &[ToolSpec],
    param: &str,
) -> std::result::Result<Value, Error> {
    if !tools.iter().any(|t| t.name == name) {
        return Err(invalid_at(
            param,
            format!("names tool {name:?}, which is not among the request's `tools`"),
        ));
    }
    Ok(ToolChoice::Function(name).to_value())
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

/// A role as the wire formats spell it.
pub(crate) fn role_name(r: Role) -> &'static str {
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
    let role = role(m.role);
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
pub(crate) fn to_chat(
    r: LlmChatRequest,
    headers: &HeaderMap,
) -> std::result::Result<ChatRequest, Error> {
    require_model(&r.model)?;
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
        tools.push(ToolSpec {
            name: t.name,
            description: t.description,
            parameters: schema_or_empty(t.parameters),
        });
    }
    let mut messages = Vec::with_capacity(r.messages.len());
    for (i, m) in r.messages.into_iter().enumerate() {
        messages.push(to_message(i, m)?);
    }
    let tool_choice = tool_choice(r.tool_choice, &tools)?;
    let s = r.sampling;
    Ok(ChatRequest {
        model: r.model,
        messages,
        tools,
        tool_choice,
        sampling: Sampling {
            temperature: s.temperature,
            top_p: s.top_p,
            max_tokens: s.max_tokens,
            stop: s.stop,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
        },
        response_format: r.response_format,
        // An empty id is no id (as over the gRPC hop).
        user: r.user.filter(|u| !u.is_empty()),
        extra: r.extra,
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream: r.stream,
    })
}

// --- answers -------------------------------------------------------------------------------------

/// A tool call's arguments as a JSON object (`{}` for none); an error naming the tool when the
/// model produced something else.
pub(crate) fn tool_input(name: &str, input_json: &str) -> std::result::Result<Value, Error> {
    if input_json.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
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

// --- the handler ----------------------------------------------------------------------------------

fn usage_out(u: Usage) -> LlmUsage {
    LlmUsage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    }
}

fn fallback_out(f: &Fallback) -> LlmFallback {
    LlmFallback {
        provider: f.provider.clone(),
        model: f.model.clone(),
        code: f.code.clone(),
        message: f.message.clone(),
    }
}

fn finish_out(f: FinishReason) -> LlmFinishReason {
    match f {
        FinishReason::Stop => LlmFinishReason::Stop,
        FinishReason::Length => LlmFinishReason::Length,
        FinishReason::ToolCalls => LlmFinishReason::ToolCalls,
        FinishReason::ContentFilter => LlmFinishReason::ContentFilter,
    }
}

/// An answer's block in the native shape: a tool call's arguments as a JSON object.
fn block_out(b: ContentBlock) -> std::result::Result<LlmBlock, Error> {
    Ok(match b {
        ContentBlock::Text { text } => LlmBlock::Text { text },
        ContentBlock::Reasoning { text, signature } => LlmBlock::Reasoning { text, signature },
        ContentBlock::ToolUse {
            id,
            name,
            input_json,
        } => {
            let input = tool_input(&name, &input_json)?;
            LlmBlock::ToolUse { id, name, input }
        }
        // An answer holds only text, reasoning and tool calls; these two never reach here.
        ContentBlock::Image { url, detail } => LlmBlock::Image { url, detail },
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => LlmBlock::ToolResult {
            tool_use_id,
            content: content
                .into_iter()
                .map(block_out)
                .collect::<std::result::Result<_, _>>()?,
            is_error,
        },
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
    let req = to_chat(body, &headers).map_err(ApiError::native)?;
    serve(&st, &p, req, Native::new(response_id())).await
}

/// weft's native format: the answer as content blocks, the stream as `provider_*`,
/// `content_block_*`, `message_delta` and `done` events.
#[derive(Clone, Default)]
pub(crate) struct Native {
    id: String,
    blocks: Blocks,
    steps: Vec<Step>,
    usage: Usage,
}

impl Native {
    pub(crate) fn new(id: String) -> Self {
        Self {
            id,
            ..Self::default()
        }
    }
}

impl Dialect for Native {
    const SHAPE: Shape = Shape::Native;
    const KEEPALIVE: KeepAlive = KeepAlive::Comment(KEEPALIVE);

    fn answer(self, a: Answer) -> std::result::Result<String, Error> {
        let content = a
            .blocks
            .into_iter()
            .map(block_out)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        to_json(&LlmChatResponse {
            id: self.id,
            provider: a.provider,
            model: a.model,
            fallbacks: a.fallbacks.iter().map(fallback_out).collect(),
            message: LlmAnswerMessage {
                role: Default::default(),
                content,
            },
            finish_reason: finish_out(a.finish),
            usage: usage_out(a.usage),
        })
    }

    fn event(&mut self, ev: ChatEvent, out: &mut Sse) {
        self.blocks.step(ev, &mut self.steps);
        for step in self.steps.drain(..) {
            match step {
                Step::Fallback(f) => out.json(Some("provider_fallback"), &fallback_out(&f)),
                Step::Chosen {
                    provider, model, ..
                } => out.json(
                    Some("provider_chosen"),
                    &LlmProviderChosen { provider, model },
                ),
                Step::Start { index, start } => {
                    let block = match start {
                        Start::Text => LlmBlockHead::Text,
                        Start::Reasoning => LlmBlockHead::Reasoning,
                        Start::ToolUse { id, name } => LlmBlockHead::ToolUse { id, name },
                    };
                    out.json(Some("content_block_start"), &LlmBlockStart { index, block });
                }
                Step::Delta { index, delta } => {
                    let delta = match delta {
                        Delta::Text(text) => LlmDelta::TextDelta { text },
                        Delta::Reasoning(text) => LlmDelta::ReasoningDelta { text },
                        Delta::Signature(signature) => LlmDelta::SignatureDelta { signature },
                        Delta::InputJson(partial_json) => LlmDelta::InputJsonDelta { partial_json },
                    };
                    out.json(Some("content_block_delta"), &LlmBlockDelta { index, delta });
                }
                Step::Stop { index } => {
                    out.json(Some("content_block_stop"), &LlmBlockStop { index });
                }
                Step::Usage(u) => self.usage = u,
                Step::Finish(f) => out.json(
                    Some("message_delta"),
                    &LlmMessageDelta {
                        finish_reason: finish_out(f),
                        usage: usage_out(self.usage),
                    },
                ),
            }
        }
    }

    fn end(&mut self, finished: bool, out: &mut Sse) {
        if finished {
            out.json(Some("done"), &LlmDone::default());
        } else {
            self.error(&weft_core::chat::ended_early(), out);
        }
    }

    fn error(&mut self, e: &Error, out: &mut Sse) {
        out.json(Some("error"), &e.native_body());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
