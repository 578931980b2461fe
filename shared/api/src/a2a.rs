//! A2A (Agent2Agent) v1.0 on the wire: the JSON (ProtoJSON of `lf.a2a.v1`: camelCase fields,
//! enums as their full upper-snake names, a oneof told apart by which key is present) that
//! weft's A2A server answers with and its A2A client sends. docs/design/a2a-wire.md records what
//! the official SDKs (1.3.0) speak; these types follow it.
//!
//! Reading is lenient where the protocol is (unknown fields are ignored, as the SDKs' own
//! parsers do, so a peer one minor version ahead still parses); writing leaves out what is
//! unset.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::defs::{DefContentSchema, def_ops};
use crate::op::{Op, Security};

/// The protocol version weft speaks, sent as `A2A-Version` and named by its interfaces.
pub const PROTOCOL_VERSION: &str = "1.0";
/// The header naming the protocol version of a request.
pub const VERSION_HEADER: &str = "A2A-Version";
/// Where a card is, relative to an agent's base URL.
pub const CARD_PATH: &str = ".well-known/agent-card.json";
/// `protocolBinding` of the JSON-RPC interface.
pub const BINDING_JSONRPC: &str = "JSONRPC";
/// `protocolBinding` of the REST (HTTP+JSON) interface.
pub const BINDING_REST: &str = "HTTP+JSON";

/// What an agent (here: a tenant's exposed agents, each a skill) is and how to reach it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    pub name: String,
    pub description: String,
    /// the agent's version (not the protocol's)
    pub version: String,
    /// in order of preference
    pub supported_interfaces: Vec<AgentInterface>,
    pub capabilities: AgentCapabilities,
    pub default_input_modes: Vec<String>,
    pub default_output_modes: Vec<String>,
    pub skills: Vec<AgentSkill>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<SecurityRequirement>,
}

/// One way to reach the agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`
    pub protocol_binding: String,
    pub protocol_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
}

/// Something the agent can do; weft makes each exposed agent one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_modes: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentProvider {
    pub organization: String,
    pub url: String,
}

/// A security scheme: one of its kinds, named by its key. weft uses the HTTP bearer one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityScheme {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_auth_security_scheme: Option<HttpAuthSecurityScheme>,
    /// the other kinds (API key, OAuth 2, OIDC, mTLS), kept as given
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpAuthSecurityScheme {
    /// `Bearer`
    pub scheme: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Schemes that together satisfy the agent: scheme name → the scopes it needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityRequirement {
    pub schemes: BTreeMap<String, StringList>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StringList {
    #[serde(default)]
    pub list: Vec<String>,
}

/// Who sent a message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Role {
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "ROLE_USER")]
    User,
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// One turn of the conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A piece of content: exactly one of `text`, `raw` (base64), `url` or `data`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct Part {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Part {
    /// A text part.
    pub fn text(t: impl Into<String>) -> Self {
        Self {
            text: Some(t.into()),
            ..Self::default()
        }
    }

    /// How many content keys the part has (a well-formed one has exactly one).
    pub fn contents(&self) -> usize {
        usize::from(self.text.is_some())
            + usize::from(self.raw.is_some())
            + usize::from(self.url.is_some())
            + usize::from(self.data.is_some())
    }
}

impl Message {
    /// The text of its text parts, joined by blank lines.
    pub fn text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaskState {
    #[default]
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// The wire name (`TASK_STATE_COMPLETED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unspecified => "TASK_STATE_UNSPECIFIED",
            Self::Submitted => "TASK_STATE_SUBMITTED",
            Self::Working => "TASK_STATE_WORKING",
            Self::Completed => "TASK_STATE_COMPLETED",
            Self::Failed => "TASK_STATE_FAILED",
            Self::Canceled => "TASK_STATE_CANCELED",
            Self::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            Self::Rejected => "TASK_STATE_REJECTED",
            Self::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    /// Completed, failed, canceled or rejected: nothing more will happen.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Waiting on the client (input or auth): a stream ends here, a message resumes it.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub state: TaskState,
    /// what the agent says with this status (the question of an input-required task)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// RFC 3339
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// A unit of work: in weft, one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// An output of a task.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    pub task_id: String,
    pub context_id: String,
    pub artifact: Artifact,
    /// the parts add to the artifact of the same id instead of replacing it
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_chunk: bool,
}

/// One event of a stream, and the answer of `SendMessage` (a task or a message alone).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    Task(Task),
    Message(Message),
    StatusUpdate(TaskStatusUpdateEvent),
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// The params of `SendMessage` and `SendStreamingMessage` (the body of `message:send` and
/// `message:stream`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct SendMessageRequest {
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// answer at once (the task as it is) instead of when it ends or needs input
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub return_immediately: bool,
}

/// The params of `GetTask` (and the query of `GET tasks/{id}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct GetTaskRequest {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The params of `CancelTask`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct CancelTaskRequest {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

// A request is read only from a JSON object (serde's derive also takes an array of the fields).
crate::objects_only!(
    Message,
    Part,
    SendMessageRequest,
    SendMessageConfiguration,
    GetTaskRequest,
    CancelTaskRequest
);

/// The JSON-RPC methods of A2A v1.0.
pub mod method {
    pub const SEND_MESSAGE: &str = "SendMessage";
    pub const SEND_STREAMING_MESSAGE: &str = "SendStreamingMessage";
    pub const GET_TASK: &str = "GetTask";
    pub const CANCEL_TASK: &str = "CancelTask";
}

/// A JSON-RPC 2.0 request. `id` is echoed verbatim (a string, a number or null).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcRequest {
    pub jsonrpc: String,
    #[serde(default)]
    pub id: Value,
    pub method: String,
    #[serde(default)]
    pub params: Value,
}

/// A JSON-RPC 2.0 answer: `result` or `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcResponse {
    pub jsonrpc: String,
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JsonRpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// A2A's error codes (JSON-RPC `error.code`) and, for REST, the `reason` and HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum A2aError {
    TaskNotFound,
    TaskNotCancelable,
    PushNotificationNotSupported,
    UnsupportedOperation,
    ContentTypeNotSupported,
    VersionNotSupported,
    InvalidRequest,
    MethodNotFound,
    InvalidParams,
    Internal,
    Parse,
}

impl A2aError {
    pub fn code(self) -> i64 {
        match self {
            Self::TaskNotFound => -32001,
            Self::TaskNotCancelable => -32002,
            Self::PushNotificationNotSupported => -32003,
            Self::UnsupportedOperation => -32004,
            Self::ContentTypeNotSupported => -32005,
            Self::VersionNotSupported => -32009,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::Internal => -32603,
            Self::Parse => -32700,
        }
    }

    /// The `google.rpc.ErrorInfo` reason the REST binding carries.
    pub fn reason(self) -> &'static str {
        match self {
            Self::TaskNotFound => "TASK_NOT_FOUND",
            Self::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Self::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            Self::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            Self::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            Self::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::MethodNotFound => "METHOD_NOT_FOUND",
            Self::InvalidParams => "INVALID_PARAMS",
            Self::Internal => "INTERNAL",
            Self::Parse => "PARSE_ERROR",
        }
    }

    /// The HTTP status of the REST binding.
    pub fn http_status(self) -> u16 {
        match self {
            Self::TaskNotFound | Self::MethodNotFound => 404,
            Self::Internal => 500,
            _ => 400,
        }
    }
}

/// An A2A peer definition's content (hashed into its version): an agent of another runtime,
/// found by its agent card, whose skills runs may call as tools `a2a__<peer>__<skill>` (an
/// agent lists them in `tools`, globs allowed). Header values may reference per-run credentials
/// as `${run.credentials.<name>}`. Calls go through the executor's egress guard.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(extend("example" = {
    "description": "The support team's triage agent",
    "card_url": "https://agents.example.com/.well-known/agent-card.json",
    "headers": {"Authorization": "Bearer ${run.credentials.support}"},
    "skills": ["triage"],
    "timeout_ms": 120000
}))]
pub struct A2aPeerContent {
    /// what the peer offers
    #[schemars(length(max = 4096))]
    pub description: String,
    /// the peer's agent card (required)
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s/?#]+"))]
    pub card_url: String,
    /// headers sent with every request to the peer (the card's too); `${run.credentials.<name>}` is replaced by the run's credential
    #[schemars(extend(
        "maxProperties" = 32,
        "propertyNames" = {"type": "string", "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"},
        "additionalProperties" = {"type": "string", "maxLength": 8192}
    ))]
    pub headers: BTreeMap<String, String>,
    /// the peer's skills runs may see (ids or globs); empty = all
    #[schemars(length(max = 256), inner(regex(pattern = r"^[A-Za-z0-9_*-]{1,128}$")))]
    pub skills: Vec<String>,
    /// the longest one call (a task, until it ends or asks for input) may take; unset = 300000
    #[schemars(range(min = 1, max = 3600000))]
    pub timeout_ms: Option<u32>,
}

impl DefContentSchema for A2aPeerContent {
    const NAME: &'static str = "A2aPeer";
}

/// The answer of `SendMessage` (`message:send`): the task, or a message alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// A REST binding error: `{"error": {"code", "status", "message", "details"}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestError {
    pub error: RestErrorBody,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestErrorBody {
    /// the HTTP status
    pub code: u16,
    /// its google.rpc.Code name (`NOT_FOUND`)
    pub status: String,
    pub message: String,
    /// a `google.rpc.ErrorInfo` whose `reason` is the A2A error (`TASK_NOT_FOUND`)
    pub details: Vec<Value>,
}

const UNAUTHORIZED: &str = "missing, invalid, expired or revoked token (weft's native error shape)";

/// The media type of the REST binding's answers.
pub const A2A_JSON: &str = "application/a2a+json";

/// The A2A peer definition routes and the A2A server's routes.
pub fn ops() -> Vec<Op> {
    let mut ops = def_ops::<A2aPeerContent>(&crate::def_texts!(
        path: "/v1/a2a-peers", tag: "a2a-peers", example: "support",
        plural: "A2A peers", a: "an A2A peer definition", noun: "A2A peer",
        put_a: "an A2A peer definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields; `card_url` is required. The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A retired name is un-retired.",
        retire: "Retire an A2A peer (it stays readable; runs stop mounting its skills)",
    ));
    let a2a = |op: Op| op.tag("a2a").security(Security::Bearer);
    let card = |path| {
        a2a(Op::get(path, "The caller's tenant's A2A agent card"))
            .describe("Its exposed agents (`a2a.expose`) as skills, the JSON-RPC and REST interfaces and a bearer security scheme (docs/a2a.md). Scope: runs:create or runs:read (it lists the tenant's agents).")
            .answer_in::<RestError>(403, A2A_JSON, "the token has neither runs:create nor runs:read")
            .ok::<AgentCard>("the card")
            .error(401, UNAUTHORIZED)
    };
    ops.extend([
        card("/.well-known/agent-card.json"),
        card("/a2a/.well-known/agent-card.json"),
        a2a(Op::post("/a2a/rpc", "A2A JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask"))
            .describe("One JSON-RPC 2.0 request. Errors are answered in a 200 body with the A2A error code (docs/a2a.md). Scopes: runs:create to send or cancel, runs:read to get.")
            .body::<JsonRpcRequest>()
            .ok::<JsonRpcResponse>("the result or the error, with the request's id; SendStreamingMessage answers with an SSE stream of responses")
            .or_in::<crate::common::SseEvent>("text/event-stream")
            .error(401, UNAUTHORIZED)
            .error(413, "body larger than gateway.max_body_bytes"),
        a2a(Op::post("/a2a/message:send", "A2A REST: send a message"))
            .describe("Starts a task (a run of the skill in `message.metadata.skill`) or continues the one `message.taskId` names. Answers when the task ends or asks for input, or at once with `configuration.returnImmediately`. Scope: runs:create.")
            .body::<SendMessageRequest>()
            .answer_in::<SendMessageResponse>(200, A2A_JSON, "the task")
            .answer_in::<RestError>(400, A2A_JSON, "bad params, an unknown or unexposed skill, a file part, a message to a task that has ended")
            .error(401, UNAUTHORIZED)
            .answer_in::<RestError>(403, A2A_JSON, "the token lacks runs:create")
            .answer_in::<RestError>(404, A2A_JSON, "no such task")
            .answer_in::<RestError>(413, A2A_JSON, "body larger than gateway.max_body_bytes")
            .answer_in::<RestError>(429, A2A_JSON, "the tenant is at its run cap (Retry-After)"),
        a2a(Op::post("/a2a/message:stream", "A2A REST: send a message and stream the task"))
            .describe("As message:send, answered with an SSE stream: the task, its status and artifact updates, closed when it ends or asks for input. Scope: runs:create.")
            .body::<SendMessageRequest>()
            .answer_in::<crate::common::SseEvent>(200, "text/event-stream", "the task's events: each `data` a stream response (`task`, `statusUpdate`, `artifactUpdate`), closed once the task ends or asks for input")
            .answer_in::<RestError>(400, A2A_JSON, "bad params, an unknown or unexposed skill, a file part, a message to a task that has ended")
            .error(401, UNAUTHORIZED)
            .answer_in::<RestError>(403, A2A_JSON, "the token lacks runs:create")
            .answer_in::<RestError>(404, A2A_JSON, "no such task")
            .answer_in::<RestError>(413, A2A_JSON, "body larger than gateway.max_body_bytes")
            .answer_in::<RestError>(429, A2A_JSON, "the tenant is at its run cap (Retry-After)"),
        a2a(Op::get("/a2a/tasks/{id}", "A2A REST: get a task"))
            .describe("The task's status, history and artifacts. Scope: runs:read.")
            .path::<String>("id", None)
            .query::<i32>("historyLength", Some("the last n history entries; 0 = none; unset = all"), None)
            .answer_in::<Task>(200, A2A_JSON, "the task")
            .answer_in::<RestError>(400, A2A_JSON, "a bad query")
            .error(401, UNAUTHORIZED)
            .answer_in::<RestError>(403, A2A_JSON, "the token lacks runs:read")
            .answer_in::<RestError>(404, A2A_JSON, "no such task (another tenant's included)"),
        a2a(Op::post("/a2a/tasks/{id}:cancel", "A2A REST: cancel a task"))
            .describe("Cancels the task's run and answers the task once it has ended. Scope: runs:create (and runs:read).")
            .path::<String>("id", None)
            .optional_body("ignored (the SDKs send `{\"id\"}` or nothing)")
            .answer_in::<Task>(200, A2A_JSON, "the task, cancelled")
            .answer_in::<RestError>(400, A2A_JSON, "the task has ended")
            .error(401, UNAUTHORIZED)
            .answer_in::<RestError>(403, A2A_JSON, "the token lacks runs:create")
            .answer_in::<RestError>(404, A2A_JSON, "no such task"),
    ]);
    ops
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_card_is_written_as_the_sdks_read_it() {
        let card = AgentCard {
            name: "acme".into(),
            description: "acme's agents".into(),
            version: "1".into(),
            supported_interfaces: vec![AgentInterface {
                url: "http://h/a2a/rpc".into(),
                protocol_binding: BINDING_JSONRPC.into(),
                protocol_version: PROTOCOL_VERSION.into(),
                tenant: None,
            }],
            capabilities: AgentCapabilities {
                streaming: Some(true),
                ..AgentCapabilities::default()
            },
            default_input_modes: vec!["text/plain".into()],
            default_output_modes: vec!["text/plain".into()],
            skills: vec![AgentSkill {
                id: "triage".into(),
                name: "triage".into(),
                description: "d".into(),
                tags: vec!["weft".into()],
                ..AgentSkill::default()
            }],
            security_schemes: BTreeMap::from([(
                "bearer".into(),
                SecurityScheme {
                    http_auth_security_scheme: Some(HttpAuthSecurityScheme {
                        scheme: "Bearer".into(),
                        ..HttpAuthSecurityScheme::default()
                    }),
                    other: BTreeMap::new(),
                },
            )]),
            security_requirements: vec![SecurityRequirement {
                schemes: BTreeMap::from([("bearer".into(), StringList::default())]),
            }],
            ..AgentCard::default()
        };
        let v = serde_json::to_value(&card).unwrap();
        assert_eq!(
            v["supportedInterfaces"][0]["protocolBinding"],
            json!("JSONRPC")
        );
        assert_eq!(
            v["securitySchemes"]["bearer"],
            json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}})
        );
        assert_eq!(
            v["securityRequirements"],
            json!([{"schemes": {"bearer": {"list": []}}}])
        );
        assert_eq!(serde_json::from_value::<AgentCard>(v).unwrap(), card);
    }

    #[test]
    fn messages_tasks_and_stream_events_use_the_v1_names() {
        // As the Python SDK sends a message (unknown fields are ignored).
        let m: Message = serde_json::from_value(json!({
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
            "taskId": "t1", "extensions": []
        }))
        .unwrap();
        assert_eq!((m.role, m.text().as_str()), (Role::User, "hi"));
        assert_eq!(m.parts[0].contents(), 1);
        let ev = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: None,
                timestamp: None,
            },
            metadata: None,
        });
        assert_eq!(
            serde_json::to_value(&ev).unwrap(),
            json!({"statusUpdate": {"taskId": "t1", "contextId": "c1",
                   "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})
        );
        let t: StreamResponse = serde_json::from_value(json!({"task": {
            "id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "done"}]}]
        }}))
        .unwrap();
        let StreamResponse::Task(t) = t else {
            panic!("not a task")
        };
        assert!(t.status.state.is_terminal() && !t.status.state.is_interrupted());
        assert!(serde_json::from_value::<TaskState>(json!("completed")).is_err());
        for s in [
            TaskState::Unspecified,
            TaskState::InputRequired,
            TaskState::AuthRequired,
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        let req: SendMessageRequest = serde_json::from_value(json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
            "configuration": {}
        }))
        .unwrap();
        assert!(!req.configuration.unwrap().return_immediately);
    }
}
