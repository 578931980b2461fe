//! Plan runs (`mode: "plan"` on `POST /v1/runs`, `/v1/runs/{id}/plan…`, `/v1/evaluations`): the
//! plan contract (tasks, checks, the verifier's verdict), its limits, and the routes that read,
//! approve, edit, retry and skip a plan run's tasks.
//!
//! A plan run asks a planner agent for a plan (or takes the caller's `tasks`), validates it, runs
//! each task attempt as a sub-run, checks its result without a model and then, where the task
//! asks, with an independent verifier agent whose answer must be a [`Verdict`]; it retries with
//! the verdict's feedback, escalates, and replans between batches (docs/harness.md).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Timestamp;
use crate::op::{In, Op};
use crate::runs::{RunId, RunStatus};

pub use crate::plan_spec::*;

/// Where a plan is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum PlanStatus {
    /// written, waiting for approval (`PUT /v1/runs/{id}/plan`)
    #[default]
    Proposed,
    /// running (or ran)
    Accepted,
    /// replaced by a newer version
    Superseded,
}

/// One attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttemptView {
    #[schemars(range(min = 1))]
    pub attempt: u32,
    /// the sub-run doing it
    pub child_run_id: RunId,
    /// the plan version it started under
    pub plan_version: u32,
    /// its checks' results, once checked
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// its verdict, once verified
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// recorded after the plan changed under it: ignored
    #[serde(default)]
    pub stale: bool,
}

/// A task with its state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskView {
    #[serde(flatten)]
    pub task: Task,
    pub status: TaskStatus,
    pub attempts: Vec<AttemptView>,
}

/// The answer of `GET /v1/runs/{id}/plan` and `GET /v1/runs/{id}/plan/versions/{v}`; its `ETag`
/// is `"<version>"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanView {
    pub run_id: RunId,
    pub run_status: RunStatus,
    #[schemars(range(min = 1))]
    pub version: u32,
    pub status: PlanStatus,
    /// the subject that approved or edited it, when one did
    pub approved_by: Option<String>,
    /// replans so far
    pub replans: u32,
    /// tokens used so far by every sub-run of the plan run (each role's, and the sub-runs they
    /// made), as `max_tokens` counts them; the plan run's `usage` is the same sum
    pub tokens: u64,
    /// the process the run follows (`plan.process`), when it names one
    pub process: Option<String>,
    /// that process's version when the run was created (its content hash)
    pub process_version: Option<String>,
    pub tasks: Vec<TaskView>,
    pub created_at: Timestamp,
}

/// The body of `PUT /v1/runs/{id}/plan` (with `If-Match: "<version>"`): approve the proposed plan
/// as it is (`{}`), or edit it (`tasks`, validated like a planner's: a new version, approved).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {}))]
pub struct PlanDecision {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<Task>>,
}

crate::objects_only!(PlanDecision);

/// The answer of `POST /v1/runs/{id}/plan/tasks/{task}/retry` and `/skip`: the request is queued
/// for the run's orchestrator, which applies it between batches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskControlAccepted {
    pub run_id: RunId,
    pub task: String,
    /// `retry` or `skip`
    pub action: String,
}

/// Who emitted an evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum EmitterRole {
    /// checks without a model
    Checks,
    Verifier,
    /// a person settling a split vote
    Human,
    /// an `Evaluation` tool call
    Agent,
}

/// Pass rates of one agent definition version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationAggregate {
    pub agent: String,
    /// the definition's content hash
    pub version: String,
    pub total: u64,
    pub pass: u64,
    pub fail: u64,
    pub inconclusive: u64,
    /// pass / total (0 when total is 0)
    pub pass_rate: f64,
    /// mean score
    pub mean_score: f64,
    /// counts per emitter role, then per verdict
    pub by_role: BTreeMap<String, BTreeMap<String, u64>>,
}

/// The answer of `GET /v1/evaluations`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluationList {
    pub data: Vec<EvaluationAggregate>,
}

/// The plan routes.
pub fn ops() -> Vec<Op> {
    use crate::runs::{E401, E403, E404, on_run};
    let plan = |op: Op| {
        on_run(op).param::<String>(
            In::Header,
            "If-Match",
            true,
            Some("the plan version the change was made against, as \"<version>\""),
            None,
        )
    };
    vec![
        crate::runs::errors(
            on_run(Op::get(
                "/v1/runs/{id}/plan",
                "A plan run's current plan, with each task's state, attempts and verdicts",
            ))
            .ok::<PlanView>("the plan (ETag: its version)"),
            &[
                E401,
                E403,
                (404, "no such run, or not a plan run, or no plan yet"),
            ],
        ),
        crate::runs::errors(
            on_run(Op::get(
                "/v1/runs/{id}/plan/versions/{version}",
                "One version of a plan run's plan",
            ))
            .path::<u32>("version", Some(serde_json::json!(1)))
            .ok::<PlanView>("that version"),
            &[E401, E403, E404],
        ),
        crate::runs::errors(
            plan(Op::put(
                "/v1/runs/{id}/plan",
                "Approve (`{}`) or edit (`tasks`) a proposed plan",
            ))
            .body::<PlanDecision>()
            .ok::<PlanView>("the approved plan"),
            &[
                (400, "an invalid plan: the message lists every error"),
                E401,
                E403,
                E404,
                (409, "the plan is not waiting for approval"),
                (412, "If-Match names another version than the current one"),
                (428, "If-Match is missing"),
                (415, "body is not JSON"),
            ],
        ),
        crate::runs::errors(
            on_run(Op::post(
                "/v1/runs/{id}/plan/tasks/{task}/retry",
                "Give a failed task another attempt",
            ))
            .path::<String>("task", Some(serde_json::json!("report")))
            .answer::<TaskControlAccepted>(202, "queued for the orchestrator"),
            &[
                E401,
                E403,
                E404,
                (409, "the run has ended, or the task is not failed"),
            ],
        ),
        crate::runs::errors(
            on_run(Op::post(
                "/v1/runs/{id}/plan/tasks/{task}/skip",
                "Skip a task that has not passed (its dependents go on)",
            ))
            .path::<String>("task", Some(serde_json::json!("report")))
            .answer::<TaskControlAccepted>(202, "queued for the orchestrator"),
            &[
                E401,
                E403,
                E404,
                (409, "the run has ended, or the task has passed"),
            ],
        ),
        crate::runs::errors(
            Op::get(
                "/v1/evaluations",
                "Verification pass rates per agent definition version",
            )
            .security(crate::Security::Bearer)
            .param::<String>(
                In::Query,
                "agent",
                true,
                Some("an agent name"),
                Some("coder".into()),
            )
            .query::<String>(
                "version",
                Some("a definition content hash (default: every version)"),
                None,
            )
            .ok::<EvaluationList>("one aggregate per (agent, version), newest version first"),
            &[(400, "`agent` is missing"), E401, E403],
        ),
    ]
}
