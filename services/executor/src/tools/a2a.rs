//! A2A tools: the skills of A2A peers (definitions of kind `a2a_peer`) as `a2a__<peer>__<skill>`.
//!
//! Which tools a run sees: every peer its `tools` names (`a2a__<peer>__<skill>`, the skill part
//! may be a glob), whose definition is read from the substrate and whose agent card is fetched
//! once per lease, at the first turn; of the card's skills, those the definition's `skills`
//! offers and the run's `tools` permits. A peer that cannot be mounted (no definition, the card
//! unreachable or not A2A 1.0) makes each of its tools answer why.
//!
//! A call sends one A2A 1.0 message (`SendStreamingMessage` when the card says it streams,
//! `SendMessage` otherwise) over the card's JSON-RPC interface (or its REST one), with the
//! definition's headers (credentials substituted), `A2A-Version: 1.0`, and
//! `metadata.skill`. The peer's status messages and artifacts are written to the transcript as
//! `peer_update` events with the result; the result is the task's artifacts (or its last
//! message). A task that asks for input is answered by calling the tool again with its
//! `task_id`. Every failure is a tool result with `is_error`, never a crashed run.
//!
//! Outbound calls go through the egress guard: http(s) only, no redirects, and the executor's
//! address policy (non-public addresses refused unless `executor.http_private_exempt` names
//! them), on every address connected to. Credentials' values are redacted from what the model
//! sees.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use weft_api::a2a::{
    self as wire, AgentCard, AgentInterface, Message, StreamResponse, Task, TaskState,
};
use weft_config::ExecutorConfig;
use weft_core::a2a_peer::{self, A2aPeerContent, TOOL_PREFIX, split_tool, tool_part};
use weft_core::def::DefContent as _;
use weft_core::mcp::{glob_matches, redact, substitute_credentials};
use weft_core::message::ToolSpec;
use weft_core::run::{PeerUpdate, RunEvent};
use weft_proto::v1;

use super::http::{AddressPolicy, HttpToolError, guarded_client};
use super::{Abort, RunHost, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// The longest fetching a peer's card may take.
const CARD_DEADLINE: Duration = Duration::from_secs(30);
/// The largest card, unary answer or whole stream read from a peer.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// `peer_update` events kept of one call (the first ones, and the last).
const MAX_UPDATES: usize = 200;
/// Characters of one `peer_update`'s text kept.
const MAX_UPDATE_CHARS: usize = 4096;
/// The longest result text handed to the model (the whole answer stays in `peer_update`s up to
/// this too).
const MAX_RESULT_CHARS: usize = 64 * 1024;

/// The HTTP client of A2A calls, built once per executor with the egress guard.
#[derive(Clone, Debug)]
pub struct A2aClient {
    client: reqwest::Client,
    addresses: Arc<AddressPolicy>,
}

impl A2aClient {
    pub fn new(cfg: &ExecutorConfig) -> Result<Self, HttpToolError> {
        let addresses = Arc::new(AddressPolicy::new(&cfg.http_private_exempt)?);
        let client = guarded_client(&addresses, Arc::new(super::http::SystemLookup))?;
        Ok(Self { client, addresses })
    }

    /// May a request go to `url`: http(s), and an IP literal (which never reaches the guarded
    /// resolver) only where the address policy allows it.
    fn check(&self, url: &str) -> Result<reqwest::Url, String> {
        let u = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(format!("`{url}`: only http and https are allowed"));
        }
        let host = u.host_str().ok_or_else(|| format!("`{url}` has no host"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            self.addresses
                .check(ip, None)
                .map_err(|b| format!("refused: {b}"))?;
        }
        Ok(u)
    }

    /// A request to `url` with the peer's headers and the A2A version.
    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        headers: &HeaderMap,
    ) -> Result<reqwest::RequestBuilder, String> {
        let u = self.check(url)?;
        Ok(self
            .client
            .request(method, u)
            .headers(headers.clone())
            .header(wire::VERSION_HEADER, wire::PROTOCOL_VERSION))
    }

    /// The peer's card.
    async fn card(&self, url: &str, headers: &HeaderMap) -> Result<AgentCard, String> {
        let resp = self
            .request(reqwest::Method::GET, url, headers)?
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(CARD_DEADLINE)
            .send()
            .await
            .map_err(|e| format!("fetching the agent card {url} failed: {}", root(&e)))?;
        let bytes = answer(resp, url).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("the agent card at {url} is not an A2A 1.0 card: {e}"))
    }
}

/// The body of a 2xx answer (at most [`MAX_ANSWER_BYTES`]); another status is an error naming
/// it and the start of the body.
async fn answer(mut resp: reqwest::Response, url: &str) -> Result<Vec<u8>, String> {
    let status = resp.status();
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("reading {url} failed: {}", root(&e)))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ANSWER_BYTES {
            return Err(format!("{url} answered more than {MAX_ANSWER_BYTES} bytes"));
        }
    }
    if status.is_redirection() {
        return Err(format!(
            "{url} redirected ({status}); weft follows no redirects to A2A peers: give the final URL"
        ));
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        return Err(format!(
            "{url} answered {status}: {}",
            text.chars().take(300).collect::<String>()
        ));
    }
    Ok(body)
}

fn root(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Whether the run's `tools` entries let it use `peer`'s skill (as its tool part).
pub fn permitted(allowed: &[String], peer: &str, skill: &str) -> bool {
    allowed.iter().any(|a| match split_tool(a) {
        Some((p, pattern)) => p == peer && glob_matches(pattern, skill),
        None => false,
    })
}

/// How a peer is called.
struct Peer {
    name: String,
    content: A2aPeerContent,
    /// The interface: its URL and whether it is JSON-RPC (else REST).
    url: String,
    jsonrpc: bool,
    streaming: bool,
}

/// One mounted skill.
pub struct A2aTool {
    name: String,
    skill: String,
    peer: Arc<Peer>,
    spec: ToolSpec,
}

/// The key under which a peer that could not be mounted is kept in the mount's failures.
pub fn failure_key(peer: &str) -> String {
    format!("{TOOL_PREFIX}{peer}")
}

/// Mounts the skills of the peers the run's `tools` names into `out`.
pub(crate) async fn mount(run: &dyn RunHost, out: &mut super::Mount) {
    let allowed = &run.spec().tools;
    let peers: BTreeSet<&str> = allowed
        .iter()
        .filter_map(|a| split_tool(a).map(|(p, _)| p))
        .collect();
    if peers.is_empty() {
        return;
    }
    let Some(client) = run.inner().tools.a2a.clone() else {
        for p in peers {
            out.failed
                .insert(failure_key(p), "this executor has no A2A client".into());
        }
        return;
    };
    let credentials = run.credentials().await;
    for peer in peers {
        match mount_peer(run, &client, peer, &credentials).await {
            Ok(tools) => out.tools.extend(tools),
            Err(why) => {
                // A peer's error page may echo the headers it was sent.
                let why = redact(&why, &credentials);
                tracing::warn!(peer = %peer, error = %why, "A2A peer could not be mounted");
                out.failed.insert(failure_key(peer), why);
            }
        }
    }
}

async fn mount_peer(
    run: &dyn RunHost,
    client: &A2aClient,
    peer: &str,
    credentials: &BTreeMap<String, String>,
) -> Result<Vec<Arc<dyn Tool>>, String> {
    let msg = v1::GetDefRequest {
        kind: v1::DefKind::A2aPeer.into(),
        name: peer.to_owned(),
        ..Default::default()
    };
    let req =
        weft_auth::rpc::request(&run.inner().jwt, run.principal(), msg).map_err(|e| e.message)?;
    let v = run
        .inner()
        .substrate
        .clone()
        .get_def(req)
        .await
        .map_err(|s| {
            format!(
                "no A2A peer definition `{peer}` ({})",
                weft_core::Error::from(&s).message
            )
        })?
        .into_inner();
    let content = A2aPeerContent::from_json_str(&v.content_json).map_err(|e| e.message)?;
    let headers = headers_of(&content, credentials)?;
    let card = client.card(&content.card_url, &headers).await?;
    let (url, jsonrpc) = interface(&card).ok_or_else(|| {
        format!(
            "the agent card at {} lists no A2A 1.0 JSONRPC or HTTP+JSON interface",
            content.card_url
        )
    })?;
    // The definition's headers (credentials) go only where its author pointed them.
    if !same_origin(&url, &content.card_url) {
        return Err(format!(
            "the agent card at {} names an interface on another origin ({url}); weft sends the peer's headers only to the card's origin: point card_url at a card served there",
            content.card_url
        ));
    }
    let peer_ref = Arc::new(Peer {
        name: peer.to_owned(),
        url,
        jsonrpc,
        streaming: card.capabilities.streaming == Some(true),
        content,
    });
    let allowed = &run.spec().tools;
    let mut seen = BTreeSet::new();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    for skill in &card.skills {
        let Some(part) = tool_part(&skill.id) else {
            continue;
        };
        if !peer_ref.content.offers(&skill.id)
            || !permitted(allowed, peer, &part)
            || !seen.insert(part.clone())
        {
            continue;
        }
        let name = tool_name(peer, &part, &skill.id);
        let mut description = format!(
            "Ask the A2A agent `{}` (peer `{peer}`{}) to do its skill `{}`: {}",
            card.name,
            if peer_ref.content.description.is_empty() {
                String::new()
            } else {
                format!(": {}", peer_ref.content.description)
            },
            skill.name,
            skill.description
        );
        if !skill.examples.is_empty() {
            description.push_str(&format!(" Examples: {}.", skill.examples.join("; ")));
        }
        description.push_str(
            " Returns the peer's answer. If the peer needs more input, the result says what it \
             asks and gives a task_id: call again with that task_id and your answer as message.",
        );
        tools.push(Arc::new(A2aTool {
            spec: ToolSpec {
                name: name.clone(),
                description,
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "what to ask the peer"},
                        "task_id": {"type": "string", "description": "the peer's task to continue (one that asked for input)"}
                    },
                    "required": ["message"],
                    "additionalProperties": false
                }),
            },
            name,
            skill: skill.id.clone(),
            peer: Arc::clone(&peer_ref),
        }));
    }
    Ok(tools)
}

/// Whether `a` and `b` are URLs of one origin (scheme, host and port).
fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// Longest tool name providers take (OpenAI's and Anthropic's limit).
const MAX_TOOL_NAME: usize = 64;

/// `a2a__<peer>__<part>`, cut to [`MAX_TOOL_NAME`] where it is longer: the part shortened and
/// ended with 8 hex digits of the skill id's hash, so two long ids stay apart.
fn tool_name(peer: &str, part: &str, id: &str) -> String {
    let name = format!("{TOOL_PREFIX}{peer}__{part}");
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let hash = weft_core::agent::sha256_ref(id);
    let tag = hash.trim_start_matches("sha256:").get(..8).unwrap_or("0");
    let room = MAX_TOOL_NAME.saturating_sub(TOOL_PREFIX.len() + peer.len() + 2 + 1 + tag.len());
    let kept: String = part.chars().take(room.max(1)).collect();
    format!("{TOOL_PREFIX}{peer}__{kept}_{tag}")
}

/// The card's interface weft calls: the first JSON-RPC one of version 1.x, else the first
/// REST one; `(url, is_jsonrpc)`.
fn interface(card: &AgentCard) -> Option<(String, bool)> {
    let v1 = |i: &&AgentInterface| {
        i.protocol_version.is_empty()
            || i.protocol_version == "1"
            || i.protocol_version.starts_with("1.")
    };
    let of = |binding: &str| {
        card.supported_interfaces
            .iter()
            .filter(v1)
            .find(|i| i.protocol_binding.eq_ignore_ascii_case(binding) && !i.url.is_empty())
            .map(|i| i.url.clone())
    };
    of(wire::BINDING_JSONRPC)
        .map(|u| (u, true))
        .or_else(|| of(wire::BINDING_REST).map(|u| (u, false)))
}

/// The definition's headers with the run's credentials substituted.
fn headers_of(
    content: &A2aPeerContent,
    credentials: &BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (name, value) in &content.headers {
        let value = substitute_credentials(value, credentials).map_err(|missing| {
            format!(
                "header `{name}` needs credential `{missing}`; pass it in the run's `credentials`"
            )
        })?;
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a header name"))?;
        let mut v = HeaderValue::from_str(&value)
            .map_err(|_| format!("header `{name}` is not a valid header value"))?;
        v.set_sensitive(true);
        out.insert(n, v);
    }
    Ok(out)
}

impl Tool for A2aTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        // A peer's task may do anything.
        SideEffect::Effectful
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
            let Some(client) = ctx.inner().tools.a2a.clone() else {
                return Ok(ToolOutput::error("this executor has no A2A client").into());
            };
            let text = input.get("message").and_then(Value::as_str).unwrap_or("");
            if text.trim().is_empty() {
                return Ok(ToolOutput::error(
                    "`message` is required: the text to send to the peer",
                )
                .into());
            }
            let task_id = input
                .get("task_id")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty());
            let credentials = ctx.host().credentials().await;
            let headers = match headers_of(&self.peer.content, &credentials) {
                Ok(h) => h,
                Err(why) => return Ok(ToolOutput::error(why).into()),
            };
            let mut message = json!({
                // The same call sends the same message id: a peer that keeps ids (weft does)
                // answers a repeat with the same task.
                "messageId": format!("weft:{}", ctx.exactly_once_key()),
                "role": "ROLE_USER",
                "parts": [{"text": text}],
                "metadata": {"skill": self.skill},
            });
            if let Some(t) = task_id {
                message["taskId"] = json!(t);
            }
            let body = json!({"message": message, "configuration": {}});
            let timeout = Duration::from_millis(u64::from(
                self.peer
                    .content
                    .timeout_ms
                    .unwrap_or(a2a_peer::limits::DEFAULT_TIMEOUT_MS),
            ));
            let mut seen = Seen::default();
            let sent =
                tokio::time::timeout(timeout, self.send(&client, &headers, &body, &mut seen)).await;
            for ev in seen.updates.drain(..) {
                ctx.emit(RunEvent::PeerUpdate(PeerUpdate {
                    tool_use_id: ctx.tool_use_id().to_owned(),
                    peer: self.peer.name.clone(),
                    text: redact(&ev.text, &credentials),
                    ..ev
                }));
            }
            let out = match sent {
                Err(_) => ToolOutput::error(format!(
                    "A2A peer `{}` did not finish within {} ms{}",
                    self.peer.name,
                    timeout.as_millis(),
                    seen.task
                        .as_ref()
                        .map(|t| format!(" (its task {} is {})", t.id, state_name(t.status.state)))
                        .unwrap_or_default()
                )),
                Ok(Err(why)) => ToolOutput::error(format!("A2A peer `{}`: {why}", self.peer.name)),
                Ok(Ok(())) => seen.outcome(&self.peer.name),
            };
            Ok(ToolOutput {
                text: redact(&out.text, &credentials),
                is_error: out.is_error,
            }
            .into())
        })
    }
}

/// What a call has seen of the peer's answer.
#[derive(Default)]
struct Seen {
    task: Option<Task>,
    message: Option<Message>,
    /// Artifacts' text by artifact id, in order.
    artifacts: Vec<(String, String)>,
    updates: Vec<PeerUpdate>,
}

fn state_name(s: TaskState) -> &'static str {
    s.as_str()
}

fn parts_text(parts: &[wire::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| {
            p.text
                .clone()
                .or_else(|| p.data.as_ref().map(Value::to_string))
                .or_else(|| p.url.clone())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Seen {
    fn task_id(&self) -> String {
        self.task.as_ref().map(|t| t.id.clone()).unwrap_or_default()
    }

    fn artifact(&mut self, id: &str, text: String, append: bool) {
        match self.artifacts.iter_mut().find(|(a, _)| a == id) {
            Some((_, t)) if append => t.push_str(&text),
            Some((_, t)) => *t = text,
            None => self.artifacts.push((id.to_owned(), text)),
        }
    }

    /// Keeps `u` as a `peer_update`: its text cut to [`MAX_UPDATE_CHARS`], and past
    /// [`MAX_UPDATES`] only the newest in the last place (the end state stays visible).
    fn update(&mut self, mut u: PeerUpdate) {
        if u.text.chars().count() > MAX_UPDATE_CHARS {
            u.text = u.text.chars().take(MAX_UPDATE_CHARS).collect();
            u.text.push_str(" [cut]");
        }
        if self.updates.len() >= MAX_UPDATES {
            self.updates.pop();
        }
        self.updates.push(u);
    }

    /// Takes one event of the answer.
    fn on(&mut self, ev: StreamResponse) {
        match ev {
            StreamResponse::Task(t) => {
                for a in &t.artifacts {
                    self.artifact(&a.artifact_id, parts_text(&a.parts), false);
                }
                self.task = Some(t);
            }
            StreamResponse::Message(m) => self.message = Some(m),
            StreamResponse::StatusUpdate(s) => {
                let text = s
                    .status
                    .message
                    .as_ref()
                    .map(|m| parts_text(&m.parts))
                    .unwrap_or_default();
                self.update(PeerUpdate {
                    task_id: s.task_id.clone(),
                    state: state_name(s.status.state).into(),
                    text,
                    ..PeerUpdate::default()
                });
                let t = self.task.get_or_insert_with(|| Task {
                    id: s.task_id.clone(),
                    context_id: s.context_id.clone(),
                    ..Task::default()
                });
                t.status = s.status;
            }
            StreamResponse::ArtifactUpdate(a) => {
                let text = parts_text(&a.artifact.parts);
                self.update(PeerUpdate {
                    task_id: a.task_id.clone(),
                    state: "artifact".into(),
                    text: text.clone(),
                    ..PeerUpdate::default()
                });
                self.artifact(&a.artifact.artifact_id, text, a.append);
            }
        }
    }

    /// The tool's result.
    fn outcome(&self, peer: &str) -> ToolOutput {
        let clip = |s: String| -> String {
            if s.chars().count() > MAX_RESULT_CHARS {
                let mut c: String = s.chars().take(MAX_RESULT_CHARS).collect();
                c.push_str("\n[cut: the peer's answer was longer]");
                c
            } else {
                s
            }
        };
        if let Some(m) = &self.message
            && self.task.is_none()
        {
            return ToolOutput::ok(clip(parts_text(&m.parts)));
        }
        let Some(task) = &self.task else {
            return ToolOutput::error(format!(
                "A2A peer `{peer}` answered with no task or message"
            ));
        };
        let said = task
            .status
            .message
            .as_ref()
            .map(|m| parts_text(&m.parts))
            .unwrap_or_default();
        let artifacts = self
            .artifacts
            .iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n");
        let state = task.status.state;
        match state {
            TaskState::Completed => {
                let text = if artifacts.is_empty() {
                    said
                } else {
                    artifacts
                };
                ToolOutput::ok(clip(text))
            }
            TaskState::InputRequired | TaskState::AuthRequired => ToolOutput::ok(clip(format!(
                "The peer needs input ({}): {said}\nCall this tool again with task_id \"{}\" and your answer as message.",
                state_name(state),
                self.task_id()
            ))),
            TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
                ToolOutput::error(clip(format!(
                    "the peer's task {} ended {}{}",
                    task.id,
                    state_name(state),
                    if said.is_empty() {
                        String::new()
                    } else {
                        format!(": {said}")
                    }
                )))
            }
            _ => ToolOutput::error(format!(
                "the peer's answer ended with its task {} still {} (it did not finish or ask for input)",
                task.id,
                state_name(state)
            )),
        }
    }
}

impl A2aTool {
    /// Sends the message and reads the answer into `seen`.
    async fn send(
        &self,
        client: &A2aClient,
        headers: &HeaderMap,
        params: &Value,
        seen: &mut Seen,
    ) -> Result<(), String> {
        let p = &self.peer;
        let (url, body) = match (p.jsonrpc, p.streaming) {
            (true, stream) => (
                p.url.clone(),
                json!({
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": if stream { wire::method::SEND_STREAMING_MESSAGE } else { wire::method::SEND_MESSAGE },
                    "params": params,
                }),
            ),
            (false, stream) => (
                format!(
                    "{}/{}",
                    p.url.trim_end_matches('/'),
                    if stream {
                        "message:stream"
                    } else {
                        "message:send"
                    }
                ),
                params.clone(),
            ),
        };
        let accept = if p.streaming {
            "text/event-stream"
        } else {
            "application/json"
        };
        let resp = client
            .request(reqwest::Method::POST, &url, headers)?
            .header(reqwest::header::ACCEPT, accept)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("sending to {url} failed: {}", root(&e)))?;
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !(is_sse && resp.status().is_success()) {
            // A unary answer (also how a streaming request's early error comes back).
            let bytes = answer(resp, &url).await?;
            let v: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{url} answered with something that is not JSON: {e}"))?;
            return take_result(v, p.jsonrpc, seen);
        }
        // At most MAX_ANSWER_BYTES of stream in all: a peer cannot grow this call's memory
        // (nor the transcript) without bound.
        let mut read = 0usize;
        let bytes = resp.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(|e| root(&e))?;
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                return Err(format!(
                    "the peer streamed more than {MAX_ANSWER_BYTES} bytes"
                ));
            }
            Ok(chunk)
        });
        let mut events = bytes.eventsource();
        while let Some(ev) = events.next().await {
            let ev = ev.map_err(|e| format!("the stream from {url} broke: {e}"))?;
            if ev.data.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&ev.data)
                .map_err(|e| format!("{url} streamed an event that is not JSON: {e}"))?;
            if ev.event == "error" {
                return Err(error_text(&v));
            }
            take_event(v, p.jsonrpc, seen)?;
            if seen
                .task
                .as_ref()
                .is_some_and(|t| t.status.state.is_terminal() || t.status.state.is_interrupted())
                || (seen.message.is_some() && seen.task.is_none())
            {
                break;
            }
        }
        Ok(())
    }
}

/// The text of an error body: JSON-RPC (`{"error": {"code", "message"}}` or the error object
/// itself) or REST (`{"error": {"message"}}`).
fn error_text(v: &Value) -> String {
    let e = v.get("error").unwrap_or(v);
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("an error without a message");
    match e.get("code") {
        Some(c) => format!("error {c}: {message}"),
        None => message.to_owned(),
    }
}

/// A unary answer: JSON-RPC `{"result": {"task"|"message"}}`, or REST `{"task"|"message"}`.
fn take_result(v: Value, jsonrpc: bool, seen: &mut Seen) -> Result<(), String> {
    let result = if jsonrpc {
        if v.get("error").is_some() {
            return Err(error_text(&v));
        }
        v.get("result").cloned().unwrap_or(Value::Null)
    } else {
        if v.get("error").is_some() {
            return Err(error_text(&v));
        }
        v
    };
    let ev: StreamResponse = serde_json::from_value(result)
        .map_err(|e| format!("the peer's answer is not an A2A task or message: {e}"))?;
    seen.on(ev);
    Ok(())
}

/// One stream event: a JSON-RPC response carrying a stream response, or the bare one (REST).
fn take_event(v: Value, jsonrpc: bool, seen: &mut Seen) -> Result<(), String> {
    if jsonrpc && v.get("jsonrpc").is_some() {
        return take_result(v, true, seen);
    }
    take_result(v, false, seen)
}

#[cfg(test)]
mod tests;
