//! The plan orchestrator as a deterministic step function: a plan run's transcript folds into a
//! [`PlanState`] ([`apply`]); [`next_action`] says what the run does next, [`task_step`] what one
//! task of a batch does next, and [`decide`] what follows a verdict. The executor performs the
//! action, records it as events, folds them in and asks again.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::RunId;
use crate::run::{
    BudgetExhausted, EventKind, OutcomeStale, PlanAccepted, PlanAwaitingApproval, PlanProposed,
    PlanRejected, PlanSource, PlanStalled, ReplanRequested, RunStatus, StopReason, TaskChecked,
    TaskControl, TaskFinished, TaskRetrying, TaskStarted, TaskVerified, VerifierUnreadable,
    VoteSplit,
};
use weft_api::plans::{
    Approval, AttemptView, PlanLimits, ReasonCode, Task, TaskStatus, TaskView, Verdict,
    VerdictKind, VerifyMode,
};

/// Tries a planner (or replanner) gets to write a valid plan before the run fails.
pub const MAX_PLAN_TRIES: u32 = 3;
/// Tries a verification gets when its verifier's answers are not verdicts; then the attempt is
/// `inconclusive` (never a pass).
pub const MAX_VERIFY_TRIES: u32 = 3;

/// Where one task's current attempt is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    /// No attempt under way.
    #[default]
    Idle,
    /// Its sub-run started.
    Started,
    /// Its sub-run ended and its checks ran.
    Checked,
    /// Its verdict is in.
    Verified,
}

/// One task, folded from the transcript.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskState {
    pub status: TaskStatus,
    pub stage: Stage,
    /// The newest attempt's number (0 = none yet).
    pub attempt: u32,
    /// Attempts not counted against `max_attempts` (those before a replan reset it, less one
    /// for each `retry` granted).
    pub base: u32,
    pub child: Option<RunId>,
    pub plan_version: u32,
    pub checked: Option<TaskChecked>,
    /// Verification tries of the current attempt whose answer was unreadable.
    pub verify_tries: u32,
    /// The last unreadable verifier answer, shown to the next verifier.
    pub unreadable: Option<String>,
    pub verdict: Option<Verdict>,
    /// What the next attempt carries, and the model it runs on.
    pub next_feedback: String,
    pub next_model: Option<String>,
    /// The no-progress signature of each verdict, in order.
    pub signatures: Vec<String>,
    pub attempts: Vec<AttemptView>,
    /// An attempt was under way when a new plan version changed the task: its result is stale.
    pub stale_in_flight: bool,
    /// The current attempt's vote split: a person must settle it.
    pub split: Option<VoteSplit>,
    pub reason: Option<ReasonCode>,
}

/// A plan run, folded from its transcript.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanState {
    pub limits: PlanLimits,
    /// The accepted version (0 = none yet).
    pub version: u32,
    pub tasks: Vec<Task>,
    pub approved_by: Option<String>,
    /// The newest valid version not accepted yet.
    pub proposed: Option<PlanProposed>,
    pub awaiting_approval: Option<u32>,
    /// The newest version number given out.
    pub last_version: u32,
    /// The writer's tries in the current round (planning, or one replan).
    pub tries: u32,
    pub rejected: Option<PlanRejected>,
    pub replans: u32,
    /// A replan asked for and not accepted yet.
    pub replanning: Option<ReplanRequested>,
    /// Tokens of the roles' sub-runs as their events recorded them (each sub-run's own, once it
    /// ended); [`Facts::tokens`] is the fresh total the budget is held to.
    pub tokens: u64,
    pub task: BTreeMap<String, TaskState>,
    pub exhausted: Option<BudgetExhausted>,
    pub finished: bool,
}

impl PlanState {
    pub fn new(limits: PlanLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The accepted task `id`.
    pub fn task_def(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// The state of task `id` (a fresh one for a task not seen yet).
    pub fn state_of(&self, id: &str) -> TaskState {
        self.task.get(id).cloned().unwrap_or_default()
    }

    /// Folds one stored event (unknown kinds are not the plan's and change nothing).
    pub fn apply(&mut self, kind: &str, data: &Value) {
        apply(self, kind, data);
    }
}

/// Folds one stored `(kind, data)` event into `state`.
pub fn apply(state: &mut PlanState, kind: &str, data: &Value) {
    fn read<T: serde::de::DeserializeOwned>(data: &Value) -> Option<T> {
        T::deserialize(data).ok()
    }
    let Some(kind) = EventKind::parse(kind) else {
        return;
    };
    match kind {
        EventKind::PlanProposed => {
            if let Some(p) = read::<PlanProposed>(data) {
                state.last_version = state.last_version.max(p.version);
                state.tokens += p.tokens;
                state.rejected = None;
                state.proposed = Some(p);
            }
        }
        EventKind::PlanRejected => {
            if let Some(r) = read::<PlanRejected>(data) {
                state.tries = state.tries.max(r.attempt);
                state.tokens += r.tokens;
                state.rejected = Some(r);
            }
        }
        EventKind::PlanAwaitingApproval => {
            if let Some(a) = read::<PlanAwaitingApproval>(data) {
                state.awaiting_approval = Some(a.version);
            }
        }
        EventKind::PlanAccepted => {
            if let Some(a) = read::<PlanAccepted>(data) {
                accept(state, &a);
            }
        }
        EventKind::TaskStarted => {
            if let Some(s) = read::<TaskStarted>(data) {
                let t = state.task.entry(s.task.clone()).or_default();
                t.status = TaskStatus::Running;
                t.stage = Stage::Started;
                t.attempt = s.attempt;
                t.child = Some(s.child_run_id);
                t.plan_version = s.plan_version;
                t.checked = None;
                t.verdict = None;
                t.verify_tries = 0;
                t.unreadable = None;
                t.split = None;
                t.attempts.push(AttemptView {
                    attempt: s.attempt,
                    child_run_id: weft_api::runs::RunId(s.child_run_id.to_string()),
                    plan_version: s.plan_version,
                    checks: Vec::new(),
                    verdict: None,
                    stale: false,
                });
            }
        }
        EventKind::TaskChecked => {
            if let Some(c) = read::<TaskChecked>(data) {
                state.tokens += c.tokens;
                let t = state.task.entry(c.task.clone()).or_default();
                if t.attempt == c.attempt {
                    t.stage = Stage::Checked;
                    if let Some(a) = t.attempts.last_mut() {
                        a.checks.clone_from(&c.results);
                    }
                    t.checked = Some(c);
                }
            }
        }
        EventKind::VerifierUnreadable => {
            if let Some(u) = read::<VerifierUnreadable>(data) {
                state.tokens += u.tokens;
                let t = state.task.entry(u.task.clone()).or_default();
                t.verify_tries = t.verify_tries.max(u.try_no);
                t.unreadable = Some(u.output);
            }
        }
        EventKind::VoteSplit => {
            if let Some(v) = read::<VoteSplit>(data) {
                state.tokens += v.tokens;
                let t = state.task.entry(v.task.clone()).or_default();
                if t.attempt == v.attempt {
                    t.split = Some(v);
                }
            }
        }
        EventKind::TaskVerified => {
            if let Some(v) = read::<TaskVerified>(data) {
                state.tokens += v.tokens;
                let t = state.task.entry(v.task.clone()).or_default();
                if t.attempt == v.attempt {
                    t.split = None;
                    t.stage = Stage::Verified;
                    t.signatures.push(signature(&v.verdict));
                    if let Some(a) = t.attempts.last_mut() {
                        a.verdict = Some(v.verdict.clone());
                    }
                    t.verdict = Some(v.verdict);
                }
            }
        }
        EventKind::TaskRetrying => {
            if let Some(r) = read::<TaskRetrying>(data) {
                let t = state.task.entry(r.task.clone()).or_default();
                t.status = TaskStatus::Pending;
                t.stage = Stage::Idle;
                t.next_feedback = r.feedback;
                t.next_model = r.model;
                t.reason = Some(r.reason_code);
            }
        }
        EventKind::TaskFinished => {
            if let Some(f) = read::<TaskFinished>(data) {
                let t = state.task.entry(f.task.clone()).or_default();
                t.status = f.status;
                t.stage = Stage::Idle;
                t.split = None;
                t.reason = Some(f.reason_code);
            }
        }
        EventKind::OutcomeStale => {
            if let Some(s) = read::<OutcomeStale>(data) {
                let t = state.task.entry(s.task.clone()).or_default();
                t.stale_in_flight = false;
                t.stage = Stage::Idle;
                t.split = None;
                for a in t.attempts.iter_mut().filter(|a| a.attempt == s.attempt) {
                    a.stale = true;
                }
            }
        }
        EventKind::TaskControl => {
            if let Some(c) = read::<TaskControl>(data)
                && c.action == "retry"
            {
                let max = state.limits.max_attempts.max(1);
                let t = state.task.entry(c.task.clone()).or_default();
                t.status = TaskStatus::Pending;
                t.stage = Stage::Idle;
                // A split vote it settles instead of a person's answer is dropped.
                t.split = None;
                // Exactly one more attempt.
                t.base = (t.attempt + 1).saturating_sub(max);
                t.signatures.clear();
                t.next_feedback.clear();
                t.next_model = None;
            }
        }
        EventKind::ReplanRequested => {
            if let Some(r) = read::<ReplanRequested>(data) {
                state.replans = state.replans.max(r.replan);
                state.tries = 0;
                state.rejected = None;
                state.replanning = Some(r);
            }
        }
        EventKind::BudgetExhausted => {
            state.exhausted = read::<BudgetExhausted>(data);
        }
        EventKind::RunFinished => state.finished = true,
        _ => {}
    }
}

/// Version `a.version` (the newest proposal) becomes the plan. A task that had not passed starts
/// over: its attempts so far stop counting, and one under way is stale.
fn accept(state: &mut PlanState, a: &PlanAccepted) {
    if state
        .proposed
        .as_ref()
        .is_none_or(|p| p.version != a.version)
    {
        return;
    }
    let Some(p) = state.proposed.take() else {
        return;
    };
    state.version = p.version;
    state.approved_by.clone_from(&a.approved_by);
    state.awaiting_approval = None;
    state.tries = 0;
    state.rejected = None;
    state.replanning = None;
    for t in &p.tasks {
        let s = state.task.entry(t.id.clone()).or_default();
        if matches!(s.status, TaskStatus::Passed | TaskStatus::Skipped) {
            continue;
        }
        if matches!(s.stage, Stage::Started | Stage::Checked | Stage::Verified) {
            s.stale_in_flight = true;
        }
        s.status = TaskStatus::Pending;
        s.split = None;
        s.base = s.attempt;
        s.signatures.clear();
        s.next_feedback.clear();
        s.next_model = None;
        s.reason = None;
    }
    state.tasks = p.tasks;
}

/// The no-progress signature of a verdict: two attempts failing the same way in a row stop
/// retrying.
pub fn signature(v: &Verdict) -> String {
    let mut parts: Vec<String> = v
        .issues
        .iter()
        .map(|i| {
            format!(
                "{}|{}|{}",
                i.path.as_deref().unwrap_or_default(),
                i.check.as_deref().unwrap_or_default(),
                i.message.trim().to_lowercase()
            )
        })
        .chain(
            v.missing
                .iter()
                .map(|m| format!("missing|{}", m.trim().to_lowercase())),
        )
        .collect();
    parts.sort();
    let mut h = Sha256::new();
    h.update(v.reason_code.as_str());
    h.update([0]);
    h.update(
        serde_json::to_string(&v.verdict)
            .unwrap_or_default()
            .as_bytes(),
    );
    for p in parts {
        h.update([0]);
        h.update(p.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// What the step function needs besides the transcript.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    pub cancelled: bool,
    /// Seconds since the run was created.
    pub elapsed_s: u64,
    /// Tokens used so far by every sub-run of the plan (each role's, and their own sub-runs'),
    /// live ones included, read fresh: what `max_tokens` is held to (with [`PlanState::tokens`]
    /// as a floor).
    pub tokens: u64,
    /// A person's retry/skip waits in the run's controls.
    pub controls_waiting: bool,
    /// The plan was given by the caller (no planner).
    pub caller_tasks: bool,
    pub approval: Approval,
    /// The newest approval of `PUT /v1/runs/{id}/plan`: the version it approved (a new version
    /// when it edited the plan, with its tasks) and by whom.
    pub approved: Option<(u32, Option<Vec<Task>>, String)>,
    /// A person's answers to split votes, by [`VoteSplit::question_id`].
    pub answers: BTreeMap<String, String>,
}

/// Whether two write globs may name a common file: conservatively, when the literal part of
/// one (up to its first wildcard) is a prefix of the other's. Tasks whose globs overlap run one
/// after the other.
pub fn globs_overlap(a: &str, b: &str) -> bool {
    let lit = |g: &str| -> String {
        g.chars()
            .take_while(|c| !matches!(c, '*' | '?' | '[' | '{'))
            .collect()
    };
    let (la, lb) = (lit(a), lit(b));
    let wild_a = la.len() < a.len();
    let wild_b = lb.len() < b.len();
    match (wild_a, wild_b) {
        (false, false) => a == b,
        (true, false) => b.starts_with(&la),
        (false, true) => a.starts_with(&lb),
        (true, true) => la.starts_with(&lb) || lb.starts_with(&la),
    }
}

/// What a plan run does next.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanAction {
    /// The transcript already ends the run.
    Done,
    /// Cancelled: finish so.
    Cancel,
    /// A budget ran out: record it and end the run.
    Exhausted(BudgetExhausted),
    /// Take the waiting retry/skip controls.
    TakeControls,
    /// Propose the caller's plan as version 1.
    ProposeCaller,
    /// Ask the planner (or, replanning, the replanner) for a plan: its try `attempt`.
    AskWriter { source: PlanSource, attempt: u32 },
    /// Park until the plan is approved.
    AwaitApproval { version: u32 },
    /// Accept version `version`; `edited` is a person's edit of it (a new version to propose
    /// first), `approved_by` who approved.
    Accept {
        version: u32,
        edited: Option<Vec<Task>>,
        approved_by: Option<String>,
    },
    /// Run these tasks (each to its end: pass, fail or skip), in parallel.
    RunBatch(Vec<String>),
    /// A person answered the split vote on `task`'s attempt `attempt`: record their verdict.
    Settle {
        task: String,
        attempt: u32,
        answer: String,
    },
    /// Park until a person settles the split vote on `task`'s attempt `attempt`.
    AskPerson { task: String, attempt: u32 },
    /// Ask for replan number `replan`; `stalled` when no task can start.
    Replan {
        replan: u32,
        reason: String,
        stalled: Option<PlanStalled>,
    },
    Finish {
        reason: StopReason,
        error: Option<String>,
    },
}

/// The next action of a plan run.
pub fn next_action(state: &PlanState, facts: &Facts) -> PlanAction {
    if state.finished {
        return PlanAction::Done;
    }
    if facts.cancelled {
        return PlanAction::Cancel;
    }
    if let Some(e) = &state.exhausted {
        return PlanAction::Finish {
            reason: StopReason::BudgetExhausted,
            error: Some(format!(
                "the plan run ran out of its `{}` budget ({} of {})",
                e.budget, e.used, e.limit
            )),
        };
    }
    let l = &state.limits;
    // The wall-time budget is a deadline: attempts under way are stopped at it (their sub-runs
    // end with the run), not awaited.
    if l.max_wall_s > 0 && facts.elapsed_s >= l.max_wall_s {
        return PlanAction::Exhausted(BudgetExhausted {
            budget: "wall_time".into(),
            used: facts.elapsed_s,
            limit: l.max_wall_s,
        });
    }
    // Attempts under way (a resumed run) end first: nothing else is decided while a task's
    // sub-run may still be writing.
    let in_flight: Vec<String> = state
        .tasks
        .iter()
        .filter(|t| {
            let s = state.state_of(&t.id);
            !s.status.is_terminal()
                && s.split.is_none()
                && matches!(s.stage, Stage::Started | Stage::Checked | Stage::Verified)
        })
        .map(|t| t.id.clone())
        .collect();
    if state.version > 0 && state.replanning.is_none() && !in_flight.is_empty() {
        return PlanAction::RunBatch(in_flight);
    }
    let tokens = state.tokens.max(facts.tokens);
    if l.max_tokens > 0 && tokens >= l.max_tokens {
        return PlanAction::Exhausted(BudgetExhausted {
            budget: "tokens".into(),
            used: tokens,
            limit: l.max_tokens,
        });
    }
    if facts.controls_waiting && state.version > 0 {
        return PlanAction::TakeControls;
    }
    if state.version == 0 || state.replanning.is_some() {
        return writing(state, facts);
    }
    let failed_critical: Vec<&str> = state
        .tasks
        .iter()
        .filter(|t| t.critical && state.state_of(&t.id).status == TaskStatus::Failed)
        .map(|t| t.id.as_str())
        .collect();
    if !failed_critical.is_empty() {
        return replan_or_fail(
            state,
            format!(
                "critical task{} {} failed",
                if failed_critical.len() > 1 { "s" } else { "" },
                quoted(&failed_critical)
            ),
            None,
        );
    }
    let batch = select_batch(state);
    if !batch.is_empty() {
        return PlanAction::RunBatch(batch);
    }
    // Nothing else can run: the split votes wait for a person.
    for t in &state.tasks {
        let st = state.state_of(&t.id);
        if st.status.is_terminal() {
            continue;
        }
        if let Some(split) = &st.split {
            let id = VoteSplit::question_id(&t.id, split.attempt);
            return match facts.answers.get(&id) {
                Some(answer) => PlanAction::Settle {
                    task: t.id.clone(),
                    attempt: split.attempt,
                    answer: answer.clone(),
                },
                None => PlanAction::AskPerson {
                    task: t.id.clone(),
                    attempt: split.attempt,
                },
            };
        }
    }
    let open: Vec<&Task> = state
        .tasks
        .iter()
        .filter(|t| !state.state_of(&t.id).status.is_terminal())
        .collect();
    if open.is_empty() {
        if let Some(f) = state.tasks.iter().find(|t| t.r#final)
            && state.state_of(&f.id).status == TaskStatus::Failed
        {
            return PlanAction::Finish {
                reason: StopReason::Error,
                error: Some(format!("the final task `{}` failed", f.id)),
            };
        }
        return PlanAction::Finish {
            reason: StopReason::EndTurn,
            error: None,
        };
    }
    let failed: Vec<String> = state
        .tasks
        .iter()
        .filter(|t| state.state_of(&t.id).status == TaskStatus::Failed)
        .map(|t| t.id.clone())
        .collect();
    let blocked: Vec<String> = open.iter().map(|t| t.id.clone()).collect();
    let stalled = PlanStalled {
        version: state.version,
        blocked: blocked.clone(),
        failed: failed.clone(),
    };
    let names: Vec<&str> = failed.iter().map(String::as_str).collect();
    replan_or_fail(
        state,
        format!(
            "the plan stalled: {} wait on failed {}",
            quoted(&blocked.iter().map(String::as_str).collect::<Vec<_>>()),
            quoted(&names)
        ),
        Some(stalled),
    )
}

/// No accepted plan (or a replan under way): propose, ask the writer, wait for approval, accept.
fn writing(state: &PlanState, facts: &Facts) -> PlanAction {
    let replanning = state.replanning.is_some();
    if let Some(p) = &state.proposed {
        if facts.approval == Approval::BeforeExecute {
            return match &facts.approved {
                Some((v, edited, by)) if *v >= p.version => PlanAction::Accept {
                    version: *v,
                    edited: edited.clone(),
                    approved_by: Some(by.clone()),
                },
                _ => PlanAction::AwaitApproval { version: p.version },
            };
        }
        return PlanAction::Accept {
            version: p.version,
            edited: None,
            approved_by: None,
        };
    }
    if !replanning && facts.caller_tasks {
        if state.rejected.is_some() {
            let errors = state
                .rejected
                .as_ref()
                .map(|r| r.errors.join("; "))
                .unwrap_or_default();
            return PlanAction::Finish {
                reason: StopReason::Error,
                error: Some(format!("the given plan is invalid: {errors}")),
            };
        }
        return PlanAction::ProposeCaller;
    }
    if state.tries >= MAX_PLAN_TRIES {
        let who = if replanning { "replanner" } else { "planner" };
        let errors = state
            .rejected
            .as_ref()
            .map(|r| r.errors.join("; "))
            .unwrap_or_default();
        return PlanAction::Finish {
            reason: StopReason::Error,
            error: Some(format!(
                "the {who} gave no valid plan in {MAX_PLAN_TRIES} tries; the last one's errors: {errors}"
            )),
        };
    }
    PlanAction::AskWriter {
        source: if replanning {
            PlanSource::Replanner
        } else {
            PlanSource::Planner
        },
        attempt: state.tries + 1,
    }
}

fn replan_or_fail(state: &PlanState, reason: String, stalled: Option<PlanStalled>) -> PlanAction {
    let max = state.limits.max_replans;
    if state.replans < max {
        return PlanAction::Replan {
            replan: state.replans + 1,
            reason,
            stalled,
        };
    }
    if max == 0 {
        return PlanAction::Finish {
            reason: StopReason::Error,
            error: Some(format!(
                "{reason}, and the run may not replan (`max_replans` is 0)"
            )),
        };
    }
    PlanAction::Exhausted(BudgetExhausted {
        budget: "replans".into(),
        used: u64::from(state.replans),
        limit: u64::from(max),
    })
}

/// The tasks to run now, in plan order: those under way first (a resumed run), then those whose
/// dependencies all passed (or were skipped) — the final task only once every other has ended —
/// at most `max_parallel`, never two whose write globs overlap.
pub fn select_batch(state: &PlanState) -> Vec<String> {
    let done = |id: &str| {
        matches!(
            state.state_of(id).status,
            TaskStatus::Passed | TaskStatus::Skipped
        )
    };
    let others_ended = |fin: &Task| {
        state
            .tasks
            .iter()
            .filter(|t| t.id != fin.id)
            .all(|t| state.state_of(&t.id).status.is_terminal())
    };
    let ready = |t: &Task| {
        let s = state.state_of(&t.id);
        !s.status.is_terminal()
            && s.split.is_none()
            && t.depends_on.iter().all(|d| done(d))
            && (!t.r#final || others_ended(t))
    };
    let mut candidates: Vec<&Task> = state
        .tasks
        .iter()
        .filter(|t| ready(t) && state.state_of(&t.id).stage != Stage::Idle)
        .collect();
    candidates.extend(
        state
            .tasks
            .iter()
            .filter(|t| ready(t) && state.state_of(&t.id).stage == Stage::Idle),
    );
    let max = state.limits.max_parallel.max(1) as usize;
    let mut chosen: Vec<&Task> = Vec::new();
    for t in candidates {
        if chosen.len() >= max {
            break;
        }
        let clash = chosen.iter().any(|c| {
            c.writes
                .iter()
                .any(|a| t.writes.iter().any(|b| globs_overlap(a, b)))
        });
        if !clash {
            chosen.push(t);
        }
    }
    chosen.into_iter().map(|t| t.id.clone()).collect()
}

/// What one task of a batch does next.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskStep {
    /// The task has ended.
    Done,
    /// An attempt under way started under an older plan version: record it stale.
    Stale { attempt: u32, plan_version: u32 },
    /// Start attempt `attempt` (carrying `feedback`, on `model` when set).
    Start {
        attempt: u32,
        feedback: String,
        model: Option<String>,
    },
    /// Wait for the attempt's sub-run to end, then run its checks.
    Await { child: RunId },
    /// The verdict without a model: from the checks (and how the sub-run ended).
    VerdictFromChecks,
    /// Ask the verifier: its try `try_no`, shown the last unreadable answer.
    Verify { try_no: u32 },
    /// The verifier's answers were never readable: the attempt is inconclusive.
    GiveUpVerifying,
    /// Ask `votes` verifiers.
    Vote { votes: u32 },
    /// The vote split: the task waits for a person (the run parks once nothing else can run).
    AwaitPerson,
    /// The verdict is in: pass, retry or fail ([`decide`]).
    Decide(Decision),
}

/// What follows a verdict.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Pass,
    Retry {
        attempt: u32,
        reason_code: ReasonCode,
        feedback: String,
        model: Option<String>,
    },
    Fail {
        reason_code: ReasonCode,
    },
}

/// The next step of task `task` in state `t`.
pub fn task_step(
    t: &TaskState,
    task: &Task,
    limits: &PlanLimits,
    escalation: &[String],
) -> TaskStep {
    if t.stale_in_flight {
        return TaskStep::Stale {
            attempt: t.attempt,
            plan_version: t.plan_version,
        };
    }
    match t.stage {
        Stage::Idle if t.status.is_terminal() => TaskStep::Done,
        Stage::Idle => TaskStep::Start {
            attempt: t.attempt + 1,
            feedback: t.next_feedback.clone(),
            model: t.next_model.clone(),
        },
        Stage::Started => match t.child {
            Some(child) => TaskStep::Await { child },
            None => TaskStep::Start {
                attempt: t.attempt + 1,
                feedback: t.next_feedback.clone(),
                model: t.next_model.clone(),
            },
        },
        Stage::Checked if t.split.is_some() => TaskStep::AwaitPerson,
        Stage::Checked => {
            let Some(c) = &t.checked else {
                return TaskStep::VerdictFromChecks;
            };
            let clean =
                c.child_status == RunStatus::Succeeded && c.results.iter().all(|r| r.passed);
            match task.verify {
                _ if !clean => TaskStep::VerdictFromChecks,
                VerifyMode::Checks => TaskStep::VerdictFromChecks,
                VerifyMode::Llm if t.verify_tries >= MAX_VERIFY_TRIES => TaskStep::GiveUpVerifying,
                VerifyMode::Llm => TaskStep::Verify {
                    try_no: t.verify_tries + 1,
                },
                VerifyMode::Vote => TaskStep::Vote {
                    votes: task.votes.unwrap_or(3),
                },
            }
        }
        Stage::Verified => TaskStep::Decide(decide(t, limits, escalation)),
    }
}

/// What follows the verdict of `t`'s newest attempt: a pass; a retry (attempt 2 carries the
/// verdict's feedback; attempt 3 on runs on the next escalation model with a fresh context);
/// or a failure — out of attempts, or the same failure twice in a row (no progress).
pub fn decide(t: &TaskState, limits: &PlanLimits, escalation: &[String]) -> Decision {
    let Some(v) = &t.verdict else {
        return Decision::Fail {
            reason_code: ReasonCode::CannotVerify,
        };
    };
    if v.verdict == VerdictKind::Pass {
        return Decision::Pass;
    }
    let counted = t.attempt.saturating_sub(t.base);
    if counted >= limits.max_attempts.max(1) {
        return Decision::Fail {
            reason_code: v.reason_code,
        };
    }
    if let [.., a, b] = t.signatures.as_slice()
        && a == b
    {
        return Decision::Fail {
            reason_code: v.reason_code,
        };
    }
    let nth = counted + 1;
    if nth <= 2 {
        return Decision::Retry {
            attempt: t.attempt + 1,
            reason_code: v.reason_code,
            feedback: feedback_text(v),
            model: None,
        };
    }
    let model = escalation
        .get((nth - 3) as usize)
        .or_else(|| escalation.last())
        .cloned();
    Decision::Retry {
        attempt: t.attempt + 1,
        reason_code: v.reason_code,
        feedback: String::new(),
        model,
    }
}

/// A verdict as the feedback an attempt carries: its feedback, then its issues and what is
/// missing.
fn feedback_text(v: &Verdict) -> String {
    let mut out = v.feedback.trim().to_owned();
    for i in &v.issues {
        out.push_str("\n- ");
        if let Some(p) = &i.path {
            out.push_str(p);
            out.push_str(": ");
        }
        out.push_str(&i.message);
    }
    for m in &v.missing {
        out.push_str("\n- missing: ");
        out.push_str(m);
    }
    out.trim().to_owned()
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `tasks` (a version of the plan) with the state the transcript gives each: status, and every
/// attempt with its checks and verdict.
pub fn task_views(state: &PlanState, tasks: &[Task]) -> Vec<TaskView> {
    tasks
        .iter()
        .map(|t| {
            let s = state.state_of(&t.id);
            TaskView {
                task: t.clone(),
                status: s.status,
                attempts: s.attempts,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::{CheckResult, TaskView};
    use crate::run::RunEvent;

    fn task(id: &str, deps: &[&str]) -> Task {
        serde_json::from_value(json!({"id": id, "description": id, "depends_on": deps})).unwrap()
    }

    fn fold(state: &mut PlanState, e: RunEvent) {
        let (kind, data) = e.into_parts();
        state.apply(&kind, &data);
    }

    fn accepted(tasks: Vec<Task>, limits: PlanLimits) -> PlanState {
        let mut s = PlanState::new(limits);
        fold(
            &mut s,
            RunEvent::PlanProposed(PlanProposed {
                version: 1,
                source: PlanSource::Caller,
                tasks,
                child_run_id: None,
                tokens: 0,
            }),
        );
        fold(
            &mut s,
            RunEvent::PlanAccepted(PlanAccepted {
                version: 1,
                approved_by: None,
            }),
        );
        s
    }

    fn verdict(kind: VerdictKind, feedback: &str) -> Verdict {
        Verdict {
            verdict: kind,
            reason_code: ReasonCode::Incorrect,
            confidence: 1.0,
            issues: vec![crate::plan::Issue {
                path: None,
                check: None,
                message: feedback.into(),
            }],
            missing: Vec::new(),
            feedback: feedback.into(),
        }
    }

    /// Runs one attempt of `id` to its verdict.
    fn attempt(s: &mut PlanState, id: &str, n: u32, v: Verdict) {
        let child = RunId::new();
        fold(
            s,
            RunEvent::TaskStarted(TaskStarted {
                task: id.into(),
                attempt: n,
                child_run_id: child,
                plan_version: s.version,
                agent: "w".into(),
                model: None,
            }),
        );
        fold(
            s,
            RunEvent::TaskChecked(TaskChecked {
                task: id.into(),
                attempt: n,
                child_status: RunStatus::Succeeded,
                results: Vec::<CheckResult>::new(),
                output: String::new(),
                tokens: 10,
            }),
        );
        fold(
            s,
            RunEvent::TaskVerified(TaskVerified {
                task: id.into(),
                attempt: n,
                tier: crate::run::VerifyTier::Llm,
                verdict: v,
                verifier_run_ids: Vec::new(),
                tokens: 5,
            }),
        );
    }

    #[test]
    fn nothing_accepted_asks_the_planner_then_gives_up() {
        let s = PlanState::new(PlanLimits::default());
        let f = Facts::default();
        assert_eq!(
            next_action(&s, &f),
            PlanAction::AskWriter {
                source: PlanSource::Planner,
                attempt: 1
            }
        );
        let mut s = s;
        for attempt in 1..=MAX_PLAN_TRIES {
            fold(
                &mut s,
                RunEvent::PlanRejected(PlanRejected {
                    attempt,
                    errors: vec!["bad".into()],
                    ..PlanRejected::default()
                }),
            );
        }
        assert!(matches!(
            next_action(&s, &f),
            PlanAction::Finish { reason: StopReason::Error, error: Some(e) } if e.contains("3 tries")
        ));
    }

    #[test]
    fn ready_tasks_run_in_parallel_unless_their_writes_overlap() {
        let mut a = task("a", &[]);
        a.writes = vec!["src/*.rs".into()];
        let mut b = task("b", &[]);
        b.writes = vec!["src/lib.rs".into()];
        let c = task("c", &[]);
        let d = task("d", &["a"]);
        let s = accepted(vec![a, b, c, d], PlanLimits::default());
        assert_eq!(
            next_action(&s, &Facts::default()),
            PlanAction::RunBatch(vec!["a".into(), "c".into()])
        );
    }

    #[test]
    fn feedback_then_escalation_then_no_progress() {
        let limits = PlanLimits {
            max_attempts: 4,
            ..PlanLimits::default()
        };
        let esc = ["tier:strong".to_owned()];
        let mut s = accepted(vec![task("a", &[])], limits.clone());
        attempt(&mut s, "a", 1, verdict(VerdictKind::Fail, "first"));
        let d = decide(&s.state_of("a"), &limits, &esc);
        assert_eq!(
            d,
            Decision::Retry {
                attempt: 2,
                reason_code: ReasonCode::Incorrect,
                feedback: "first\n- first".into(),
                model: None
            }
        );
        attempt(&mut s, "a", 2, verdict(VerdictKind::Fail, "second"));
        // A different failure: attempt 3 escalates, fresh.
        let d = decide(&s.state_of("a"), &limits, &esc);
        assert_eq!(
            d,
            Decision::Retry {
                attempt: 3,
                reason_code: ReasonCode::Incorrect,
                feedback: String::new(),
                model: Some("tier:strong".into())
            }
        );
        // The same failure twice in a row stops retrying.
        let mut same = verdict(VerdictKind::Fail, "x");
        same.issues = vec![crate::plan::Issue {
            path: Some("a.txt".into()),
            check: None,
            message: "wrong".into(),
        }];
        attempt(&mut s, "a", 3, same.clone());
        attempt(&mut s, "a", 4, same);
        assert!(matches!(
            decide(&s.state_of("a"), &limits, &esc),
            Decision::Fail { .. }
        ));
        // Inconclusive is never a pass.
        let mut t = accepted(vec![task("b", &[])], limits.clone());
        attempt(&mut t, "b", 1, verdict(VerdictKind::Inconclusive, ""));
        assert!(matches!(
            decide(&t.state_of("b"), &limits, &esc),
            Decision::Retry { .. }
        ));
    }

    #[test]
    fn a_result_from_an_older_plan_version_is_stale() {
        let mut s = accepted(vec![task("a", &[])], PlanLimits::default());
        fold(
            &mut s,
            RunEvent::TaskStarted(TaskStarted {
                task: "a".into(),
                attempt: 1,
                child_run_id: RunId::new(),
                plan_version: 1,
                agent: "w".into(),
                model: None,
            }),
        );
        // A person's edit lands as version 2 while attempt 1 is under way.
        let mut edited = task("a", &[]);
        edited.description = "do it differently".into();
        fold(
            &mut s,
            RunEvent::PlanProposed(PlanProposed {
                version: 2,
                source: PlanSource::Person,
                tasks: vec![edited.clone()],
                child_run_id: None,
                tokens: 0,
            }),
        );
        fold(
            &mut s,
            RunEvent::PlanAccepted(PlanAccepted {
                version: 2,
                approved_by: Some("p".into()),
            }),
        );
        let t = s.state_of("a");
        assert_eq!(
            task_step(&t, &edited, &s.limits, &[]),
            TaskStep::Stale {
                attempt: 1,
                plan_version: 1
            }
        );
        fold(
            &mut s,
            RunEvent::OutcomeStale(OutcomeStale {
                task: "a".into(),
                attempt: 1,
                plan_version: 1,
            }),
        );
        let views: Vec<TaskView> = task_views(&s, &s.tasks);
        assert!(views[0].attempts[0].stale);
        assert!(matches!(
            task_step(&s.state_of("a"), &edited, &s.limits, &[]),
            TaskStep::Start { attempt: 2, .. }
        ));
    }

    #[test]
    fn a_stall_replans_within_budget_then_exhausts_it() {
        let limits = PlanLimits {
            max_replans: 1,
            ..PlanLimits::default()
        };
        let mut s = accepted(vec![task("a", &[]), task("b", &["a"])], limits);
        fold(
            &mut s,
            RunEvent::TaskFinished(TaskFinished {
                task: "a".into(),
                status: TaskStatus::Failed,
                attempts: 3,
                reason_code: ReasonCode::Incorrect,
                by: None,
            }),
        );
        assert!(matches!(
            next_action(&s, &Facts::default()),
            PlanAction::Replan {
                replan: 1,
                stalled: Some(_),
                ..
            }
        ));
        fold(
            &mut s,
            RunEvent::ReplanRequested(ReplanRequested {
                replan: 1,
                reason: "stalled".into(),
            }),
        );
        // Still stalled after the replan: the replans budget is spent.
        s.replanning = None;
        assert!(matches!(
            next_action(&s, &Facts::default()),
            PlanAction::Exhausted(b) if b.budget == "replans"
        ));
    }

    #[test]
    fn tokens_and_wall_time_are_budgets() {
        let limits = PlanLimits {
            max_tokens: 10,
            max_wall_s: 60,
            ..PlanLimits::default()
        };
        let mut s = accepted(vec![task("a", &[])], limits);
        assert!(matches!(
            next_action(&s, &Facts { elapsed_s: 61, ..Facts::default() }),
            PlanAction::Exhausted(b) if b.budget == "wall_time"
        ));
        attempt(&mut s, "a", 1, verdict(VerdictKind::Pass, ""));
        // The attempt under way ends first.
        assert_eq!(
            next_action(&s, &Facts::default()),
            PlanAction::RunBatch(vec!["a".into()])
        );
        fold(
            &mut s,
            RunEvent::TaskFinished(TaskFinished {
                task: "a".into(),
                status: TaskStatus::Passed,
                attempts: 1,
                reason_code: ReasonCode::Ok,
                by: None,
            }),
        );
        assert!(matches!(
            next_action(&s, &Facts::default()),
            PlanAction::Exhausted(b) if b.budget == "tokens" && b.used == 15
        ));
        // The fresh total (sub-runs' own sub-runs, verifiers, live runs) counts when higher.
        assert!(matches!(
            next_action(&s, &Facts { tokens: 40, ..Facts::default() }),
            PlanAction::Exhausted(b) if b.budget == "tokens" && b.used == 40
        ));
        let mut fresh = accepted(
            vec![task("b", &[])],
            PlanLimits {
                max_tokens: 10,
                ..PlanLimits::default()
            },
        );
        fresh.tokens = 0;
        assert!(matches!(
            next_action(&fresh, &Facts { tokens: 10, ..Facts::default() }),
            PlanAction::Exhausted(b) if b.budget == "tokens" && b.used == 10
        ));
    }
}

#[cfg(test)]
mod resume_tests {
    use serde_json::json;

    use super::*;
    use crate::run::RunEvent;

    fn fold(state: &mut PlanState, e: RunEvent) {
        let (kind, data) = e.into_parts();
        state.apply(&kind, &data);
    }

    #[test]
    fn a_resumed_run_finishes_attempts_under_way_before_deciding_anything_else() {
        let tasks: Vec<Task> = serde_json::from_value(json!([
            {"id": "a", "description": "a", "critical": true},
            {"id": "b", "description": "b"}
        ]))
        .unwrap();
        let limits = PlanLimits {
            max_tokens: 1,
            ..PlanLimits::default()
        };
        let mut s = PlanState::new(limits);
        fold(
            &mut s,
            RunEvent::PlanProposed(PlanProposed {
                version: 1,
                source: PlanSource::Caller,
                tasks,
                child_run_id: None,
                tokens: 5,
            }),
        );
        fold(
            &mut s,
            RunEvent::PlanAccepted(PlanAccepted {
                version: 1,
                approved_by: None,
            }),
        );
        fold(
            &mut s,
            RunEvent::TaskFinished(TaskFinished {
                task: "a".into(),
                status: TaskStatus::Failed,
                attempts: 3,
                reason_code: ReasonCode::Incorrect,
                by: None,
            }),
        );
        fold(
            &mut s,
            RunEvent::TaskStarted(TaskStarted {
                task: "b".into(),
                attempt: 1,
                child_run_id: RunId::new(),
                plan_version: 1,
                agent: "w".into(),
                model: None,
            }),
        );
        // A critical task failed and the token budget is spent, but b's sub-run is still live.
        let f = Facts {
            controls_waiting: true,
            ..Facts::default()
        };
        assert_eq!(next_action(&s, &f), PlanAction::RunBatch(vec!["b".into()]));
        // Cancel still wins.
        let f = Facts {
            cancelled: true,
            ..Facts::default()
        };
        assert_eq!(next_action(&s, &f), PlanAction::Cancel);
    }

    #[test]
    fn a_plan_past_its_cap_is_refused_before_anything_else_is_looked_at() {
        let many: Vec<Task> = (0..5000)
            .map(|i| {
                serde_json::from_value(json!({"id": format!("t{i}"), "description": "x",
                    "depends_on": if i > 0 { vec![format!("t{}", i - 1)] } else { vec![] }}))
                .unwrap()
            })
            .collect();
        let errors = crate::plan::validate(&many, &PlanLimits::default());
        assert_eq!(errors.len(), 1, "{errors:?}");
        let bad = PlanLimits {
            max_attempts: u32::MAX,
            ..PlanLimits::default()
        };
        assert_eq!(
            crate::plan::limit_errors(&bad),
            vec![format!(
                "`plan.limits.max_attempts` must be between 1 and 10, got {}",
                u32::MAX
            )]
        );
    }

    #[test]
    fn the_wall_time_budget_stops_attempts_under_way_and_tokens_wait_for_them() {
        let tasks: Vec<Task> =
            serde_json::from_value(json!([{"id": "a", "description": "a"}])).unwrap();
        let limits = PlanLimits {
            max_tokens: 1,
            max_wall_s: 60,
            ..PlanLimits::default()
        };
        let mut s = PlanState::new(limits);
        fold(
            &mut s,
            RunEvent::PlanProposed(PlanProposed {
                version: 1,
                source: PlanSource::Caller,
                tasks,
                child_run_id: None,
                tokens: 5,
            }),
        );
        fold(
            &mut s,
            RunEvent::PlanAccepted(PlanAccepted {
                version: 1,
                approved_by: None,
            }),
        );
        fold(
            &mut s,
            RunEvent::TaskStarted(TaskStarted {
                task: "a".into(),
                attempt: 1,
                child_run_id: RunId::new(),
                plan_version: 1,
                agent: "w".into(),
                model: None,
            }),
        );
        // Over the token budget, the attempt under way ends first.
        assert_eq!(
            next_action(&s, &Facts::default()),
            PlanAction::RunBatch(vec!["a".into()])
        );
        // Past the deadline, it does not.
        let late = Facts {
            elapsed_s: 60,
            ..Facts::default()
        };
        let PlanAction::Exhausted(b) = next_action(&s, &late) else {
            panic!("{:?}", next_action(&s, &late));
        };
        assert_eq!((b.budget.as_str(), b.used, b.limit), ("wall_time", 60, 60));
        fold(&mut s, RunEvent::BudgetExhausted(b));
        assert!(matches!(
            next_action(&s, &late),
            PlanAction::Finish {
                reason: StopReason::BudgetExhausted,
                ..
            }
        ));
    }
}
