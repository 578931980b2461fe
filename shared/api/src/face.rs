//! The inputs of the tools weft's MCP server face offers (`/mcp`, `weft mcp`): each is weft's
//! own API called with the caller's token, so a field means what it means in the route's body.
//! Fields that name the route (`run_id`, `channel`, `scope`, …) are not sent in the body.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A memory scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    Run,
    Agent,
    User,
    Tenant,
}

impl MemoryScope {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryScope::Run => "run",
            MemoryScope::Agent => "agent",
            MemoryScope::User => "user",
            MemoryScope::Tenant => "tenant",
        }
    }
}

/// A run's state, as `list_runs` filters on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Queued,
    Running,
    AwaitingInput,
    Paused,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::AwaitingInput => "awaiting_input",
            RunState::Paused => "paused",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }
}

/// `spawn_run`, and each entry of `spawn_runs`: the body of `POST /v1/runs`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SpawnRun {
    /// the agent's name
    pub agent: String,
    /// the user message the run starts with
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// `plan` runs the plan harness over `input` as its goal (docs/harness.md)
    #[serde(default, skip_serializing_if = "crate::plan_spec::RunMode::is_loop")]
    pub mode: crate::plan_spec::RunMode,
    /// the plan harness's roles, plan and budgets (with `mode: "plan"` only)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<crate::plan_spec::PlanSpec>,
}

/// `spawn_runs`: several runs, each started (or refused) on its own.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SpawnRuns {
    /// Read one by one, so that a bad entry fails alone.
    #[schemars(with = "Vec<SpawnRun>", length(max = 32))]
    pub runs: Vec<Value>,
}

/// `get_run`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GetRun {
    pub run_id: String,
}

/// `list_runs`: the query of `GET /v1/runs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ListRuns {
    #[serde(default)]
    pub status: Option<RunState>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `cancel_run`: the run, and the body of `POST /v1/runs/{id}/cancel`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CancelRun {
    #[serde(skip_serializing)]
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `send_input`: the run, and the body of `POST /v1/runs/{id}/input`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SendInput {
    #[serde(skip_serializing)]
    pub run_id: String,
    pub text: String,
}

/// Where a memory entry lives.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct MemoryGet {
    pub scope: MemoryScope,
    pub scope_id: String,
    pub key: String,
}

/// `memory_set`: the entry, and the body of `PUT /v1/memory/{scope}/{scope_id}/{key}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct MemorySet {
    #[serde(skip_serializing)]
    pub scope: MemoryScope,
    #[serde(skip_serializing)]
    pub scope_id: String,
    #[serde(skip_serializing)]
    pub key: String,
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ttl_seconds: Option<u64>,
}

/// `memory_search`: the body of `POST /v1/memory/search`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearch {
    pub scope: MemoryScope,
    pub scope_id: String,
    pub query: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub top_k: Option<u32>,
}

/// `channel_publish`: the channel, and the body of `POST /v1/channels/{name}/publish`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChannelPublish {
    #[serde(skip_serializing)]
    pub channel: String,
    pub payload: Value,
}

/// `channel_read`: the channel, and the body of `POST /v1/channels/{name}/read`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChannelRead {
    #[serde(skip_serializing)]
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 30000))]
    pub wait_ms: Option<u32>,
}

/// `list_agents`: no input.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ListAgents {}

/// `get_agent`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GetAgent {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
}

/// `put_agent`: the name, and the definition's content fields (the body of `PUT /v1/agents/{name}`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct PutAgent {
    pub name: String,
    pub definition: Map<String, Value>,
}

/// `agent__<name>`: one run of that agent, waited for.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunAgent {
    /// the message the run starts with
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

// --- volumes: each tool names a named volume (`volume`) or a run's own (`run`), not both ------

/// `list_volumes`: no input.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ListVolumes {}

/// Which volume a volume tool works on: `volume` (a named volume) or `run` (a run id: the
/// volume of that run's tree), exactly one.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct VolumeAt {
    /// a named volume
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// a run id: the volume of that run's tree
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

/// `volume_tree`: the files of a volume, a page at a time (the query of `GET …/tree`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeTree {
    #[serde(flatten)]
    pub at: VolumeAt,
    /// only files under this directory
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `next_cursor` of the previous page
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub limit: Option<u32>,
}

/// `volume_read`: one text file.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeRead {
    #[serde(flatten)]
    pub at: VolumeAt,
    /// the file's path, relative to the volume's root
    pub path: String,
}

/// `volume_write`: a text file's whole content (`PUT …/files/{path}`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeWrite {
    #[serde(flatten)]
    pub at: VolumeAt,
    pub path: String,
    pub content: String,
    /// the sha256 the file must have now (from `volume_read`); "" = it must not exist yet
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_match: Option<String>,
}

/// `volume_delete`: one file (`DELETE …/files/{path}`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeDelete {
    #[serde(flatten)]
    pub at: VolumeAt,
    pub path: String,
    /// the sha256 the file must have now
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_match: Option<String>,
}

/// `volume_changes`: the changelog, newest first (the query of `GET …/changes`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeChanges {
    #[serde(flatten)]
    pub at: VolumeAt,
    /// only the changes of this run
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// only changes before this seq (`next_before_seq` of the previous page)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub before_seq: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<u32>,
    /// include a unified diff of each text file
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<bool>,
}

/// `volume_undo`: the volume, and the body of `POST …/undo`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeUndo {
    #[serde(flatten, skip_serializing)]
    pub at: VolumeAt,
    /// the change to revert (or `run_id`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_id: Option<String>,
    /// revert every change this run made (or `change_id`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `volume_snapshot`: the volume, and the body of `POST …/snapshots`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeSnapshot {
    #[serde(flatten, skip_serializing)]
    pub at: VolumeAt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// `volume_snapshots`: the volume whose snapshots to list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeSnapshots {
    #[serde(flatten)]
    pub at: VolumeAt,
}

/// `volume_restore`: the volume and the snapshot, and the body of `POST …/restore`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct VolumeRestore {
    #[serde(flatten, skip_serializing)]
    pub at: VolumeAt,
    #[serde(skip_serializing)]
    pub snapshot_id: String,
    /// restore only when the volume's tree hash is still this
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_tree: Option<String>,
}
