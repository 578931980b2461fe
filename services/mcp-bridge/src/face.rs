//! weft as an MCP server (API.md, "MCP"): the tools `spawn_run`, `spawn_runs`, `get_run`,
//! `list_runs`, `cancel_run`, `send_input`, `memory_get`, `memory_set`, `memory_search`,
//! `channel_publish`, `channel_read`, `list_agents`, `get_agent`, `put_agent`, one
//! `agent__<name>` tool per agent the caller may run, and the tenant's skills as prompts.
//!
//! Every tool is weft's own HTTP API called with the caller's bearer token through an
//! [`Upstream`] — in the gateway, its own router in-process; in `weft mcp`, a running fleet over
//! HTTP — so scopes, tenancy and validation are exactly the API's. The tool list is filtered by
//! the caller's scopes; a call the API refuses comes back as a tool error with the API's message.
//!
//! `agent__<name>` starts a run with `stream: true`, reports each event as a progress
//! notification (when the client sent a progress token), and answers with the run's final
//! text; an MCP cancellation cancels the run.

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use rmcp::model::CallToolResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, ListPromptsResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptMessage, Role, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Map, Value, json};
use weft_core::{Principal, Scope};

/// An answer from weft's API: the status and the body as a stream of chunks.
pub struct UpResponse {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: BoxStream<'static, Result<Bytes, String>>,
}

impl UpResponse {
    /// The whole body as JSON (`null` when empty or not JSON).
    pub async fn json(mut self) -> Result<Value, String> {
        let mut buf = Vec::new();
        while let Some(chunk) = self.body.next().await {
            buf.extend_from_slice(&chunk?);
        }
        Ok(serde_json::from_slice(&buf).unwrap_or(Value::Null))
    }
}

/// How the face reaches weft's API.
pub trait Upstream: Send + Sync + 'static {
    /// Sends `method path` with `Authorization: Bearer <bearer>` and an optional JSON body.
    /// `Err` means weft could not be reached (the message says how).
    fn call(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        body: Option<Value>,
    ) -> BoxFuture<'static, Result<UpResponse, String>>;
}

/// Who is calling: the principal (for filtering the tool list) and the token to call with.
#[derive(Clone, Debug)]
pub struct Caller {
    pub principal: Option<Principal>,
    pub bearer: String,
}

/// Where the caller comes from for one request: the gateway puts a [`Caller`] in the HTTP
/// request's extensions (after checking the token); `weft mcp` uses a fixed one.
fn caller(ctx: &RequestContext<RoleServer>, fixed: Option<&Caller>) -> Result<Caller, ErrorData> {
    if let Some(c) = fixed {
        return Ok(c.clone());
    }
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("missing bearer token", None))
}

/// The MCP server handler. One per session (rmcp's factory clones it).
#[derive(Clone)]
pub struct Face {
    upstream: Arc<dyn Upstream>,
    /// `weft mcp`: every request acts with this caller.
    fixed: Option<Caller>,
}

impl Face {
    /// A face whose requests carry their caller in the HTTP request (the gateway).
    pub fn new(upstream: Arc<dyn Upstream>) -> Self {
        Self {
            upstream,
            fixed: None,
        }
    }

    /// A face acting for one caller (stdio: `weft mcp`).
    pub fn for_caller(upstream: Arc<dyn Upstream>, caller: Caller) -> Self {
        Self {
            upstream,
            fixed: Some(caller),
        }
    }
}

/// Percent-encodes one path segment. `.` and `..` are refused: a URL parser folds them (and
/// their `%2e` spellings) into the path around them, so `get_run` of `..` would call another
/// route (`weft mcp` sends its calls through one).
fn seg(s: &str) -> Result<String, String> {
    if s == "." || s == ".." {
        return Err(format!(
            "`{s}` is not a name or id weft uses (it would change the path of the call)"
        ));
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    }
}

fn str_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("`{name}` (a string) is required"))
}

/// One static tool: name, description, input schema, whether it only reads, and the scopes of
/// which the caller needs at least one.
struct Fixed {
    name: &'static str,
    description: &'static str,
    schema: fn() -> Value,
    read_only: bool,
    needs: &'static [Scope],
}

const RUN_WRITE: &[Scope] = &[Scope::RunsCreate];
const RUN_READ: &[Scope] = &[Scope::RunsCreate, Scope::RunsRead];
const MEM_READ: &[Scope] = &[Scope::MemoryRead, Scope::MemoryWrite];
const MEM_WRITE: &[Scope] = &[Scope::MemoryWrite];
const CH_PUB: &[Scope] = &[Scope::ChannelsPublish];
const CH_READ: &[Scope] = &[Scope::ChannelsRead];
const ADMIN: &[Scope] = &[Scope::TenantAdmin];

fn spawn_schema() -> Value {
    json!({"type": "object", "properties": {
        "agent": {"type": "string", "description": "the agent's name"},
        "input": {"type": "string", "description": "the user message the run starts with"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "idempotency_key": {"type": "string"}
    }, "required": ["agent", "input"]})
}

const FIXED: &[Fixed] = &[
    Fixed {
        name: "spawn_run",
        description: "Start a run of an agent; returns its run_id and status without waiting (use get_run, or the agent__<name> tool to wait).",
        schema: spawn_schema,
        read_only: false,
        needs: RUN_WRITE,
    },
    Fixed {
        name: "spawn_runs",
        description: "Start several runs at once; returns one {run_id, status} or {error} per entry, in order.",
        schema: || json!({"type": "object", "properties": {"runs": {"type": "array", "maxItems": 32, "items": spawn_schema()}}, "required": ["runs"]}),
        read_only: false,
        needs: RUN_WRITE,
    },
    Fixed {
        name: "get_run",
        description: "A run's status, stop reason, usage and timings.",
        schema: || json!({"type": "object", "properties": {"run_id": {"type": "string"}}, "required": ["run_id"]}),
        read_only: true,
        needs: RUN_READ,
    },
    Fixed {
        name: "list_runs",
        description: "Your runs, newest first (tenant admins: the tenant's).",
        schema: || {
            json!({"type": "object", "properties": {
            "status": {"type": "string", "enum": ["queued", "running", "awaiting_input", "succeeded", "failed", "cancelled"]},
            "agent": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 200},
            "cursor": {"type": "string"}}})
        },
        read_only: true,
        needs: RUN_READ,
    },
    Fixed {
        name: "cancel_run",
        description: "Cancel a run (and its sub-runs).",
        schema: || json!({"type": "object", "properties": {"run_id": {"type": "string"}, "reason": {"type": "string"}}, "required": ["run_id"]}),
        read_only: false,
        needs: RUN_WRITE,
    },
    Fixed {
        name: "send_input",
        description: "Steer a running run, or wake a run waiting for input, with a message.",
        schema: || json!({"type": "object", "properties": {"run_id": {"type": "string"}, "text": {"type": "string"}}, "required": ["run_id", "text"]}),
        read_only: false,
        needs: RUN_WRITE,
    },
    Fixed {
        name: "memory_get",
        description: "Read a memory entry: scope run|agent|user|tenant, its scope_id, and the key.",
        schema: || json!({"type": "object", "properties": {"scope": {"type": "string", "enum": ["run", "agent", "user", "tenant"]}, "scope_id": {"type": "string"}, "key": {"type": "string"}}, "required": ["scope", "scope_id", "key"]}),
        read_only: true,
        needs: MEM_READ,
    },
    Fixed {
        name: "memory_set",
        description: "Write a memory entry (any JSON value up to 64 KiB), optionally with ttl_seconds.",
        schema: || json!({"type": "object", "properties": {"scope": {"type": "string", "enum": ["run", "agent", "user", "tenant"]}, "scope_id": {"type": "string"}, "key": {"type": "string"}, "value": {}, "ttl_seconds": {"type": "integer", "minimum": 1}}, "required": ["scope", "scope_id", "key", "value"]}),
        read_only: false,
        needs: MEM_WRITE,
    },
    Fixed {
        name: "memory_search",
        description: "Search a memory scope by meaning; returns the closest entries with scores.",
        schema: || json!({"type": "object", "properties": {"scope": {"type": "string", "enum": ["run", "agent", "user", "tenant"]}, "scope_id": {"type": "string"}, "query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["scope", "scope_id", "query"]}),
        read_only: true,
        needs: MEM_READ,
    },
    Fixed {
        name: "channel_publish",
        description: "Publish a JSON payload to a channel.",
        schema: || json!({"type": "object", "properties": {"channel": {"type": "string"}, "payload": {}}, "required": ["channel", "payload"]}),
        read_only: false,
        needs: CH_PUB,
    },
    Fixed {
        name: "channel_read",
        description: "Read a channel's messages after a cursor (waiting up to wait_ms for new ones).",
        schema: || json!({"type": "object", "properties": {"channel": {"type": "string"}, "cursor": {"type": "string"}, "max": {"type": "integer", "minimum": 1, "maximum": 1000}, "wait_ms": {"type": "integer", "minimum": 0, "maximum": 30000}}, "required": ["channel"]}),
        read_only: true,
        needs: CH_READ,
    },
    Fixed {
        name: "list_agents",
        description: "The agents of your tenant.",
        schema: || json!({"type": "object", "properties": {}}),
        read_only: true,
        needs: RUN_READ,
    },
    Fixed {
        name: "get_agent",
        description: "An agent's active definition (or ?version).",
        schema: || json!({"type": "object", "properties": {"name": {"type": "string"}, "version": {"type": "string"}}, "required": ["name"]}),
        read_only: true,
        needs: RUN_READ,
    },
    Fixed {
        name: "put_agent",
        description: "Create or change an agent: `definition` holds its content fields (model, system_prompt, tools, …); a change makes a new version.",
        schema: || json!({"type": "object", "properties": {"name": {"type": "string"}, "definition": {"type": "object"}}, "required": ["name", "definition"]}),
        read_only: false,
        needs: ADMIN,
    },
];

/// Whether `p` holds one of `needs` (admin scopes imply the others, as everywhere).
fn allowed(p: Option<&Principal>, needs: &[Scope]) -> bool {
    match p {
        // Without a principal (weft mcp's fixed caller), the API decides on each call.
        None => true,
        Some(p) => needs.iter().any(|s| p.has(*s)),
    }
}

fn tool_of(f: &Fixed) -> Tool {
    Tool::new(f.name, f.description, schema((f.schema)())).with_annotations(
        ToolAnnotations::new()
            .read_only(f.read_only)
            .destructive(false),
    )
}

const AGENT_PREFIX: &str = "agent__";

fn ok_json(v: &Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(v.to_string())])
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

impl Face {
    async fn api(
        &self,
        c: &Caller,
        method: http::Method,
        path: String,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let r = self
            .upstream
            .call(method, path, c.bearer.clone(), body)
            .await?;
        let status = r.status;
        let v = r.json().await?;
        if (200..300).contains(&status) {
            Ok(v)
        } else {
            let msg = v["error"]["message"]
                .as_str()
                .map_or_else(|| format!("weft answered {status}"), str::to_owned);
            Err(format!("{msg} (HTTP {status})"))
        }
    }

    /// The agents the caller may run, as tools.
    async fn agent_tools(&self, c: &Caller) -> Vec<Tool> {
        if !allowed(c.principal.as_ref(), RUN_WRITE) {
            return Vec::new();
        }
        let Ok(list) = self
            .api(c, http::Method::GET, "/v1/agents".into(), None)
            .await
        else {
            return Vec::new();
        };
        list["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["retired"] != true)
            .filter_map(|a| {
                let name = a["name"].as_str()?;
                let description = a["description"].as_str().unwrap_or_default();
                let text = if description.is_empty() {
                    format!("Run the agent `{name}` on an input and return its answer.")
                } else {
                    format!("Run the agent `{name}`: {description}")
                };
                Some(
                    Tool::new(
                        format!("{AGENT_PREFIX}{name}"),
                        text,
                        schema(json!({"type": "object", "properties": {
                            "input": {"type": "string", "description": "the message the run starts with"},
                            "metadata": {"type": "object", "additionalProperties": {"type": "string"}}
                        }, "required": ["input"]})),
                    )
                    .with_annotations(ToolAnnotations::new().read_only(false)),
                )
            })
            .collect()
    }

    async fn call_fixed(
        &self,
        c: &Caller,
        name: &str,
        args: &Map<String, Value>,
    ) -> Result<Value, String> {
        use http::Method as M;
        match name {
            "spawn_run" => {
                self.api(c, M::POST, "/v1/runs".into(), Some(run_body(args)?))
                    .await
            }
            "spawn_runs" => {
                let runs = args
                    .get("runs")
                    .and_then(Value::as_array)
                    .ok_or("`runs` (an array of {agent, input}) is required")?;
                if runs.len() > 32 {
                    return Err("`runs` may have at most 32 entries".into());
                }
                let mut out = Vec::with_capacity(runs.len());
                for r in runs {
                    let res = match r.as_object() {
                        Some(r) => match run_body(r) {
                            Ok(body) => self.api(c, M::POST, "/v1/runs".into(), Some(body)).await,
                            Err(e) => Err(e),
                        },
                        None => Err("each entry is an object {agent, input}".into()),
                    };
                    out.push(res.unwrap_or_else(|e| json!({ "error": e })));
                }
                Ok(json!({ "runs": out }))
            }
            "get_run" => {
                let id = str_arg(args, "run_id")?;
                self.api(c, M::GET, format!("/v1/runs/{}", seg(id)?), None)
                    .await
            }
            "list_runs" => {
                let mut q = Vec::new();
                for k in ["status", "agent", "cursor"] {
                    if let Some(v) = args.get(k).and_then(Value::as_str) {
                        q.push(format!("{k}={}", seg(v)?));
                    }
                }
                if let Some(l) = args.get("limit").and_then(Value::as_u64) {
                    q.push(format!("limit={l}"));
                }
                let path = if q.is_empty() {
                    "/v1/runs".to_owned()
                } else {
                    format!("/v1/runs?{}", q.join("&"))
                };
                self.api(c, M::GET, path, None).await
            }
            "cancel_run" => {
                let id = str_arg(args, "run_id")?;
                let mut body = json!({});
                if let Some(r) = args.get("reason") {
                    body["reason"] = r.clone();
                }
                self.api(
                    c,
                    M::POST,
                    format!("/v1/runs/{}/cancel", seg(id)?),
                    Some(body),
                )
                .await
            }
            "send_input" => {
                let id = str_arg(args, "run_id")?;
                let text = str_arg(args, "text")?;
                self.api(
                    c,
                    M::POST,
                    format!("/v1/runs/{}/input", seg(id)?),
                    Some(json!({ "text": text })),
                )
                .await
            }
            "memory_get" | "memory_set" => {
                let path = format!(
                    "/v1/memory/{}/{}/{}",
                    seg(str_arg(args, "scope")?)?,
                    seg(str_arg(args, "scope_id")?)?,
                    seg(str_arg(args, "key")?)?
                );
                if name == "memory_get" {
                    return self.api(c, M::GET, path, None).await;
                }
                let mut body =
                    json!({ "value": args.get("value").cloned().ok_or("`value` is required")? });
                if let Some(t) = args.get("ttl_seconds") {
                    body["ttl_seconds"] = t.clone();
                }
                self.api(c, M::PUT, path, Some(body)).await
            }
            "memory_search" => {
                let mut body = json!({
                    "scope": str_arg(args, "scope")?,
                    "scope_id": str_arg(args, "scope_id")?,
                    "query": str_arg(args, "query")?,
                });
                if let Some(k) = args.get("top_k") {
                    body["top_k"] = k.clone();
                }
                self.api(c, M::POST, "/v1/memory/search".into(), Some(body))
                    .await
            }
            "channel_publish" => {
                let ch = str_arg(args, "channel")?;
                let payload = args
                    .get("payload")
                    .cloned()
                    .ok_or("`payload` is required")?;
                self.api(
                    c,
                    M::POST,
                    format!("/v1/channels/{}/publish", seg(ch)?),
                    Some(json!({ "payload": payload })),
                )
                .await
            }
            "channel_read" => {
                let ch = str_arg(args, "channel")?;
                let mut body = json!({});
                for k in ["cursor", "max", "wait_ms"] {
                    if let Some(v) = args.get(k) {
                        body[k] = v.clone();
                    }
                }
                self.api(
                    c,
                    M::POST,
                    format!("/v1/channels/{}/read", seg(ch)?),
                    Some(body),
                )
                .await
            }
            "list_agents" => self.api(c, M::GET, "/v1/agents".into(), None).await,
            "get_agent" => {
                let name = str_arg(args, "name")?;
                let path = match args.get("version").and_then(Value::as_str) {
                    Some(v) => format!("/v1/agents/{}?version={}", seg(name)?, seg(v)?),
                    None => format!("/v1/agents/{}", seg(name)?),
                };
                self.api(c, M::GET, path, None).await
            }
            "put_agent" => {
                let name = str_arg(args, "name")?;
                let def = args
                    .get("definition")
                    .filter(|d| d.is_object())
                    .cloned()
                    .ok_or("`definition` (an object of the agent's content fields) is required")?;
                self.api(c, M::PUT, format!("/v1/agents/{}", seg(name)?), Some(def))
                    .await
            }
            other => Err(format!(
                "no tool `{other}`; tools/list shows the ones you may call"
            )),
        }
    }

    /// `agent__<name>`: a streamed run, its events as progress, its final text as the answer.
    async fn call_agent(
        &self,
        c: &Caller,
        agent: &str,
        args: &Map<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let mut body = json!({
            "agent": agent,
            "input": match str_arg(args, "input") { Ok(i) => i, Err(e) => return tool_error(e) },
            "stream": true,
        });
        if let Some(m) = args.get("metadata") {
            body["metadata"] = m.clone();
        }
        let r = match self
            .upstream
            .call(
                http::Method::POST,
                "/v1/runs".into(),
                c.bearer.clone(),
                Some(body),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return tool_error(e),
        };
        if !(200..300).contains(&r.status) {
            let status = r.status;
            let v = r.json().await.unwrap_or(Value::Null);
            return tool_error(format!(
                "{} (HTTP {status})",
                v["error"]["message"]
                    .as_str()
                    .unwrap_or("the run could not start")
            ));
        }
        let token = ctx.meta.get_progress_token();
        let run_id: Option<String> = r
            .headers
            .get("x-weft-run-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut frames = SseFrames::new(r.body);
        let mut texts: Vec<String> = Vec::new();
        let mut progress = 0.0;
        let mut finished: Option<Value> = None;
        loop {
            let frame = tokio::select! {
                () = ctx.ct.cancelled() => {
                    if let Some(Ok(id)) = run_id.as_deref().map(seg) {
                        let _ = self
                            .api(c, http::Method::POST, format!("/v1/runs/{id}/cancel"), Some(json!({"reason": "cancelled by the MCP client"})))
                            .await;
                    }
                    return tool_error("cancelled");
                }
                f = frames.next() => f,
            };
            let Some(frame) = frame else { break };
            let (event, data) = match frame {
                Ok(f) => f,
                Err(e) => return tool_error(format!("the run's stream broke: {e}")),
            };
            let frame: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            let data = &frame["data"];
            match event.as_str() {
                "assistant_message" => {
                    let text = assistant_text(data);
                    if !text.is_empty() {
                        texts.push(text);
                    }
                }
                "run_finished" => finished = Some(data.clone()),
                // A parked run waits for someone: the call ends here and says how to go on.
                "awaiting_input" => {
                    let question = data["interrupt"]["question"].as_str();
                    let mut result = CallToolResult::success(vec![ContentBlock::text(
                        match question {
                            Some(q) => format!(
                                "the run is waiting for an answer to: {q} (answer with POST /v1/runs/{{id}}/interrupts/{{interrupt_id}})"
                            ),
                            None => format!(
                                "the run is waiting for input (send it with the send_input tool): {}",
                                texts.last().cloned().unwrap_or_default()
                            ),
                        },
                    )]);
                    result.structured_content = Some(json!({
                        "run_id": run_id,
                        "status": "awaiting_input",
                        "interrupt": data["interrupt"],
                        "final_text": texts.last(),
                    }));
                    return result;
                }
                "error" => {
                    return tool_error(format!("the run's stream failed: {}", frame["message"]));
                }
                _ => {}
            }
            if event != "text_delta"
                && let Some(t) = &token
            {
                progress += 1.0;
                let _ = ctx
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(t.clone(), progress)
                            .with_message(event.clone()),
                    )
                    .await;
            }
            if finished.is_some() {
                break;
            }
        }
        let final_text = texts.last().cloned().unwrap_or_default();
        let Some(done) = finished else {
            return tool_error("the run's stream ended before the run finished");
        };
        let status = done["status"].as_str().unwrap_or_default();
        let mut result = if status == "succeeded" {
            CallToolResult::success(vec![ContentBlock::text(final_text.clone())])
        } else {
            tool_error(format!(
                "the run ended {status} ({}): {final_text}",
                done["stop_reason"].as_str().unwrap_or("unknown")
            ))
        };
        result.structured_content = Some(json!({
            "run_id": run_id,
            "status": status,
            "stop_reason": done["stop_reason"],
            "final_text": final_text,
        }));
        result
    }
}

/// The text blocks of an `assistant_message` event.
fn assistant_text(data: &Value) -> String {
    let blocks = data["content"]
        .as_array()
        .or_else(|| data["message"]["content"].as_array());
    blocks
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("")
}

fn run_body(args: &Map<String, Value>) -> Result<Value, String> {
    let mut body = json!({ "agent": str_arg(args, "agent")?, "input": str_arg(args, "input")? });
    for k in ["metadata", "idempotency_key"] {
        if let Some(v) = args.get(k) {
            body[k] = v.clone();
        }
    }
    Ok(body)
}

/// Splits an SSE body into (event, data) frames.
struct SseFrames {
    body: BoxStream<'static, Result<Bytes, String>>,
    /// Bytes not yet framed: decoded only once a whole frame has arrived, as a chunk may end
    /// inside a character or between the `\r` and `\n` of a line end.
    buf: Vec<u8>,
}

/// The length of the first frame in `buf` up to and including the empty line that ends it
/// (lines end with `\n` or `\r\n`), if it has arrived.
fn frame_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b == b'\n' {
            if matches!(&buf[line_start..i], b"" | b"\r") {
                return Some(i + 1);
            }
            line_start = i + 1;
        }
    }
    None
}

impl SseFrames {
    fn new(body: BoxStream<'static, Result<Bytes, String>>) -> Self {
        Self {
            body,
            buf: Vec::new(),
        }
    }

    async fn next(&mut self) -> Option<Result<(String, String), String>> {
        loop {
            if let Some(end) = frame_end(&self.buf) {
                let frame: Vec<u8> = self.buf.drain(..end).collect();
                let frame = String::from_utf8_lossy(&frame);
                let mut event = String::from("message");
                let mut data = Vec::new();
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                    }
                }
                if data.is_empty() {
                    continue; // a comment (keepalive)
                }
                return Some(Ok((event, data.join("\n"))));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => return Some(Err(e)),
                None => return None,
            }
        }
    }
}

impl ServerHandler for Face {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
        .with_server_info(Implementation::new("weft", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "weft runs agents server-side. Use agent__<name> to run an agent and wait for its answer, spawn_run/get_run to start and poll runs, memory_* and channel_* for shared state. Skills are offered as prompts.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let c = caller(&context, self.fixed.as_ref())?;
        let mut tools: Vec<Tool> = FIXED
            .iter()
            .filter(|f| allowed(c.principal.as_ref(), f.needs))
            .map(tool_of)
            .collect();
        tools.extend(self.agent_tools(&c).await);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let c = caller(&context, self.fixed.as_ref())?;
        let args = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        if let Some(agent) = name.strip_prefix(AGENT_PREFIX) {
            if !allowed(c.principal.as_ref(), RUN_WRITE) {
                return Ok(tool_error(
                    "starting a run needs the `runs:create` scope; ask for a token that has it",
                )
                .into());
            }
            return Ok(self.call_agent(&c, agent, &args, &context).await.into());
        }
        let Some(fixed) = FIXED.iter().find(|f| f.name == name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool `{name}`; tools/list shows the ones you may call"),
                None,
            ));
        };
        if !allowed(c.principal.as_ref(), fixed.needs) {
            let names: BTreeSet<&str> = fixed.needs.iter().map(|s| s.as_str()).collect();
            return Ok(tool_error(format!(
                "`{name}` needs one of the scopes {}; your token has none of them",
                names.into_iter().collect::<Vec<_>>().join(", ")
            ))
            .into());
        }
        Ok(match self.call_fixed(&c, name, &args).await {
            Ok(v) => ok_json(&v),
            Err(e) => tool_error(e),
        }
        .into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let c = caller(&context, self.fixed.as_ref())?;
        let list = self
            .api(&c, http::Method::GET, "/v1/skills".into(), None)
            .await
            .unwrap_or(Value::Null);
        let prompts = list["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["retired"] != true)
            .filter_map(|s| {
                Some(Prompt::new(
                    s["name"].as_str()?.to_owned(),
                    s["description"].as_str().map(str::to_owned),
                    None,
                ))
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let c = caller(&context, self.fixed.as_ref())?;
        let name = seg(&request.name).map_err(|e| ErrorData::invalid_params(e, None))?;
        let v = self
            .api(&c, http::Method::GET, format!("/v1/skills/{name}"), None)
            .await
            .map_err(|e| ErrorData::invalid_params(e, None))?;
        let body = v["content"]["body"].as_str().unwrap_or_default();
        let mut result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)]);
        result.description = v["content"]["description"].as_str().map(str::to_owned);
        Ok(result.into())
    }
}

/// The streamable HTTP service for `/mcp`: sessions for 2025-11-25 kept in `store` (any
/// replica serves any session), stateless 2026-07-28, `Host`/`Origin` checked per `cfg`.
/// `ledger` hears of every session this replica opens, restores or ends ([`CountedSessions`]).
pub fn http_service(
    upstream: Arc<dyn Upstream>,
    cfg: &weft_config::McpServerFaceConfig,
    store: crate::sessions::PgSessionStore,
    ledger: Arc<dyn SessionLedger>,
    shutdown: tokio_util::sync::CancellationToken,
) -> rmcp::transport::StreamableHttpService<Face, CountedSessions> {
    let sessions = Arc::new(CountedSessions {
        inner: local_sessions(cfg),
        ledger,
    });
    streamable_with(Face::new(upstream), cfg, Some(store), sessions, shutdown)
}

tokio::task_local! {
    /// Whose request this task serves (`<tenant>/<subject>`): the gateway sets it around each
    /// `/mcp` request, so the session manager knows whom a session it opens belongs to.
    pub static SESSION_OWNER: String;
}

/// Hears of the sessions a [`CountedSessions`] opens (or restores from the store) and ends.
pub trait SessionLedger: Send + Sync + 'static {
    /// Session `id` is live on this replica, for `owner` ([`SESSION_OWNER`], when set).
    fn opened(&self, id: &str, owner: Option<&str>);
    /// Session `id` ended here: deleted, idle past its keep-alive, or shut down.
    fn closed(&self, id: &str);
}

/// rmcp's in-memory session manager, telling a [`SessionLedger`] of every session it starts
/// and ends. rmcp itself drives both (a session's worker ends after its keep-alive unused, or
/// when the client deletes it), so what the ledger counts is what is in memory.
pub struct CountedSessions {
    inner: LocalSessionManager,
    ledger: Arc<dyn SessionLedger>,
}

fn session_owner() -> Option<String> {
    SESSION_OWNER.try_with(Clone::clone).ok()
}

type SessionError =
    rmcp::transport::streamable_http_server::session::local::LocalSessionManagerError;
type SessionTransport = <LocalSessionManager as SessionManager>::Transport;

impl SessionManager for CountedSessions {
    type Error = SessionError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        self.ledger.opened(&id, session_owner().as_deref());
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.ledger.closed(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let out = self.inner.restore_session(id.clone()).await?;
        if matches!(out, RestoreOutcome::Restored(_)) {
            self.ledger.opened(&id, session_owner().as_deref());
        }
        Ok(out)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// rmcp's session manager, whose sessions end after `mcp.session_idle_secs` unused.
fn local_sessions(cfg: &weft_config::McpServerFaceConfig) -> LocalSessionManager {
    let mut m = LocalSessionManager::default();
    m.session_config.keep_alive = Some(std::time::Duration::from_secs(cfg.session_idle_secs));
    m
}

/// weft's transport and session layers around any MCP server handler: rmcp's streamable HTTP
/// service with the face's `Host`/`Origin` rules and, when given, the Postgres session store.
/// The gateway serves [`Face`] with it; the conformance suite's fixture server serves its
/// fixture tools with the very same layers.
pub fn streamable<S>(
    handler: S,
    cfg: &weft_config::McpServerFaceConfig,
    store: Option<crate::sessions::PgSessionStore>,
    shutdown: tokio_util::sync::CancellationToken,
) -> rmcp::transport::StreamableHttpService<S, LocalSessionManager>
where
    S: ServerHandler + Clone + Send + 'static,
{
    streamable_with(handler, cfg, store, Arc::new(local_sessions(cfg)), shutdown)
}

/// [`streamable`] over the given session manager.
fn streamable_with<S, M>(
    handler: S,
    cfg: &weft_config::McpServerFaceConfig,
    store: Option<crate::sessions::PgSessionStore>,
    sessions: Arc<M>,
    shutdown: tokio_util::sync::CancellationToken,
) -> rmcp::transport::StreamableHttpService<S, M>
where
    S: ServerHandler + Clone + Send + 'static,
    M: SessionManager,
{
    use rmcp::transport::StreamableHttpServerConfig;
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_allowed_hosts(cfg.allowed_hosts.clone());
    if cfg.allowed_hosts.is_empty() {
        config = config.disable_allowed_hosts();
    }
    if !cfg.allowed_origins.is_empty() {
        config = config.with_allowed_origins(cfg.allowed_origins.clone());
    }
    if let Some(store) = store {
        config.session_store = Some(Arc::new(store));
    }
    rmcp::transport::StreamableHttpService::new(move || Ok(handler.clone()), sessions, config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dot_segment_is_refused_and_the_rest_encoded() {
        // What the fuzzer found (mcp_face): `get_run` of `..` called `GET /v1/runs/..`, which
        // `weft mcp`'s HTTP client sends as `GET /v1/`.
        assert!(seg("..").is_err());
        assert!(seg(".").is_err());
        assert_eq!(seg("...").as_deref(), Ok("..."));
        assert_eq!(seg("a/b c").as_deref(), Ok("a%2Fb%20c"));
        assert_eq!(seg("run_1.x-y~").as_deref(), Ok("run_1.x-y~"));
    }

    async fn frames(body: &'static [u8], chunk: usize) -> Vec<(String, String)> {
        let chunks: Vec<Result<Bytes, String>> = body
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut f = SseFrames::new(futures::stream::iter(chunks).boxed());
        let mut out = Vec::new();
        while let Some(Ok(frame)) = f.next().await {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn frames_do_not_depend_on_how_the_body_is_chunked() {
        // What the fuzzer found (mcp_face): a chunk ending inside `é` turned it into two U+FFFD,
        // and one ending between `\r` and `\n` left the frame unterminated.
        let body = "event: assistant_message\r\ndata: {\"text\":\"h\u{e9}llo \u{65e5}\"}\r\n\r\n: keepalive\n\nevent: run_finished\ndata: a\ndata: b\n\n";
        let whole = frames(body.as_bytes(), body.len()).await;
        assert_eq!(
            whole,
            [
                (
                    "assistant_message".to_owned(),
                    "{\"text\":\"h\u{e9}llo \u{65e5}\"}".to_owned()
                ),
                ("run_finished".to_owned(), "a\nb".to_owned()),
            ]
        );
        for chunk in 1..8 {
            assert_eq!(
                frames(body.as_bytes(), chunk).await,
                whole,
                "chunks of {chunk}"
            );
        }
    }
}
