//! Plan runs: the plan validator ([`validate`]), the fold of a transcript (its plan events are
//! `crate::run`'s) into a [`PlanState`] and the deterministic step function over it
//! ([`next_action`], [`task_step`]), the checks without a model ([`checks`]) and the readers of
//! a planner's and a verifier's answers ([`parse`]). No I/O: the executor performs the actions,
//! records what happened as events, folds them in, and asks again — a resumed run is the same
//! fold over the same transcript.

pub mod checks;
pub mod parse;
mod state;
mod validate;

pub use crate::run::{
    BudgetExhausted, OutcomeStale, PlanAccepted, PlanAwaitingApproval, PlanProposed, PlanRejected,
    PlanSource, PlanStalled, ReplanRequested, TaskChecked, TaskControl, TaskFinished, TaskRetrying,
    TaskStarted, TaskVerified, VerifierUnreadable, VerifyTier, VoteSplit,
};
pub use state::{
    Decision, Facts, MAX_PLAN_TRIES, MAX_VERIFY_TRIES, PlanAction, PlanState, Stage, TaskState,
    TaskStep, apply, decide, globs_overlap, next_action, select_batch, signature, task_step,
    task_views,
};
pub use validate::{MAX_TASKS, limit_errors, validate, validate_replan};
pub use weft_api::plans::{
    Approval, AttemptView, Check, CheckResult, EmitterRole, EvaluationAggregate, EvaluationList,
    Format, Issue, PhaseMode, PlanLimits, PlanSpec, PlanStatus, PlanView, ReasonCode, RunMode,
    Task, TaskStatus, TaskView, Verdict, VerdictKind, VerifyMode,
};
