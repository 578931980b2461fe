//! The plan contract (docs/harness.md): how a run asks for the plan harness (`mode`, `plan`),
//! a plan's tasks and their checks, and the verdict a verifier must give. Shared by the run
//! routes' bodies and the plan routes ([`crate::plans`] re-exports it), so neither family
//! imports the other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a run works: `loop` (the default: the agent loop) or `plan` (the plan harness).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum RunMode {
    #[default]
    Loop,
    Plan,
}

impl RunMode {
    /// Whether this is the default, `loop`.
    pub fn is_loop(&self) -> bool {
        *self == RunMode::Loop
    }
}

/// Whether a proposed plan waits for a person (`PUT /v1/runs/{id}/plan`) before it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Approval {
    #[default]
    None,
    BeforeExecute,
}

/// The `plan` of `POST /v1/runs` with `mode: "plan"`. Roles are agent names of the caller's
/// tenant; a role left out is played by the run's own agent (the verifier's has no default: a
/// task asking for `llm` or `vote` verification needs one).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"planner": "planner", "verifier": "checker", "approval": "none", "limits": {"max_parallel": 2}}))]
pub struct PlanSpec {
    /// the agent that writes the plan (default: the run's agent)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub planner: Option<String>,
    /// the independent agent that verifies results (`verify: llm|vote`); never given write tools
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub verifier: Option<String>,
    /// the agents of a vote's seats, in turn (default: `verifier` in every seat); a panel of
    /// different agents (or models) disagrees more honestly than one agent asked thrice
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7), inner(length(min = 1, max = 128)))]
    pub voters: Vec<String>,
    /// the agent that rewrites a stalled plan (default: the planner)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub replanner: Option<String>,
    /// models for attempt 3 onwards, in order (`tier:strong`, `provider/model`, an alias): attempt
    /// 3 runs on the first, 4 on the second…; empty = the task's agent's own model throughout
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub escalation: Vec<String>,
    /// the plan itself: no planner is asked (validated the same way; an invalid one is a 400)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<Task>>,
    #[serde(default)]
    pub approval: Approval,
    /// the volume binding checks read and verifiers see (default: the run's default binding)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))]
    pub volume: Option<String>,
    #[serde(default)]
    pub limits: PlanLimits,
    /// a process of the caller's tenant (`/v1/processes`, its active version): its phases become
    /// the plan (`phase_mode: strict`) or guide the planner (`guided`, `suggestive`), and its
    /// persona, tools and limits apply (the caller's `limits` may only narrow them). Not with
    /// `tasks`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))]
    pub process: Option<String>,
    /// set by the gateway from `process`; a caller may not set it: the process version the run
    /// was created from (its content hash, `sha256:…`), so a later activation of another version
    /// does not change what this run followed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("readOnly" = true))]
    pub process_version: Option<String>,
    /// set by the gateway from `process`; a caller may not set it: how binding the process's
    /// phases are
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("readOnly" = true))]
    pub phase_mode: Option<PhaseMode>,
    /// set by the gateway from `process` (`guided` and `suggestive`; a `strict` process's phases
    /// are `tasks`); a caller may not set it: the phases as tasks, for the planner
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("readOnly" = true))]
    pub phases: Option<Vec<Task>>,
    /// set by the gateway from `process`; a caller may not set it: text put before the
    /// planner's message and each task attempt's
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("readOnly" = true))]
    pub persona: Option<String>,
    /// set by the gateway from `process`; a caller may not set it: tools every agent doing a
    /// task must have (checked for the run's agent and the phases' agents when the run is
    /// created)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("readOnly" = true))]
    pub tools_required: Vec<String>,
    /// set by the gateway from `process`; a caller may not set it: tools (names, or globs with
    /// `*`) taken from every sub-run of the plan run and from the sub-runs those make
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("readOnly" = true))]
    pub tools_excluded: Vec<String>,
}

crate::objects_only!(PlanSpec);

/// How binding a process's phases are on a plan run: `strict` (the phases are the plan; no
/// planner is asked), `guided` (a planner writes the plan, which must keep every phase with its
/// dependencies, checks and verification, and may add tasks), `suggestive` (the planner is
/// shown the phases as an outline and may depart from it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum PhaseMode {
    #[default]
    Strict,
    Guided,
    Suggestive,
}

/// A plan run's budgets. Running out of one ends the run `failed` with stop reason
/// `budget_exhausted` (and a `budget_exhausted` event naming it), never mid-write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields, default)]
#[schemars(inline)]
pub struct PlanLimits {
    /// tasks in a plan (a longer plan is refused)
    #[schemars(range(min = 1, max = 100))]
    pub max_tasks: u32,
    /// task attempts running at once
    #[schemars(range(min = 1, max = 16))]
    pub max_parallel: u32,
    /// attempts per task (per plan version)
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: u32,
    /// replans of the run
    #[schemars(range(min = 0, max = 10))]
    pub max_replans: u32,
    /// tokens of every role's sub-runs together (0 = no limit)
    #[schemars(range(min = 0))]
    pub max_tokens: u64,
    /// wall time from the run's creation, in seconds (0 = no limit)
    #[schemars(range(min = 0, max = 604_800))]
    pub max_wall_s: u64,
}

impl Default for PlanLimits {
    fn default() -> Self {
        Self {
            max_tasks: 20,
            max_parallel: 4,
            max_attempts: 3,
            max_replans: 2,
            max_tokens: 0,
            max_wall_s: 0,
        }
    }
}

crate::objects_only!(PlanLimits);

/// How a task's result is verified: `checks` (its checks only), `llm` (its checks, then the
/// verifier agent), `vote` (its checks, then `votes` verifiers; the majority decides, a split
/// asks a person).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum VerifyMode {
    #[default]
    Checks,
    Llm,
    Vote,
}

/// One task of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"id": "report", "description": "Write report.md summarising data.csv", "depends_on": ["load"], "writes": ["report.md"], "checks": [{"check": "non_empty", "path": "report.md"}], "acceptance": "report.md names the three largest rows", "verify": "llm"}))]
pub struct Task {
    /// unique in the plan: 1-64 characters of a-z, A-Z, 0-9, `_`, `-` and `.`
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"))]
    pub id: String,
    /// what to do, for the agent doing it
    #[schemars(length(min = 1, max = 20000))]
    pub description: String,
    /// tasks that must pass first
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// the agent that does it (default: the run's agent)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub agent: Option<String>,
    /// globs of the files it writes: tasks whose globs overlap never run at once
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub writes: Vec<String>,
    /// checks run without a model over the plan's volume
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub checks: Vec<Check>,
    /// what a verifier holds the result to
    #[serde(default)]
    #[schemars(length(max = 20000))]
    pub acceptance: String,
    #[serde(default)]
    pub verify: VerifyMode,
    /// verifiers in a vote (odd, 3 by default)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3, max = 7))]
    pub votes: Option<u32>,
    /// out of attempts, it replans the run (or fails it) instead of being left failed
    #[serde(default)]
    pub critical: bool,
    /// the last task: runs after every other has ended, and nothing may depend on it
    #[serde(default)]
    pub r#final: bool,
}

crate::objects_only!(Task);

/// A file format `parses` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum Format {
    Json,
    Yaml,
    Toml,
    Csv,
}

/// A check run without a model over a file of the plan's volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(
    remote = "Self",
    tag = "check",
    rename_all = "snake_case",
    deny_unknown_fields
)]
pub enum Check {
    /// the file exists
    Exists { path: String },
    /// the file exists and holds something other than whitespace
    NonEmpty { path: String },
    /// the file parses as `format`
    Parses { path: String, format: Format },
    /// the file's text matches the regular expression (Rust `regex` syntax)
    Matches { path: String, pattern: String },
    /// the file's text does not match the regular expression
    NotMatches { path: String, pattern: String },
    /// the file is JSON whose value at `pointer` (RFC 6901, default the whole document) equals `value`
    JsonEq {
        path: String,
        #[serde(default)]
        pointer: String,
        #[schemars(schema_with = "any_json")]
        value: Value,
    },
    /// the file's sha256 is this (64 lowercase hex digits)
    Sha256 { path: String, sha256: String },
    /// the file holds no placeholder (`TODO`, `FIXME`, `TBD`, `lorem ipsum`, `...` alone on a
    /// line, `<placeholder>`, `NotImplemented`, `unimplemented!`)
    NoPlaceholders { path: String },
}

crate::objects_only!(Check);

/// Any JSON value (an empty schema, not `true`).
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({})
}

impl Check {
    /// The file the check reads.
    pub fn path(&self) -> &str {
        match self {
            Check::Exists { path }
            | Check::NonEmpty { path }
            | Check::Parses { path, .. }
            | Check::Matches { path, .. }
            | Check::NotMatches { path, .. }
            | Check::JsonEq { path, .. }
            | Check::Sha256 { path, .. }
            | Check::NoPlaceholders { path } => path,
        }
    }

    /// The check's name (`exists`, `non_empty`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Check::Exists { .. } => "exists",
            Check::NonEmpty { .. } => "non_empty",
            Check::Parses { .. } => "parses",
            Check::Matches { .. } => "matches",
            Check::NotMatches { .. } => "not_matches",
            Check::JsonEq { .. } => "json_eq",
            Check::Sha256 { .. } => "sha256",
            Check::NoPlaceholders { .. } => "no_placeholders",
        }
    }
}

/// The result of one check.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    pub check: Check,
    pub passed: bool,
    /// why it failed (empty when it passed)
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// A verifier's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum VerdictKind {
    Pass,
    Fail,
    /// never a pass
    Inconclusive,
}

/// Why a verdict is what it is: a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum ReasonCode {
    /// the result meets the acceptance
    Ok,
    /// an expected file or part of the result is missing
    Missing,
    /// some of the work is done, not all
    Incomplete,
    /// the result is wrong
    Incorrect,
    /// a check without a model failed
    CheckFailed,
    /// placeholders instead of content
    Placeholder,
    /// the result does something other than the task
    OffTask,
    /// the verifier could not tell
    CannotVerify,
    /// the task's sub-run did not end well (failed, cancelled, out of turns)
    RunFailed,
    /// the verifiers of a vote disagreed and nobody settled it
    Split,
    /// none of the above
    Other,
}

impl ReasonCode {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Ok => "ok",
            ReasonCode::Missing => "missing",
            ReasonCode::Incomplete => "incomplete",
            ReasonCode::Incorrect => "incorrect",
            ReasonCode::CheckFailed => "check_failed",
            ReasonCode::Placeholder => "placeholder",
            ReasonCode::OffTask => "off_task",
            ReasonCode::CannotVerify => "cannot_verify",
            ReasonCode::RunFailed => "run_failed",
            ReasonCode::Split => "split",
            ReasonCode::Other => "other",
        }
    }
}

/// One problem a verdict names.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Issue {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    pub message: String,
}

/// The answer a verifier must give (its whole final message, as JSON), and the verdict weft
/// records for checks alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub verdict: VerdictKind,
    pub reason_code: ReasonCode,
    /// 0 to 1
    #[schemars(range(min = 0.0, max = 1.0))]
    pub confidence: f64,
    #[serde(default)]
    pub issues: Vec<Issue>,
    /// what the result lacks
    #[serde(default)]
    pub missing: Vec<String>,
    /// what the next attempt should do differently
    #[serde(default)]
    pub feedback: String,
}

impl Verdict {
    /// OpenAI's `response_format` asking for a verdict: its JSON Schema, for providers that
    /// constrain generation to it.
    pub fn response_format() -> Value {
        serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schemars::schema_for!(Verdict)}
        })
    }
}

/// Where a task is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum TaskStatus {
    #[default]
    Pending,
    Running,
    Passed,
    Failed,
    Skipped,
}

impl TaskStatus {
    /// Whether the task will not run again (unless retried or replanned).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Passed | Self::Failed | Self::Skipped)
    }
}
