//! The run side of A2A: a task is a run started over A2A (its metadata holds the task's
//! `a2a_context_id`; a run without one is not a task), read and driven through the REST run
//! routes in-process as the caller.
//!
//! - A message without `taskId` starts a run of the skill it names (`metadata.skill`, or the
//!   only exposed agent); with one, it answers the run's pending interruption, or is input to
//!   it (`POST /v1/runs/{id}/input`).
//! - Statuses: queued → SUBMITTED, running → WORKING, awaiting_input → INPUT_REQUIRED,
//!   succeeded → COMPLETED, failed → FAILED, cancelled → CANCELED.
//! - A stream is the run's own, translated: a `task` first, a WORKING status, each turn's text
//!   that comes with tool calls as a WORKING status message, and at the end the final text as
//!   the `result` artifact and the last status (COMPLETED, FAILED, CANCELED, or INPUT_REQUIRED
//!   with the question), after which the stream closes.

use std::collections::VecDeque;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use serde_json::{Value, json};
use weft_api::a2a::{
    A2aError, Artifact, Message, Part, Role, SendMessageRequest, StreamResponse, Task,
    TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use weft_mcp_face::Upstream as _;

use crate::mcp::RouterUpstream;
use crate::sse_read;

/// The run metadata key holding a task's context id.
pub(super) const CONTEXT_KEY: &str = "a2a_context_id";
/// Longest context id (and message id used in an idempotency key) taken from a client.
const MAX_ID_CHARS: usize = 190;
/// Agents the card looks at, at most (the tenant's first, by name).
const MAX_SCANNED_AGENTS: usize = 1000;
/// How long `CancelTask` waits for the run to end before answering with it as it is.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
/// Transcript pages read for a task's history, at most (1000 events each).
const MAX_PAGES: usize = 100;

/// An A2A error: its code, message and, where weft's own answer was more precise (401, 403,
/// 413, 429, 503, 504), that HTTP status for the REST binding, with weft's error code and
/// `Retry-After`.
#[derive(Debug)]
pub(super) struct Fail {
    kind: A2aError,
    message: String,
    http: Option<StatusCode>,
    weft_code: Option<String>,
    retry_after: Option<HeaderValue>,
}

impl Fail {
    pub(super) fn new(kind: A2aError, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            http: None,
            weft_code: None,
            retry_after: None,
        }
    }

    /// An error the REST binding answers with `status` (weft's own, more precise than the A2A
    /// error's).
    pub(super) fn with_status(
        kind: A2aError,
        message: impl Into<String>,
        status: StatusCode,
    ) -> Self {
        Self {
            http: Some(status),
            ..Self::new(kind, message)
        }
    }

    fn internal(message: impl Into<String>) -> Self {
        Self::new(A2aError::Internal, message)
    }

    /// A REST error answer of the run routes (`{"error": {"code", "message"}}`); a 404 is
    /// `missing`.
    fn of_rest(status: u16, headers: &HeaderMap, body: &[u8], missing: A2aError) -> Self {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let err = v.get("error").unwrap_or(&Value::Null);
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| format!("HTTP {status}"), str::to_owned);
        let kind = match status {
            404 => missing,
            400 | 413 | 415 | 422 => A2aError::InvalidParams,
            409 => A2aError::UnsupportedOperation,
            _ => A2aError::Internal,
        };
        let http = match status {
            401 | 403 | 413 | 429 | 503 | 504 => StatusCode::from_u16(status).ok(),
            _ => None,
        };
        Self {
            kind,
            message,
            http,
            weft_code: err.get("code").and_then(Value::as_str).map(str::to_owned),
            retry_after: headers.get(header::RETRY_AFTER).cloned(),
        }
    }

    fn error_info(&self) -> Value {
        let mut metadata = serde_json::Map::new();
        if let Some(c) = &self.weft_code {
            metadata.insert("weft_code".into(), json!(c));
        }
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.kind.reason(),
            "domain": "a2a-protocol.org",
            "metadata": metadata,
        })
    }

    /// The JSON-RPC `error` object.
    pub(super) fn rpc(&self) -> Value {
        json!({"code": self.kind.code(), "message": self.message, "data": [self.error_info()]})
    }

    fn status(&self) -> StatusCode {
        self.http.unwrap_or_else(|| {
            StatusCode::from_u16(self.kind.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        })
    }

    /// The REST binding's error body.
    pub(super) fn rest_body(&self) -> Value {
        let s = self.status();
        json!({"error": {
            "code": s.as_u16(),
            "status": status_name(s),
            "message": self.message,
            "details": [self.error_info()],
        }})
    }

    /// The REST binding's error answer.
    pub(super) fn rest(&self) -> Response {
        let mut r = (self.status(), axum::Json(self.rest_body())).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/a2a+json"),
        );
        self.retry_after(&mut r);
        r
    }

    pub(super) fn retry_after(&self, r: &mut Response) {
        if let Some(ra) = &self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, ra.clone());
        }
    }
}

/// A task's stream events.
pub(super) type TaskStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<StreamResponse, Fail>> + Send>>;

type FrameStream = std::pin::Pin<Box<dyn Stream<Item = Result<sse_read::Frame, String>> + Send>>;

/// The REST status line of an A2A error.
fn status_name(s: StatusCode) -> &'static str {
    match s.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "FAILED_PRECONDITION",
        413 => "OUT_OF_RANGE",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

/// An agent the caller's tenant offers over A2A.
pub(super) struct Exposed {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub examples: Vec<String>,
}

/// A task just started or resumed: where its stream goes on from.
struct Started {
    run_id: String,
    context_id: String,
    from_seq: i64,
    snapshot: Task,
}

/// One caller: the API router and the caller's bearer token.
pub(super) struct Caller {
    api: RouterUpstream,
    bearer: String,
}

/// Longest id (of a task, or a skill's agent name) looked up.
const MAX_LOOKUP_CHARS: usize = 200;

/// A path segment of an id; one that cannot be (`.`, `..`), or is too long to be one, names
/// nothing.
fn seg(id: &str, missing: A2aError) -> Result<String, Fail> {
    if id.is_empty() {
        return Err(Fail::new(missing, "the id is empty"));
    }
    if id.chars().count() > MAX_LOOKUP_CHARS {
        return Err(Fail::new(
            missing,
            format!("no such id: ids are at most {MAX_LOOKUP_CHARS} characters"),
        ));
    }
    weft_mcp_face::seg(id).map_err(|e| Fail::new(missing, e))
}

impl Caller {
    /// The caller of a request the bearer check let through.
    pub(super) fn new(api: &RouterUpstream, headers: &HeaderMap) -> Result<Self, Fail> {
        let bearer = weft_auth::bearer_token(headers).ok_or_else(|| Fail {
            http: Some(StatusCode::UNAUTHORIZED),
            ..Fail::new(A2aError::InvalidRequest, "missing bearer token")
        })?;
        Ok(Self {
            api: api.clone(),
            bearer: bearer.to_owned(),
        })
    }

    /// `method path` with a JSON answer; an error answer is a [`Fail`] (a 404 is `missing`).
    async fn json(
        &self,
        method: Method,
        path: String,
        body: Option<Value>,
        missing: A2aError,
    ) -> Result<Value, Fail> {
        let r = self
            .api
            .call(method, path, self.bearer.clone(), body)
            .await
            .map_err(|e| Fail::internal(format!("calling the run API failed: {e}")))?;
        let bytes = body_of(r.body).await?;
        if !(200..300).contains(&r.status) {
            return Err(Fail::of_rest(r.status, &r.headers, &bytes, missing));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| Fail::internal(format!("the run API's answer is not JSON: {e}")))
    }

    /// The run stream of `run_id` from `from_seq`, as SSE frames.
    async fn run_stream(&self, run_id: &str, from_seq: i64) -> Result<FrameStream, Fail> {
        let path = format!(
            "/v1/runs/{}/stream?from_seq={}",
            seg(run_id, A2aError::TaskNotFound)?,
            from_seq.max(1)
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        let r = self
            .api
            .call_raw(Method::GET, path, self.bearer.clone(), headers, None)
            .await
            .map_err(|e| Fail::internal(format!("calling the run API failed: {e}")))?;
        if !(200..300).contains(&r.status) {
            let bytes = body_of(r.body).await.unwrap_or_default();
            return Err(Fail::of_rest(
                r.status,
                &r.headers,
                &bytes,
                A2aError::TaskNotFound,
            ));
        }
        Ok(Box::pin(sse_read::frames(r.body)))
    }

    /// The agents of the caller's tenant with `a2a.expose` set, by name.
    pub(super) async fn exposed(&self) -> Result<Vec<Exposed>, Fail> {
        let list = self
            .json(Method::GET, "/v1/agents".into(), None, A2aError::Internal)
            .await?;
        let names: Vec<String> = list
            .get("data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|d| d.get("retired").and_then(Value::as_bool) != Some(true))
            .filter_map(|d| d.get("name").and_then(Value::as_str).map(str::to_owned))
            .take(MAX_SCANNED_AGENTS)
            .collect();
        let found: Vec<Result<Option<Exposed>, Fail>> = futures::stream::iter(names)
            .map(|name| async move { self.exposed_agent(&name).await })
            .buffered(8)
            .collect()
            .await;
        let mut out = Vec::new();
        for f in found {
            if let Some(e) = f? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// Agent `name`, when it exists and is exposed.
    async fn exposed_agent(&self, name: &str) -> Result<Option<Exposed>, Fail> {
        let path = format!("/v1/agents/{}", seg(name, A2aError::InvalidParams)?);
        let v = match self
            .json(Method::GET, path, None, A2aError::InvalidParams)
            .await
        {
            Ok(v) => v,
            // Gone since it was listed, or never there.
            Err(f) if f.kind == A2aError::InvalidParams => return Ok(None),
            Err(f) => return Err(f),
        };
        let content = v.get("content").unwrap_or(&Value::Null);
        let a2a = content.get("a2a").unwrap_or(&Value::Null);
        if a2a.get("expose").and_then(Value::as_bool) != Some(true) {
            return Ok(None);
        }
        let strings = |k: &str| -> Vec<String> {
            a2a.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        Ok(Some(Exposed {
            name: name.to_owned(),
            description: content
                .get("description")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map_or_else(|| format!("the weft agent {name}"), str::to_owned),
            tags: strings("tags"),
            examples: strings("examples"),
        }))
    }

    /// The agent a new task runs: the skill named in the message's (or the request's)
    /// `metadata.skill`, or the tenant's only exposed agent.
    async fn skill(&self, msg: &Message, req_meta: Option<&Value>) -> Result<String, Fail> {
        let named = [msg.metadata.as_ref(), req_meta]
            .into_iter()
            .flatten()
            .find_map(|m| m.get("skill"));
        match named {
            Some(Value::String(s)) if s.chars().count() > 64 => Err(Fail::new(
                A2aError::InvalidParams,
                "`metadata.skill` is longer than 64 characters; give the id of a skill on the agent card",
            )),
            Some(Value::String(s)) => match self.exposed_agent(s).await? {
                Some(e) => Ok(e.name),
                None => Err(Fail::new(
                    A2aError::InvalidParams,
                    format!(
                        "no skill `{s}` on this agent card; GET /.well-known/agent-card.json lists them"
                    ),
                )),
            },
            Some(_) => Err(Fail::new(
                A2aError::InvalidParams,
                "`metadata.skill` must be a string: the id of a skill on the agent card",
            )),
            None => {
                let all = self.exposed().await?;
                match all.as_slice() {
                    [one] => Ok(one.name.clone()),
                    [] => Err(Fail::new(
                        A2aError::InvalidParams,
                        "this tenant offers no agent over A2A; set `a2a.expose: true` on an agent definition",
                    )),
                    many => Err(Fail::new(
                        A2aError::InvalidParams,
                        format!(
                            "this agent card has {} skills; name one in message.metadata.skill: {}",
                            many.len(),
                            many.iter()
                                .map(|e| e.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )),
                }
            }
        }
    }

    /// The run of task `id`: visible to the caller and started over A2A.
    async fn task_run(&self, id: &str) -> Result<Value, Fail> {
        let path = format!("/v1/runs/{}", seg(id, A2aError::TaskNotFound)?);
        let run = self
            .json(Method::GET, path, None, A2aError::TaskNotFound)
            .await?;
        if context_of(&run).is_none() {
            return Err(Fail::new(A2aError::TaskNotFound, format!("no task `{id}`")));
        }
        Ok(run)
    }

    /// The persisted events of run `id`, oldest first.
    async fn transcript(&self, id: &str) -> Result<Vec<Value>, Fail> {
        let id = seg(id, A2aError::TaskNotFound)?;
        let mut out = Vec::new();
        let mut from = 1;
        for _ in 0..MAX_PAGES {
            let path = format!("/v1/runs/{id}/events?from_seq={from}&limit=1000");
            let page = self
                .json(Method::GET, path, None, A2aError::TaskNotFound)
                .await?;
            let events = match page.get("data") {
                Some(Value::Array(a)) => a.clone(),
                _ => Vec::new(),
            };
            let n = events.len();
            if let Some(last) = events
                .last()
                .and_then(|e| e.get("seq"))
                .and_then(Value::as_i64)
            {
                from = last + 1;
            }
            out.extend(events);
            if n < 1000 {
                break;
            }
        }
        Ok(out)
    }

    /// Starts a task, or resumes the one the message names.
    async fn start(&self, req: SendMessageRequest) -> Result<Started, Fail> {
        let SendMessageRequest {
            message, metadata, ..
        } = req;
        let text = input_text(&message)?;
        let given_ctx = message.context_id.clone().filter(|c| !c.is_empty());
        if let Some(c) = &given_ctx
            && c.chars().count() > MAX_ID_CHARS
        {
            return Err(Fail::new(
                A2aError::InvalidParams,
                format!("`contextId` must be at most {MAX_ID_CHARS} characters"),
            ));
        }
        if let Some(task_id) = message.task_id.clone().filter(|t| !t.is_empty()) {
            return self.resume(&task_id, given_ctx, text, message).await;
        }
        let agent = self.skill(&message, metadata.as_ref()).await?;
        let context_id = given_ctx.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut body = json!({
            "agent": agent,
            "input": text,
            "metadata": {CONTEXT_KEY: context_id},
        });
        // A message sent again (a client's retry) is the same task.
        if (1..=MAX_ID_CHARS).contains(&message.message_id.chars().count()) {
            body["idempotency_key"] = json!(format!("a2a:{}", message.message_id));
        }
        let run = self
            .json(
                Method::POST,
                "/v1/runs".into(),
                Some(body),
                A2aError::InvalidParams,
            )
            .await?;
        let run_id = str_of(&run, "run_id");
        let context_id = context_of(&run).unwrap_or(context_id);
        let user = Message {
            task_id: Some(run_id.clone()),
            context_id: Some(context_id.clone()),
            role: Role::User,
            ..message
        };
        Ok(Started {
            snapshot: task_of(&run, &[], None, vec![user]),
            run_id,
            context_id,
            from_seq: 1,
        })
    }

    async fn resume(
        &self,
        task_id: &str,
        given_ctx: Option<String>,
        text: String,
        message: Message,
    ) -> Result<Started, Fail> {
        let run = self.task_run(task_id).await?;
        let context_id = context_of(&run).unwrap_or_default();
        if let Some(c) = given_ctx
            && c != context_id
        {
            return Err(Fail::new(
                A2aError::InvalidParams,
                format!(
                    "task `{task_id}` belongs to context `{context_id}`, not `{c}`; send its own contextId or none"
                ),
            ));
        }
        let state = state_of(&run);
        if state.is_terminal() {
            return Err(Fail::new(
                A2aError::UnsupportedOperation,
                format!(
                    "task `{task_id}` has ended ({}); send the message without taskId to start a new task",
                    state_name(state)
                ),
            ));
        }
        let last = self
            .transcript(task_id)
            .await?
            .last()
            .and_then(|e| e.get("seq"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let id = seg(task_id, A2aError::TaskNotFound)?;
        let pending = run
            .get("pending_interrupt")
            .and_then(|p| p.get("id"))
            .and_then(Value::as_str)
            .filter(|_| state == TaskState::InputRequired);
        let answered = match pending {
            Some(iid) => {
                let path = format!(
                    "/v1/runs/{id}/interrupts/{}",
                    seg(iid, A2aError::TaskNotFound)?
                );
                // A 404 here is an interruption answered meanwhile (by a racing message).
                self.json(
                    Method::POST,
                    path,
                    Some(json!({"answer": text})),
                    A2aError::UnsupportedOperation,
                )
                .await?
            }
            None => {
                self.json(
                    Method::POST,
                    format!("/v1/runs/{id}/input"),
                    Some(json!({"text": text})),
                    A2aError::TaskNotFound,
                )
                .await?
            }
        };
        let user = Message {
            task_id: Some(task_id.to_owned()),
            context_id: Some(context_id.clone()),
            role: Role::User,
            ..message
        };
        Ok(Started {
            snapshot: task_of(&answered, &[], None, vec![user]),
            run_id: task_id.to_owned(),
            context_id,
            from_seq: last + 1,
        })
    }

    /// The stream of a started task: its snapshot, then its run's events translated, until
    /// the task ends or needs input.
    async fn follow(&self, s: Started) -> Result<TaskStream, Fail> {
        let frames = self.run_stream(&s.run_id, s.from_seq).await?;
        let tr = Translator::new(s.run_id, s.context_id);
        Ok(Box::pin(translate(
            frames,
            tr,
            vec![StreamResponse::Task(s.snapshot)],
        )))
    }

    /// `SendMessage`: the task when it ends or needs input (or at once, with
    /// `returnImmediately`).
    pub(super) async fn send(&self, req: SendMessageRequest) -> Result<Value, Fail> {
        let conf = req.configuration.clone().unwrap_or_default();
        let started = self.start(req).await?;
        if conf.return_immediately {
            return Ok(json!({"task": started.snapshot}));
        }
        let run_id = started.run_id.clone();
        let events = self.follow(started).await?;
        futures::pin_mut!(events);
        while let Some(ev) = events.next().await {
            ev?;
        }
        let task = self.get(&run_id, conf.history_length).await?;
        Ok(json!({"task": task}))
    }

    /// `SendStreamingMessage`.
    pub(super) async fn stream(&self, req: SendMessageRequest) -> Result<TaskStream, Fail> {
        let started = self.start(req).await?;
        self.follow(started).await
    }

    /// `GetTask`.
    pub(super) async fn get(&self, id: &str, history_length: Option<i32>) -> Result<Task, Fail> {
        let run = self.task_run(id).await?;
        let events = self.transcript(id).await?;
        Ok(task_of(&run, &events, history_length, Vec::new()))
    }

    /// `CancelTask`: the task once its run has ended (or after [`CANCEL_WAIT`], as it is).
    pub(super) async fn cancel(&self, id: &str) -> Result<Task, Fail> {
        let run = self.task_run(id).await?;
        let state = state_of(&run);
        let not_cancelable = || {
            Fail::new(
                A2aError::TaskNotCancelable,
                format!(
                    "task `{id}` has ended ({}); there is nothing to cancel",
                    state_name(state)
                ),
            )
        };
        if state.is_terminal() {
            return Err(not_cancelable());
        }
        let path = format!("/v1/runs/{}/cancel", seg(id, A2aError::TaskNotFound)?);
        match self
            .json(
                Method::POST,
                path,
                Some(json!({"reason": "cancelled by an A2A client"})),
                A2aError::TaskNotFound,
            )
            .await
        {
            Ok(_) => {}
            // It ended meanwhile.
            Err(f) if f.kind == A2aError::UnsupportedOperation => return Err(not_cancelable()),
            Err(f) => return Err(f),
        }
        let frames = self.run_stream(id, 1).await?;
        let ended = async {
            futures::pin_mut!(frames);
            while let Some(Ok(f)) = frames.next().await {
                if serde_json::from_str::<Value>(&f.data)
                    .is_ok_and(|v| v.get("kind").and_then(Value::as_str) == Some("run_finished"))
                {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CANCEL_WAIT, ended).await;
        self.get(id, None).await
    }
}

/// A whole answer body of the API router.
async fn body_of(
    mut chunks: futures::stream::BoxStream<'static, Result<bytes::Bytes, String>>,
) -> Result<Vec<u8>, Fail> {
    let mut bytes = Vec::new();
    while let Some(c) = chunks.next().await {
        bytes.extend_from_slice(&c.map_err(Fail::internal)?);
    }
    Ok(bytes)
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A task's context id, from its run's metadata; `None` for a run not started over A2A.
fn context_of(run: &Value) -> Option<String> {
    run.get("metadata")
        .and_then(|m| m.get(CONTEXT_KEY))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The text a message gives a run: its text parts, and its data parts as JSON, joined by
/// blank lines. Files (`raw`, `url`) are refused: runs take text.
pub(super) fn input_text(m: &Message) -> Result<String, Fail> {
    let mut out = Vec::new();
    for (i, p) in m.parts.iter().enumerate() {
        if p.contents() != 1 {
            return Err(Fail::new(
                A2aError::InvalidParams,
                format!(
                    "message.parts[{i}] must have exactly one of text, raw, url and data, got {}",
                    p.contents()
                ),
            ));
        }
        if let Some(t) = &p.text {
            out.push(t.clone());
        } else if let Some(d) = &p.data {
            out.push(d.to_string());
        } else {
            return Err(Fail::new(
                A2aError::ContentTypeNotSupported,
                format!(
                    "message.parts[{i}] is a file; weft agents take text and data parts (put a file's URL in a text part)"
                ),
            ));
        }
    }
    let text = out.join("\n\n");
    if text.trim().is_empty() {
        return Err(Fail::new(
            A2aError::InvalidParams,
            "the message has no text; give it a text (or data) part",
        ));
    }
    Ok(text)
}

/// A task's state from its run's status.
fn state_of(run: &Value) -> TaskState {
    match run.get("status").and_then(Value::as_str) {
        Some("queued") => TaskState::Submitted,
        // A paused run is still the agent's work: it goes on when resumed.
        Some("running" | "paused") => TaskState::Working,
        Some("awaiting_input") => TaskState::InputRequired,
        Some("succeeded") => TaskState::Completed,
        Some("failed") => TaskState::Failed,
        Some("cancelled") => TaskState::Canceled,
        _ => TaskState::Unspecified,
    }
}

fn state_name(s: TaskState) -> &'static str {
    s.as_str()
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn agent_message(task_id: &str, context_id: &str, text: String) -> Message {
    Message {
        message_id: uuid::Uuid::new_v4().to_string(),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
    }
}

fn result_artifact(text: String) -> Artifact {
    Artifact {
        artifact_id: "result".into(),
        name: Some("result".into()),
        description: None,
        parts: vec![Part::text(text)],
        metadata: None,
    }
}

/// What a transcript tells about a task.
#[derive(Default)]
struct Told {
    history: Vec<Message>,
    last_text: Option<String>,
    question: Option<String>,
    error: Option<String>,
}

/// The text of an `assistant_message` event's message, and whether it calls tools.
fn turn_text(data: &Value) -> Option<(String, bool)> {
    let m: weft_core::message::Message =
        serde_json::from_value(data.get("message")?.clone()).ok()?;
    let tools = m
        .content
        .iter()
        .any(|b| matches!(b, weft_core::message::ContentBlock::ToolUse { .. }));
    Some((m.text(), tools))
}

fn told(run_id: &str, context_id: &str, events: &[Value]) -> Told {
    let mut t = Told::default();
    for e in events {
        let data = e.get("data").unwrap_or(&Value::Null);
        let seq = e.get("seq").and_then(Value::as_i64).unwrap_or(0);
        let msg = |role, text: String| Message {
            message_id: format!("{run_id}:{seq}"),
            context_id: Some(context_id.to_owned()),
            task_id: Some(run_id.to_owned()),
            role,
            parts: vec![Part::text(text)],
            metadata: None,
        };
        match e.get("kind").and_then(Value::as_str) {
            Some("user_input") => {
                let text = match (data.get("text"), data.get("messages")) {
                    (Some(Value::String(s)), _) => s.clone(),
                    (_, Some(Value::Array(ms))) => ms
                        .iter()
                        .filter_map(|m| {
                            serde_json::from_value::<weft_core::message::Message>(m.clone()).ok()
                        })
                        .map(|m| m.text())
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                    _ => continue,
                };
                t.history.push(msg(Role::User, text));
            }
            Some("assistant_message") => {
                if let Some((text, _)) = turn_text(data)
                    && !text.trim().is_empty()
                {
                    t.history.push(msg(Role::Agent, text.clone()));
                    t.last_text = Some(text);
                }
            }
            Some("interruption") => {
                t.question = data
                    .get("question")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            Some("error") => {
                t.error = data
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            _ => {}
        }
    }
    t
}

/// The task of `run`, told by its transcript `events`; `extra` is history to add (the message
/// that just started or resumed it).
fn task_of(
    run: &Value,
    events: &[Value],
    history_length: Option<i32>,
    extra: Vec<Message>,
) -> Task {
    let run_id = str_of(run, "run_id");
    let context_id = context_of(run).unwrap_or_else(|| run_id.clone());
    let state = state_of(run);
    let mut t = told(&run_id, &context_id, events);
    t.history.extend(extra);
    let status_text = match state {
        TaskState::InputRequired => run
            .get("pending_interrupt")
            .and_then(|p| p.get("question"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(t.question)
            .or_else(|| t.last_text.clone()),
        TaskState::Failed => run
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(t.error)
            .or_else(|| Some("the run failed".into())),
        _ => None,
    };
    let artifacts = match (state, t.last_text) {
        (TaskState::Completed, Some(text)) => vec![result_artifact(text)],
        _ => Vec::new(),
    };
    let mut history = t.history;
    match history_length {
        Some(n) if n <= 0 => history.clear(),
        Some(n) => {
            let keep = usize::try_from(n).unwrap_or(usize::MAX);
            let drop = history.len().saturating_sub(keep);
            history.drain(..drop);
        }
        None => {}
    }
    let timestamp = ["finished_at", "started_at", "created_at"]
        .iter()
        .find_map(|k| run.get(*k).and_then(Value::as_str))
        .map(str::to_owned);
    Task {
        status: TaskStatus {
            state,
            message: status_text.map(|s| agent_message(&run_id, &context_id, s)),
            timestamp,
        },
        artifacts,
        history,
        metadata: Some(json!({"weft": {
            "agent": run.get("agent"),
            "status": run.get("status"),
            "stop_reason": run.get("stop_reason"),
        }})),
        id: run_id,
        context_id,
    }
}

/// Turns a run's events into A2A stream events, as they come.
struct Translator {
    task_id: String,
    context_id: String,
    last_text: Option<String>,
    question: Option<String>,
    error: Option<String>,
    working: bool,
}

impl Translator {
    fn new(task_id: String, context_id: String) -> Self {
        Self {
            task_id,
            context_id,
            last_text: None,
            question: None,
            error: None,
            working: false,
        }
    }

    fn status(&self, state: TaskState, text: Option<String>) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state,
                message: text.map(|t| agent_message(&self.task_id, &self.context_id, t)),
                timestamp: Some(now()),
            },
            metadata: None,
        })
    }

    /// The stream events of one run event (`{"seq","kind","data"}`), and whether the task's
    /// stream ends with them.
    fn on(&mut self, ev: &Value) -> (Vec<StreamResponse>, bool) {
        let kind = ev.get("kind").and_then(Value::as_str).unwrap_or_default();
        let data = ev.get("data").unwrap_or(&Value::Null);
        let mut out = Vec::new();
        let mut end = false;
        match kind {
            "text_delta" => return (out, false),
            "assistant_message" => {
                if let Some((text, tools)) = turn_text(data)
                    && !text.trim().is_empty()
                {
                    self.last_text = Some(text.clone());
                    if tools {
                        out.push(self.status(TaskState::Working, Some(text)));
                    }
                }
            }
            "interruption" => {
                self.question = data
                    .get("question")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            "error" => {
                self.error = data
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            "awaiting_input" => {
                let asked = data
                    .get("interrupt")
                    .and_then(|i| i.get("question"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let text = self
                    .question
                    .take()
                    .or(asked)
                    .or_else(|| self.last_text.clone());
                out.push(self.status(TaskState::InputRequired, text));
                end = true;
            }
            "run_finished" => {
                match data.get("status").and_then(Value::as_str) {
                    Some("succeeded") => {
                        if let Some(text) = self.last_text.take() {
                            out.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                                task_id: self.task_id.clone(),
                                context_id: self.context_id.clone(),
                                artifact: result_artifact(text),
                                append: false,
                                last_chunk: true,
                            }));
                        }
                        out.push(self.status(TaskState::Completed, None));
                    }
                    Some("cancelled") => out.push(self.status(TaskState::Canceled, None)),
                    _ => {
                        let why = self.error.take().unwrap_or_else(|| {
                            format!(
                                "the run failed ({})",
                                data.get("stop_reason")
                                    .and_then(Value::as_str)
                                    .unwrap_or("error")
                            )
                        });
                        out.push(self.status(TaskState::Failed, Some(why)));
                    }
                }
                end = true;
            }
            _ => {}
        }
        if !self.working && !end {
            self.working = true;
            out.insert(0, self.status(TaskState::Working, None));
        }
        (out, end)
    }
}

/// The task's stream: `first`, then the translation of `frames` until the task ends or needs
/// input. A broken run stream, or an error frame, ends it with a [`Fail`].
fn translate(
    frames: impl Stream<Item = Result<sse_read::Frame, String>> + Send + 'static,
    tr: Translator,
    first: Vec<StreamResponse>,
) -> impl Stream<Item = Result<StreamResponse, Fail>> + Send + 'static {
    let state = (Box::pin(frames), tr, VecDeque::from(first), false);
    futures::stream::unfold(
        state,
        |(mut frames, mut tr, mut queue, mut done)| async move {
            loop {
                if let Some(ev) = queue.pop_front() {
                    return Some((Ok(ev), (frames, tr, queue, done)));
                }
                if done {
                    return None;
                }
                let fail = match frames.next().await {
                    None => {
                        done = true;
                        continue;
                    }
                    Some(Err(e)) => Fail::internal(format!("the run stream broke: {e}")),
                    Some(Ok(f)) if f.event.as_deref() == Some("error") => {
                        let v: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
                        let body = json!({"error": v}).to_string();
                        Fail::of_rest(500, &HeaderMap::new(), body.as_bytes(), A2aError::Internal)
                    }
                    Some(Ok(f)) => match serde_json::from_str::<Value>(&f.data) {
                        Ok(v) => {
                            let (evs, end) = tr.on(&v);
                            queue.extend(evs);
                            done = end;
                            continue;
                        }
                        Err(e) => Fail::internal(format!("a bad run stream frame: {e}")),
                    },
                };
                done = true;
                return Some((Err(fail), (frames, tr, queue, done)));
            }
        },
    )
}

#[cfg(test)]
mod tests;
