//! The model routes beyond OpenAI's: the Anthropic-compatible Messages API (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`) and weft's native model gateway (`POST /v1/llm/chat`).
//!
//! The Anthropic-compatible types describe Anthropic's wire format for the document; the
//! gateway's door still parses with its own (`crate::messages` in the gateway), which these mirror.
//! The native types are the route's own: the gateway reads [`LlmChatRequest`] and answers with
//! [`LlmChatResponse`] and, when streaming, the events below.

use schemars::JsonSchema;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::base::{one_of, tidy};
use crate::common::SseEvent;
use crate::op::{Op, Security};

// --- the Anthropic-compatible door ----------------------------------------------------------------

/// Anthropic's Messages request. Fields not listed (e.g. service_tier) are forwarded to providers that have them.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "max_tokens": 64, "messages": [{"role": "user", "content": "Say hi"}]}))]
pub struct MessagesRequest {
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_tokens: u32,
    #[serde(flatten)]
    pub params: MessagesParams,
}

/// A Messages request; max_tokens may be left out.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "messages": [{"role": "user", "content": "Say hi"}]}))]
pub struct CountTokensRequest {
    #[serde(default)]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_tokens: Option<u32>,
    #[serde(flatten)]
    pub params: MessagesParams,
}

/// What a Messages request holds besides `max_tokens`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct MessagesParams {
    /// a model, an alias, provider/model or tier:<name>
    #[schemars(length(min = 1))]
    pub model: String,
    #[serde(default)]
    pub system: Option<SystemPrompt>,
    #[schemars(length(min = 1))]
    pub messages: Vec<InMessage>,
    #[serde(default)]
    pub tools: Option<Vec<AnthropicTool>>,
    #[serde(default)]
    pub tool_choice: Option<AnthropicToolChoice>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub temperature: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 4294967295u32))]
    pub top_k: Option<u32>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub metadata: Option<AnthropicMetadata>,
    /// forwarded to providers that have it
    #[serde(default)]
    pub thinking: Option<Map<String, Value>>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `system`: text, or text blocks.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum SystemPrompt {
    Text(String),
    Blocks(Vec<SystemBlock>),
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct SystemBlock {
    #[serde(rename = "type")]
    pub kind: TextKind,
    pub text: String,
    /// accepted and ignored (weft routes to providers without prompt caching controls)
    #[serde(default)]
    pub cache_control: Option<Value>,
}

// `"text"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum TextKind {
    #[default]
    Text,
}

/// One message of the conversation.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct InMessage {
    pub role: AnthropicRole,
    pub content: InContent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum AnthropicRole {
    User,
    Assistant,
}

/// A message's content: text, or content blocks.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum InContent {
    Text(String),
    Blocks(#[schemars(length(min = 1))] Vec<InBlock>),
}

/// A content block, by `type`; its other fields are Anthropic's.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct InBlock {
    #[serde(rename = "type")]
    pub kind: InBlockKind,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum InBlockKind {
    Text,
    Image,
    ToolUse,
    ToolResult,
    Thinking,
    RedactedThinking,
}

/// A tool the model may call (a custom tool: server tools are refused).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct AnthropicTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Map<String, Value>,
    /// server tools are refused
    #[serde(default, rename = "type")]
    #[schemars(with = "CustomKind")]
    pub kind: Option<CustomKind>,
}

// `"custom"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum CustomKind {
    #[default]
    Custom,
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(inline)]
pub enum AnthropicToolChoice {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        /// one of the request's tools
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct AnthropicMetadata {
    #[serde(default)]
    pub user_id: Option<String>,
}

/// Anthropic's message (the door's answer).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct AnthropicMessage {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: MessageKind,
    pub role: AssistantRole,
    /// the model as requested
    pub model: String,
    pub content: Vec<OutBlock>,
    pub stop_reason: StopReason,
    #[serde(default)]
    #[schemars(with = "()")]
    pub stop_sequence: Option<String>,
    pub usage: AnthropicUsage,
}

// `"message"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum MessageKind {
    #[default]
    Message,
}

// `"assistant"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum AssistantRole {
    #[default]
    Assistant,
}

/// A block of an answer, by `type`; its other fields are Anthropic's.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct OutBlock {
    #[serde(rename = "type")]
    pub kind: OutBlockKind,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum OutBlockKind {
    Text,
    Thinking,
    ToolUse,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    ToolUse,
    Refusal,
}

/// input_tokens excludes cached tokens, as Anthropic counts them
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(inline)]
pub struct AnthropicUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

/// The answer of `POST /v1/messages/count_tokens`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct TokenCount {
    pub input_tokens: u64,
}

/// An error in Anthropic's shape.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct AnthropicError {
    #[serde(rename = "type")]
    pub kind: ErrorKind,
    pub error: AnthropicErrorBody,
}

// `"error"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ErrorKind {
    #[default]
    Error,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct AnthropicErrorBody {
    #[serde(rename = "type")]
    pub kind: AnthropicErrorType,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum AnthropicErrorType {
    InvalidRequestError,
    RequestTooLarge,
    AuthenticationError,
    PermissionError,
    NotFoundError,
    ConflictError,
    RateLimitError,
    TimeoutError,
    OverloadedError,
    ApiError,
}

// --- the native gateway: the request ------------------------------------------------------------------

/// `POST /v1/llm/chat`. Strict: an unknown field is a 400 naming it; provider-specific fields go
/// in `extra`.
#[derive(Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "messages": [{"role": "user", "content": "Say hi"}], "sampling": {"max_tokens": 64}}))]
pub struct LlmChatRequest {
    /// a model, an alias, provider/model or tier:<name>
    #[schemars(length(min = 1))]
    pub model: String,
    #[schemars(length(min = 1))]
    pub messages: Vec<LlmMessage>,
    #[serde(default)]
    pub tools: Vec<LlmTool>,
    /// `"auto"`, `"none"`, `"required"` or `{"type": "tool", "name": …}` (checked by the route).
    #[serde(default)]
    #[schemars(with = "Option<LlmToolChoice>")]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub sampling: LlmSampling,
    /// OpenAI-style: {type: json_object} or {type: json_schema, json_schema}
    #[serde(default)]
    #[schemars(with = "Option<Map<String, Value>>")]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub user: Option<String>,
    /// provider-specific request fields (thinking, top_k, reasoning_effort, …), forwarded unchanged
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// Who says a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum LlmRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline)]
pub struct LlmMessage {
    pub role: LlmRole,
    /// A string is one text block.
    #[serde(deserialize_with = "text_or_blocks")]
    #[schemars(with = "LlmContent")]
    pub content: Vec<LlmContentBlock>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A message's content in the document: text, or at least one block.
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
#[expect(
    dead_code,
    reason = "a schema only: the content is read by `text_or_blocks`"
)]
enum LlmContent {
    Text(String),
    Blocks(#[schemars(length(min = 1))] Vec<LlmContentBlock>),
}

/// A tool result's content in the document: text, or blocks (text and images).
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
#[expect(
    dead_code,
    reason = "a schema only: the content is read by `text_or_blocks`"
)]
enum LlmResultContent {
    Text(String),
    Blocks(#[schemars(length(min = 0))] Vec<LlmContentBlock>),
}

/// weft's content block. A `tool_use` carries its arguments as a JSON object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    remote = "Self",
    tag = "type",
    rename_all = "snake_case",
    deny_unknown_fields
)]
#[schemars(transform = tidy)]
pub enum LlmContentBlock {
    Text {
        text: String,
    },
    Image {
        /// https: or data: URL
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        #[schemars(with = "Map<String, Value>")]
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, deserialize_with = "text_or_blocks")]
        #[schemars(with = "LlmResultContent")]
        content: Vec<LlmContentBlock>,
        #[serde(default)]
        is_error: bool,
    },
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
}

impl LlmContentBlock {
    /// The block's `type`.
    pub fn kind(&self) -> &'static str {
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
fn text_or_blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<LlmContentBlock>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<LlmContentBlock>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or an array of content blocks")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(vec![LlmContentBlock::Text { text: s.to_owned() }])
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline)]
pub struct LlmTool {
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// a JSON schema
    #[serde(default)]
    #[schemars(with = "Option<Map<String, Value>>")]
    pub parameters: Option<Value>,
}

/// `tool_choice` in the document.
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
#[expect(
    dead_code,
    reason = "a schema only: the route reads `tool_choice` as JSON and checks it"
)]
enum LlmToolChoice {
    Mode(LlmToolMode),
    Tool(LlmNamedTool),
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
#[expect(dead_code, reason = "a schema only")]
enum LlmToolMode {
    Auto,
    None,
    Required,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
#[expect(dead_code, reason = "a schema only")]
struct LlmNamedTool {
    #[serde(rename = "type")]
    kind: ToolKind,
    name: String,
}

// `"tool"`, always.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
#[expect(dead_code, reason = "a schema only")]
enum ToolKind {
    Tool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline)]
pub struct LlmSampling {
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[schemars(range(min = i64::MIN, max = i64::MAX))]
    pub seed: Option<i64>,
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
}

// Objects only: serde's derive would also read a struct (and an internally tagged enum) from a
// sequence of its fields, so `"sampling": [0.5]` or `"messages": [["user", "hi"]]` would pass.
crate::objects_only!(deserialize: LlmChatRequest, LlmMessage, LlmTool, LlmSampling);
/// Read only from a JSON object whose `type` is a string: serde's reading of a tagged enum would
/// also take a variant's index (`"type": 0` as `text`), which the document does not allow.
impl<'de> Deserialize<'de> for LlmContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let crate::objects::Fields(map) = crate::objects::object_only(d)?;
        if let Some(t) = map.get("type").filter(|t| !t.is_string()) {
            return Err(serde::de::Error::custom(format!(
                "invalid type: `type` is {t}, expected a string naming the block (text, image, tool_use, tool_result or reasoning)"
            )));
        }
        LlmContentBlock::deserialize(Value::Object(map)).map_err(serde::de::Error::custom)
    }
}

impl Serialize for LlmContentBlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LlmContentBlock::serialize(self, s)
    }
}

// --- the native gateway: the answer ---------------------------------------------------------------------

/// The answer of `POST /v1/llm/chat` (without `stream`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct LlmChatResponse {
    pub id: String,
    pub provider: String,
    /// the provider's model that answered
    pub model: String,
    pub fallbacks: Vec<LlmFallback>,
    pub message: LlmAnswerMessage,
    pub finish_reason: LlmFinishReason,
    pub usage: LlmUsage,
}

/// A candidate that failed before the one that answered (also the stream's `provider_fallback`
/// event).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(inline)]
pub struct LlmFallback {
    pub provider: String,
    pub model: String,
    pub code: String,
    pub message: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(inline)]
pub struct LlmAnswerMessage {
    pub role: AssistantRole,
    pub content: Vec<LlmContentBlock>,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum LlmFinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

/// prompt_tokens includes the cached tokens
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
#[schemars(inline)]
pub struct LlmUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

// --- the native gateway: stream events (the `data` of each SSE event, by `event` name) ---------------

/// `provider_chosen`: the candidate that is answering.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LlmProviderChosen {
    pub provider: String,
    pub model: String,
}

/// `content_block_start`: a block opens at `index`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LlmBlockStart {
    pub index: u32,
    pub block: LlmBlockHead,
}

/// What a block that starts is.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmBlockHead {
    Text,
    Reasoning,
    ToolUse { id: String, name: String },
}

/// `content_block_delta`: more of the block at `index`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LlmBlockDelta {
    pub index: u32,
    pub delta: LlmDelta,
}

/// A piece of a block.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LlmDelta {
    TextDelta { text: String },
    ReasoningDelta { text: String },
    SignatureDelta { signature: String },
    InputJsonDelta { partial_json: String },
}

/// `content_block_stop`: the block at `index` is complete.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LlmBlockStop {
    pub index: u32,
}

/// `message_delta`: why the answer ended, and its usage.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LlmMessageDelta {
    pub finish_reason: LlmFinishReason,
    pub usage: LlmUsage,
}

/// `done`: the stream is complete (an empty object).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct LlmDone {}

// --- routes -----------------------------------------------------------------------------------

/// The errors of a route that reads a chat request, in the error shape `E`; `model` adds those
/// of calling a model.
fn chat_errors<E: JsonSchema>(op: Op, model: bool) -> Op {
    let op = op
        .answer::<E>(
            400,
            "invalid request; the message names the field and how to fix it",
        )
        .answer::<E>(401, "missing, invalid, expired or revoked token")
        .answer::<E>(403, "the token lacks llm:call");
    let op = if model {
        op.answer::<E>(404, "unknown model, alias or tier")
    } else {
        op
    };
    let op = op
        .answer::<E>(413, "body larger than gateway.max_body_bytes")
        .answer::<E>(415, "body is not JSON");
    if !model {
        return op;
    }
    op.answer::<E>(429, "rate limited; Retry-After says when to retry")
        .answer::<E>(
            502,
            "every upstream candidate failed, or the model produced invalid tool arguments",
        )
        .answer::<E>(503, "the router is unavailable")
        .answer::<E>(504, "no answer in time")
}

pub fn ops() -> Vec<Op> {
    vec![
        chat_errors::<AnthropicError>(
            Op::post("/v1/messages", "Anthropic-compatible Messages API (JSON, or SSE with stream:true) routed to any provider")
                .describe("Scope: llm:call. The key may be sent as `Authorization: Bearer wft_…` or `x-api-key: wft_…`; `anthropic-version` / `anthropic-beta` are ignored. `model` is a model, an alias or tier:<name>; routing hints go in `x-weft-provider` / `x-weft-tier`. Streams use Anthropic's events: message_start (usage zero), content_block_start / content_block_delta (text_delta, input_json_delta, thinking_delta, signature_delta) / content_block_stop, message_delta (stop_reason and the real usage), message_stop, ping while idle, and `error` for a failure mid-stream. Server tools and document blocks are refused with 400. Errors use Anthropic's shape.")
                .tag("anthropic")
                .security(Security::Bearer)
                .body::<MessagesRequest>()
                .ok::<AnthropicMessage>("the message (application/json), or its SSE stream (text/event-stream)")
                .or_in::<SseEvent>("text/event-stream"),
            true,
        ),
        chat_errors::<AnthropicError>(
            Op::post("/v1/messages/count_tokens", "Estimate the input tokens of a Messages request")
                .describe("Scope: llm:call. An estimate, not a provider's tokenizer: a quarter of the characters of the system prompt, messages, tool calls, tool results and tool definitions, plus 1600 per image. The body is validated as for /v1/messages; max_tokens is not needed.")
                .tag("anthropic")
                .security(Security::Bearer)
                .body::<CountTokensRequest>()
                .ok::<TokenCount>("the estimate"),
            false,
        ),
        chat_errors::<crate::Error>(
            Op::post("/v1/llm/chat", "weft's native model gateway: one request/response shape across providers (JSON, or SSE with stream:true)")
                .describe("Scope: llm:call. Strict: an unknown field is a 400 naming it; provider-specific fields go in `extra`. Routing hints go in `x-weft-provider` / `x-weft-tier`. SSE events: provider_fallback {provider, model, code, message} per failed candidate, provider_chosen {provider, model}, content_block_start {index, block: {type: text|reasoning|tool_use (id, name)}}, content_block_delta {index, delta: text_delta {text} | reasoning_delta {text} | signature_delta {signature} | input_json_delta {partial_json}}, content_block_stop {index}, message_delta {finish_reason, usage}, done {}; a failure mid-stream is `error` {error: {code, message}}. Keepalive comments every 15 s.")
                .tag("llm")
                .security(Security::Bearer)
                .body::<LlmChatRequest>()
                .ok::<LlmChatResponse>("the answer (application/json), or its SSE stream (text/event-stream)")
                .or_in::<SseEvent>("text/event-stream"),
            true,
        ),
    ]
}
