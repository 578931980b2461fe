//! `/v1/mcp-servers…` (MCP server definitions: the eight definition routes of
//! [`crate::defs`] over [`McpServerContent`]) and `/mcp`, weft's own MCP server face.
//!
//! [`McpServerContent`] mirrors `weft_core::mcp::McpServerContent` (serde form, defaults);
//! weft-core keeps the validation, and a test there checks that both serialize the same.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::defs::{DefContentSchema, def_ops};
use crate::op::{In, Op};

/// How weft reaches an MCP server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum McpTransport {
    // Streamable HTTP.
    #[default]
    Http,
    // A child process speaking MCP on its standard input and output.
    Stdio,
}

/// An MCP server definition's content (hashed into its version). `http` (streamable HTTP) needs `url` and may have `headers`, whose values may reference per-run credentials as `${run.credentials.<name>}`; `stdio` (`command`, `args`, `env`) may only be declared by an operator in the config file — over the API it is a 403.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(extend("example" = {
    "description": "GitHub issues",
    "transport": "http",
    "url": "https://mcp.example.com/mcp",
    "headers": {"Authorization": "Bearer ${run.credentials.github}"},
    "tools": ["get_*", "list_*"]
}))]
pub struct McpServerContent {
    /// what the server offers
    #[schemars(length(max = 4096))]
    pub description: String,
    /// default http
    pub transport: McpTransport,
    /// http: the streamable HTTP endpoint
    #[schemars(length(max = 2048), regex(pattern = r"^https?://[^\s/?#]+"))]
    pub url: Option<String>,
    /// http: headers sent with every request; `${run.credentials.<name>}` is replaced by the run's credential
    #[schemars(extend(
        "maxProperties" = 32,
        "propertyNames" = {"type": "string", "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"},
        "additionalProperties" = {"type": "string", "maxLength": 8192}
    ))]
    pub headers: BTreeMap<String, String>,
    /// stdio (operators only): the program
    pub command: Option<String>,
    #[schemars(length(max = 64), inner(length(max = 4096)))]
    pub args: Vec<String>,
    #[schemars(extend("maxProperties" = 64))]
    pub env: BTreeMap<String, String>,
    /// the tools runs may see (names or globs); empty = all
    #[schemars(
        length(max = 256),
        inner(regex(pattern = r"^[A-Za-z0-9_.*/-]{1,128}$"))
    )]
    pub tools: Vec<String>,
    /// the longest one call may take
    #[schemars(range(min = 1, max = 600000))]
    pub timeout_ms: Option<u32>,
}

impl DefContentSchema for McpServerContent {
    const NAME: &'static str = "McpServer";
}

/// A JSON-RPC id: a number or a string.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpId {
    Number(i64),
    String(String),
}

fn object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object"})
}

fn message_id(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 256}]})
}

/// The JSON-RPC version every message names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum JsonRpcVersion {
    #[default]
    #[serde(rename = "2.0")]
    V2,
}

/// One JSON-RPC 2.0 message of MCP: a request (`id` + `method`), a notification (`method`) or an answer to the server (`id` + `result` or `error`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("example" = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "example", "version": "1.0"}
    }
}))]
pub struct McpMessage {
    pub jsonrpc: JsonRpcVersion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "message_id")]
    pub id: Option<McpId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), with = "String")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object")]
    pub params: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object")]
    pub result: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object")]
    pub error: Option<Map<String, Value>>,
}

/// A JSON-RPC error message from the MCP layer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct McpJsonRpcError {
    pub jsonrpc: JsonRpcVersion,
    #[serde(default)]
    #[schemars(schema_with = "error_id")]
    pub id: Option<McpId>,
    pub error: McpJsonRpcErrorBody,
}

fn error_id(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]})
}

/// What went wrong, in JSON-RPC's terms.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct McpJsonRpcErrorBody {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any")]
    pub data: Option<Value>,
}

fn any(_: &mut SchemaGenerator) -> Schema {
    json_schema!({})
}

/// An error of /mcp: weft's error shape, or a JSON-RPC error message from the MCP layer (protocol errors keep their JSON-RPC codes, e.g. -32602, -32022).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(transform = crate::defs::one_of)]
pub enum McpErrorAnswer {
    Native(crate::Error),
    JsonRpc(McpJsonRpcError),
}

/// A JSON-RPC message of any kind, as answered.
pub struct McpAnswer;

impl JsonSchema for McpAnswer {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "McpAnswer".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object"})
    }
}

/// A stream of server-sent events carrying JSON-RPC messages.
pub struct McpEvents;

impl JsonSchema for McpEvents {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "McpEvents".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"description": "SSE events whose data are JSON-RPC messages (an empty priming event first)"})
    }
}

/// `Mcp-Session-Id`: a session of the 2025-11-25 revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct McpSessionId(
    #[schemars(length(min = 1, max = 200), regex(pattern = r"^[!-~]+$"))] pub String,
);

/// `MCP-Protocol-Version`: the protocol revisions a client may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum McpProtocolVersion {
    #[serde(rename = "2024-11-05")]
    V20241105,
    #[serde(rename = "2025-03-26")]
    V20250326,
    #[serde(rename = "2025-06-18")]
    V20250618,
    #[serde(rename = "2025-11-25")]
    V20251125,
    #[serde(rename = "2026-07-28")]
    V20260728,
}

/// The headers every /mcp request may carry.
fn mcp(op: Op) -> Op {
    op.tag("mcp")
        .param::<McpSessionId>(
            In::Header,
            "Mcp-Session-Id",
            false,
            Some("the session (2025-11-25), from the initialize answer"),
            None,
        )
        .param::<McpProtocolVersion>(
            In::Header,
            "MCP-Protocol-Version",
            false,
            Some("the negotiated protocol revision"),
            None,
        )
}

const UNAUTHORIZED: &str = "missing, invalid, expired or revoked token";

pub fn ops() -> Vec<Op> {
    let mut ops = def_ops::<McpServerContent>(&crate::def_texts!(
        path: "/v1/mcp-servers", tag: "mcp-servers", example: "github",
        plural: "MCP servers", a: "an MCP server definition", noun: "MCP server",
        put_a: "an MCP server definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields. The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A `stdio` server is refused with 403: only an operator may declare one, in the config file.",
        retire: "Retire an MCP server definition (it stays readable; runs stop mounting it)",
        put_forbidden: "the token lacks the scope this route needs, or the definition is a `stdio` server (operators only)",
    ));
    ops.extend([
        mcp(Op::post("/mcp", "weft's MCP server face: one JSON-RPC message"))
            .describe("Streamable HTTP (MCP 2025-11-25 with sessions, served by any replica, and 2026-07-28 stateless). Any valid token; each MCP tool then needs the scopes of the route it calls (docs/mcp.md). A request answers with JSON or an SSE stream (`text/event-stream`); a notification or an answer to the server with 202. The envelope is checked here (400 naming `jsonrpc`, `method`, `id` or `params`); the protocol itself is checked by the official MCP conformance suite.")
            .body::<McpMessage>()
            .ok::<McpAnswer>("the answer: one JSON-RPC message, or an SSE stream of messages ending with it")
            .or_in::<McpEvents>("text/event-stream")
            .empty(202, "a notification or an answer to the server, accepted")
            .answer::<McpErrorAnswer>(400, "a malformed message (the field is named), or a request without the session it needs")
            .error(401, UNAUTHORIZED)
            .answer::<McpErrorAnswer>(403, "the `Host` or `Origin` is not allowed (mcp.allowed_hosts, mcp.allowed_origins)")
            .answer::<McpErrorAnswer>(404, "an unknown or expired session id, or a method the 2026-07-28 revision does not have")
            .answer::<McpErrorAnswer>(406, "`Accept` names neither `application/json` nor `text/event-stream`")
            .answer::<McpErrorAnswer>(413, "body larger than gateway.max_body_bytes")
            .answer::<McpErrorAnswer>(415, "body is not JSON"),
        mcp(Op::get("/mcp", "weft's MCP server face: a session's server-to-client stream"))
            .answer_in::<McpEvents>(200, "text/event-stream", "an SSE stream")
            .answer::<McpErrorAnswer>(400, "no session id")
            .error(401, UNAUTHORIZED)
            .answer::<McpErrorAnswer>(403, "the `Host` or `Origin` is not allowed")
            .answer::<McpErrorAnswer>(404, "an unknown or expired session id")
            .answer::<McpErrorAnswer>(405, "this revision has no server-to-client stream")
            .answer::<McpErrorAnswer>(406, "`Accept` does not name `text/event-stream`")
            .answer::<McpErrorAnswer>(409, "the session already has a stream open"),
        mcp(Op::delete("/mcp", "weft's MCP server face: end a session"))
            .empty(204, "the session is ended")
            .answer::<McpErrorAnswer>(400, "no session id")
            .error(401, UNAUTHORIZED)
            .answer::<McpErrorAnswer>(403, "the `Host` or `Origin` is not allowed")
            .answer::<McpErrorAnswer>(404, "an unknown or expired session id")
            .answer::<McpErrorAnswer>(405, "sessions cannot be ended by the client"),
    ]);
    ops
}
