//! Plan runs: the events a plan run's transcript holds, the plan validator ([`validate`]), the
//! fold of a transcript into a [`PlanState`] and the deterministic step function over it
//! ([`next_action`], [`task_step`]), the checks without a model ([`checks`]) and the readers of
//! a planner's and a verifier's answers ([`parse`]). No I/O: the executor performs the actions,
//! records what happened as events, folds them in, and asks again — a resumed run is the same
//! fold over the same transcript.

pub mod checks;
pub mod parse;
mod state;
mod validate;

use serde::{Deserialize, Serialize};

pub use state::{
    Decision, Facts, MAX_PLAN_TRIES, MAX_VERIFY_TRIES, PlanAction, PlanState, Stage, TaskState,
    TaskStep, apply, decide, next_action, select_batch, signature, task_step, task_views,
};
pub use validate::{globs_overlap, validate, validate_replan};
pub use weft_api::plans::{
    Approval, AttemptView, Check, CheckResult, EmitterRole, EvaluationAggregate, EvaluationList,
    Format, Issue, PhaseMode, PlanLimits, PlanSpec, PlanStatus, PlanView, ReasonCode, RunMode,
    Task, TaskStatus, TaskView, Verdict, VerdictKind, VerifyMode,
};

use crate::RunId;
use crate::run::RunStatus;

/// Who wrote a plan version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    #[default]
    Planner,
    /// the caller's `plan.tasks`
    Caller,
    Replanner,
    /// an edit through `PUT /v1/runs/{id}/plan`
    Person,
}

/// How a verdict was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyTier {
    #[default]
    Checks,
    Llm,
    Vote,
    Human,
}

/// `plan_proposed`: version `version` of the plan, valid, as written by `source`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanProposed {
    pub version: u32,
    pub source: PlanSource,
    pub tasks: Vec<Task>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<RunId>,
    /// tokens the writing sub-run used
    #[serde(default)]
    pub tokens: u64,
}

/// `plan_rejected`: a plan (or a replan) that failed validation; it goes back to its writer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanRejected {
    /// the writer's try, from 1
    pub attempt: u32,
    pub source: PlanSource,
    pub errors: Vec<String>,
    /// what the writer answered (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run_id: Option<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

/// `plan_accepted`: version `version` runs from here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanAccepted {
    pub version: u32,
    /// the subject that approved it (`approval: before_execute`)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// `plan_awaiting_approval`: the run parks until `PUT /v1/runs/{id}/plan` approves `version`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanAwaitingApproval {
    pub version: u32,
}

/// `task_started`: attempt `attempt` of `task` runs as sub-run `child_run_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskStarted {
    pub task: String,
    pub attempt: u32,
    pub child_run_id: RunId,
    pub plan_version: u32,
    pub agent: String,
    /// the escalation model it runs on, when not its agent's own
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `task_checked`: the attempt's sub-run ended and its checks ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskChecked {
    pub task: String,
    pub attempt: u32,
    /// how the sub-run ended
    pub child_status: RunStatus,
    pub results: Vec<CheckResult>,
    /// the sub-run's last answer (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub tokens: u64,
}

/// `verifier_unreadable`: a verifier's answer was not a verdict; the verification runs again
/// (never the task).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifierUnreadable {
    pub task: String,
    pub attempt: u32,
    /// the verification's try, from 1
    pub try_no: u32,
    pub verifier_run_id: RunId,
    pub error: String,
    /// what the verifier answered (cut short)
    #[serde(default)]
    pub output: String,
    #[serde(default)]
    pub tokens: u64,
}

/// `task_verified`: the attempt's verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskVerified {
    pub task: String,
    pub attempt: u32,
    pub tier: VerifyTier,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_run_ids: Vec<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

/// `vote_split`: a vote's verifiers disagreed; a person settles it through an interruption
/// (`POST /v1/runs/{id}/interrupts/{interrupt_id}` with `pass` or `fail`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoteSplit {
    pub task: String,
    pub attempt: u32,
    pub pass: u32,
    pub fail: u32,
    pub votes: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_run_ids: Vec<RunId>,
    #[serde(default)]
    pub tokens: u64,
}

impl VoteSplit {
    /// The tool-use id (and ledger key) of the question put to a person about this split.
    pub fn question_id(task: &str, attempt: u32) -> String {
        format!("vote:{task}:{attempt}")
    }
}

/// `task_retrying`: attempt `attempt` comes next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRetrying {
    pub task: String,
    /// the attempt about to start
    pub attempt: u32,
    pub reason_code: ReasonCode,
    /// carried to the attempt (empty for a fresh-context escalation)
    #[serde(default)]
    pub feedback: String,
    /// the model it escalates to, when it does
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `task_finished`: the task passed, failed (out of attempts, or no progress) or was skipped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskFinished {
    pub task: String,
    pub status: TaskStatus,
    pub attempts: u32,
    pub reason_code: ReasonCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `outcome_stale`: an attempt started under an older plan version ended; it is ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutcomeStale {
    pub task: String,
    pub attempt: u32,
    pub plan_version: u32,
}

/// `plan_stalled`: no task can start and some never will without a new plan.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanStalled {
    pub version: u32,
    /// pending tasks that wait on a task that failed
    pub blocked: Vec<String>,
    pub failed: Vec<String>,
}

/// `replan_requested`: replan number `replan` is asked for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplanRequested {
    pub replan: u32,
    pub reason: String,
}

/// `budget_exhausted`: the run ends on budget `budget` (`tokens`, `wall_time`, `replans`,
/// `plan_tries`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetExhausted {
    pub budget: String,
    pub used: u64,
    pub limit: u64,
}

/// `task_retry_requested` / a person's `retry` or `skip`, taken from the run's controls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskControl {
    pub task: String,
    /// `retry` or `skip`
    pub action: String,
    pub by: String,
}
