//! The base routes: the OpenAI-compatible doors (`POST /v1/chat/completions`, `POST
//! /v1/embeddings`, `GET /v1/models`), tokens and the caller (`/v1/tokens`, `/v1/me`), and the
//! operational routes (`/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json`).
//!
//! The OpenAI-compatible request and answer types here describe OpenAI's wire format for the
//! document; the gateway's door still parses with its own (`crate::openai` in the gateway), which
//! these mirror field for field.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;

use crate::common::{NextCursor, SseEvent, TenantName, Timestamp, Uuid};
use crate::op::{In, Op, Security};

/// The document's spelling of a derived schema, applied to it and every schema inlined in it
/// (`#[schemars(transform = tidy)]`); each rewrite keeps what the schema accepts:
/// - a one-value `enum` is a `const`, and a `"type": "string"` beside a string `const` or `enum`
///   is left out (the values say it);
/// - `additionalProperties: true` (a flattened or free-form map) is left out, as is the default;
/// - a property that takes any value is `{}`, not `true` (nor `{"default": null}`);
/// - an optional [`one_of`] (`anyOf: [{oneOf: [a, b]}, null]`) is `oneOf: [a, b, null]`.
pub fn tidy(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Array(values)) = obj.get("enum")
            && let [one] = values.as_slice()
        {
            let one = one.clone();
            obj.remove("enum");
            obj.insert("const".into(), one);
        }
        let stringy = match obj.get("type") {
            Some(Value::String(t)) => t == "string",
            Some(Value::Array(ts)) => ts.iter().all(|t| t == "string" || t == "null"),
            _ => false,
        };
        if stringy && (obj.contains_key("const") || obj.contains_key("enum")) {
            obj.remove("type");
        }
        if obj.get("additionalProperties") == Some(&Value::Bool(true)) {
            obj.remove("additionalProperties");
        }
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            for p in props.values_mut() {
                if *p == Value::Bool(true) || *p == serde_json::json!({"default": null}) {
                    *p = Value::Object(Map::new());
                }
            }
        }
        if let Some(Value::Array(any)) = obj.get("anyOf")
            && let [Value::Object(inner), null] = any.as_slice()
            && *null == serde_json::json!({"type": "null"})
            && inner.keys().all(|k| k == "oneOf" || k == "description")
            && let Some(Value::Array(choices)) = inner.get("oneOf")
        {
            let mut choices = choices.clone();
            choices.push(null.clone());
            let description = inner.get("description").cloned();
            obj.remove("anyOf");
            obj.insert("oneOf".into(), Value::Array(choices));
            if let Some(d) = description {
                obj.entry("description").or_insert(d);
            }
        }
    }
    schemars::transform::transform_subschemas(&mut tidy, schema);
}

/// An untagged enum whose choices never overlap (a string or an array, …): `oneOf`, not the
/// derived `anyOf` (`#[schemars(transform = one_of)]`).
pub fn one_of(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut()
        && let Some(any) = obj.remove("anyOf")
    {
        obj.insert("oneOf".into(), any);
    }
}

// --- the OpenAI-compatible doors ----------------------------------------------------------------

/// `POST /v1/chat/completions`: OpenAI's chat completion request. Fields not listed are forwarded
/// to providers that have them.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "messages": [{"role": "user", "content": "Say hi"}]}))]
pub struct ChatCompletionRequest {
    /// a model, an alias, provider/model or tier:<name>
    #[schemars(length(min = 1))]
    pub model: String,
    #[schemars(length(min = 1), extend("example" = [{"role": "user", "content": "Say hi"}]))]
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub tools: Vec<ChatTool>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 4294967295u32))]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    #[schemars(range(min = i64::MIN, max = i64::MAX))]
    pub seed: Option<i64>,
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub response_format: Option<Map<String, Value>>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub user: Option<String>,
    /// Only 1: weft answers one choice per request.
    #[serde(default)]
    #[schemars(extend("enum" = [1, null]))]
    pub n: Option<u32>,
    /// Everything else, forwarded to providers that have it.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `stop`: one sequence or several.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// one message, by role; fields of other roles are ignored
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
#[schemars(transform = tidy)]
pub enum ChatMessage {
    System {
        content: ChatContent,
        #[serde(default)]
        name: Option<String>,
    },
    Developer {
        content: ChatContent,
        #[serde(default)]
        name: Option<String>,
    },
    User {
        content: ChatContent,
        #[serde(default)]
        name: Option<String>,
    },
    Assistant {
        #[serde(default)]
        content: Option<ChatContent>,
        #[serde(default)]
        tool_calls: Vec<ChatToolCall>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        reasoning_content: Option<String>,
    },
    Tool {
        content: ChatContent,
        tool_call_id: String,
    },
}

/// A message's content: text, or parts.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum ChatContent {
    Text(String),
    Parts(Vec<ChatPart>),
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(inline)]
pub enum ChatPart {
    Text { text: String },
    ImageUrl { image_url: ChatImageUrl },
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChatImageUrl {
    pub url: String,
    #[serde(default)]
    pub detail: Option<String>,
}

/// A tool call of an earlier assistant message.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChatToolCall {
    pub id: String,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub function: ChatFunctionCall,
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChatFunctionCall {
    pub name: String,
    /// JSON text
    #[serde(default)]
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChatTool {
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    pub function: ChatFunctionDef,
}

/// The only kind of tool: `function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum FunctionKind {
    #[default]
    Function,
}

#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct ChatFunctionDef {
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// a JSON schema
    #[serde(default)]
    pub parameters: Option<Map<String, Value>>,
}

/// `POST /v1/embeddings`: OpenAI's embeddings request.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[schemars(transform = tidy, example = serde_json::json!({"model": "mock-1", "input": "hello", "dimensions": 8}))]
pub struct EmbeddingsRequest {
    #[schemars(length(min = 1))]
    pub model: String,
    /// one text or up to 2048; at most 2 MiB of text in all
    pub input: EmbedInput,
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 8192))]
    pub dimensions: Option<u32>,
    #[serde(default)]
    pub user: Option<String>,
}

/// The texts to embed.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum EmbedInput {
    One(String),
    Many(#[schemars(length(min = 1, max = 2048))] Vec<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum EncodingFormat {
    Float,
    Base64,
}

// `"list"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ListObject {
    #[default]
    List,
}

/// The answer of `GET /v1/models`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct ModelList {
    pub object: ListObject,
    pub data: Vec<Model>,
}

/// A model, an alias or a tier this principal may name.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct Model {
    pub id: String,
    pub object: ModelObject,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub owned_by: String,
    #[serde(default)]
    pub weft_kind: String,
}

// `"model"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ModelObject {
    #[default]
    Model,
}

/// OpenAI's chat completion (the door's answer).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct ChatCompletion {
    pub id: String,
    pub object: CompletionObject,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Map<String, Value>>,
    #[serde(default)]
    pub usage: Map<String, Value>,
}

// `"chat.completion"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub enum CompletionObject {
    #[default]
    #[serde(rename = "chat.completion")]
    ChatCompletion,
}

/// OpenAI's embeddings answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct EmbeddingList {
    pub object: ListObject,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: Map<String, Value>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct Embedding {
    pub object: EmbeddingObject,
    pub index: usize,
    pub embedding: EmbeddingVector,
}

// `"embedding"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum EmbeddingObject {
    #[default]
    Embedding,
}

/// The vector, as numbers or (`encoding_format: base64`) as text.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(inline, transform = one_of)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    /// base64 of little-endian f32
    Base64(String),
}

// --- tokens and the caller ------------------------------------------------------------------------

/// A permission a token holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[schemars(inline)]
pub enum Scope {
    #[serde(rename = "admin")]
    Admin,
    #[serde(rename = "tenant:admin")]
    TenantAdmin,
    #[serde(rename = "runs:create")]
    RunsCreate,
    #[serde(rename = "runs:read")]
    RunsRead,
    #[serde(rename = "memory:read")]
    MemoryRead,
    #[serde(rename = "memory:write")]
    MemoryWrite,
    #[serde(rename = "channels:publish")]
    ChannelsPublish,
    #[serde(rename = "channels:read")]
    ChannelsRead,
    #[serde(rename = "llm:call")]
    LlmCall,
    #[serde(rename = "volumes:read")]
    VolumesRead,
    #[serde(rename = "volumes:write")]
    VolumesWrite,
}

impl Scope {
    pub const ALL: [Scope; 11] = [
        Self::Admin,
        Self::TenantAdmin,
        Self::RunsCreate,
        Self::RunsRead,
        Self::MemoryRead,
        Self::MemoryWrite,
        Self::ChannelsPublish,
        Self::ChannelsRead,
        Self::LlmCall,
        Self::VolumesRead,
        Self::VolumesWrite,
    ];

    /// What a run's own principal holds (the executor's calls on a run's behalf); what it may
    /// touch beyond these is decided by its agent (memory scopes, channels, skills, volumes).
    pub const RUN: [Scope; 9] = [
        Self::RunsCreate,
        Self::RunsRead,
        Self::LlmCall,
        Self::MemoryRead,
        Self::MemoryWrite,
        Self::ChannelsPublish,
        Self::ChannelsRead,
        Self::VolumesRead,
        Self::VolumesWrite,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::TenantAdmin => "tenant:admin",
            Self::RunsCreate => "runs:create",
            Self::RunsRead => "runs:read",
            Self::MemoryRead => "memory:read",
            Self::MemoryWrite => "memory:write",
            Self::ChannelsPublish => "channels:publish",
            Self::ChannelsRead => "channels:read",
            Self::LlmCall => "llm:call",
            Self::VolumesRead => "volumes:read",
            Self::VolumesWrite => "volumes:write",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A scope name that is not one; its message lists the known ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownScope(pub String);

impl std::fmt::Display for UnknownScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known: Vec<_> = Scope::ALL.iter().map(|s| s.as_str()).collect();
        write!(
            f,
            "unknown scope `{}`; known scopes are {}",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownScope {}

impl std::str::FromStr for Scope {
    type Err = UnknownScope;
    fn from_str(s: &str) -> Result<Self, UnknownScope> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownScope(s.to_owned()))
    }
}

/// An unknown name is refused with the list of known ones.
impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `POST /v1/tokens`. Strict: an unknown field is a 400.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(transform = tidy, example = serde_json::json!({"name": "ci", "subject": "ci-bot", "scopes": ["runs:read"]}))]
pub struct CreateToken {
    #[schemars(length(min = 1, max = 200), extend("example" = "ci"))]
    pub name: String,
    /// Defaults to the caller's tenant; a tenant admin names only its own.
    #[serde(default, deserialize_with = "valid_tenant")]
    #[schemars(extend("example" = "default"))]
    pub tenant: Option<TenantName>,
    #[schemars(length(min = 1, max = 200), extend("example" = "ci-bot"))]
    pub subject: String,
    #[schemars(length(min = 1))]
    pub scopes: Vec<Scope>,
    /// in the future
    #[serde(default, with = "time::serde::rfc3339::option")]
    #[schemars(with = "Option<Timestamp>")]
    pub expires_at: Option<OffsetDateTime>,
}

crate::objects_only!(deserialize: CreateToken);

/// A tenant's name, checked as it is read (the message the API has always given).
fn valid_tenant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TenantName>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-');
    if ok {
        Ok(Some(TenantName(s)))
    } else {
        Err(serde::de::Error::custom(format!(
            "tenant `{s}` is not valid: use 1-63 characters of a-z, 0-9 and '-', not starting with '-'"
        )))
    }
}

/// A token, as listed; `token` (the secret) only in the answer to `POST /v1/tokens`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Token {
    #[schemars(extend("format" = "uuid"))]
    pub id: String,
    pub name: String,
    pub tenant: String,
    pub subject: String,
    pub scopes: Vec<String>,
    pub prefix: String,
    pub bootstrap: bool,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    /// the secret, only in the answer to POST /v1/tokens
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub token: Option<String>,
}

/// The answer of `GET /v1/tokens`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct TokenList {
    pub data: Vec<Token>,
    #[serde(default)]
    pub next_cursor: NextCursor,
}

/// Who a call acts as.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Principal {
    pub tenant: String,
    pub subject: String,
    pub scopes: Vec<String>,
}

// --- operations -----------------------------------------------------------------------------------

/// The answer of `/healthz`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct Health {
    pub status: HealthStatus,
}

// `"ok"`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum HealthStatus {
    #[default]
    Ok,
}

/// The answer of `/readyz`: ready only when every dependency answers, the process has started
/// (stores opened, migrations applied) and it is not shutting down.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = tidy)]
pub struct Readiness {
    pub status: ReadyStatus,
    /// Each check by name: the dependencies the service uses (the gateway's: `postgres`,
    /// `router`, `nats`, `redis`), `started` (connected, migrations applied) and `accepting`
    /// (`unavailable` once a SIGTERM began the drain).
    pub checks: BTreeMap<String, Check>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ReadyStatus {
    Ready,
    NotReady,
}

/// One dependency's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Check {
    Ok,
    Unavailable,
}

impl From<bool> for Check {
    fn from(ok: bool) -> Self {
        if ok { Self::Ok } else { Self::Unavailable }
    }
}

/// The OpenAPI document itself (this one).
pub struct OpenApiDocument;

impl JsonSchema for OpenApiDocument {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "OpenApiDocument".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object", "required": ["openapi", "paths"]})
    }
}

// --- routes -----------------------------------------------------------------------------------

/// The errors of a route that calls a model through the router, after those of the body.
fn model_errors(op: Op) -> Op {
    op.error(429, "upstream rate limit; Retry-After says when to retry")
        .error(502, "every upstream candidate failed")
        .error(503, "the router is unavailable")
        .error(504, "no answer in time")
}

/// The errors of an OpenAI-compatible route with a body.
fn door_errors(op: Op) -> Op {
    model_errors(
        op.error(400, "invalid request")
            .error(401, "missing, invalid, expired or revoked token")
            .error(403, "the token lacks the scope this route needs")
            .error(404, "unknown model, alias or tier (code model_not_found)")
            .error(413, "body larger than gateway.max_body_bytes")
            .error(415, "body is not JSON"),
    )
}

/// The errors of the token routes that take no body.
fn token_errors(op: Op) -> Op {
    op.error(401, "missing, invalid, expired or revoked token")
        .error(403, "the token lacks the scope this route needs")
}

pub fn ops() -> Vec<Op> {
    vec![
        door_errors(
            Op::post("/v1/chat/completions", "Create a chat completion (JSON or SSE stream)")
                .describe("Scope: llm:call")
                .tag("openai")
                .body::<ChatCompletionRequest>()
                .ok::<ChatCompletion>("the completion (application/json), or its SSE stream (text/event-stream) with stream:true")
                .or_in::<SseEvent>("text/event-stream"),
        ),
        door_errors(
            Op::post("/v1/embeddings", "Create embeddings")
                .describe("Scope: llm:call")
                .tag("openai")
                .body::<EmbeddingsRequest>()
                .ok::<EmbeddingList>("the embeddings"),
        ),
        model_errors(token_errors(
            Op::get("/v1/models", "List the models, aliases and tiers this principal may use")
                .describe("Scope: llm:call")
                .tag("openai")
                .ok::<ModelList>("the models"),
        )),
        Op::get("/v1/me", "The caller's principal")
            .tag("auth")
            .ok::<Principal>("the caller's principal")
            .error(401, "missing, invalid, expired or revoked token"),
        Op::post("/v1/tokens", "Mint a token (shown once)")
            .describe("Scope: admin or tenant:admin")
            .tag("auth")
            .body::<CreateToken>()
            .answer::<Token>(201, "the token, with its secret (shown once)")
            .error(400, "invalid request")
            .error(401, "missing, invalid, expired or revoked token")
            .error(403, "the token lacks the scope this route needs")
            .error(413, "body larger than gateway.max_body_bytes")
            .error(415, "body is not JSON")
            .error(503, "the database is unreachable"),
        token_errors(
            Op::get("/v1/tokens", "List tokens (admins: all, or ?tenant=; tenant admins: their tenant)")
                .describe("Scope: admin or tenant:admin")
                .tag("auth")
                .query::<TenantFilter>("tenant", Some("admins: only this tenant's tokens (empty = every tenant); tenant admins always get their own tenant's"), Some("default".into()))
                .ok::<TokenList>("the tokens this caller may see (never one holding more than the caller)")
                .error(400, "a tenant that is not a tenant name, or an unknown parameter"),
        )
        .error(503, "the database is unreachable"),
        token_errors(
            Op::delete("/v1/tokens/{id}", "Revoke a token (effective on every replica within 1 s)")
                .describe("Scope: admin or tenant:admin")
                .tag("auth")
                .param::<Uuid>(In::Path, "id", true, Some("the token's id (an id that is not one is a 404)"), None)
                .ok::<Token>("the revoked token")
                .error(400, "an id that does not decode"),
        )
        .error(404, "no such token in your tenant")
        .error(503, "the database is unreachable"),
        Op::get("/v1/openapi.json", "This document")
            .tag("ops")
            .security(Security::Open)
            .ok::<OpenApiDocument>("this document"),
        Op::get("/healthz", "The process is up")
            .tag("ops")
            .security(Security::Open)
            .ok::<Health>("the process is up"),
        Op::get("/readyz", "Ready: the dependencies answer, started, not shutting down")
            .tag("ops")
            .security(Security::Open)
            .ok::<Readiness>("ready")
            .answer::<Readiness>(503, "a dependency is unreachable, the process is still connecting, or it is shutting down"),
        Op::get("/metrics", "Prometheus metrics")
            .tag("ops")
            .security(Security::Open)
            .answer_in::<String>(200, "text/plain", "Prometheus text exposition"),
    ]
}

/// `?tenant=` of `GET /v1/tokens`: a tenant's name, or empty for every tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TenantFilter(#[schemars(regex(pattern = r"^([a-z0-9][a-z0-9-]{0,62})?$"))] pub String);
