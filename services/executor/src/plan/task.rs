//! One task of a batch, to its end: each attempt a sub-run keyed by (run, task, attempt); when
//! it ends, the checks without a model over the plan's volume; then the verifier (a read-only
//! sub-run keyed by the attempt and the try) or a vote; then pass, retry or fail
//! ([`weft_core::plan::task_step`]). Every step is recorded before the next starts, so a
//! resumed run picks the task up where the transcript left it.

use std::sync::Arc;

use weft_core::plan::{
    self, CheckResult, Decision, EmitterRole, OutcomeStale, PlanSpec, PlanState, ReasonCode, Task,
    TaskChecked, TaskFinished, TaskRetrying, TaskStarted, TaskStatus, TaskStep, TaskVerified,
    Verdict, VerdictKind, VerifierUnreadable, VerifyTier, VoteSplit,
};
use weft_core::run::{RunEvent, RunStatus};
use weft_proto::v1;
use weft_store::{NewEvaluation, RunRecord};

use super::{MAX_KEPT_OUTPUT, prompts};
use crate::driver::Driver;
use crate::stop::Stop;
use crate::subruns::{ChildRequest, Made};

/// The tokens a finished sub-run used.
pub(crate) fn tokens_of(r: &RunRecord) -> u64 {
    let n = |k: &str| {
        r.usage
            .get(k)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    match n("total_tokens") {
        0 => n("prompt_tokens") + n("completion_tokens"),
        t => t,
    }
}

impl Driver {
    /// Runs task `id` of `state`'s plan until it passes, fails or this run stops.
    pub(super) async fn run_task(
        &self,
        spec: &PlanSpec,
        state: &Arc<PlanState>,
        goal: &str,
        id: String,
    ) -> Result<(), Stop> {
        let Some(task) = state.task_def(&id).cloned() else {
            return Ok(());
        };
        let mut local = (**state).clone();
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            if self.lost.is_cancelled() {
                return Err(Stop::Lost);
            }
            if self.stop.is_cancelled() {
                return Err(Stop::Shutdown);
            }
            // Past the wall-time budget nothing more starts: the run ends at once.
            if self.wall_time_left() == Some(std::time::Duration::ZERO) {
                return Ok(());
            }
            let t = local.state_of(&id);
            let step = plan::task_step(&t, &task, &spec.limits, &spec.escalation);
            let events = match step {
                TaskStep::Done => return Ok(()),
                TaskStep::Stale {
                    attempt,
                    plan_version,
                } => {
                    // The old attempt's sub-run must not go on writing beside the next one.
                    if let Some(child) = t.child {
                        self.stop_child(child, "replaced by a newer attempt").await;
                    }
                    vec![RunEvent::OutcomeStale(OutcomeStale {
                        task: id.clone(),
                        attempt,
                        plan_version,
                    })]
                }
                TaskStep::Start {
                    attempt,
                    feedback,
                    model,
                } => {
                    // Budgets are looked at between attempts, on the plan's fresh total
                    // (every task's, verifier's and sub-run's tokens so far, not this task's
                    // view of them): the run ends cleanly, never with an attempt cut short.
                    if spec.limits.max_tokens > 0
                        && local.tokens.max(self.plan_usage().await?.total_tokens)
                            >= spec.limits.max_tokens
                    {
                        return Ok(());
                    }
                    match self
                        .start_attempt((spec, &local, goal), &task, attempt, &feedback, model)
                        .await?
                    {
                        None => return Ok(()),
                        // Recorded with the child: folded, not written again.
                        Some(Ok(started)) => {
                            fold(&mut local, started);
                            continue;
                        }
                        Some(Err(refused)) => vec![refused],
                    }
                }
                TaskStep::Await { child } => {
                    let Some(record) = self.inner.store.get(&self.lease.run.tenant, child).await?
                    else {
                        return Err(Stop::Infra("a task's sub-run is missing".into()));
                    };
                    let Some(record) = self.watch_child(record).await? else {
                        return Ok(());
                    };
                    let output = self
                        .inner
                        .store
                        .last_assistant_text(record.id)
                        .await?
                        .unwrap_or_default();
                    let results = self.run_checks(spec, &task).await?;
                    vec![RunEvent::TaskChecked(TaskChecked {
                        task: id.clone(),
                        attempt: t.attempt,
                        child_status: record.status,
                        results,
                        output: plan::parse::cut(&output, MAX_KEPT_OUTPUT),
                        tokens: tokens_of(&record),
                    })]
                }
                TaskStep::VerdictFromChecks => {
                    let (status, results) = t
                        .checked
                        .as_ref()
                        .map(|c| (c.child_status, c.results.clone()))
                        .unwrap_or((RunStatus::Failed, Vec::new()));
                    let verdict = plan::checks::verdict_from_checks(status, &results);
                    let e = self
                        .record_verdict(&t, &task, VerifyTier::Checks, verdict, Vec::new(), 0)
                        .await?;
                    fold(&mut local, e);
                    continue;
                }
                TaskStep::GiveUpVerifying => {
                    let verdict = Verdict {
                        verdict: VerdictKind::Inconclusive,
                        reason_code: ReasonCode::CannotVerify,
                        confidence: 0.0,
                        issues: Vec::new(),
                        missing: Vec::new(),
                        feedback: format!(
                            "the verifier's answers could not be read in {} tries",
                            plan::MAX_VERIFY_TRIES
                        ),
                    };
                    let e = self
                        .record_verdict(&t, &task, VerifyTier::Llm, verdict, Vec::new(), 0)
                        .await?;
                    fold(&mut local, e);
                    continue;
                }
                TaskStep::Verify { try_no } => {
                    match self.verify(spec, goal, &t, &task, try_no, None).await? {
                        None => return Ok(()),
                        Some(Ok((verdict, run, tokens))) => {
                            let e = self
                                .record_verdict(
                                    &t,
                                    &task,
                                    VerifyTier::Llm,
                                    verdict,
                                    vec![run],
                                    tokens,
                                )
                                .await?;
                            fold(&mut local, e);
                            continue;
                        }
                        Some(Err(unreadable)) => vec![RunEvent::VerifierUnreadable(unreadable)],
                    }
                }
                TaskStep::AwaitPerson => return Ok(()),
                TaskStep::Vote { votes } => match self.vote(spec, goal, &t, &task, votes).await? {
                    None => return Ok(()),
                    Some(Voted::Majority(verdict, runs, tokens)) => {
                        let e = self
                            .record_verdict(&t, &task, VerifyTier::Vote, verdict, runs, tokens)
                            .await?;
                        fold(&mut local, e);
                        continue;
                    }
                    // A person settles it once nothing else can run.
                    Some(Voted::Split(split)) => vec![RunEvent::VoteSplit(split)],
                },
                TaskStep::Decide(d) => match d {
                    Decision::Pass => vec![RunEvent::TaskFinished(TaskFinished {
                        task: id.clone(),
                        status: TaskStatus::Passed,
                        attempts: t.attempt,
                        reason_code: ReasonCode::Ok,
                        by: None,
                    })],
                    Decision::Retry {
                        attempt,
                        reason_code,
                        feedback,
                        model,
                    } => vec![RunEvent::TaskRetrying(TaskRetrying {
                        task: id.clone(),
                        attempt,
                        reason_code,
                        feedback,
                        model,
                    })],
                    Decision::Fail { reason_code } => vec![RunEvent::TaskFinished(TaskFinished {
                        task: id.clone(),
                        status: TaskStatus::Failed,
                        attempts: t.attempt,
                        reason_code,
                        by: None,
                    })],
                },
            };
            if !events.is_empty() {
                self.persist(None, events.clone()).await?;
            }
            for e in events {
                fold(&mut local, e);
            }
        }
    }

    /// Starts attempt `attempt` of `task` as a sub-run keyed by (run, task, attempt), with its
    /// `task_started` in the same transaction: that event, or (the agent cannot be used) the
    /// task's failure to record; `None` when this run was cancelled meanwhile.
    async fn start_attempt(
        &self,
        (spec, state, goal): (&PlanSpec, &PlanState, &str),
        task: &Task,
        attempt: u32,
        feedback: &str,
        model: Option<String>,
    ) -> Result<Option<Result<RunEvent, RunEvent>>, Stop> {
        let agent = task
            .agent
            .clone()
            .unwrap_or_else(|| self.lease.run.agent_name.clone());
        let request = ChildRequest {
            key: format!("plan:{}:task:{}:{attempt}", self.run_id(), task.id),
            agent: &agent,
            text: prompts::attempt(goal, spec, task, feedback),
            read_only: false,
            model: model.clone(),
            response_format: None,
        };
        let started = |child: weft_core::RunId, agent: String| {
            RunEvent::TaskStarted(TaskStarted {
                task: task.id.clone(),
                attempt,
                child_run_id: child,
                plan_version: state.version,
                agent,
                model: model.clone(),
            })
        };
        let made = self
            .make_child(request, |run| {
                (vec![started(run.id, run.agent_name.clone())], None)
            })
            .await?;
        match made {
            Made::Run(run) => Ok(Some(Ok(started(run.id, run.agent_name.clone())))),
            Made::Cancelled(_) => Ok(None),
            Made::Refused(why) => Ok(Some(Err(RunEvent::TaskFinished(TaskFinished {
                task: task.id.clone(),
                status: TaskStatus::Failed,
                attempts: attempt.saturating_sub(1),
                reason_code: ReasonCode::RunFailed,
                by: Some(format!("the task's agent `{agent}` cannot be used: {why}")),
            })))),
        }
    }

    /// Runs `task`'s checks over the plan's volume.
    async fn run_checks(&self, spec: &PlanSpec, task: &Task) -> Result<Vec<CheckResult>, Stop> {
        let mut out = Vec::with_capacity(task.checks.len());
        if task.checks.is_empty() {
            return Ok(out);
        }
        let target = match crate::tools::files::resolve(
            &self.spec.volumes,
            self.run_id(),
            spec.volume.as_deref(),
        ) {
            Ok(t) => t,
            Err(e) => {
                return Ok(task
                    .checks
                    .iter()
                    .map(|c| CheckResult {
                        check: c.clone(),
                        passed: false,
                        message: format!("the checks cannot read the plan's volume: {e}"),
                    })
                    .collect());
            }
        };
        let client = crate::tools::files::client(self.inner.substrate_transport.clone());
        for c in &task.checks {
            let msg = v1::ReadFileRequest {
                volume: Some(target.volume.clone()),
                path: c.path().to_owned(),
            };
            let read = crate::tools::with_retry(|| {
                let req = self
                    .internal(msg.clone())
                    .map_err(|e| tonic::Status::internal(e.message));
                let mut client = client.clone();
                async move { client.read_file(req?).await }
            })
            .await;
            let content = match read {
                Ok(r) => Some(r.into_inner().content),
                Err(s) if s.code() == tonic::Code::NotFound => None,
                Err(s) if s.code() == tonic::Code::InvalidArgument => {
                    out.push(CheckResult {
                        check: c.clone(),
                        passed: false,
                        message: format!("`{}` cannot be read: {}", c.path(), s.message()),
                    });
                    continue;
                }
                Err(s) => {
                    return Err(Stop::Infra(format!(
                        "the plan's checks cannot read the volume: {}",
                        s.message()
                    )));
                }
            };
            out.push(plan::checks::run(c, content.as_deref()));
        }
        Ok(out)
    }

    /// One verification try: a read-only verifier sub-run keyed by (run, task, attempt, try).
    /// Its verdict (with its run and tokens), or what made its answer unreadable; `None` when
    /// this run was cancelled meanwhile.
    async fn verify(
        &self,
        spec: &PlanSpec,
        goal: &str,
        t: &plan::TaskState,
        task: &Task,
        try_no: u32,
        vote: Option<u32>,
    ) -> Result<Option<Result<(Verdict, weft_core::RunId, u64), VerifierUnreadable>>, Stop> {
        let seat = vote.and_then(|i| {
            (!spec.voters.is_empty()).then(|| spec.voters[i as usize % spec.voters.len()].clone())
        });
        let Some(agent) = seat.or_else(|| spec.verifier.clone()) else {
            return Ok(Some(Ok((
                Verdict {
                    verdict: VerdictKind::Inconclusive,
                    reason_code: ReasonCode::CannotVerify,
                    confidence: 0.0,
                    issues: Vec::new(),
                    missing: Vec::new(),
                    feedback: "the plan has no verifier (`plan.verifier`)".into(),
                },
                self.run_id(),
                0,
            ))));
        };
        let (output, checks) = t
            .checked
            .as_ref()
            .map(|c| (c.output.clone(), c.results.clone()))
            .unwrap_or_default();
        let error = t.unreadable.as_ref().map(|_| "not a JSON verdict");
        let previous = t.unreadable.clone().unwrap_or_default();
        let key = match vote {
            Some(i) => format!(
                "plan:{}:task:{}:{}:vote:{i}",
                self.run_id(),
                task.id,
                t.attempt
            ),
            None => format!(
                "plan:{}:task:{}:{}:verify:{try_no}",
                self.run_id(),
                task.id,
                t.attempt
            ),
        };
        let request = ChildRequest {
            key,
            agent: &agent,
            text: prompts::verifier(
                goal,
                task,
                &output,
                &checks,
                error.map(|e| (e, previous.as_str())),
            ),
            read_only: true,
            model: None,
            response_format: Some(Verdict::response_format()),
        };
        let record = match self.make_child(request, |_| (Vec::new(), None)).await? {
            Made::Run(r) => *r,
            Made::Cancelled(_) => return Ok(None),
            Made::Refused(why) => {
                return Ok(Some(Ok((
                    Verdict {
                        verdict: VerdictKind::Inconclusive,
                        reason_code: ReasonCode::CannotVerify,
                        confidence: 0.0,
                        issues: Vec::new(),
                        missing: Vec::new(),
                        feedback: format!("the verifier `{agent}` cannot be used: {why}"),
                    },
                    self.run_id(),
                    0,
                ))));
            }
        };
        let Some(record) = self.watch_child(record).await? else {
            return Ok(None);
        };
        let tokens = tokens_of(&record);
        let answer = self
            .inner
            .store
            .last_assistant_text(record.id)
            .await?
            .unwrap_or_default();
        let parsed = if record.status == RunStatus::Succeeded {
            plan::parse::parse_verdict(&answer)
        } else {
            Err(format!("the verifier's run ended `{}`", record.status))
        };
        Ok(Some(match parsed {
            Ok(v) => Ok((v, record.id, tokens)),
            Err(error) => Err(VerifierUnreadable {
                task: task.id.clone(),
                attempt: t.attempt,
                try_no,
                verifier_run_id: record.id,
                error,
                output: plan::parse::cut(&answer, MAX_KEPT_OUTPUT),
                tokens,
            }),
        }))
    }

    /// A vote of `votes` verifiers at once: the majority's verdict, or — no majority for pass or
    /// fail — a split for a person to settle. An unreadable answer counts as inconclusive.
    async fn vote(
        &self,
        spec: &PlanSpec,
        goal: &str,
        t: &plan::TaskState,
        task: &Task,
        votes: u32,
    ) -> Result<Option<Voted>, Stop> {
        let results = futures::future::join_all(
            (0..votes).map(|i| self.verify(spec, goal, t, task, 1, Some(i))),
        )
        .await;
        let mut verdicts = Vec::new();
        let mut runs = Vec::new();
        let mut tokens = 0;
        for r in results {
            match r? {
                None => return Ok(None),
                Some(Ok((v, run, n))) => {
                    runs.push(run);
                    tokens += n;
                    verdicts.push(v);
                }
                Some(Err(u)) => {
                    runs.push(u.verifier_run_id);
                    tokens += u.tokens;
                }
            }
        }
        let pass = verdicts
            .iter()
            .filter(|v| v.verdict == VerdictKind::Pass)
            .count();
        let fail = verdicts
            .iter()
            .filter(|v| v.verdict == VerdictKind::Fail)
            .count();
        let need = votes as usize / 2 + 1;
        let majority = if pass >= need {
            verdicts
                .into_iter()
                .find(|v| v.verdict == VerdictKind::Pass)
        } else if fail >= need {
            verdicts
                .into_iter()
                .find(|v| v.verdict == VerdictKind::Fail)
        } else {
            None
        };
        Ok(Some(match majority {
            Some(v) => Voted::Majority(v, runs, tokens),
            None => Voted::Split(VoteSplit {
                task: task.id.clone(),
                attempt: t.attempt,
                pass: u32::try_from(pass).unwrap_or(u32::MAX),
                fail: u32::try_from(fail).unwrap_or(u32::MAX),
                votes,
                verifier_run_ids: runs,
                tokens,
            }),
        }))
    }

    /// Records a verdict: `task_verified` and its evaluation row, in one transaction.
    pub(super) async fn record_verdict(
        &self,
        t: &plan::TaskState,
        task: &Task,
        tier: VerifyTier,
        verdict: Verdict,
        runs: Vec<weft_core::RunId>,
        tokens: u64,
    ) -> Result<RunEvent, Stop> {
        // The definition evaluated is the one that did the work: the attempt's sub-run's.
        let child = match t.child {
            Some(c) => self.inner.store.get(&self.lease.run.tenant, c).await?,
            None => None,
        };
        let (agent_name, agent_hash) =
            child
                .map(|c| (c.agent_name, c.agent_hash))
                .unwrap_or_else(|| {
                    (
                        self.lease.run.agent_name.clone(),
                        self.lease.run.agent_hash.clone(),
                    )
                });
        let role = match tier {
            VerifyTier::Checks => EmitterRole::Checks,
            VerifyTier::Human => EmitterRole::Human,
            VerifyTier::Llm | VerifyTier::Vote => EmitterRole::Verifier,
        };
        let score = match verdict.verdict {
            VerdictKind::Pass => 1.0,
            VerdictKind::Fail => 0.0,
            VerdictKind::Inconclusive => 0.5,
        };
        let evaluation = NewEvaluation {
            task: task.id.clone(),
            attempt: t.attempt,
            agent_name,
            agent_hash,
            emitter_role: enum_name(&role),
            verdict: enum_name(&verdict.verdict),
            score,
            dimensions: serde_json::json!({
                "reason_code": verdict.reason_code,
                "confidence": verdict.confidence,
                "tier": tier,
                "checks": t.checked.as_ref().map_or(0, |c| c.results.len()),
                "checks_passed": t.checked.as_ref().map_or(0, |c| c.results.iter().filter(|r| r.passed).count()),
            }),
        };
        let event = RunEvent::TaskVerified(TaskVerified {
            task: task.id.clone(),
            attempt: t.attempt,
            tier,
            verdict,
            verifier_run_ids: runs,
            tokens,
        });
        let recorded = event.clone();
        self.commit(None, async |f| {
            f.record_evaluation(&evaluation).await?;
            Ok(vec![recorded])
        })
        .await?;
        Ok(event)
    }
}

/// What a vote came to.
enum Voted {
    /// A majority's verdict, the verifiers' runs and their tokens.
    Majority(Verdict, Vec<weft_core::RunId>, u64),
    Split(VoteSplit),
}

/// Folds one event this task recorded into its run's state.
fn fold(state: &mut PlanState, e: RunEvent) {
    let (kind, data) = e.into_parts();
    state.apply(&kind, &data);
}

/// A unit enum's wire name.
fn enum_name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
