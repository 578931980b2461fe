//! A plan run under a lease: the I/O around the step function in [`weft_core::plan`]. The run's
//! transcript (and its plan rows, for approvals) folds into a `PlanState`; `next_action` says
//! what to do; this module does it — asks the planner, parks for approval, runs a batch of
//! tasks ([`task`]), replans, finishes — records what happened as events under the lease's
//! epoch, and asks again. Every role is a sub-run made under a key unique in the run, so a run
//! resumed on another executor finds the sub-runs made before instead of making them again.

mod prompts;
mod task;

use std::sync::Arc;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use weft_core::message::{ContentBlock, Message, Role, Usage};

use weft_core::plan::{
    self, Facts, PlanAccepted, PlanAction, PlanAwaitingApproval, PlanProposed, PlanRejected,
    PlanSource, PlanSpec, PlanState, ReasonCode, ReplanRequested, Task, TaskControl, TaskFinished,
    TaskStatus, Verdict, VerdictKind, VerifyTier, VoteSplit,
};
use weft_core::run::{
    AssistantMessage, AwaitingInput, ErrorEvent, Interruption, RunEvent, StopReason,
};
use weft_store::{LedgerStart, StepChange};

use crate::driver::Driver;
use crate::machine::LoopState;
use crate::stop::Stop;
use crate::subruns::{ChildRequest, Made};

/// The ledger's name for a question put to a person (a split vote).
const PERSON_TOOL: &str = "plan.person";

/// The most of a role's answer a plan event keeps.
const MAX_KEPT_OUTPUT: usize = 4000;

impl Driver {
    /// Drives a plan run until it finishes, parks or loses its lease.
    pub(crate) async fn drive_plan(
        &self,
        spec: &PlanSpec,
        fresh: Option<Vec<(String, Value)>>,
    ) -> Result<(), Stop> {
        let mut fresh = fresh;
        loop {
            if self.lost.is_cancelled() {
                return Err(Stop::Lost);
            }
            if self.stop.is_cancelled() {
                return Err(Stop::Shutdown);
            }
            // A pause parks the plan run between its steps (a cancel wins over it).
            if *self.pause.borrow()
                && !self.cancel.is_cancelled()
                && self.park_paused_with(None).await?
            {
                return Ok(());
            }
            let (state, goal, answers) = self.plan_state(spec, fresh.take()).await?;
            let mut facts = self.plan_facts(spec, &state).await?;
            facts.answers = answers;
            match plan::next_action(&state, &facts) {
                PlanAction::Done => return Ok(()),
                PlanAction::Cancel => {
                    return self.finish_plan(&state, StopReason::Cancelled, None).await;
                }
                PlanAction::Finish { reason, error } => {
                    return self.finish_plan(&state, reason, error).await;
                }
                PlanAction::Exhausted(b) => {
                    self.persist(None, vec![RunEvent::BudgetExhausted(b)])
                        .await?;
                }
                PlanAction::TakeControls => self.take_controls(&state).await?,
                PlanAction::ProposeCaller => {
                    let tasks = spec.tasks.clone().unwrap_or_default();
                    let errors = plan::validate(&tasks, &spec.limits);
                    self.record_plan(
                        &state,
                        PlanSource::Caller,
                        1,
                        Ok(tasks),
                        errors,
                        None,
                        0,
                        String::new(),
                    )
                    .await?;
                }
                PlanAction::AskWriter { source, attempt } => {
                    // While its writer works, this run does none: it lends its slot to it.
                    let _ = self
                        .inner
                        .coord
                        .release(&self.lease.run.tenant, self.run_id())
                        .await;
                    self.ask_writer(spec, &state, &goal, source, attempt)
                        .await?;
                    self.wait_for_slot(self.run_id()).await?;
                }
                PlanAction::AwaitApproval { version } => {
                    self.park_for_approval(version).await?;
                    // A control is taken only once a plan runs.
                    if state.version > 0 {
                        self.wake_for_raced_controls().await;
                    }
                    return Ok(());
                }
                PlanAction::Accept {
                    version,
                    edited,
                    approved_by,
                } => self.accept(&state, version, edited, approved_by).await?,
                PlanAction::RunBatch(ids) => {
                    // While its tasks work, this run does none: it lends its slot to them.
                    let _ = self
                        .inner
                        .coord
                        .release(&self.lease.run.tenant, self.run_id())
                        .await;
                    let state = Arc::new(state);
                    futures::future::try_join_all(
                        ids.iter()
                            .map(|id| self.run_task(spec, &state, &goal, id.clone())),
                    )
                    .await?;
                    self.wait_for_slot(self.run_id()).await?;
                }
                PlanAction::AskPerson { task, attempt } => {
                    self.ask_person(&state, &task, attempt).await?;
                    self.wake_for_raced_controls().await;
                    return Ok(());
                }
                PlanAction::Settle {
                    task,
                    attempt,
                    answer,
                } => self.settle(&state, &task, attempt, &answer).await?,
                PlanAction::Replan {
                    replan,
                    reason,
                    stalled,
                } => {
                    let mut events = Vec::new();
                    if let Some(s) = stalled {
                        events.push(RunEvent::PlanStalled(s));
                    }
                    events.push(RunEvent::ReplanRequested(ReplanRequested {
                        replan,
                        reason,
                    }));
                    self.persist(None, events).await?;
                }
            }
        }
    }

    /// The run's transcript folded into a plan state, the goal (its first input) and a person's
    /// answers to split votes (from the ledger rows their questions left).
    async fn plan_state(
        &self,
        spec: &PlanSpec,
        fresh: Option<Vec<(String, Value)>>,
    ) -> Result<(PlanState, String, BTreeMap<String, String>), Stop> {
        let mut answers = BTreeMap::new();
        let events: Vec<(i64, String, Value)> = match fresh {
            Some(e) => (1i64..).zip(e).map(|(seq, (k, d))| (seq, k, d)).collect(),
            None => {
                let t = self.inner.store.transcript(self.run_id()).await?;
                for l in t.ledger {
                    if l.finished
                        && l.tool == PERSON_TOOL
                        && let Some(answer) = l
                            .result
                            .as_deref()
                            .and_then(|r| serde_json::from_str::<Value>(r).ok())
                            .and_then(|v| {
                                v.get("answer").and_then(Value::as_str).map(str::to_owned)
                            })
                    {
                        answers.insert(l.tool_use_id, answer);
                    }
                }
                t.events
                    .into_iter()
                    .map(|e| (e.seq, e.kind, e.data))
                    .collect()
            }
        };
        let mut state = PlanState::new(spec.limits.clone());
        let mut goal = None;
        let mut last_seq = 0;
        for (seq, kind, data) in &events {
            last_seq = last_seq.max(*seq);
            if goal.is_none()
                && let Some(RunEvent::UserInput(u)) = RunEvent::parse(kind, data)
            {
                goal = u.text;
            }
            state.apply(kind, data);
        }
        let mut seq = self.seq.lock().await;
        *seq = (*seq).max(last_seq + 1);
        drop(seq);
        Ok((state, goal.unwrap_or_default(), answers))
    }

    async fn plan_facts(&self, spec: &PlanSpec, state: &PlanState) -> Result<Facts, Stop> {
        let controls_waiting =
            state.version > 0 && self.inner.store.has_plan_controls(self.run_id()).await?;
        let mut approved = None;
        if spec.approval == plan::Approval::BeforeExecute && state.proposed.is_some() {
            let rows = self
                .inner
                .store
                .plan_rows(&self.lease.run.tenant, self.run_id())
                .await?;
            if let Some(row) = rows.iter().rev().find(|r| r.approved_by.is_some()) {
                let edited = if row.source == "person" {
                    match serde_json::from_value::<Vec<Task>>(row.tasks.clone()) {
                        Ok(tasks) => Some(tasks),
                        // Unreadable here (another version of weft wrote it): not an approval
                        // this executor can act on; the run stays parked.
                        Err(e) => {
                            tracing::warn!(error = %e, "an edited plan cannot be read; waiting");
                            return Ok(Facts {
                                approval: spec.approval,
                                ..Facts::default()
                            });
                        }
                    }
                } else {
                    None
                };
                approved = Some((
                    row.version,
                    edited,
                    row.approved_by.clone().unwrap_or_default(),
                ));
            }
        }
        Ok(Facts {
            cancelled: self.cancel.is_cancelled(),
            elapsed_s: self.elapsed_s(),
            tokens: self.plan_usage().await?.total_tokens,
            controls_waiting,
            caller_tasks: spec.tasks.is_some(),
            approval: spec.approval,
            approved,
            answers: BTreeMap::new(),
        })
    }

    /// What every sub-run of this plan (each role's, and their own sub-runs) has used so far,
    /// read fresh: the plan's `max_tokens` is held to its total, and it is the plan run's own
    /// `usage` (its orchestration makes no model calls).
    pub(super) async fn plan_usage(&self) -> Result<Usage, Stop> {
        Ok(self
            .inner
            .store
            .subtree_usage(&self.lease.run.tenant, self.run_id())
            .await?)
    }

    /// Asks the planner (or the replanner) for a plan — its try `attempt`, a sub-run keyed by
    /// the round and the try — and records what it wrote.
    async fn ask_writer(
        &self,
        spec: &PlanSpec,
        state: &PlanState,
        goal: &str,
        source: PlanSource,
        attempt: u32,
    ) -> Result<(), Stop> {
        let own = self.lease.run.agent_name.clone();
        let planner = spec.planner.clone().unwrap_or(own);
        let (agent, text, key) = match source {
            PlanSource::Replanner => (
                spec.replanner.clone().unwrap_or(planner),
                prompts::replanner(
                    goal,
                    state
                        .replanning
                        .as_ref()
                        .map_or("the plan must change", |r| r.reason.as_str()),
                    state.version,
                    &state.tasks,
                    &state.task,
                    state.rejected.as_ref(),
                ),
                format!(
                    "plan:{}:role:replanner:{}:{attempt}",
                    self.run_id(),
                    state.replans
                ),
            ),
            _ => (
                planner,
                prompts::planner(goal, spec, &spec.limits, state.rejected.as_ref()),
                format!("plan:{}:role:planner:{attempt}", self.run_id()),
            ),
        };
        let request = ChildRequest {
            key,
            agent: &agent,
            text,
            read_only: false,
            model: None,
            response_format: None,
        };
        let record = match self.make_child(request, |_| (Vec::new(), None)).await? {
            Made::Run(r) => *r,
            Made::Cancelled(_) => return Ok(()),
            Made::Refused(why) => {
                return self
                    .fail_plan(&format!(
                        "the {} agent `{agent}` cannot be used: {why}",
                        role(source)
                    ))
                    .await;
            }
        };
        let Some(record) = self.watch_child(record).await? else {
            return Ok(());
        };
        let tokens = task::tokens_of(&record);
        let output = self
            .inner
            .store
            .last_assistant_text(record.id)
            .await?
            .unwrap_or_default();
        let version = state.last_version + 1;
        let parsed = if record.status == weft_core::run::RunStatus::Succeeded {
            plan::parse::parse_plan(&output)
        } else {
            Err(format!(
                "the {}'s run ended `{}`",
                role(source),
                record.status
            ))
        };
        let mut errors = match &parsed {
            Ok(tasks) if source == PlanSource::Replanner => {
                plan::validate_replan(&state.tasks, &state.task, tasks, &spec.limits)
            }
            Ok(tasks) => plan::validate(tasks, &spec.limits),
            Err(e) => vec![e.clone()],
        };
        // A task verified by a model needs a verifier to verify it.
        if let Ok(tasks) = &parsed
            && spec.verifier.is_none()
            && spec.voters.is_empty()
        {
            for t in tasks
                .iter()
                .filter(|t| t.verify != plan::VerifyMode::Checks)
            {
                errors.push(format!(
                    "task `{}` asks to be verified by a model, but this run has no verifier: use `\"verify\": \"checks\"`",
                    t.id
                ));
            }
        }
        // A process's phases bind a guided run's plans, and a strict run's replans.
        if let (Ok(tasks), Some(phases)) = (&parsed, binding_phases(spec)) {
            errors.extend(weft_core::process::phase_errors(phases, tasks));
        }
        let _ = attempt;
        self.record_plan(
            state,
            source,
            version,
            parsed,
            errors,
            Some(record.id),
            tokens,
            output,
        )
        .await
    }

    /// Records a written plan: `plan_proposed` (and its row) when valid, else `plan_rejected`
    /// with every error.
    #[expect(clippy::too_many_arguments, reason = "one record of a writer's try")]
    async fn record_plan(
        &self,
        state: &PlanState,
        source: PlanSource,
        version: u32,
        parsed: Result<Vec<Task>, String>,
        errors: Vec<String>,
        child: Option<weft_core::RunId>,
        tokens: u64,
        output: String,
    ) -> Result<(), Stop> {
        match parsed {
            Ok(tasks) if errors.is_empty() => {
                let value = serde_json::to_value(&tasks).unwrap_or_default();
                let source_name = source_name(source);
                self.commit(None, async |f| {
                    f.put_plan(version, "proposed", source_name, &value, None)
                        .await?;
                    Ok(vec![RunEvent::PlanProposed(PlanProposed {
                        version,
                        source,
                        tasks,
                        child_run_id: child,
                        tokens,
                    })])
                })
                .await
            }
            _ => {
                self.persist(
                    None,
                    vec![RunEvent::PlanRejected(PlanRejected {
                        attempt: state.tries + 1,
                        source,
                        errors,
                        output: plan::parse::cut(&output, MAX_KEPT_OUTPUT),
                        child_run_id: child,
                        tokens,
                    })],
                )
                .await
            }
        }
    }

    /// Accepts version `version` (a person's edit is proposed as that version first).
    async fn accept(
        &self,
        state: &PlanState,
        version: u32,
        edited: Option<Vec<Task>>,
        approved_by: Option<String>,
    ) -> Result<(), Stop> {
        let proposed = state.proposed.as_ref().map_or(0, |p| p.version);
        self.commit(None, async |f| {
            let mut events = Vec::new();
            if let Some(tasks) = edited.filter(|_| version > proposed) {
                let value = serde_json::to_value(&tasks).unwrap_or_default();
                f.put_plan(
                    version,
                    "proposed",
                    "person",
                    &value,
                    approved_by.as_deref(),
                )
                .await?;
                events.push(RunEvent::PlanProposed(PlanProposed {
                    version,
                    source: PlanSource::Person,
                    tasks,
                    child_run_id: None,
                    tokens: 0,
                }));
            }
            f.accept_plan(version).await?;
            events.push(RunEvent::PlanAccepted(PlanAccepted {
                version,
                approved_by: approved_by.clone(),
            }));
            Ok(events)
        })
        .await
    }

    /// Parks the run until `PUT /v1/runs/{id}/plan` approves version `version`.
    async fn park_for_approval(&self, version: u32) -> Result<(), Stop> {
        let usage = serde_json::to_value(self.plan_usage().await?).unwrap_or_default();
        self.step(
            None,
            vec![
                RunEvent::PlanAwaitingApproval(PlanAwaitingApproval { version }),
                RunEvent::AwaitingInput(AwaitingInput {
                    reason: "plan_approval".into(),
                    interrupt: None,
                    executor: self.inner.owner.clone(),
                }),
            ],
            StepChange::Park {
                iterations: 0,
                usage,
                interrupt: None,
            },
        )
        .await
    }

    /// Takes a person's waiting retries and skips: a retry of a failed task gives it one more
    /// attempt, a skip ends a task that has not passed; others are recorded and change nothing.
    /// A task whose vote split waits for a person may be retried (the split attempt is dropped,
    /// one more runs) or skipped: either settles the question, which is withdrawn in the same
    /// transaction so no later answer is read for it.
    async fn take_controls(&self, state: &PlanState) -> Result<(), Stop> {
        let tasks: BTreeMap<String, (TaskStatus, Option<u32>, u32)> = state
            .tasks
            .iter()
            .map(|t| {
                let s = state.state_of(&t.id);
                (
                    t.id.clone(),
                    (s.status, s.split.as_ref().map(|v| v.attempt), s.attempt),
                )
            })
            .collect();
        self.commit(None, async |f| {
            let controls = f.take_plan_controls().await?;
            let mut events = Vec::new();
            // Each control sees the tasks as the ones before it left them.
            let mut tasks = tasks;
            for c in controls {
                let Some((status, split, attempts)) = tasks.get(&c.task).copied() else {
                    continue;
                };
                let applies = match c.action.as_str() {
                    "retry" => status == TaskStatus::Failed || split.is_some(),
                    "skip" => status != TaskStatus::Passed && status != TaskStatus::Skipped,
                    _ => false,
                };
                if !applies {
                    continue;
                }
                if let Some(attempt) = split {
                    f.withdraw_question(
                        &VoteSplit::question_id(&c.task, attempt),
                        &json!({"settled_by": c.action, "by": c.subject}),
                    )
                    .await?;
                }
                events.push(RunEvent::TaskControl(TaskControl {
                    task: c.task.clone(),
                    action: c.action.clone(),
                    by: c.subject.clone(),
                }));
                let after = if c.action == "skip" {
                    events.push(RunEvent::TaskFinished(TaskFinished {
                        task: c.task.clone(),
                        status: TaskStatus::Skipped,
                        attempts,
                        reason_code: plan::ReasonCode::Other,
                        by: Some(c.subject),
                    }));
                    TaskStatus::Skipped
                } else {
                    TaskStatus::Pending
                };
                tasks.insert(c.task, (after, None, attempts));
            }
            Ok(events)
        })
        .await
    }

    /// Parks the run with a question to a person about the split vote on `task`'s attempt
    /// `attempt`: an interruption whose answer (`pass` or `fail`) settles it.
    async fn ask_person(&self, state: &PlanState, task: &str, attempt: u32) -> Result<(), Stop> {
        let id = VoteSplit::question_id(task, attempt);
        let split = state.state_of(task).split;
        let question = format!(
            "The verifiers of task `{task}` (attempt {attempt}) split{}. Answer `pass` or `fail`.",
            split
                .as_ref()
                .map(|s| format!(": {} pass, {} fail of {}", s.pass, s.fail, s.votes))
                .unwrap_or_default()
        );
        let interrupt = Interruption {
            id: format!("int_{id}"),
            tool_use_id: id.clone(),
            question,
        };
        let value = serde_json::to_value(&interrupt).unwrap_or_default();
        let usage = serde_json::to_value(self.plan_usage().await?).unwrap_or_default();
        self.step(
            None,
            vec![RunEvent::Interruption(interrupt)],
            StepChange::LedgerStart(vec![LedgerStart {
                tool_use_id: id,
                tool: PERSON_TOOL.into(),
                input: json!({"task": task, "attempt": attempt}),
                idempotent: false,
            }]),
        )
        .await?;
        self.step(
            None,
            vec![RunEvent::AwaitingInput(AwaitingInput {
                reason: "interruption".into(),
                interrupt: Some(value.clone()),
                executor: self.inner.owner.clone(),
            })],
            StepChange::Park {
                iterations: 0,
                usage,
                interrupt: Some(value),
            },
        )
        .await
    }

    /// A person's control queued while this run was parking found it not parked yet, so it
    /// woke nothing: the run wakes itself (queued and dispatched) to take it.
    async fn wake_for_raced_controls(&self) {
        let store = &self.inner.store;
        if store
            .has_plan_controls(self.run_id())
            .await
            .unwrap_or(false)
            && store
                .wake_plan_for_controls(self.run_id())
                .await
                .unwrap_or(false)
        {
            let _ = self
                .inner
                .bus
                .dispatch(&weft_bus::Dispatch {
                    run_id: self.run_id(),
                    tenant: self.lease.run.tenant.clone(),
                })
                .await;
        }
    }

    /// Records a person's answer to a split vote as the attempt's verdict: `pass` passes,
    /// anything else fails with the answer as feedback.
    async fn settle(
        &self,
        state: &PlanState,
        task: &str,
        attempt: u32,
        answer: &str,
    ) -> Result<(), Stop> {
        let Some(def) = state.task_def(task).cloned() else {
            return Ok(());
        };
        let t = state.state_of(task);
        if t.attempt != attempt {
            return Ok(());
        }
        let pass = answer.trim().eq_ignore_ascii_case("pass");
        let verdict = Verdict {
            verdict: if pass {
                VerdictKind::Pass
            } else {
                VerdictKind::Fail
            },
            reason_code: if pass {
                ReasonCode::Ok
            } else {
                ReasonCode::Other
            },
            confidence: 1.0,
            issues: Vec::new(),
            missing: Vec::new(),
            feedback: if pass {
                String::new()
            } else {
                answer.trim().to_owned()
            },
        };
        let runs = t
            .split
            .as_ref()
            .map(|s| s.verifier_run_ids.clone())
            .unwrap_or_default();
        self.record_verdict(&t, &def, VerifyTier::Human, verdict, runs, 0)
            .await?;
        Ok(())
    }

    /// Fails the run with `message`.
    async fn fail_plan(&self, message: &str) -> Result<(), Stop> {
        let state = PlanState::default();
        self.finish_plan(&state, StopReason::Error, Some(message.to_owned()))
            .await
    }

    /// Ends the run: a summary of its tasks as its answer, then `run_finished`.
    async fn finish_plan(
        &self,
        state: &PlanState,
        reason: StopReason,
        error: Option<String>,
    ) -> Result<(), Stop> {
        let mut summary = String::new();
        for t in &state.tasks {
            let s = state.state_of(&t.id);
            summary.push_str(&format!(
                "- {}: {} after {} attempt{}\n",
                t.id,
                serde_json::to_value(s.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                s.attempt,
                if s.attempt == 1 { "" } else { "s" }
            ));
        }
        if let Some(e) = &error {
            summary.push_str(e);
        }
        if !summary.is_empty() {
            self.persist(
                None,
                vec![RunEvent::AssistantMessage(AssistantMessage {
                    message: Message {
                        role: Role::Assistant,
                        content: vec![ContentBlock::text(summary.trim_end())],
                        name: None,
                    },
                    finish_reason: Some("stop".into()),
                })],
            )
            .await?;
        }
        let code = if reason == StopReason::BudgetExhausted {
            "budget_exhausted"
        } else {
            "plan_failed"
        };
        if reason == StopReason::Error
            && let Some(message) = &error
        {
            self.persist(
                None,
                vec![RunEvent::Error(ErrorEvent {
                    code: code.to_owned(),
                    message: message.clone(),
                })],
            )
            .await?;
        }
        let error = error.map(|m| json!({"code": code, "message": m}));
        // The plan run's usage is its sub-runs' (it makes no model calls of its own).
        let progress = LoopState {
            usage: self.plan_usage().await?,
            ..LoopState::default()
        };
        self.finish(&progress, reason, error).await
    }
}

/// The phases a written plan must keep: a guided process's, or a strict process's (its phases
/// are the run's first plan, which a replan must keep too).
fn binding_phases(spec: &PlanSpec) -> Option<&[Task]> {
    spec.process.as_ref()?;
    match spec.phase_mode.unwrap_or_default() {
        plan::PhaseMode::Guided => spec.phases.as_deref(),
        plan::PhaseMode::Strict => spec.tasks.as_deref(),
        plan::PhaseMode::Suggestive => None,
    }
}

fn role(source: PlanSource) -> &'static str {
    match source {
        PlanSource::Replanner => "replanner",
        _ => "planner",
    }
}

fn source_name(source: PlanSource) -> &'static str {
    match source {
        PlanSource::Planner => "planner",
        PlanSource::Caller => "caller",
        PlanSource::Replanner => "replanner",
        PlanSource::Person => "person",
    }
}
