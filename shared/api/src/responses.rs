//! OpenAI's Responses API door: `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`.
//!
//! These types describe OpenAI's wire format for the document; the gateway's door parses with
//! its own (`crate::responses` in the gateway, which checks each input item as it converts it),
//! which these mirror, and writes its answers with `weft_wire::responses`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::base::{one_of, tidy};
use crate::common::SseEvent;
use crate::op::{In, Op};

/// OpenAI's Responses request. Fields not listed are forwarded to providers that have them.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "input": "Say hi"}))]
pub struct ResponsesRequest {
    /// a model, an alias, provider/model or tier:<name>
    #[schemars(length(min = 1))]
    pub model: String,
    /// A string (one user message) or input items: messages (`input_text`, `input_image` by
    /// URL; an assistant's `output_text` or `refusal`), `function_call`,
    /// `function_call_output` and `reasoning`. Required unless `previous_response_id` is given.
    #[serde(default)]
    pub input: Option<ResponsesInput>,
    /// A system message before the input; not carried into a continuation.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Function tools only; a built-in tool (web or file search, computer use, code
    /// interpreter, image generation, MCP, shells, custom) is a 400 naming it.
    #[serde(default)]
    pub tools: Option<Vec<FunctionTool>>,
    /// "auto", "none", "required", {"type": "function", "name"} or {"type": "allowed_tools",
    /// "mode", "tools"}.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Up to 16 string values (keys up to 64 characters, values up to 512), echoed back.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 16))]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Keep the response (default true) for gateway.responses_ttl_secs: readable, deletable and
    /// continued with previous_response_id by the principal that made it.
    #[serde(default)]
    pub store: Option<bool>,
    /// A stored response of the caller's to continue: its chain's input and output come before
    /// this input.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// {"format": {"type": "text" | "json_object" | "json_schema", …}, "verbosity"?}
    #[serde(default)]
    pub text: Option<Map<String, Value>>,
    /// {"effort"?, "summary"?}; the effort is forwarded as reasoning_effort.
    #[serde(default)]
    pub reasoning: Option<Map<String, Value>>,
    /// Accepted; weft never truncates (a conversation too long for the model fails).
    #[serde(default)]
    pub truncation: Option<Truncation>,
    /// Accepted, no effect.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// Only false: weft answers in the request.
    #[serde(default)]
    #[schemars(extend("enum" = [false, null]))]
    pub background: Option<bool>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `input`: text, or items.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum ResponsesInput {
    Text(String),
    Items(Vec<Map<String, Value>>),
}

/// A function tool.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct FunctionTool {
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON schema object.
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
    #[serde(default)]
    pub strict: Option<bool>,
}

// `"function"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum FunctionKind {
    #[default]
    Function,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Truncation {
    Auto,
    Disabled,
}

/// A response object: the answer, and what `GET /v1/responses/{id}` returns.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct ResponseObject {
    pub id: String,
    pub object: ResponseKind,
    pub created_at: u64,
    pub status: ResponseStatus,
    pub error: Option<Map<String, Value>>,
    pub incomplete_details: Option<Map<String, Value>>,
    pub model: String,
    /// `message` (output_text parts), `function_call` (call_id, name, arguments) and
    /// `reasoning` (reasoning_text parts, encrypted_content) items.
    pub output: Vec<Map<String, Value>>,
    pub usage: Option<Map<String, Value>>,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub metadata: Map<String, Value>,
}

// `"response"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ResponseKind {
    #[default]
    Response,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ResponseStatus {
    Completed,
    Incomplete,
    InProgress,
    Failed,
}

/// `DELETE /v1/responses/{id}`'s answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct DeletedResponse {
    pub id: String,
    pub object: ResponseKind,
    pub deleted: bool,
}

/// A response id.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct ResponseId(#[schemars(length(min = 1, max = 100))] pub String);

fn id_param(op: Op) -> Op {
    op.param::<ResponseId>(
        In::Path,
        "id",
        true,
        Some("the response's id (`resp_…`)"),
        Some(Value::String("resp_0".into())),
    )
}

/// The errors of every Responses route.
fn errors(op: Op) -> Op {
    op.error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks llm:call")
        .error(503, "the database or the router is unavailable")
}

pub fn ops() -> Vec<Op> {
    vec![
        errors(
            Op::post("/v1/responses", "Create a model response (OpenAI's Responses API; JSON or SSE stream)")
                .describe("Scope: llm:call. `model` is a model, an alias or tier:<name>; routing hints go in `x-weft-provider` / `x-weft-tier`. Streams use the typed events: response.created, response.in_progress, response.output_item.added / .done around each item, response.content_part.added / .done, response.output_text.delta / .done, response.function_call_arguments.delta / .done, response.reasoning_text.delta / .done, then response.completed (or response.incomplete); a failure mid-stream is `error` then response.failed. Each event's data has `type` and `sequence_number`. With store (the default) the response is kept for gateway.responses_ttl_secs for the principal that made it. Built-in tools are refused with 400 naming the tool. Errors use OpenAI's shape.")
                .tag("openai")
                .body::<ResponsesRequest>()
                .ok::<ResponseObject>("the response (application/json), or its SSE stream (text/event-stream) with stream:true")
                .or_in::<SseEvent>("text/event-stream")
                .error(400, "invalid request: a field, an input item, a built-in tool, or a previous_response_id the caller has no stored response of")
                .error(404, "unknown model, alias or tier (code model_not_found)")
                .error(413, "body larger than gateway.max_body_bytes")
                .error(415, "body is not JSON")
                .error(429, "rate limited; Retry-After says when to retry")
                .error(502, "every upstream candidate failed")
                .error(504, "no answer in time"),
        ),
        errors(id_param(
            Op::get("/v1/responses/{id}", "A stored response of the caller's")
                .describe("Scope: llm:call. Another principal's response, an expired or a deleted one is a 404.")
                .tag("openai")
                .ok::<ResponseObject>("the response"),
        ))
        .error(404, "no such response of the caller's"),
        errors(id_param(
            Op::delete("/v1/responses/{id}", "Delete a stored response of the caller's")
                .describe("Scope: llm:call. A continuation of it can no longer be made (nor of a response that continued it).")
                .tag("openai")
                .ok::<DeletedResponse>("deleted"),
        ))
        .error(404, "no such response of the caller's"),
    ]
}
