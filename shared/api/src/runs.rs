//! The run routes (`/v1/runs…`): start a run (JSON, or its SSE stream), read and list runs, page
//! through a transcript, follow the live stream, cancel, steer, and answer an interruption.
//!
//! The transcript's events are documented as `{seq, kind, data, created_at}` with `data` any
//! JSON: their typed payloads are `weft_core::run::RunEvent`'s, not (yet) part of this contract.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::{AgentSampling, Nullable, SseEvent, Timestamp};
use crate::op::Op;

/// A run's id: a UUID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

impl JsonSchema for RunId {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "RunId".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "uuid"})
    }
}

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum RunStatus {
    Queued,
    Running,
    AwaitingInput,
    /// parked by a pause (of the run, its tenant or the fleet) until resumed
    Paused,
    Succeeded,
    Failed,
    Cancelled,
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum StopReason {
    EndTurn,
    MaxIterations,
    MaxTokens,
    Cancelled,
    Error,
    Timeout,
    BudgetExhausted,
}

/// A run, as every run route answers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Run {
    pub run_id: RunId,
    pub status: RunStatus,
    pub agent: String,
    pub agent_hash: String,
    pub parent_run_id: Option<RunId>,
    pub root_run_id: RunId,
    #[schemars(range(min = 0))]
    pub depth: i32,
    pub interactive: bool,
    pub stop_reason: Option<StopReason>,
    /// token counts so far
    #[serde(default)]
    pub usage: Value,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub iterations: i32,
    /// as given at creation
    #[serde(default)]
    pub metadata: Value,
    /// the interruption the run waits on (`id`, and what it asks), when it does
    #[serde(default)]
    #[schemars(schema_with = "optional_object")]
    pub pending_interrupt: Option<Value>,
    /// why the run failed, when it did
    pub error: Option<Value>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// who asked the run to pause (`run`, `tenant` or `fleet`), while it is asked: it parks in
    /// `paused` at its next step boundary
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<PauseScope>,
}

/// Who paused a run: the run itself, its tenant's drain or the fleet's maintenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PauseScope {
    Run,
    Tenant,
    Fleet,
}

/// An object or null (kept as the JSON it is stored as).
fn optional_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["object", "null"]})
}

/// Any JSON value.
fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({})
}

/// The answer of `GET /v1/runs`: a page of runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunList {
    pub data: Vec<Run>,
    /// the `cursor` of the next page; null on the last
    pub next_cursor: Nullable<String>,
    /// the same list as `data` (the old key, kept for one release)
    #[schemars(extend("deprecated" = true))]
    pub runs: Vec<Run>,
}

/// One persisted event of a run's transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunEvent {
    #[schemars(range(min = 1))]
    pub seq: i64,
    pub kind: String,
    #[schemars(schema_with = "any_json")]
    pub data: Value,
    pub created_at: Timestamp,
}

/// The answer of `GET /v1/runs/{id}/events`: a page of the transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunEventPage {
    pub run_id: RunId,
    pub status: RunStatus,
    pub data: Vec<RunEvent>,
    /// the `from_seq` of the next page (the same as `next_seq`, the old key)
    pub next_cursor: Option<i64>,
    /// the same list as `data` (the old key, kept for one release)
    #[schemars(extend("deprecated" = true))]
    pub events: Vec<RunEvent>,
    #[schemars(extend("deprecated" = true))]
    pub next_seq: Nullable<i64>,
}

/// One part of `input` given as an array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum InputPart {
    Text {
        text: String,
    },
    /// Data from outside the caller's control: fenced in the prompt, never instructions.
    Untrusted {
        text: String,
    },
}

/// The first user message: a text, or parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Parts(Vec<InputPart>),
}

/// `input`: a string, an array of parts, or null.
fn input_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": [
            {"type": "string"},
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["type", "text"],
                    "additionalProperties": false,
                    "properties": {
                        "type": {"enum": ["text", "untrusted"]},
                        "text": {"type": "string"}
                    }
                }
            },
            {"type": "null"}
        ],
        "description": "the first user message; parts of type untrusted are fenced as data. Give input or messages (or interactive: true)"
    })
}

/// Who said a message of `messages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum InputRole {
    User,
    Assistant,
}

/// One earlier message of the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct InputMessage {
    pub role: InputRole,
    pub content: String,
}

/// The body of `POST /v1/runs`. The gateway reads it as `weft_launch::CreateRun` (shared with the
/// ingress's schedules and webhooks, and holding `weft_core`'s sampling type); this mirror
/// carries its schema and lets a client build one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("example" = {"agent": "triage", "input": "Say hi", "metadata": {"ticket": 42}}))]
pub struct CreateRun {
    #[schemars(length(min = 1), extend("example" = "triage"))]
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "input_schema")]
    pub input: Option<Input>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<InputMessage>>,
    /// narrows the agent's tools
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// narrows the agent's hosts; [] = no network
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    pub interactive: bool,
    /// any JSON, kept on the run
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// overrides the agent's
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<AgentSampling>,
    /// narrows the agent's
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_iterations: Option<u32>,
    /// narrows the agent's volume bindings (names it lacks are dropped; ro wins)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub volumes: Option<Vec<crate::binding::VolumeBinding>>,
    /// never stored
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub idempotency_key: Option<String>,
    /// answer with the run's SSE stream instead of JSON
    #[serde(default)]
    pub stream: bool,
    /// `plan` runs the plan harness over `input` as its goal (docs/harness.md)
    #[serde(default, skip_serializing_if = "crate::plan_spec::RunMode::is_loop")]
    pub mode: crate::plan_spec::RunMode,
    /// the plan harness's roles, plan and budgets (with `mode: "plan"` only)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::plan_spec::PlanSpec>,
    /// replaces the agent's compaction settings for this run (docs/runs.md "Long runs")
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<crate::context::Compaction>,
}

/// The answer of `POST /v1/runs/{id}/compact`: the request is taken; the run wakes, compacts and
/// parks again, and the `context_compacted` event says what it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactAccepted {
    pub run: Run,
    /// the seq after which to wait for `context_compacted` on the run's stream
    pub after_seq: i64,
}

/// The body of `POST /v1/runs/{id}/cancel` (optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline, extend("example" = {"reason": "no longer needed"}))]
pub struct CancelBody {
    #[serde(default)]
    pub reason: Option<String>,
}

/// The body of `POST /v1/runs/{id}/input`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline, extend("example" = {"text": "Also mention the weather"}))]
pub struct InputBody {
    /// not empty
    #[schemars(length(min = 1))]
    pub text: String,
}

/// The body of `POST /v1/runs/{id}/interrupts/{interrupt_id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(inline, extend("example" = {"answer": "yes"}))]
pub struct AnswerBody {
    pub answer: String,
}

// Request bodies are JSON objects only: serde's derive would also read one from an array of its
// fields.
crate::objects_only!(CancelBody, InputBody, AnswerBody);

/// `limit` of `GET /v1/runs`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct RunListLimit(#[schemars(range(min = 1, max = 500), extend("default" = 50))] pub i64);

/// `limit` of `GET /v1/runs/{id}/events`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct EventPageLimit(#[schemars(range(min = 1, max = 1000), extend("default" = 500))] pub i64);

/// A transcript position (`from_seq`): any 64-bit integer; values below 1 read from 1.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Seq(#[schemars(range(min = i64::MIN, max = i64::MAX))] pub i64);

pub(crate) fn errors(mut op: Op, list: &[(u16, &'static str)]) -> Op {
    for &(status, description) in list {
        op = op.error(status, description);
    }
    op
}

/// The request body of `op` may be left out.
pub(crate) fn optional_body(mut op: Op) -> Op {
    if let Some(b) = op.body.as_mut() {
        b.required = false;
    }
    op
}

pub(crate) const E401: (u16, &str) = (401, "no valid bearer token");
pub(crate) const E403: (u16, &str) = (403, "the token lacks the scope");
pub(crate) const E404: (u16, &str) = (404, "no such run in this tenant");
const E413: (u16, &str) = (413, "body larger than gateway.max_body_bytes");
const E415: (u16, &str) = (415, "body is not JSON");
const BAD_QUERY: (u16, &str) = (
    400,
    "a bad query parameter: the message and `param` name it",
);
const BAD_BODY: (u16, &str) = (400, "invalid body: the message and `param` name the field");
const DB_DOWN: (u16, &str) = (503, "the database is unreachable");
const ALL_DOWN: (u16, &str) = (503, "Redis, NATS or the database is unreachable");

/// A route on one run (`{id}` in its path).
pub(crate) fn on_run(op: Op) -> Op {
    op.security(crate::Security::Bearer)
        .path::<RunId>("id", None)
}

pub fn ops() -> Vec<Op> {
    const SSE: &str = "text/event-stream";
    vec![
        errors(
            Op::post("/v1/runs", "Start an agent run (JSON, or SSE with stream:true / Accept: text/event-stream)")
                .security(crate::Security::Bearer)
                .body::<CreateRun>()
                .answer::<Run>(200, "the existing run for a repeated idempotency_key (application/json), or its SSE stream with stream:true or Accept: text/event-stream")
                .or_in::<SseEvent>(SSE)
                .answer::<Run>(201, "the run (application/json), or its SSE stream with stream:true or Accept: text/event-stream")
                .or_in::<SseEvent>(SSE),
            &[
                (400, "invalid body; the message names the field"),
                E401,
                E403,
                (404, "unknown agent"),
                E413,
                E415,
                (429, "tenant_concurrency_exhausted (see Retry-After), or too many open run streams for this principal"),
                (503, "admission_unavailable (Redis) or dispatch unavailable (NATS)"),
            ],
        ),
        errors(
            Op::get("/v1/runs", "List runs, newest first")
                .security(crate::Security::Bearer)
                .query::<RunStatus>("status", None, None)
                .query::<String>("agent", None, Some("triage".into()))
                .query::<RunListLimit>("limit", None, None)
                .query::<RunId>("cursor", Some("next_cursor of the previous page"), None)
                .query::<Timestamp>("since", Some("only runs created at or after this RFC 3339 time"), None)
                .ok::<RunList>("a page"),
            &[(400, "a bad filter: the message and `param` name it"), E401, E403, DB_DOWN],
        ),
        errors(
            on_run(Op::get("/v1/runs/{id}", "A run")).ok::<Run>("the run"),
            &[(400, "an id that does not decode"), E401, E403, E404, DB_DOWN],
        ),
        errors(
            on_run(Op::get("/v1/runs/{id}/events", "A page of the persisted transcript"))
                .query::<Seq>("from_seq", Some("first seq (values below 1 read from 1)"), None)
                .query::<EventPageLimit>("limit", None, None)
                .ok::<RunEventPage>("events"),
            &[BAD_QUERY, E401, E403, E404, DB_DOWN],
        ),
        errors(
            on_run(Op::get("/v1/runs/{id}/stream", "SSE: replay from from_seq (or Last-Event-ID + 1), then live, until run_finished; id: <seq> on every frame"))
                .query::<Seq>("from_seq", Some("first seq to replay (values below 1 replay from 1)"), None)
                .param::<String>(crate::In::Header, "Last-Event-ID", false, Some("the last seq seen; replay starts after it (from_seq wins)"), None)
                .answer_in::<SseEvent>(200, SSE, "text/event-stream of RunEvent frames"),
            &[
                BAD_QUERY,
                E401,
                E403,
                E404,
                (429, "too many open run streams for this principal (gateway.max_streams_per_principal)"),
                (503, "the database or NATS is unreachable"),
            ],
        ),
        errors(
            optional_body(
                on_run(Op::post("/v1/runs/{id}/cancel", "Cancel a run and its sub-runs"))
                    .describe("The body is optional (empty, or a JSON object).")
                    .body::<CancelBody>(),
            )
            .answer::<Run>(200, "already ended (or ended now)")
            .answer::<Run>(202, "the executor holding it is stopping it"),
            &[BAD_BODY, E401, E403, E404, E413, E415, (503, "Redis unreachable")],
        ),
        errors(
            on_run(Op::post("/v1/runs/{id}/pause", "Pause a run and its sub-runs at their next step boundary"))
                .describe("No body. The run parks in status `paused` at its next step boundary (after the model turn or tool calls under way; an effectful call still running after `executor.pause_grace_ms` is abandoned and its outcome is unknown when the run resumes), with a `run_paused` event, and holds no executor until `POST /v1/runs/{id}/resume`. Idempotent. Input sent meanwhile waits for the resume.")
                .answer::<Run>(200, "already paused, or ended (nothing to pause)")
                .answer::<Run>(202, "asked: `paused_by` is `run`; watch for `run_paused`"),
            &[(400, "an id that does not decode"), E401, E403, E404, (503, "the database or Redis is unreachable")],
        ),
        errors(
            on_run(Op::post("/v1/runs/{id}/resume", "Resume a paused run"))
                .describe("No body. A parked run is queued again (a `run_resumed` event) and goes on where it stopped; a run asked to pause that has not parked yet goes on without parking. Its sub-runs paused with it resume too. A run held by its tenant's drain or the fleet's maintenance is a 503 `tenant_paused`: resume that instead.")
                .ok::<Run>("resumed, or not paused (nothing to do)"),
            &[(400, "an id that does not decode"), E401, E403, E404, (503, "tenant_paused: its tenant drains or the fleet is in maintenance; or the database is unreachable")],
        ),
        errors(
            on_run(Op::post("/v1/runs/{id}/input", "Steer a running run or wake a parked interactive run"))
                .body::<InputBody>()
                .answer::<Run>(202, "accepted"),
            &[
                BAD_BODY,
                E401,
                E403,
                E404,
                (409, "the run has ended, or waits for an interruption answer"),
                E413,
                E415,
                (429, "tenant_concurrency_exhausted"),
                ALL_DOWN,
            ],
        ),
        errors(
            on_run(Op::post("/v1/runs/{id}/compact", "Compact a parked run's context now"))
                .describe("Takes a request to compact the run's model view (docs/runs.md \"Long runs\"): the run wakes, writes `context_compacted` after `after_seq`, and parks again. A run working on a turn answers 409: ask the agent to call Context {op: compact}, or set `compaction.auto_percent`. No body.")
                .answer::<CompactAccepted>(202, "taken; watch the stream for context_compacted"),
            &[
                E401,
                E403,
                E404,
                (409, "a turn is in flight, the run waits for an interruption answer, or it has ended"),
                (429, "tenant_concurrency_exhausted"),
                ALL_DOWN,
            ],
        ),
        errors(
            on_run(Op::get("/v1/runs/{id}/search", "Full-text search over the run's history (and, by scope, its user's earlier runs)"))
                .describe("Postgres full-text search (websearch syntax, no stemming) over the text of the conversation's events: inputs, model turns, tool calls and results, whole as in the transcript (compaction and result budgets change only what the model is sent). `scope=agent|user` also searches the newest 50 runs of the run's user in its tenant, of its agent or of any.")
                .param::<String>(crate::In::Query, "q", true, Some("the words to find (1 to 1000 bytes)"), Some("invoice 4711".into()))
                .query::<crate::context::RecallScope>("scope", Some("run (default), agent or user"), None)
                .query::<crate::context::SearchLimit>("limit", None, None)
                .ok::<crate::context::SearchHits>("hits, best first"),
            &[(400, "no `q`, or a bad scope or limit"), E401, E403, E404, DB_DOWN],
        ),
        errors(
            on_run(Op::post("/v1/runs/{id}/interrupts/{interrupt_id}", "Answer an Interruption.ask"))
                .path::<String>("interrupt_id", None)
                .body::<AnswerBody>()
                .answer::<Run>(202, "the run continues"),
            &[
                BAD_BODY,
                E401,
                E403,
                E404,
                E413,
                E415,
                (429, "tenant_concurrency_exhausted; see Retry-After"),
                ALL_DOWN,
            ],
        ),
    ]
}
