//! weft as an MCP server (API.md, "MCP"): the tools `spawn_run`, `spawn_runs`, `get_run`,
//! `list_runs`, `cancel_run`, `send_input`, `memory_get`, `memory_set`, `memory_search`,
//! `channel_publish`, `channel_read`, `list_agents`, `get_agent`, `put_agent`, the volume tools
//! (`list_volumes`, `volume_tree`, `volume_read`, `volume_write`, `volume_delete`,
//! `volume_changes`, `volume_undo`, `volume_snapshot`, `volume_snapshots`, `volume_restore`),
//! one `agent__<name>` tool per agent the caller may run, and the tenant's skills as prompts.
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

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use rmcp::handler::server::common::Extension;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResponse;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, ListPromptsResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptMessage, Role, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, tool, tool_router};
use serde_json::{Map, Value};
use weft_api::face;
use weft_core::{Principal, Scope};

pub mod sessions;

/// The raw bodies of [`Upstream::call_raw`].
pub use bytes::Bytes;

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

    /// Sends `method path` with extra `headers` (`If-Match`) and a raw body (a file's bytes),
    /// as the volume tools do. The default sends what [`Upstream::call`] can (no header, no
    /// body) and refuses the rest; an upstream that carries raw bodies overrides it.
    fn call_raw(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        headers: http::HeaderMap,
        body: Option<Bytes>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        if headers.is_empty() && body.is_none() {
            return self.call(method, path, bearer, None);
        }
        Box::pin(async {
            Err(
                "this connection to weft cannot send a file's bytes or conditional headers"
                    .to_owned(),
            )
        })
    }
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
    /// The fixed tools, from `#[tool_router]` (their schemas from the `weft_api::face` inputs).
    tools: ToolRouter<Face>,
}

impl Face {
    /// A face whose requests carry their caller in the HTTP request (the gateway).
    pub fn new(upstream: Arc<dyn Upstream>) -> Self {
        Self {
            upstream,
            fixed: None,
            tools: Self::tool_router(),
        }
    }

    /// A face acting for one caller (stdio: `weft mcp`).
    pub fn for_caller(upstream: Arc<dyn Upstream>, caller: Caller) -> Self {
        Self {
            upstream,
            fixed: Some(caller),
            tools: Self::tool_router(),
        }
    }
}

/// Percent-encodes one path segment. `.` and `..` are refused: a URL parser folds them (and
/// their `%2e` spellings) into the path around them, so `get_run` of `..` would call another
/// route (`weft mcp` sends its calls through one; the gateway's gRPC API too).
pub fn seg(s: &str) -> Result<String, String> {
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

/// `name`'s value, refused when empty (every name and id the tools take is required).
fn given<'a>(value: &'a str, name: &str) -> Result<&'a str, String> {
    if value.is_empty() {
        Err(format!("`{name}` (a string) is required"))
    } else {
        Ok(value)
    }
}

/// The JSON body of a tool's input (its route fields are skipped when serializing).
fn body<T: serde::Serialize>(input: &T) -> Result<Value, String> {
    serde_json::to_value(input).map_err(|e| format!("the input cannot be sent: {e}"))
}

const RUN_WRITE: &[Scope] = &[Scope::RunsCreate];
const RUN_READ: &[Scope] = &[Scope::RunsCreate, Scope::RunsRead];
const MEM_READ: &[Scope] = &[Scope::MemoryRead, Scope::MemoryWrite];
const MEM_WRITE: &[Scope] = &[Scope::MemoryWrite];
const CH_PUB: &[Scope] = &[Scope::ChannelsPublish];
const CH_READ: &[Scope] = &[Scope::ChannelsRead];
const ADMIN: &[Scope] = &[Scope::TenantAdmin];
const VOL_READ: &[Scope] = &[Scope::VolumesRead];
const VOL_WRITE: &[Scope] = &[Scope::VolumesWrite];

/// The scopes of which the caller needs at least one, per tool (data, read by the scope check
/// and the tool list; the router dispatches).
const NEEDS: &[(&str, &[Scope])] = &[
    ("spawn_run", RUN_WRITE),
    ("spawn_runs", RUN_WRITE),
    ("get_run", RUN_READ),
    ("list_runs", RUN_READ),
    ("cancel_run", RUN_WRITE),
    ("send_input", RUN_WRITE),
    ("memory_get", MEM_READ),
    ("memory_set", MEM_WRITE),
    ("memory_search", MEM_READ),
    ("channel_publish", CH_PUB),
    ("channel_read", CH_READ),
    ("list_agents", RUN_READ),
    ("get_agent", RUN_READ),
    ("put_agent", ADMIN),
    ("list_volumes", VOL_READ),
    ("volume_tree", VOL_READ),
    ("volume_read", VOL_READ),
    ("volume_write", VOL_WRITE),
    ("volume_delete", VOL_WRITE),
    ("volume_changes", VOL_READ),
    ("volume_undo", VOL_WRITE),
    ("volume_snapshot", VOL_WRITE),
    ("volume_snapshots", VOL_READ),
    ("volume_restore", VOL_WRITE),
];

fn needs(tool: &str) -> &'static [Scope] {
    NEEDS
        .iter()
        .find(|(name, _)| *name == tool)
        .map_or(ADMIN, |(_, needs)| needs)
}

/// Whether `p` holds one of `needs` (admin scopes imply the others, as everywhere).
fn allowed(p: Option<&Principal>, needs: &[Scope]) -> bool {
    match p {
        // Without a principal (weft mcp's fixed caller), the API decides on each call.
        None => true,
        Some(p) => needs.iter().any(|s| p.has(*s)),
    }
}

const AGENT_PREFIX: &str = "agent__";

/// A tool's answer: the API's JSON, or its error as a tool error.
fn answer(r: Result<Value, String>) -> CallToolResult {
    match r {
        Ok(v) => CallToolResult::success(vec![ContentBlock::text(v.to_string())]),
        Err(e) => tool_error(e),
    }
}

fn tool_error(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text.into())])
}

/// The body of `POST /v1/runs` for an `agent__<name>` call: a streamed run.
#[derive(serde::Serialize)]
struct StreamedRun<'a> {
    agent: &'a str,
    input: &'a str,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a std::collections::BTreeMap<String, String>>,
}

/// The structured answer of an `agent__<name>` call.
#[derive(serde::Serialize)]
struct Outcome<'a> {
    run_id: Option<&'a str>,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupt: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<&'a Value>,
    final_text: Option<&'a str>,
}

/// The body of `POST /v1/runs/{id}/cancel` when the MCP client cancels an `agent__` call.
#[derive(serde::Serialize)]
struct CancelBody {
    reason: &'static str,
}

use http::Method as M;

#[tool_router]
impl Face {
    #[tool(
        description = "Start a run of an agent (or, with mode: \"plan\", a plan run: plan, parallel tasks, independent verification, replan); returns its run_id and status without waiting (use get_run, or the agent__<name> tool to wait).",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn spawn_run(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(run): Parameters<face::SpawnRun>,
    ) -> CallToolResult {
        answer(self.spawn(&c, &run).await)
    }

    #[tool(
        description = "Start several runs at once; returns one {run_id, status} or {error} per entry, in order.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn spawn_runs(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::SpawnRuns>,
    ) -> CallToolResult {
        if input.runs.len() > 32 {
            return tool_error("`runs` may have at most 32 entries");
        }
        let mut out = Vec::with_capacity(input.runs.len());
        for r in input.runs {
            let res = match serde_json::from_value::<face::SpawnRun>(r) {
                Ok(run) => self.spawn(&c, &run).await,
                Err(e) => Err(format!("each entry is an object {{agent, input}}: {e}")),
            };
            out.push(res.unwrap_or_else(|e| {
                let mut m = Map::new();
                m.insert("error".into(), e.into());
                Value::Object(m)
            }));
        }
        let mut m = Map::new();
        m.insert("runs".into(), out.into());
        answer(Ok(Value::Object(m)))
    }

    #[tool(
        description = "A run's status, stop reason, usage and timings.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn get_run(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::GetRun>,
    ) -> CallToolResult {
        answer(self.get_run_of(&c, &input).await)
    }

    #[tool(
        description = "Your runs, newest first (tenant admins: the tenant's).",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn list_runs(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::ListRuns>,
    ) -> CallToolResult {
        answer(self.list_runs_of(&c, &input).await)
    }

    #[tool(
        description = "Cancel a run (and its sub-runs).",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn cancel_run(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::CancelRun>,
    ) -> CallToolResult {
        answer(
            self.post_to_run(&c, &input.run_id, "cancel", body(&input))
                .await,
        )
    }

    #[tool(
        description = "Steer a running run, or wake a run waiting for input, with a message.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn send_input(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::SendInput>,
    ) -> CallToolResult {
        let r = match given(&input.text, "text") {
            Ok(_) => {
                self.post_to_run(&c, &input.run_id, "input", body(&input))
                    .await
            }
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Read a memory entry: scope run|agent|user|tenant, its scope_id, and the key.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn memory_get(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(at): Parameters<face::MemoryGet>,
    ) -> CallToolResult {
        let r = match memory_path(at.scope, &at.scope_id, &at.key) {
            Ok(path) => self.api(&c, M::GET, path, None).await,
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Write a memory entry (any JSON value up to 64 KiB), optionally with ttl_seconds.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn memory_set(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::MemorySet>,
    ) -> CallToolResult {
        let r = match memory_path(input.scope, &input.scope_id, &input.key) {
            Ok(path) => match body(&input) {
                Ok(b) => self.api(&c, M::PUT, path, Some(b)).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Search a memory scope by meaning; returns the closest entries with scores.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn memory_search(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::MemorySearch>,
    ) -> CallToolResult {
        let r = match given(&input.scope_id, "scope_id").and(given(&input.query, "query")) {
            Ok(_) => match body(&input) {
                Ok(b) => {
                    self.api(&c, M::POST, "/v1/memory/search".into(), Some(b))
                        .await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Publish a JSON payload to a channel.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn channel_publish(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::ChannelPublish>,
    ) -> CallToolResult {
        answer(
            self.post_to_channel(&c, &input.channel, "publish", body(&input))
                .await,
        )
    }

    #[tool(
        description = "Read a channel's messages after a cursor (waiting up to wait_ms for new ones).",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn channel_read(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::ChannelRead>,
    ) -> CallToolResult {
        answer(
            self.post_to_channel(&c, &input.channel, "read", body(&input))
                .await,
        )
    }

    #[tool(
        description = "The agents of your tenant.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn list_agents(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(_): Parameters<face::ListAgents>,
    ) -> CallToolResult {
        answer(self.api(&c, M::GET, "/v1/agents".into(), None).await)
    }

    #[tool(
        description = "An agent's active definition (or ?version).",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn get_agent(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::GetAgent>,
    ) -> CallToolResult {
        let path = given(&input.name, "name").and_then(seg).and_then(|name| {
            Ok(match input.version.as_deref() {
                Some(v) => format!("/v1/agents/{name}?version={}", seg(v)?),
                None => format!("/v1/agents/{name}"),
            })
        });
        let r = match path {
            Ok(path) => self.api(&c, M::GET, path, None).await,
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Create or change an agent: `definition` holds its content fields (model, system_prompt, tools, …); a change makes a new version.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn put_agent(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::PutAgent>,
    ) -> CallToolResult {
        let r = match given(&input.name, "name").and_then(seg) {
            Ok(name) => {
                self.api(
                    &c,
                    M::PUT,
                    format!("/v1/agents/{name}"),
                    Some(Value::Object(input.definition)),
                )
                .await
            }
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "The named volumes (shared file trees) of your tenant, with their sizes and versions.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn list_volumes(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(_): Parameters<face::ListVolumes>,
    ) -> CallToolResult {
        answer(self.api(&c, M::GET, "/v1/volumes".into(), None).await)
    }

    #[tool(
        description = "The files of a volume in path order (path, sha256, size, mode), a page at a time. Name the volume with `volume`, or with `run` for a run's own volume.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn volume_tree(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeTree>,
    ) -> CallToolResult {
        let path = volume_base(&input.at).map(|base| {
            let mut q = Vec::new();
            if let Some(p) = &input.prefix {
                q.push(format!("prefix={}", query_value(p)));
            }
            if let Some(cursor) = &input.cursor {
                q.push(format!("cursor={}", query_value(cursor)));
            }
            if let Some(l) = input.limit {
                q.push(format!("limit={l}"));
            }
            with_query(format!("{base}/tree"), &q)
        });
        answer(match path {
            Ok(path) => self.api(&c, M::GET, path, None).await,
            Err(e) => Err(e),
        })
    }

    #[tool(
        description = "Read a text file of a volume: its content and its sha256 (pass it as `if_match` to volume_write to change exactly this version).",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn volume_read(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeRead>,
    ) -> CallToolResult {
        answer(self.read_file(&c, &input).await)
    }

    #[tool(
        description = "Write a text file of a volume (its whole content), as one change; `if_match` (a sha256, or \"\" for a new file) refuses to overwrite another version. Returns the change with the file's new sha256.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true
        )
    )]
    async fn volume_write(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeWrite>,
    ) -> CallToolResult {
        let r = match file_url(&input.at, &input.path) {
            Ok(url) => match condition(input.if_match.as_deref()) {
                Ok(headers) => {
                    let body = Bytes::from(input.content.into_bytes());
                    self.api_raw(&c, M::PUT, url, headers, Some(body)).await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "Delete a file of a volume, as one change; `if_match` (a sha256) refuses to delete another version.",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn volume_delete(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeDelete>,
    ) -> CallToolResult {
        let r = match file_url(&input.at, &input.path) {
            Ok(url) => match condition(input.if_match.as_deref().filter(|m| !m.is_empty())) {
                Ok(headers) => self.api_raw(&c, M::DELETE, url, headers, None).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        answer(r)
    }

    #[tool(
        description = "A volume's changelog, newest first: who changed which files and how (`diff: true` adds unified diffs); filter by `run_id`.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn volume_changes(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeChanges>,
    ) -> CallToolResult {
        let path = volume_base(&input.at).map(|base| {
            let mut q = Vec::new();
            if let Some(r) = &input.run_id {
                q.push(format!("run_id={}", query_value(r)));
            }
            if let Some(b) = input.before_seq {
                q.push(format!("before_seq={b}"));
            }
            if let Some(l) = input.limit {
                q.push(format!("limit={l}"));
            }
            if let Some(d) = input.diff {
                q.push(format!("diff={d}"));
            }
            with_query(format!("{base}/changes"), &q)
        });
        answer(match path {
            Ok(path) => self.api(&c, M::GET, path, None).await,
            Err(e) => Err(e),
        })
    }

    #[tool(
        description = "Undo one change (`change_id`) or every change of a run (`run_id`) of a volume, as a new change; refused when a file changed since (a later edit is never clobbered).",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn volume_undo(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeUndo>,
    ) -> CallToolResult {
        answer(
            self.post_to_volume(&c, &input.at, "undo", body(&input))
                .await,
        )
    }

    #[tool(
        description = "Take a snapshot of a volume (a version you can diff against or restore later).",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    async fn volume_snapshot(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeSnapshot>,
    ) -> CallToolResult {
        answer(
            self.post_to_volume(&c, &input.at, "snapshots", body(&input))
                .await,
        )
    }

    #[tool(
        description = "A volume's snapshots, newest first.",
        annotations(read_only_hint = true, destructive_hint = false)
    )]
    async fn volume_snapshots(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeSnapshots>,
    ) -> CallToolResult {
        answer(match volume_base(&input.at) {
            Ok(base) => {
                self.api(&c, M::GET, format!("{base}/snapshots"), None)
                    .await
            }
            Err(e) => Err(e),
        })
    }

    #[tool(
        description = "Restore a snapshot of a volume, as one change; `if_tree` refuses when the volume is no longer at that version.",
        annotations(read_only_hint = false, destructive_hint = true)
    )]
    async fn volume_restore(
        &self,
        Extension(c): Extension<Caller>,
        Parameters(input): Parameters<face::VolumeRestore>,
    ) -> CallToolResult {
        let action = given(&input.snapshot_id, "snapshot_id")
            .and_then(seg)
            .map(|id| format!("snapshots/{id}/restore"));
        answer(match action {
            Ok(action) => {
                self.post_to_volume(&c, &input.at, &action, body(&input))
                    .await
            }
            Err(e) => Err(e),
        })
    }
}

/// `/v1/volumes/{name}`, or `/v1/runs/{id}/volume` for a run's own volume.
fn volume_base(at: &face::VolumeAt) -> Result<String, String> {
    match (at.volume.as_deref(), at.run.as_deref()) {
        (Some(v), None) => Ok(format!("/v1/volumes/{}", seg(given(v, "volume")?)?)),
        (None, Some(r)) => Ok(format!("/v1/runs/{}/volume", seg(given(r, "run")?)?)),
        _ => Err(
            "name the volume with exactly one of `volume` (a named volume) and `run` (a run id: the volume of its tree)"
                .to_owned(),
        ),
    }
}

/// `…/files/{path}`, each segment of the path encoded (`.` and `..` refused).
fn file_url(at: &face::VolumeAt, path: &str) -> Result<String, String> {
    let base = volume_base(at)?;
    let segments = given(path, "path")?
        .split('/')
        .map(|s| {
            seg(s).map_err(|_| {
                format!("`path` {path:?} has a `.` or `..` segment; name the file from the volume's root")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("{base}/files/{}", segments.join("/")))
}

/// A query value, percent-encoded (`.` and `..` are fine in a query).
fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn with_query(path: String, q: &[String]) -> String {
    if q.is_empty() {
        path
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

/// The headers of a conditional write: `If-Match: "<sha>"`, or `If-None-Match: *` for "".
fn condition(if_match: Option<&str>) -> Result<http::HeaderMap, String> {
    let mut h = http::HeaderMap::new();
    match if_match {
        None => {}
        Some("") => {
            h.insert(
                http::header::IF_NONE_MATCH,
                http::HeaderValue::from_static("*"),
            );
        }
        Some(sha) => {
            let v = http::HeaderValue::from_str(&format!("\"{}\"", sha.trim_matches('"')))
                .map_err(|_| format!("`if_match` must be a sha256 (64 hex digits), got {sha:?}"))?;
            h.insert(http::header::IF_MATCH, v);
        }
    }
    Ok(h)
}

/// What `volume_read` answers.
#[derive(serde::Serialize)]
struct FileText<'a> {
    path: &'a str,
    sha256: &'a str,
    size: usize,
    content: &'a str,
}

/// The message of an API error answer (`{"error": {"message"}}`).
fn api_message(v: &Value) -> Option<&str> {
    v.get("error")?.get("message")?.as_str()
}

/// An answer's JSON, or its error as a message with the status.
async fn json_answer(r: UpResponse) -> Result<Value, String> {
    let status = r.status;
    let v = r.json().await?;
    if (200..300).contains(&status) {
        Ok(v)
    } else {
        let msg = api_message(&v).map_or_else(|| format!("weft answered {status}"), str::to_owned);
        Err(format!("{msg} (HTTP {status})"))
    }
}

/// What the face reads of `GET /v1/agents`.
#[derive(Default, serde::Deserialize)]
struct AgentList {
    #[serde(default)]
    data: Vec<AgentItem>,
}

#[derive(serde::Deserialize)]
struct AgentItem {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    retired: bool,
}

/// `/v1/memory/{scope}/{scope_id}/{key}`, each part checked and encoded.
fn memory_path(scope: face::MemoryScope, scope_id: &str, key: &str) -> Result<String, String> {
    Ok(format!(
        "/v1/memory/{}/{}/{}",
        scope.as_str(),
        seg(given(scope_id, "scope_id")?)?,
        seg(given(key, "key")?)?
    ))
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
        json_answer(r).await
    }

    /// [`Face::api`] with headers and a raw body.
    async fn api_raw(
        &self,
        c: &Caller,
        method: http::Method,
        path: String,
        headers: http::HeaderMap,
        body: Option<Bytes>,
    ) -> Result<Value, String> {
        let r = self
            .upstream
            .call_raw(method, path, c.bearer.clone(), headers, body)
            .await?;
        json_answer(r).await
    }

    /// `volume_read`: the file's text and sha256; a binary file is refused, saying so.
    async fn read_file(&self, c: &Caller, input: &face::VolumeRead) -> Result<Value, String> {
        let url = file_url(&input.at, &input.path)?;
        let mut r = self
            .upstream
            .call_raw(M::GET, url, c.bearer.clone(), http::HeaderMap::new(), None)
            .await?;
        if !(200..300).contains(&r.status) {
            return json_answer(r).await;
        }
        let sha = r
            .headers
            .get(http::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned();
        let mut bytes = Vec::new();
        while let Some(chunk) = r.body.next().await {
            bytes.extend_from_slice(&chunk?);
        }
        let text = std::str::from_utf8(&bytes)
            .ok()
            .filter(|t| !t.contains('\0'))
            .ok_or_else(|| {
                format!(
                    "`{}` is a binary file ({} bytes, sha256 {sha}); this tool reads text files only (export the volume over HTTP to get it)",
                    input.path,
                    bytes.len()
                )
            })?;
        serde_json::to_value(FileText {
            path: &input.path,
            sha256: &sha,
            size: bytes.len(),
            content: text,
        })
        .map_err(|e| format!("the file cannot be answered: {e}"))
    }

    /// `POST <volume>/{action}` with `body`.
    async fn post_to_volume(
        &self,
        c: &Caller,
        at: &face::VolumeAt,
        action: &str,
        body: Result<Value, String>,
    ) -> Result<Value, String> {
        let base = volume_base(at)?;
        self.api(c, M::POST, format!("{base}/{action}"), Some(body?))
            .await
    }

    /// `POST /v1/runs` for one [`face::SpawnRun`].
    async fn spawn(&self, c: &Caller, run: &face::SpawnRun) -> Result<Value, String> {
        given(&run.agent, "agent")?;
        given(&run.input, "input")?;
        self.api(c, M::POST, "/v1/runs".into(), Some(body(run)?))
            .await
    }

    async fn get_run_of(&self, c: &Caller, input: &face::GetRun) -> Result<Value, String> {
        let id = seg(given(&input.run_id, "run_id")?)?;
        self.api(c, M::GET, format!("/v1/runs/{id}"), None).await
    }

    async fn list_runs_of(&self, c: &Caller, input: &face::ListRuns) -> Result<Value, String> {
        let mut q = Vec::new();
        if let Some(s) = input.status {
            q.push(format!("status={}", s.as_str()));
        }
        if let Some(a) = &input.agent {
            q.push(format!("agent={}", seg(a)?));
        }
        if let Some(cursor) = &input.cursor {
            q.push(format!("cursor={}", seg(cursor)?));
        }
        if let Some(l) = input.limit {
            q.push(format!("limit={l}"));
        }
        let path = if q.is_empty() {
            "/v1/runs".to_owned()
        } else {
            format!("/v1/runs?{}", q.join("&"))
        };
        self.api(c, M::GET, path, None).await
    }

    /// `POST /v1/runs/{id}/{action}` with `body`.
    async fn post_to_run(
        &self,
        c: &Caller,
        run_id: &str,
        action: &str,
        body: Result<Value, String>,
    ) -> Result<Value, String> {
        let id = seg(given(run_id, "run_id")?)?;
        self.api(c, M::POST, format!("/v1/runs/{id}/{action}"), Some(body?))
            .await
    }

    /// `POST /v1/channels/{name}/{action}` with `body`.
    async fn post_to_channel(
        &self,
        c: &Caller,
        channel: &str,
        action: &str,
        body: Result<Value, String>,
    ) -> Result<Value, String> {
        let ch = seg(given(channel, "channel")?)?;
        self.api(
            c,
            M::POST,
            format!("/v1/channels/{ch}/{action}"),
            Some(body?),
        )
        .await
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
        let list: AgentList = serde_json::from_value(list).unwrap_or_default();
        let schema = rmcp::handler::server::common::schema_for_type::<face::RunAgent>();
        list.data
            .into_iter()
            .filter(|a| !a.retired)
            .map(|a| {
                let description = a.description.unwrap_or_default();
                let text = if description.is_empty() {
                    format!(
                        "Run the agent `{}` on an input and return its answer.",
                        a.name
                    )
                } else {
                    format!("Run the agent `{}`: {description}", a.name)
                };
                Tool::new(format!("{AGENT_PREFIX}{}", a.name), text, schema.clone())
                    .with_annotations(ToolAnnotations::new().read_only(false))
            })
            .collect()
    }

    /// `agent__<name>`: a streamed run, its events as progress, its final text as the answer.
    async fn call_agent(
        &self,
        c: &Caller,
        agent: &str,
        input: &face::RunAgent,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        if let Err(e) = given(&input.input, "input") {
            return tool_error(e);
        }
        let start = match serde_json::to_value(StreamedRun {
            agent,
            input: &input.input,
            stream: true,
            metadata: input.metadata.as_ref(),
        }) {
            Ok(b) => b,
            Err(e) => return tool_error(format!("the input cannot be sent: {e}")),
        };
        let r = match self
            .upstream
            .call(M::POST, "/v1/runs".into(), c.bearer.clone(), Some(start))
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
                api_message(&v).unwrap_or("the run could not start")
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
                    if let Some(id) = run_id.as_deref() {
                        let _ = self
                            .post_to_run(c, id, "cancel", body(&CancelBody { reason: "cancelled by the MCP client" }))
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
                    result.structured_content = serde_json::to_value(Outcome {
                        run_id: run_id.as_deref(),
                        status: "awaiting_input",
                        interrupt: Some(&data["interrupt"]),
                        stop_reason: None,
                        final_text: texts.last().map(String::as_str),
                    })
                    .ok();
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
                // A notice from the run (`Interruption {op: notify}`) is its own message; any
                // other event is named.
                let message = match (event.as_str(), data["message"].as_str()) {
                    ("notice", Some(m)) => m.to_owned(),
                    _ => event.clone(),
                };
                let _ = ctx
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(t.clone(), progress).with_message(message),
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
        result.structured_content = serde_json::to_value(Outcome {
            run_id: run_id.as_deref(),
            status,
            interrupt: None,
            stop_reason: Some(&done["stop_reason"]),
            final_text: Some(&final_text),
        })
        .ok();
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
        let mut tools: Vec<Tool> = self
            .tools
            .list_all()
            .into_iter()
            .filter(|t| allowed(c.principal.as_ref(), needs(&t.name)))
            .collect();
        tools.extend(self.agent_tools(&c).await);
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let c = caller(&context, self.fixed.as_ref())?;
        let name = request.name.as_ref();
        if let Some(agent) = name.strip_prefix(AGENT_PREFIX) {
            if !allowed(c.principal.as_ref(), RUN_WRITE) {
                return Ok(tool_error(
                    "starting a run needs the `runs:create` scope; ask for a token that has it",
                )
                .into());
            }
            let args = Value::Object(request.arguments.clone().unwrap_or_default());
            let input: face::RunAgent = match serde_json::from_value(args) {
                Ok(i) => i,
                Err(e) => {
                    return Ok(tool_error(format!(
                        "`agent__{agent}` takes {{input, metadata?}}: {e}"
                    ))
                    .into());
                }
            };
            return Ok(self.call_agent(&c, agent, &input, &context).await.into());
        }
        if !self.tools.has_route(name) {
            return Err(ErrorData::invalid_params(
                format!("no tool `{name}`; tools/list shows the ones you may call"),
                None,
            ));
        }
        let needs = needs(name);
        if !allowed(c.principal.as_ref(), needs) {
            let names: BTreeSet<&str> = needs.iter().map(|s| s.as_str()).collect();
            return Ok(tool_error(format!(
                "`{name}` needs one of the scopes {}; your token has none of them",
                names.into_iter().collect::<Vec<_>>().join(", ")
            ))
            .into());
        }
        // The tools read their caller as an extension of the call.
        context.extensions.insert(c);
        self.tools
            .call(ToolCallContext::new(self, request, context))
            .await
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
    store: sessions::PgSessionStore,
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
    store: Option<sessions::PgSessionStore>,
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
    store: Option<sessions::PgSessionStore>,
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
