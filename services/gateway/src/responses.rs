//! The OpenAI Responses API door: `POST /v1/responses` (JSON, or SSE with the typed
//! `response.*` events), `GET` and `DELETE /v1/responses/{id}`, so the OpenAI Agents SDK, the
//! Codex CLI and `client.responses` reach any provider through weft. A fourth dialect of the
//! chat pipeline ([`crate::dialect`]): `model` is resolved by the router, the routing hints,
//! quotas, usage and `x-ratelimit-*` are the other doors'.
//!
//! How a request maps onto weft's chat contract:
//! - `instructions` is a system message first; `input` is a string (one user message) or items:
//!   messages (`input_text`, `input_image` by URL, an assistant's `output_text`/`refusal`),
//!   `function_call` and `function_call_output`, and `reasoning` (its text, and its
//!   `encrypted_content` as the provider's signature). Consecutive assistant items (reasoning,
//!   text, calls) are one assistant message, as the chat formats want parallel calls.
//! - `tools` are function tools; a built-in tool (web or file search, computer use, code
//!   interpreter, image generation, MCP, shells, custom grammars) is a 400 naming it: it runs
//!   inside OpenAI's platform, and weft never drops a tool silently. `tool_choice` takes the
//!   modes, a named function and `allowed_tools` (the tools offered are narrowed to it).
//! - `max_output_tokens` caps the answer, `text.format` is the response format, `reasoning.effort`
//!   is forwarded as `reasoning_effort`, `parallel_tool_calls: false` is forwarded; fields weft
//!   does not model are forwarded to providers that have them, as on the other doors.
//! - `store` (default true) keeps the response for `gateway.responses_ttl_secs`, readable,
//!   deletable and continued with `previous_response_id` by the principal that made it only
//!   (anyone else gets a 404, as for an id that never existed). A continuation replays the
//!   stored chain's input and output items before the new input, without the earlier
//!   `instructions`. A stored response is saved before the answer (or the stream's last event)
//!   goes out, so a client can continue from it at once. Failed responses are not stored.
//!
//! Answers: `status` is `completed`, or `incomplete` with `max_output_tokens` / `content_filter`;
//! a stream opens with `response.created` and `response.in_progress`, brackets each output item
//! with `response.output_item.added` / `.done` (text in `response.output_text.delta`, arguments
//! in `response.function_call_arguments.delta`, reasoning in `response.reasoning_text.delta`),
//! and ends with `response.completed` (or `response.incomplete`); a failure mid-stream is an
//! `error` event followed by `response.failed`.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use weft_core::chat::{Answer, Blocks, ChatEvent, ChatRequest, Delta, Sampling, Start, Step};
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};
use weft_core::{Error, ErrorCode, Principal, TenantId};
use weft_store::{Chain, NewResponse, ResponseStore};
use weft_wire::responses::{self as wire, Event, Item, Part};

use crate::AppState;
use crate::dialect::{Dialect, KeepAlive, Sse, collect, json_response, sse_response, to_json};
use crate::error::{ApiError, Shape};
use crate::extract::{OpenAiJson, ValidJson, invalid_at, typed};
use crate::llm::{header, named_tool_choice, range, require_model, role_name};
use crate::openai::unix_now;

type Result<T> = std::result::Result<T, ApiError>;

/// The longest `metadata` OpenAI takes: 16 pairs, keys of 64 and values of 512 characters.
const METADATA_PAIRS: usize = 16;
const METADATA_KEY: usize = 64;
const METADATA_VALUE: usize = 512;

/// The Responses routes (the bearer and `llm:call` layers are added by the caller).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/responses", post(create_response_handler))
        .route(
            "/v1/responses/{id}",
            get(get_response_handler).delete(delete_response_handler),
        )
}

// --- request ------------------------------------------------------------------------------------

/// `POST /v1/responses`.
#[derive(Deserialize)]
pub struct ResponsesRequest {
    model: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    instructions: Option<Value>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    truncation: Option<String>,
    /// Extra output OpenAI can add (`reasoning.encrypted_content`, …); weft's output already
    /// carries what it has, so this is accepted and has no effect.
    #[serde(default)]
    include: Option<Vec<String>>,
    #[serde(default)]
    stream_options: Option<Value>,
    /// A cap on built-in tool calls; weft has no built-in tools.
    #[serde(default)]
    max_tool_calls: Option<u32>,
    /// The Codex CLI's own metadata about its session (not an OpenAI field): never forwarded.
    #[serde(default)]
    client_metadata: Option<Value>,
    #[serde(default)]
    background: Option<bool>,
    #[serde(default)]
    conversation: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct MessageIn {
    role: String,
    content: Value,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct TextIn {
    text: String,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct RefusalIn {
    refusal: String,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ImageIn {
    #[serde(default)]
    image_url: Option<String>,
    #[serde(default)]
    file_id: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct CallIn {
    call_id: String,
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct CallOutputIn {
    call_id: String,
    output: Value,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct ReasoningIn {
    #[serde(default)]
    summary: Vec<TextIn>,
    #[serde(default)]
    content: Option<Vec<TextIn>>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct FunctionToolIn {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    /// Whether the model must follow the schema exactly; providers that have it get the schema
    /// as it is (weft does not forward the flag, as on the Chat Completions door).
    #[serde(default)]
    strict: Option<bool>,
}

weft_core::objects_only!(
    deserialize: MessageIn,
    TextIn,
    RefusalIn,
    ImageIn,
    CallIn,
    CallOutputIn,
    ReasoningIn,
    FunctionToolIn,
);

/// An object's `type`, when it has a string one.
fn type_of(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// Where an item's assistant blocks go: the assistant message being built, opened when the
/// last message is not one.
fn assistant_blocks(out: &mut Vec<Message>) -> &mut Vec<ContentBlock> {
    if out.last().is_none_or(|m| m.role != Role::Assistant) {
        out.push(Message {
            role: Role::Assistant,
            content: Vec::new(),
            name: None,
        });
    }
    let last = out.len() - 1;
    &mut out[last].content
}

/// A message's content parts (a string is one text part).
fn parts(content: Value, role: Role, path: &str) -> std::result::Result<Vec<ContentBlock>, Error> {
    let items = match content {
        Value::String(text) => return Ok(vec![ContentBlock::Text { text }]),
        Value::Array(items) => items,
        other => {
            return Err(invalid_at(
                path,
                format!("must be a string or an array of content parts, got {other}"),
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (j, part) in items.into_iter().enumerate() {
        let p = format!("{path}[{j}]");
        let Some(ty) = type_of(&part).map(str::to_owned) else {
            return Err(invalid_at(
                &format!("{p}.type"),
                "is missing; each content part is an object with a `type` such as \"input_text\"",
            ));
        };
        let block = match (ty.as_str(), role) {
            ("input_text", _) | ("output_text", Role::Assistant) | ("text", _) => {
                ContentBlock::Text {
                    text: typed::<TextIn>(part, &p)?.text,
                }
            }
            ("refusal", Role::Assistant) => ContentBlock::Text {
                text: typed::<RefusalIn>(part, &p)?.refusal,
            },
            ("input_image", r) if r != Role::Assistant => {
                let img: ImageIn = typed(part, &p)?;
                match (img.image_url, img.file_id) {
                    (Some(url), _) => ContentBlock::Image {
                        url,
                        detail: img.detail.filter(|d| d != "auto"),
                    },
                    (None, Some(_)) => {
                        return Err(invalid_at(
                            &format!("{p}.file_id"),
                            "is not supported: weft has no Files API; send the image as \
                             `image_url` (an https or data: URL)",
                        ));
                    }
                    (None, None) => {
                        return Err(invalid_at(
                            &format!("{p}.image_url"),
                            "is missing; an `input_image` part needs `image_url`",
                        ));
                    }
                }
            }
            ("input_file" | "input_audio", _) => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!(
                        "\"{ty}\" is not supported by weft's Responses API (it routes to \
                         providers that take text and images); send its text as `input_text`"
                    ),
                ));
            }
            _ => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!(
                        "\"{ty}\" is not a content part of a {} message here; use \
                         `input_text` or `input_image` (an assistant's: `output_text` or `refusal`)",
                        role_name(role)
                    ),
                ));
            }
        };
        out.push(block);
    }
    Ok(out)
}

/// A function call's output: text, or `input_text` / `input_image` parts.
fn call_output(v: Value, path: &str) -> std::result::Result<Vec<ContentBlock>, Error> {
    match v {
        Value::String(text) => Ok(vec![ContentBlock::Text { text }]),
        Value::Array(_) => parts(v, Role::Tool, path),
        other => Err(invalid_at(
            path,
            format!("must be a string or an array of input_text/input_image parts, got {other}"),
        )),
    }
}

/// The built-in tool item types a client may echo back from OpenAI's platform.
const BUILT_IN_ITEMS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
];

/// `input` as weft messages, appended to `out`.
fn input_messages(input: Value, out: &mut Vec<Message>) -> std::result::Result<(), Error> {
    let items = match input {
        Value::String(text) => {
            out.push(Message {
                role: Role::User,
                content: vec![ContentBlock::Text { text }],
                name: None,
            });
            return Ok(());
        }
        Value::Array(items) => items,
        other => {
            return Err(invalid_at(
                "input",
                format!("must be a string or an array of input items, got {other}"),
            ));
        }
    };
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("input[{i}]");
        if !item.is_object() {
            return Err(invalid_at(
                &path,
                format!(
                    "must be an input item, an object such as {{\"role\": \"user\", \"content\": \"…\"}}, got {item}"
                ),
            ));
        }
        let ty = match item.get("type") {
            None | Some(Value::Null) => "message".to_owned(),
            Some(Value::String(t)) => t.clone(),
            Some(other) => {
                return Err(invalid_at(
                    &format!("{path}.type"),
                    format!("must be a string such as \"message\", got {other}"),
                ));
            }
        };
        match ty.as_str() {
            "message" => {
                let m: MessageIn = typed(item, &path)?;
                let role = match m.role.as_str() {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "system" => Role::System,
                    "developer" => Role::Developer,
                    other => {
                        return Err(invalid_at(
                            &format!("{path}.role"),
                            format!(
                                "must be \"user\", \"assistant\", \"system\" or \"developer\", got {other:?}"
                            ),
                        ));
                    }
                };
                let content = parts(m.content, role, &format!("{path}.content"))?;
                if role == Role::Assistant {
                    assistant_blocks(out).extend(content);
                } else {
                    out.push(Message {
                        role,
                        content,
                        name: None,
                    });
                }
            }
            "function_call" => {
                let c: CallIn = typed(item, &path)?;
                assistant_blocks(out).push(ContentBlock::ToolUse {
                    id: c.call_id,
                    name: c.name,
                    input_json: c.arguments,
                });
            }
            "function_call_output" => {
                let o: CallOutputIn = typed(item, &path)?;
                out.push(Message {
                    role: Role::Tool,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: o.call_id,
                        content: call_output(o.output, &format!("{path}.output"))?,
                        is_error: false,
                    }],
                    name: None,
                });
            }
            "reasoning" => {
                let r: ReasoningIn = typed(item, &path)?;
                let from = r.content.filter(|c| !c.is_empty()).unwrap_or(r.summary);
                let text: String = from.into_iter().map(|t| t.text).collect();
                let signature = r.encrypted_content.filter(|s| !s.is_empty());
                if !text.is_empty() || signature.is_some() {
                    assistant_blocks(out).push(ContentBlock::Reasoning { text, signature });
                }
            }
            "item_reference" => {
                return Err(invalid_at(
                    &format!("{path}.type"),
                    "\"item_reference\" is not supported; send the item itself, or continue a \
                     stored response with `previous_response_id`",
                ));
            }
            t if BUILT_IN_ITEMS.contains(&t) => {
                return Err(invalid_at(
                    &format!("{path}.type"),
                    format!(
                        "\"{t}\" is an item of a built-in tool, which runs inside OpenAI's \
                         platform and which weft cannot run for other providers; use function \
                         tools (`function_call` / `function_call_output`)"
                    ),
                ));
            }
            t => {
                return Err(invalid_at(
                    &format!("{path}.type"),
                    format!(
                        "\"{t}\" is not an input item weft takes; use \"message\", \
                         \"function_call\", \"function_call_output\" or \"reasoning\""
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The request's function tools; built-in tools are refused by name.
fn to_tools(tools: Vec<Value>) -> std::result::Result<Vec<ToolSpec>, Error> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, t) in tools.into_iter().enumerate() {
        let p = format!("tools[{i}]");
        if !t.is_object() {
            return Err(invalid_at(
                &p,
                format!(
                    "must be a tool, an object such as {{\"type\": \"function\", \"name\": \"…\", \"parameters\": {{…}}}}, got {t}"
                ),
            ));
        }
        match type_of(&t) {
            Some("function") => {}
            Some(kind) => {
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| format!(" ({n:?})"))
                    .unwrap_or_default();
                return Err(invalid_at(
                    &format!("{p}.type"),
                    format!(
                        "is {kind:?}{name}, a tool weft cannot honour: built-in tools (web \
                         search, file search, computer use, code interpreter, image generation, \
                         MCP, shells, custom grammars) run inside OpenAI's platform, not at the \
                         providers weft routes to; define a function tool (`\"type\": \
                         \"function\"`, `name`, `parameters`) and run it yourself"
                    ),
                ));
            }
            None => {
                return Err(invalid_at(
                    &format!("{p}.type"),
                    "is missing; a tool is {\"type\": \"function\", \"name\": \"…\", \"parameters\": {…}}",
                ));
            }
        }
        let f: FunctionToolIn = typed(t, &p)?;
        if f.name.trim().is_empty() {
            return Err(invalid_at(&format!("{p}.name"), "must not be empty"));
        }
        let parameters = match f.parameters {
            None | Some(Value::Null) => weft_wire::openai::no_arguments_schema(),
            Some(Value::Object(o)) => Value::Object(o),
            Some(other) => {
                return Err(invalid_at(
                    &format!("{p}.parameters"),
                    format!("must be a JSON schema object, got {other}"),
                ));
            }
        };
        out.push(ToolSpec {
            name: f.name,
            description: f.description.unwrap_or_default(),
            parameters,
        });
    }
    Ok(out)
}

/// The router's OpenAI-style `tool_choice`; `allowed_tools` narrows `tools` in place.
fn tool_choice(
    choice: Value,
    tools: &mut Vec<ToolSpec>,
) -> std::result::Result<Option<Value>, Error> {
    let bad = |c: &Value| {
        invalid_at(
            "tool_choice",
            format!(
                "must be \"auto\", \"none\", \"required\", {{\"type\": \"function\", \"name\": \"…\"}} \
                 or {{\"type\": \"allowed_tools\", \"mode\": \"auto\", \"tools\": […]}}, got {c}"
            ),
        )
    };
    match &choice {
        Value::Null => Ok(None),
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => Ok(Some(choice)),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let Some(name) = o.get("name").and_then(Value::as_str) else {
                    return Err(invalid_at(
                        "tool_choice.name",
                        "is missing; name the function tool to call",
                    ));
                };
                named_tool_choice(name, tools, "tool_choice.name").map(Some)
            }
            Some("allowed_tools") => {
                let mode = match o.get("mode").and_then(Value::as_str) {
                    None => "auto",
                    Some(m @ ("auto" | "required")) => m,
                    Some(m) => {
                        return Err(invalid_at(
                            "tool_choice.mode",
                            format!("must be \"auto\" or \"required\", got {m:?}"),
                        ));
                    }
                };
                let Some(Value::Array(allowed)) = o.get("tools") else {
                    return Err(invalid_at(
                        "tool_choice.tools",
                        "must be an array of {\"type\": \"function\", \"name\": \"…\"}",
                    ));
                };
                let mut names = Vec::with_capacity(allowed.len());
                for (k, a) in allowed.iter().enumerate() {
                    let at = format!("tool_choice.tools[{k}]");
                    match (type_of(a), a.get("name").and_then(Value::as_str)) {
                        (Some("function"), Some(name)) => {
                            named_tool_choice(name, tools, &format!("{at}.name"))?;
                            names.push(name.to_owned());
                        }
                        (Some("function"), None) => {
                            return Err(invalid_at(&format!("{at}.name"), "is missing"));
                        }
                        _ => {
                            return Err(invalid_at(
                                &at,
                                "must name a function tool of the request: {\"type\": \"function\", \"name\": \"…\"}",
                            ));
                        }
                    }
                }
                tools.retain(|t| names.contains(&t.name));
                Ok(Some(Value::String(mode.to_owned())))
            }
            Some(kind) => Err(invalid_at(
                "tool_choice.type",
                format!(
                    "is {kind:?}, a built-in tool weft cannot honour; choose \"auto\", \"none\", \
                     \"required\" or a function tool"
                ),
            )),
            None => Err(bad(&choice)),
        },
        _ => Err(bad(&choice)),
    }
}

/// `text.format` as the chat contract's `response_format`.
fn response_format(format: &Value) -> std::result::Result<Option<Value>, Error> {
    match type_of(format) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(serde_json::json!({"type": "json_object"}))),
        Some("json_schema") => {
            let Some(schema) = format.get("schema").filter(|s| s.is_object()) else {
                return Err(invalid_at(
                    "text.format.schema",
                    "must be a JSON schema object for a \"json_schema\" format",
                ));
            };
            let mut js = Map::new();
            js.insert(
                "name".into(),
                format
                    .get("name")
                    .cloned()
                    .unwrap_or_else(|| Value::String("response".into())),
            );
            js.insert("schema".into(), schema.clone());
            for key in ["strict", "description"] {
                if let Some(v) = format.get(key) {
                    js.insert(key.into(), v.clone());
                }
            }
            Ok(Some(
                serde_json::json!({"type": "json_schema", "json_schema": js}),
            ))
        }
        _ => Err(invalid_at(
            "text.format",
            format!(
                "must be {{\"type\": \"text\"}}, {{\"type\": \"json_object\"}} or {{\"type\": \
                 \"json_schema\", \"name\": \"…\", \"schema\": {{…}}}}, got {format}"
            ),
        )),
    }
}

fn check_metadata(m: &Value) -> std::result::Result<(), Error> {
    let Value::Object(pairs) = m else {
        return Err(invalid_at(
            "metadata",
            format!("must be an object of string values, got {m}"),
        ));
    };
    if pairs.len() > METADATA_PAIRS {
        return Err(invalid_at(
            "metadata",
            format!(
                "may hold at most {METADATA_PAIRS} pairs, got {}",
                pairs.len()
            ),
        ));
    }
    for (k, v) in pairs {
        if k.chars().count() > METADATA_KEY {
            return Err(invalid_at(
                "metadata",
                format!("keys are at most {METADATA_KEY} characters; {k:?} is longer"),
            ));
        }
        match v {
            Value::String(s) if s.chars().count() <= METADATA_VALUE => {}
            Value::String(_) => {
                return Err(invalid_at(
                    &format!("metadata.{k}"),
                    format!("must be at most {METADATA_VALUE} characters"),
                ));
            }
            other => {
                return Err(invalid_at(
                    &format!("metadata.{k}"),
                    format!("must be a string, got {other}"),
                ));
            }
        }
    }
    Ok(())
}

/// What the response object repeats from its request.
#[derive(Clone, Debug)]
pub(crate) struct Echo {
    model: String,
    instructions: Option<Value>,
    max_output_tokens: Option<u32>,
    parallel_tool_calls: bool,
    previous_response_id: Option<String>,
    reasoning_effort: Option<Value>,
    reasoning_summary: Option<Value>,
    store: bool,
    temperature: Option<f64>,
    top_p: Option<f64>,
    text_format: Value,
    tool_choice: Value,
    tools: Vec<Value>,
    user: Option<String>,
    metadata: Value,
}

impl Echo {
    #[cfg(test)]
    pub(crate) fn plain(model: &str, store: bool) -> Self {
        Self {
            model: model.into(),
            instructions: None,
            max_output_tokens: None,
            parallel_tool_calls: true,
            previous_response_id: None,
            reasoning_effort: None,
            reasoning_summary: None,
            store,
            temperature: None,
            top_p: None,
            text_format: serde_json::json!({"type": "text"}),
            tool_choice: Value::String("auto".into()),
            tools: Vec::new(),
            user: None,
            metadata: Value::Object(Map::new()),
        }
    }
}

/// A request, checked and converted.
pub(crate) struct Turn {
    /// The router's request, without the stored chain (added by the handler).
    pub chat: ChatRequest,
    pub echo: Echo,
    /// This turn's input as messages (without `instructions`), as a stored response keeps it.
    pub input: Vec<Message>,
}

/// Validates the request and converts it to the router's contract.
pub(crate) fn to_turn(
    r: ResponsesRequest,
    headers: &HeaderMap,
) -> std::result::Result<Turn, Error> {
    require_model(&r.model)?;
    if r.background == Some(true) {
        return Err(invalid_at(
            "background",
            "must be false: weft answers in the request (stream it for long answers)",
        ));
    }
    if r.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(invalid_at(
            "conversation",
            "is not supported: weft has no Conversations API; continue a stored response with \
             `previous_response_id`, or send the whole conversation as `input`",
        ));
    }
    if r.prompt.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(invalid_at(
            "prompt",
            "is not supported: weft has no stored prompt templates; send the prompt as \
             `instructions` and `input`",
        ));
    }
    if r.max_output_tokens == Some(0) {
        return Err(invalid_at("max_output_tokens", "must be at least 1"));
    }
    range("temperature", r.temperature, 0.0, 2.0)?;
    range("top_p", r.top_p, 0.0, 1.0)?;
    if let Some(t) = r.truncation.as_deref()
        && !matches!(t, "auto" | "disabled")
    {
        return Err(invalid_at(
            "truncation",
            format!("must be \"auto\" or \"disabled\", got {t:?}"),
        ));
    }
    let metadata = match r.metadata {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(m) => {
            check_metadata(&m)?;
            m
        }
    };
    if let Some(id) = &r.previous_response_id
        && (id.is_empty() || !storable_id(id))
    {
        return Err(invalid_at(
            "previous_response_id",
            "must be the id of a stored response (`resp_…`)",
        ));
    }
    let mut messages = Vec::new();
    let instructions = match r.instructions {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            if !s.is_empty() {
                messages.push(Message {
                    role: Role::System,
                    content: vec![ContentBlock::Text { text: s.clone() }],
                    name: None,
                });
            }
            Some(Value::String(s))
        }
        Some(other) => {
            return Err(invalid_at(
                "instructions",
                format!("must be a string, got {other}"),
            ));
        }
    };
    let mut input = Vec::new();
    match r.input {
        None | Some(Value::Null) => {
            if r.previous_response_id.is_none() {
                return Err(invalid_at(
                    "input",
                    "is required: a string, or an array of input items such as \
                     {\"role\": \"user\", \"content\": \"…\"}",
                ));
            }
        }
        Some(i) => input_messages(i, &mut input)?,
    }
    messages.extend(input.iter().cloned());
    let tools_echo = r.tools.clone().unwrap_or_default();
    let mut tools = to_tools(r.tools.unwrap_or_default())?;
    let tool_choice_echo = r
        .tool_choice
        .clone()
        .filter(|c| !c.is_null())
        .unwrap_or_else(|| Value::String("auto".into()));
    let mut tool_choice = match r.tool_choice {
        None => None,
        Some(c) => tool_choice(c, &mut tools)?,
    };
    let mut extra = r.extra;
    let parallel = r.parallel_tool_calls.unwrap_or(true);
    if tools.is_empty() {
        // No tool to choose or to call in parallel (the Codex CLI compacts with `tools: []` and
        // `tool_choice: "auto"`): Chat Completions-style providers refuse a `tool_choice` or
        // `parallel_tool_calls` without tools, and "required" with none would be unanswerable.
        tool_choice = None;
    } else if !parallel {
        extra.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    let (text_format, response_format) = match r.text {
        None | Some(Value::Null) => (serde_json::json!({"type": "text"}), None),
        Some(Value::Object(mut t)) => {
            if let Some(v) = t.remove("verbosity").filter(|v| !v.is_null()) {
                extra.insert("verbosity".into(), v);
            }
            match t.remove("format") {
                None | Some(Value::Null) => (serde_json::json!({"type": "text"}), None),
                Some(f) => {
                    let rf = response_format(&f)?;
                    (f, rf)
                }
            }
        }
        Some(other) => {
            return Err(invalid_at(
                "text",
                format!(
                    "must be an object such as {{\"format\": {{\"type\": \"text\"}}}}, got {other}"
                ),
            ));
        }
    };
    let (reasoning_effort, reasoning_summary) = match r.reasoning {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(o)) => {
            let effort = o.get("effort").filter(|v| !v.is_null()).cloned();
            if let Some(e) = &effort {
                extra.insert("reasoning_effort".into(), e.clone());
            }
            (effort, o.get("summary").filter(|v| !v.is_null()).cloned())
        }
        Some(other) => {
            return Err(invalid_at(
                "reasoning",
                format!("must be an object such as {{\"effort\": \"low\"}}, got {other}"),
            ));
        }
    };
    // Responses-only settings with no provider counterpart: read here, never forwarded.
    let _ = (
        r.include,
        r.stream_options,
        r.max_tool_calls,
        r.client_metadata,
    );
    let stream = r.stream.unwrap_or(false);
    let user = r.user.filter(|u| !u.is_empty());
    let chat = ChatRequest {
        model: r.model.clone(),
        messages,
        tools,
        tool_choice,
        sampling: Sampling {
            temperature: r.temperature,
            top_p: r.top_p,
            max_tokens: r.max_output_tokens,
            ..Sampling::default()
        },
        response_format,
        user: user.clone(),
        extra,
        provider_hint: header(headers, "x-weft-provider"),
        tier_hint: header(headers, "x-weft-tier"),
        stream,
    };
    Ok(Turn {
        chat,
        echo: Echo {
            model: r.model,
            instructions,
            max_output_tokens: r.max_output_tokens,
            parallel_tool_calls: parallel,
            previous_response_id: r.previous_response_id,
            reasoning_effort,
            reasoning_summary,
            store: r.store.unwrap_or(true),
            temperature: r.temperature,
            top_p: r.top_p,
            text_format,
            tool_choice: tool_choice_echo,
            tools: tools_echo,
            user,
            metadata,
        },
        input,
    })
}

// --- answers --------------------------------------------------------------------------------------

fn response_id() -> String {
    format!("resp_{}", uuid::Uuid::now_v7().simple())
}

/// What an output item is.
#[derive(Clone, Debug)]
enum Kind {
    Message,
    Reasoning { signature: Option<String> },
    Call { call_id: String, name: String },
}

/// An output item as it builds up: its text, reasoning or arguments so far.
#[derive(Clone, Debug)]
struct Out {
    id: String,
    kind: Kind,
    text: String,
    /// Its block was closed (a stream that fails leaves the last one open: `incomplete`).
    done: bool,
}

impl Out {
    fn item(&self, status: &'static str, whole: bool) -> Item<'_> {
        let text = if whole { self.text.as_str() } else { "" };
        match &self.kind {
            Kind::Message => Item::Message {
                id: &self.id,
                status,
                role: "assistant",
                content: if whole {
                    vec![Part::output_text(text)]
                } else {
                    Vec::new()
                },
            },
            Kind::Reasoning { signature } => Item::Reasoning {
                id: &self.id,
                summary: [],
                content: if whole {
                    vec![Part::ReasoningText { text }]
                } else {
                    Vec::new()
                },
                encrypted_content: signature.as_deref().filter(|_| whole),
                status,
            },
            Kind::Call { call_id, name } => Item::FunctionCall {
                id: &self.id,
                call_id,
                name,
                arguments: text,
                status,
            },
        }
    }

    /// The item as a block of the stored assistant message.
    fn block(&self) -> ContentBlock {
        match &self.kind {
            Kind::Message => ContentBlock::Text {
                text: self.text.clone(),
            },
            Kind::Reasoning { signature } => ContentBlock::Reasoning {
                text: self.text.clone(),
                signature: signature.clone(),
            },
            Kind::Call { call_id, name } => ContentBlock::ToolUse {
                id: call_id.clone(),
                name: name.clone(),
                input_json: self.text.clone(),
            },
        }
    }
}

fn usage_out(u: &Usage) -> wire::Usage {
    wire::Usage {
        input_tokens: u.prompt_tokens,
        input_tokens_details: wire::InputDetails {
            cached_tokens: u.cache_read_tokens,
        },
        output_tokens: u.completion_tokens,
        output_tokens_details: wire::OutputDetails::default(),
        total_tokens: u.total_tokens,
    }
}

/// A response to keep when it completes: where, for whom, and this turn's input.
pub(crate) struct Keep {
    store: ResponseStore,
    tenant: TenantId,
    subject: String,
    ttl: Duration,
    input: Vec<Message>,
}

impl Keep {
    /// Saves the response (`response`, JSON text) and this turn's messages.
    async fn save(
        self,
        id: String,
        previous: Option<String>,
        response: String,
        answer: Message,
    ) -> std::result::Result<(), Error> {
        let mut items = self.input;
        items.push(answer);
        let items = to_json(&items)?;
        let expires_at = OffsetDateTime::now_utc() + self.ttl;
        self.store
            .insert(NewResponse {
                id: &id,
                tenant: &self.tenant,
                subject: &self.subject,
                previous_id: previous.as_deref(),
                items: &items,
                response: &response,
                expires_at,
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "storing a response");
                e.to_api()
            })
    }
}

/// The Responses format: the response object, or its stream of typed events.
pub(crate) struct Responses {
    id: String,
    created_at: u64,
    echo: Echo,
    seq: u64,
    blocks: Blocks,
    steps: Vec<Step>,
    items: Vec<Out>,
    usage: Usage,
    finish: Option<FinishReason>,
    keep: Option<Keep>,
}

impl Clone for Responses {
    /// A copy that keeps nothing (for the golden tests, which render without a store).
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            created_at: self.created_at,
            echo: self.echo.clone(),
            seq: self.seq,
            blocks: self.blocks.clone(),
            steps: self.steps.clone(),
            items: self.items.clone(),
            usage: self.usage,
            finish: self.finish,
            keep: None,
        }
    }
}

impl Responses {
    pub(crate) fn new(id: String, created_at: u64, echo: Echo, keep: Option<Keep>) -> Self {
        Self {
            id,
            created_at,
            echo,
            seq: 0,
            blocks: Blocks::default(),
            steps: Vec::new(),
            items: Vec::new(),
            usage: Usage::default(),
            finish: None,
            keep,
        }
    }

    /// The suffix item ids share with the response's (`resp_<x>` → `msg_<x>_<n>`).
    fn item_id(&self, prefix: &str, n: usize) -> String {
        let base = self.id.strip_prefix("resp_").unwrap_or(&self.id);
        format!("{prefix}_{base}_{n}")
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq += 1;
        s
    }

    /// `status` and its details, from how the turn finished (or `None`: still going).
    fn status(&self) -> (&'static str, Option<wire::IncompleteDetails>) {
        match self.finish {
            None => ("in_progress", None),
            Some(FinishReason::Length) => (
                "incomplete",
                Some(wire::IncompleteDetails {
                    reason: "max_output_tokens",
                }),
            ),
            Some(FinishReason::ContentFilter) => (
                "incomplete",
                Some(wire::IncompleteDetails {
                    reason: "content_filter",
                }),
            ),
            Some(FinishReason::Stop | FinishReason::ToolCalls) => ("completed", None),
        }
    }

    /// The response object as it stands; `failed` makes it a failed one.
    fn response<'a>(&'a self, failed: Option<&'a Error>) -> wire::Response<'a> {
        let (status, incomplete_details) = match failed {
            Some(_) => ("failed", None),
            None => self.status(),
        };
        let done = status != "in_progress";
        let e = &self.echo;
        wire::Response {
            id: &self.id,
            object: wire::OBJECT,
            created_at: self.created_at,
            status,
            background: false,
            error: failed.map(|err| wire::ErrorObject {
                code: err.code.as_str(),
                message: &err.message,
            }),
            incomplete_details,
            instructions: e.instructions.as_ref(),
            max_output_tokens: e.max_output_tokens,
            model: &e.model,
            output: if done {
                self.items
                    .iter()
                    .map(|o| o.item(if o.done { "completed" } else { "incomplete" }, true))
                    .collect()
            } else {
                Vec::new()
            },
            parallel_tool_calls: e.parallel_tool_calls,
            previous_response_id: e.previous_response_id.as_deref(),
            reasoning: wire::Reasoning {
                effort: e.reasoning_effort.as_ref(),
                summary: e.reasoning_summary.as_ref(),
            },
            store: e.store,
            temperature: e.temperature,
            text: wire::TextConfig {
                format: &e.text_format,
            },
            tool_choice: &e.tool_choice,
            tools: &e.tools,
            top_p: e.top_p,
            truncation: "disabled",
            usage: done.then(|| usage_out(&self.usage)),
            user: e.user.as_deref(),
            metadata: &e.metadata,
        }
    }

    /// The answer's blocks as the stored assistant message.
    fn answer_message(&self) -> Message {
        Message {
            role: Role::Assistant,
            content: self.items.iter().map(Out::block).collect(),
            name: None,
        }
    }

    fn send(out: &mut Sse, e: &Event<'_>) {
        out.json(Some(e.name()), e);
    }

    /// Takes in a whole answer's blocks (the JSON path).
    fn take_answer(&mut self, a: Answer) {
        for (n, b) in a.blocks.into_iter().enumerate() {
            let (kind, text) = match b {
                ContentBlock::Text { text } => (Kind::Message, text),
                ContentBlock::Reasoning { text, signature } => {
                    (Kind::Reasoning { signature }, text)
                }
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                } => (Kind::Call { call_id: id, name }, input_json),
                // An answer holds only text, reasoning and calls.
                ContentBlock::Image { .. } | ContentBlock::ToolResult { .. } => continue,
            };
            let id = self.item_id(prefix(&kind), n);
            self.items.push(Out {
                id,
                kind,
                text,
                done: true,
            });
        }
        self.usage = a.usage;
        self.finish = Some(a.finish);
    }

    /// The whole answer: the response's JSON, and what a stored response keeps.
    pub(crate) async fn finish_answer(mut self, a: Answer) -> std::result::Result<String, Error> {
        self.take_answer(a);
        let body = to_json(&self.response(None))?;
        if let Some(keep) = self.keep.take() {
            let answer = self.answer_message();
            keep.save(
                self.id.clone(),
                self.echo.previous_response_id.clone(),
                body.clone(),
                answer,
            )
            .await?;
        }
        Ok(body)
    }
}

fn prefix(k: &Kind) -> &'static str {
    match k {
        Kind::Message => "msg",
        Kind::Reasoning { .. } => "rs",
        Kind::Call { .. } => "fc",
    }
}

impl Dialect for Responses {
    const SHAPE: Shape = Shape::OpenAi;
    const KEEPALIVE: KeepAlive = KeepAlive::None;

    fn answer(mut self, a: Answer) -> std::result::Result<String, Error> {
        self.take_answer(a);
        to_json(&self.response(None))
    }

    fn open(&mut self, out: &mut Sse) {
        let created = self.next_seq();
        let in_progress = self.next_seq();
        let r = self.response(None);
        Self::send(
            out,
            &Event::Created {
                sequence_number: created,
                response: &r,
            },
        );
        Self::send(
            out,
            &Event::InProgress {
                sequence_number: in_progress,
                response: &r,
            },
        );
    }

    fn event(&mut self, ev: ChatEvent, out: &mut Sse) {
        self.blocks.step(ev, &mut self.steps);
        let steps = std::mem::take(&mut self.steps);
        for step in steps {
            match step {
                Step::Fallback(_) | Step::Chosen { .. } => {}
                Step::Usage(u) => self.usage = u,
                Step::Finish(f) => self.finish = Some(f),
                Step::Start { index: _, start } => {
                    let n = self.items.len();
                    let kind = match start {
                        Start::Text => Kind::Message,
                        Start::Reasoning => Kind::Reasoning { signature: None },
                        Start::ToolUse { id, name } => Kind::Call { call_id: id, name },
                    };
                    let id = self.item_id(prefix(&kind), n);
                    self.items.push(Out {
                        id,
                        kind,
                        text: String::new(),
                        done: false,
                    });
                    let seq = self.next_seq();
                    let o = &self.items[n];
                    let output_index = index(n);
                    Self::send(
                        out,
                        &Event::OutputItemAdded {
                            sequence_number: seq,
                            output_index,
                            item: o.item("in_progress", false),
                        },
                    );
                    if matches!(o.kind, Kind::Message) {
                        let seq = self.next_seq();
                        let o = &self.items[n];
                        Self::send(
                            out,
                            &Event::ContentPartAdded {
                                sequence_number: seq,
                                item_id: &o.id,
                                output_index,
                                content_index: 0,
                                part: Part::output_text(""),
                            },
                        );
                    }
                }
                Step::Delta { index: b, delta } => {
                    let Some(n) = self.item_at(b) else { continue };
                    let output_index = index(n);
                    match delta {
                        Delta::Signature(s) => {
                            // No event: the signature comes with the item's `done`.
                            if let Kind::Reasoning { signature } = &mut self.items[n].kind {
                                *signature = Some(s);
                            }
                        }
                        Delta::Text(t) | Delta::Reasoning(t) | Delta::InputJson(t) => {
                            let seq = self.next_seq();
                            self.items[n].text.push_str(&t);
                            let o = &self.items[n];
                            let item_id = &o.id;
                            let e = match o.kind {
                                Kind::Message => Event::OutputTextDelta {
                                    sequence_number: seq,
                                    item_id,
                                    output_index,
                                    content_index: 0,
                                    delta: &t,
                                    logprobs: [],
                                },
                                Kind::Reasoning { .. } => Event::ReasoningTextDelta {
                                    sequence_number: seq,
                                    item_id,
                                    output_index,
                                    content_index: 0,
                                    delta: &t,
                                },
                                Kind::Call { .. } => Event::FunctionCallArgumentsDelta {
                                    sequence_number: seq,
                                    item_id,
                                    output_index,
                                    delta: &t,
                                },
                            };
                            Self::send(out, &e);
                        }
                    }
                }
                Step::Stop { index: b } => {
                    let Some(n) = self.item_at(b) else { continue };
                    self.items[n].done = true;
                    let output_index = index(n);
                    let first = self.seq;
                    let o = &self.items[n];
                    let mut seq = first;
                    let mut next = || {
                        let s = seq;
                        seq += 1;
                        s
                    };
                    match &o.kind {
                        Kind::Message => {
                            Self::send(
                                out,
                                &Event::OutputTextDone {
                                    sequence_number: next(),
                                    item_id: &o.id,
                                    output_index,
                                    content_index: 0,
                                    text: &o.text,
                                    logprobs: [],
                                },
                            );
                            Self::send(
                                out,
                                &Event::ContentPartDone {
                                    sequence_number: next(),
                                    item_id: &o.id,
                                    output_index,
                                    content_index: 0,
                                    part: Part::output_text(&o.text),
                                },
                            );
                        }
                        Kind::Reasoning { .. } => Self::send(
                            out,
                            &Event::ReasoningTextDone {
                                sequence_number: next(),
                                item_id: &o.id,
                                output_index,
                                content_index: 0,
                                text: &o.text,
                            },
                        ),
                        Kind::Call { name, .. } => Self::send(
                            out,
                            &Event::FunctionCallArgumentsDone {
                                sequence_number: next(),
                                item_id: &o.id,
                                output_index,
                                name,
                                arguments: &o.text,
                            },
                        ),
                    }
                    Self::send(
                        out,
                        &Event::OutputItemDone {
                            sequence_number: next(),
                            output_index,
                            item: o.item("completed", true),
                        },
                    );
                    self.seq = seq;
                }
            }
        }
    }

    fn settle(
        &mut self,
        finished: bool,
    ) -> Option<futures::future::BoxFuture<'static, std::result::Result<(), Error>>> {
        if !finished {
            return None;
        }
        let keep = self.keep.take()?;
        let body = match to_json(&self.response(None)) {
            Ok(b) => b,
            Err(e) => return Some(Box::pin(async move { Err(e) })),
        };
        let answer = self.answer_message();
        let (id, previous) = (self.id.clone(), self.echo.previous_response_id.clone());
        Some(Box::pin(keep.save(id, previous, body, answer)))
    }

    fn end(&mut self, finished: bool, out: &mut Sse) {
        if !finished {
            self.error(&weft_core::chat::ended_early(), out);
            return;
        }
        let seq = self.next_seq();
        let r = self.response(None);
        let e = if r.status == "completed" {
            Event::Completed {
                sequence_number: seq,
                response: &r,
            }
        } else {
            Event::Incomplete {
                sequence_number: seq,
                response: &r,
            }
        };
        Self::send(out, &e);
    }

    fn error(&mut self, e: &Error, out: &mut Sse) {
        let seq = self.next_seq();
        Self::send(
            out,
            &Event::Error {
                sequence_number: seq,
                code: e.code.as_str(),
                message: &e.message,
                param: e.param.as_deref(),
            },
        );
        let seq = self.next_seq();
        let r = self.response(Some(e));
        Self::send(
            out,
            &Event::Failed {
                sequence_number: seq,
                response: &r,
            },
        );
    }
}

impl Responses {
    /// The output item of the router's block `b` (blocks and items are numbered alike).
    fn item_at(&self, b: u32) -> Option<usize> {
        usize::try_from(b).ok().filter(|n| *n < self.items.len())
    }
}

fn index(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

// --- handlers --------------------------------------------------------------------------------------

/// `POST /v1/responses`.
#[tracing::instrument(skip_all)]
pub async fn create_response_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    headers: HeaderMap,
    ValidJson(body): OpenAiJson<ResponsesRequest>,
) -> Result<Response> {
    let Turn {
        mut chat,
        echo,
        input,
    } = to_turn(body, &headers).map_err(ApiError::openai)?;
    if let Some(prev) = &echo.previous_response_id {
        let earlier = continued(&st, &p, prev).await.map_err(ApiError::openai)?;
        // After `instructions` (this turn's only), before this turn's input.
        let at = usize::from(matches!(&echo.instructions, Some(Value::String(s)) if !s.is_empty()));
        chat.messages.splice(at..at, earlier);
    }
    if chat.messages.iter().all(|m| m.role == Role::System) {
        return Err(ApiError::openai(invalid_at(
            "input",
            "holds no message to answer; send at least one input item (a user message, or a \
             function call's output)",
        )));
    }
    let keep = echo.store.then(|| Keep {
        store: st.responses.clone(),
        tenant: p.tenant.clone(),
        subject: p.subject.clone(),
        ttl: st.responses_ttl,
        input,
    });
    let stream = chat.stream;
    let dialect = Responses::new(response_id(), unix_now(), echo, keep);
    let crate::RouterChat {
        mut events,
        headers,
    } = st.router_chat(&p, chat).await.map_err(ApiError::openai)?;
    if stream {
        return Ok((headers, sse_response(events, dialect)).into_response());
    }
    let answer = collect(&mut events).await.map_err(ApiError::openai)?;
    let body = dialect
        .finish_answer(answer)
        .await
        .map_err(ApiError::openai)?;
    Ok((headers, json_response(body)).into_response())
}

/// The messages of the stored chain ending at `id`, oldest first.
async fn continued(
    st: &AppState,
    p: &Principal,
    id: &str,
) -> std::result::Result<Vec<Message>, Error> {
    let chain = st
        .responses
        .chain(&p.tenant, &p.subject, id)
        .await
        .map_err(|e| e.to_api())?;
    let turns = match chain {
        Chain::Found(turns) => turns,
        Chain::Missing => {
            return Err(Error::invalid(format!(
                "previous response {id:?} was not found: it never existed, expired, was deleted, \
                 was made with `store: false` or by another principal (or a response it \
                 continued is gone); send the whole conversation as `input` instead"
            ))
            .with_param("previous_response_id"));
        }
        Chain::TooLong => {
            return Err(Error::invalid(format!(
                "the chain of responses ending at {id:?} is longer than {} responses; send the \
                 conversation as `input` to start a new one",
                weft_store::MAX_CHAIN
            ))
            .with_param("previous_response_id"));
        }
        Chain::TooLarge => {
            return Err(Error::invalid(format!(
                "the conversation stored up to {id:?} is larger than {} MiB; send what the model \
                 needs of it as `input` to start a new one",
                weft_store::MAX_CHAIN_BYTES >> 20
            ))
            .with_param("previous_response_id"));
        }
    };
    let mut out = Vec::new();
    for t in turns {
        let ms: Vec<Message> = serde_json::from_str(&t).map_err(|e| {
            tracing::error!(error = %e, "reading a stored response");
            Error::internal()
        })?;
        out.extend(ms);
    }
    Ok(out)
}

/// Whether `id` could be a stored response's: ids are at most 100 bytes, and Postgres text
/// holds no U+0000, so anything else is known missing without a query.
fn storable_id(id: &str) -> bool {
    id.len() <= 100 && !id.contains('\0')
}

/// The id of `GET`/`DELETE /v1/responses/{id}`; one that cannot be stored is missing (404 in
/// OpenAI's shape, never axum's plain-text rejection).
fn path_id(
    id: std::result::Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> std::result::Result<String, ApiError> {
    match id {
        Ok(Path(id)) if storable_id(&id) => Ok(id),
        Ok(Path(id)) => Err(not_found(&id)),
        Err(_) => Err(not_found("")),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::openai(
        Error::new(
            ErrorCode::NotFound,
            format!("no response with id {id:?} (it may have expired or been deleted)"),
        )
        .with_param("id"),
    )
}

/// `GET /v1/responses/{id}`: a stored response of the caller's.
#[tracing::instrument(skip_all)]
pub async fn get_response_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    id: std::result::Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response> {
    let id = path_id(id)?;
    match st
        .responses
        .get(&p.tenant, &p.subject, &id)
        .await
        .map_err(|e| ApiError::openai(e.to_api()))?
    {
        Some(body) => Ok(json_response(body)),
        None => Err(not_found(&id)),
    }
}

/// `DELETE /v1/responses/{id}`.
#[tracing::instrument(skip_all)]
pub async fn delete_response_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    id: std::result::Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response> {
    let id = path_id(id)?;
    let deleted = st
        .responses
        .delete(&p.tenant, &p.subject, &id)
        .await
        .map_err(|e| ApiError::openai(e.to_api()))?;
    if !deleted {
        return Err(not_found(&id));
    }
    Ok(axum::Json(wire::Deleted {
        id: &id,
        object: wire::OBJECT,
        deleted: true,
    })
    .into_response())
}

/// The most delete statements one sweep round makes (enough for a whole expired chain of
/// [`weft_store::MAX_CHAIN`] responses).
const SWEEP_STATEMENTS: i64 = 2 * weft_store::MAX_CHAIN;

/// Deletes expired responses every `every` until `stop`.
pub async fn sweep_until(store: ResponseStore, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        // Each statement takes the expired responses nothing continues (a conversation's
        // newest first), so a round goes on while any went, up to a bound.
        for _ in 0..SWEEP_STATEMENTS {
            match store.sweep_expired(1000).await {
                Ok(n) if n > 0 && !stop.is_cancelled() => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "response sweep failed");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: Value) -> ResponsesRequest {
        crate::extract::parse::<ResponsesRequest>(v.to_string().as_bytes())
            .map_err(|e| e.message)
            .expect("parses")
    }

    fn turn(v: Value) -> std::result::Result<Turn, Error> {
        to_turn(parse(v), &HeaderMap::new())
    }

    #[test]
    fn input_items_become_messages_with_calls_joined() {
        let t = turn(json!({
            "model": "m", "instructions": "be brief",
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}],
                 "encrypted_content": "sig"},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "w", "arguments": "{\"x\":1}"},
                {"type": "function_call", "call_id": "c2", "name": "t", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
                {"role": "user", "content": [{"type": "input_text", "text": "and"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}]},
            ],
        }))
        .unwrap();
        let roles: Vec<Role> = t.chat.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant,
                Role::User
            ]
        );
        assert_eq!(
            t.input.len(),
            6,
            "instructions are not part of the stored input"
        );
        let a = &t.chat.messages[2].content;
        assert_eq!(a.len(), 3);
        assert_eq!(
            a[0],
            ContentBlock::Reasoning {
                text: "think".into(),
                signature: Some("sig".into())
            }
        );
        assert_eq!(
            a[2],
            ContentBlock::ToolUse {
                id: "c2".into(),
                name: "t".into(),
                input_json: "{}".into()
            }
        );
        assert_eq!(
            t.chat.messages[6].content[1],
            ContentBlock::Image {
                url: "https://x/y.png".into(),
                detail: None
            }
        );
        assert!(t.echo.store, "store defaults to true");
    }

    #[test]
    fn request_fields_map_onto_the_router_contract() {
        let t = turn(json!({
            "model": "m", "input": "hi", "max_output_tokens": 64, "temperature": 0.5,
            "parallel_tool_calls": false, "user": "u1", "store": false,
            "reasoning": {"effort": "low"}, "service_tier": "auto", "include": ["x"],
            "truncation": "auto", "metadata": {"k": "v"},
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": true}},
            "tools": [{"type": "function", "name": "a", "parameters": {"type": "object"}},
                      {"type": "function", "name": "b"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}]},
        }))
        .unwrap();
        let c = &t.chat;
        assert_eq!(c.sampling.max_tokens, Some(64));
        assert_eq!(c.user.as_deref(), Some("u1"));
        assert_eq!(c.tool_choice, Some(json!("required")));
        assert_eq!(c.tools.len(), 1, "allowed_tools narrows the tools offered");
        assert_eq!(c.tools[0].name, "b");
        assert_eq!(
            c.response_format,
            Some(
                json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": true}})
            )
        );
        assert_eq!(
            Value::Object(c.extra.clone()),
            json!({"parallel_tool_calls": false, "reasoning_effort": "low", "service_tier": "auto"})
        );
        assert!(!t.echo.store);
        assert_eq!(
            t.echo.tools.len(),
            2,
            "the response echoes the tools as sent"
        );
    }

    #[test]
    fn without_tools_there_is_no_tool_choice() {
        // The Codex CLI's compaction request.
        let t = turn(json!({
            "model": "m", "input": "x", "tools": [], "tool_choice": "auto",
            "parallel_tool_calls": false,
        }))
        .unwrap();
        assert_eq!(t.chat.tool_choice, None);
        assert!(t.chat.extra.is_empty(), "{:?}", t.chat.extra);
        let t = turn(json!({
            "model": "m", "input": "x", "tools": [{"type": "function", "name": "a"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": []},
        }))
        .unwrap();
        assert!(t.chat.tools.is_empty());
        assert_eq!(
            t.chat.tool_choice, None,
            "nothing allowed: nothing required"
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases = [
            (json!({"model": "m"}), "input"),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search_preview"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "computer_use_preview"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "nope"}}),
                "tool_choice.name",
            ),
            (
                json!({"model": "m", "input": "x", "tool_choice": {"type": "web_search_preview"}}),
                "tool_choice.type",
            ),
            (
                json!({"model": "m", "input": [{"type": "web_search_call", "id": "w"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": [{"type": "item_reference", "id": "w"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
                "input[0].content[0].type",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
                "input[0].content[0].file_id",
            ),
            (
                json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}),
                "input[0]",
            ),
            (
                json!({"model": "m", "input": "x", "temperature": 3}),
                "temperature",
            ),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
            (
                json!({"model": "m", "input": "x", "background": true}),
                "background",
            ),
            (
                json!({"model": "m", "input": "x", "conversation": "c"}),
                "conversation",
            ),
            (
                json!({"model": "m", "input": "x", "metadata": {"k": 1}}),
                "metadata.k",
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}}),
                "text.format.schema",
            ),
            (json!({"model": "", "input": "x"}), "model"),
        ];
        for (body, param) in cases {
            let e = turn(body.clone()).err().expect("refused");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            assert!(
                e.message.contains(param) || param == "model",
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_stream_brackets_each_item_and_numbers_its_events() {
        let d = Responses::new("resp_x".into(), 1, Echo::plain("m", false), None);
        let (sse, answer) = crate::dialect::render(
            d,
            vec![
                Ok(ChatEvent::TextDelta("Hi".into())),
                Ok(ChatEvent::ToolCallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "f".into(),
                }),
                Ok(ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{}".into(),
                }),
                Ok(ChatEvent::Finish(FinishReason::ToolCalls)),
            ],
        );
        let events: Vec<&str> = sse
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            events,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let seqs: Vec<u64> = sse
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| {
                serde_json::from_str::<Value>(d).unwrap()["sequence_number"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (0..13).collect::<Vec<_>>());
        let a: Value = serde_json::from_str(&answer.unwrap()).unwrap();
        assert_eq!(a["output"][1]["call_id"], "call_1");
        assert_eq!(a["output"][1]["id"], "fc_x_1");
        assert_eq!(a["status"], "completed");
    }
}
