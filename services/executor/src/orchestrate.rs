//! Tool orchestration: the ledger rules and default-deny, decided once for every tool from
//! its [`SideEffect`](crate::tools::SideEffect) class.
//!
//! - A call whose result the ledger holds is answered with that result (`reused: true`), never
//!   run again.
//! - A call that started but never finished is run again when its class is read-only or
//!   idempotent; an effectful one is answered "outcome unknown" instead.
//! - A call to a tool the run may not use (not in its spec's `tools`, or not mounted here) is
//!   answered with an error naming the tools it may use.
//! - Every call is recorded as started (with `idempotent` from its class) before any runs — by
//!   the commit of the model turn that made it, or, for a run resumed mid-turn, by one write
//!   before the calls start; each result is committed with its ledger entry and any events the
//!   tool emitted, together. The last result of a turn, when its call is read-only, is
//!   committed with the run's next step instead (within `executor.step_hold_ms`: see
//!   [`Driver::defer`]); a crash before that runs the call again, and records it once.
//! - A tool that asks to park the run (`Interruption`) parks it after the others finished; only
//!   the first ask of a turn parks, later ones are answered with an error.
//! - Tool-use hooks ([`crate::hooks`]) that apply to an admitted call are called around it:
//!   the pre hooks of every call of the turn are asked first, and their decisions (allow, deny,
//!   the input rewritten) committed to the calls' ledger rows, with a `hook_decision` event per
//!   hook, in one transaction before any tool runs; a resumed run reuses a recorded decision
//!   rather than asking again — a denied call is answered with the denial even when it is not
//!   safe to repeat, since it never ran. The post hooks' decisions are committed with the
//!   result (never deferred). A call that parks the run gets no post hook. (Nothing in the
//!   calls' futures commits: the loop below awaits its own writes between polls of them.)

use std::collections::HashMap;

use futures::StreamExt as _;
use serde_json::Value;
use weft_core::agent::AgentContent;
use weft_core::hook::HookPhase;
use weft_core::run::{Interruption, RunEvent, ToolResultEvent};
use weft_store::{LedgerDone, LedgerEntry, LedgerStart, StepChange};

use crate::driver::{Driver, parse_input};
use crate::hooks::{self, Hook, PreRecord, Subject};
use crate::machine::{LoopState, ToolCall};
use crate::stop::Stop;
use crate::tools::{Abort, SideEffect, ToolCtx, ToolOutcome, ToolOutput};

/// A call that passed the ledger rules and default-deny, to be run.
struct Admitted {
    index: usize,
    call: ToolCall,
    input: Value,
    tool: std::sync::Arc<dyn crate::tools::Tool>,
    /// What its pre hooks decided before (a resumed run), from its ledger row.
    pre: Option<PreRecord>,
}

/// How an admitted call went: its outcome, the events the tool emitted, the input it ran with,
/// and what its post hooks decided.
struct Ran {
    out: Result<ToolOutcome, Abort>,
    events: Vec<RunEvent>,
    input: Value,
    post: Option<Value>,
}

impl Driver {
    /// Runs the pending calls of a turn. Returns the interruption to park on, if one asks.
    pub(crate) async fn run_tools(
        &self,
        def: &AgentContent,
        state: &mut LoopState,
        ledger: &mut HashMap<String, LedgerEntry>,
        recorded: &[String],
        calls: Vec<ToolCall>,
    ) -> Result<Option<Value>, Stop> {
        let mut to_run = Vec::new();
        for (index, c) in calls.into_iter().enumerate() {
            match ledger.get(&c.id) {
                // Recorded before (a resumed run): reused, never executed again.
                Some(l) if l.finished => {
                    let out = ToolOutput {
                        text: l.result.clone().unwrap_or_default(),
                        is_error: l.is_error.unwrap_or(false),
                    };
                    self.persist(Some(state), vec![result_event(&c, &out, true)])
                        .await?;
                    continue;
                }
                // Started without a recorded result, and not safe to repeat: unless a pre hook
                // denied it (the tool never ran).
                Some(l) if !l.idempotent => {
                    let denied = PreRecord::from_ledger(l.hooks.as_ref()).and_then(|p| p.denied);
                    let out = ToolOutput::error(denied.unwrap_or_else(|| format!(
                        "the outcome of this `{}` call is unknown: it started before the run moved to another executor and its result was never recorded, so it may or may not have taken effect; check before repeating it",
                        c.name
                    )));
                    self.finish_call(state, &c, &out, Vec::new(), None).await?;
                    continue;
                }
                _ => {}
            }
            // Default-deny: only the run's own tools, and only those mounted here.
            match self.tool_for(def, &c.name).await {
                None => {
                    let out = ToolOutput::error(format!(
                        "tool `{}` is not available to this run; available: {}",
                        c.name,
                        self.spec.tools.join(", ")
                    ));
                    self.finish_call(state, &c, &out, Vec::new(), None).await?;
                }
                Some(tool) => to_run.push(Admitted {
                    index,
                    input: parse_input(&c.input_json),
                    pre: ledger
                        .get(&c.id)
                        .and_then(|l| PreRecord::from_ledger(l.hooks.as_ref())),
                    call: c,
                    tool,
                }),
            }
        }
        // Record every call before any runs; the class decides whether a repeat is safe. The
        // turn that made them recorded them already, unless this lease resumed mid-turn.
        let unrecorded: Vec<&Admitted> = to_run
            .iter()
            .filter(|a| !recorded.contains(&a.call.id))
            .collect();
        if !unrecorded.is_empty() {
            let calls: Vec<LedgerStart> = unrecorded
                .iter()
                .map(|a| LedgerStart {
                    tool_use_id: a.call.id.clone(),
                    tool: a.call.name.clone(),
                    input: a.input.clone(),
                    idempotent: a.tool.side_effect(&a.input).is_rerunnable(),
                })
                .collect();
            self.step(None, Vec::new(), StepChange::LedgerStart(calls))
                .await?;
        }
        // From here the calls are under way: a hand-back no longer forgets their ledger rows.
        self.unstarted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        // The tenant's hooks (a cache lookup; listed at most once per hooks_cache_ms). The pre
        // hooks of every call are asked, and their decisions committed together, before any
        // tool runs.
        let hooks = if to_run.is_empty() {
            None
        } else {
            Some(self.tenant_hooks().await?)
        };
        let hooks = hooks.as_deref().unwrap_or_default();
        let limit = self.inner.cfg.max_parallel_tools.max(1);
        if !hooks.is_empty() {
            let asked = tokio::select! {
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                () = self.cancel.cancelled() => return Ok(None),
                asked = self.ask_pre_hooks(&to_run, hooks, limit) => asked,
            };
            self.record_pre(&mut to_run, asked).await?;
        }
        let iteration = state.iterations;
        let mut outstanding = to_run.len();
        let mut running = futures::stream::iter(to_run.into_iter().map(|a| async move {
            let ran = self.run_one(def, &a, iteration, hooks).await;
            (a, ran)
        }))
        .buffer_unordered(limit);
        // A result is recorded as soon as its call returns, so a crash or an abort of a sibling
        // later in the turn cannot turn a known outcome into an unknown one.
        let mut asks = Vec::new();
        // One grace for the calls under way, not one per call that returns.
        let grace = self.pause_grace_over();
        tokio::pin!(grace);
        loop {
            let next = tokio::select! {
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                // A cancelled run stops waiting on its calls (a long Channel wait, say): the
                // loop finishes it next, whatever is still pending.
                () = self.cancel.cancelled() => return Ok(None),
                // A pause lets the calls under way finish, for a grace; then they are
                // abandoned (an effectful one's outcome is unknown to the resumed run).
                () = &mut grace => return Err(Stop::Paused),
                n = running.next() => n,
            };
            let Some((a, ran)) = next else { break };
            outstanding -= 1;
            let Ran {
                out,
                events,
                input,
                post,
            } = ran;
            match out.map_err(|e| e.0)? {
                ToolOutcome::Done(out) => {
                    // The turn's last result, of a read-only call, goes with the run's next
                    // step (the next model turn's, within its hold); any other at once. (An
                    // idempotent call may have written to the transcript, as `Agent` does: run
                    // again, it would write that again. A result its post hooks decided on is
                    // recorded at once, so they are not called again.)
                    if outstanding == 0
                        && self.inner.cfg.step_hold_ms > 0
                        && post.is_none()
                        && matches!(a.tool.side_effect(&input), SideEffect::ReadOnly)
                    {
                        let (events, done) = call_result(&a.call, &out, events, None);
                        self.defer(state, events, vec![done], None).await;
                    } else {
                        self.finish_call(state, &a.call, &out, events, post).await?;
                    }
                    ledger.remove(&a.call.id);
                }
                ToolOutcome::Ask { question } => asks.push((a, input, question, events)),
            }
        }
        drop(running);
        // The first ask of the turn (in call order) parks the run.
        asks.sort_by_key(|(a, _, _, _)| a.index);
        let mut ask = None;
        for (a, input, question, events) in asks {
            if ask.is_none() {
                ask = Some((a, input, question, events));
            } else {
                let out = ToolOutput::error(format!(
                    "only one `{}` ask per turn: ask again after this one is answered",
                    a.call.name
                ));
                self.finish_call(state, &a.call, &out, events, None).await?;
                ledger.remove(&a.call.id);
            }
        }
        let Some((a, input, question, mut events)) = ask else {
            return Ok(None);
        };
        let c = &a.call;
        let interrupt = Interruption {
            id: format!("int_{}", c.id),
            tool_use_id: c.id.clone(),
            question,
        };
        let value = serde_json::to_value(&interrupt).unwrap_or_default();
        events.push(RunEvent::Interruption(interrupt));
        let call = vec![LedgerStart {
            tool_use_id: c.id.clone(),
            tool: c.name.clone(),
            input: a.input.clone(),
            idempotent: a.tool.side_effect(&input).is_rerunnable(),
        }];
        self.step(Some(state), events, StepChange::LedgerStart(call))
            .await?;
        Ok(Some(value))
    }

    /// The run's tenant's active hooks ([`hooks::Hooks::for_tenant`]); a failure to list them,
    /// with nothing listed before, hands the run back for a retry.
    async fn tenant_hooks(&self) -> Result<std::sync::Arc<[Hook]>, Stop> {
        let mut substrate = self.inner.substrate.clone();
        self.inner
            .hooks
            .for_tenant(&self.lease.run.tenant, &mut substrate, || {
                self.internal(weft_proto::v1::ListDefsRequest {
                    kind: weft_proto::v1::DefKind::Hook.into(),
                })
            })
            .await
            .map_err(Stop::Infra)
    }

    /// Asks the pre hooks that apply to each call that has no recorded decision (at most
    /// `limit` calls at once): the index of each call asked, and the decision.
    async fn ask_pre_hooks(
        &self,
        to_run: &[Admitted],
        hooks: &[Hook],
        limit: usize,
    ) -> Vec<(usize, PreRecord)> {
        let agent = self.lease.run.agent_name.as_str();
        let mut asks = Vec::new();
        for (i, a) in to_run.iter().enumerate() {
            if a.pre.is_some() {
                continue;
            }
            let applicable = hooks::applicable(hooks, HookPhase::Pre, agent, &a.call.name);
            if !applicable.is_empty() {
                asks.push(self.ask_pre(i, a, applicable));
            }
        }
        futures::stream::iter(asks)
            .buffer_unordered(limit)
            .collect()
            .await
    }

    /// One call's pre hooks, asked.
    async fn ask_pre(&self, i: usize, a: &Admitted, applicable: Vec<&Hook>) -> (usize, PreRecord) {
        let who = self.subject(&a.call);
        (
            i,
            self.inner
                .hooks
                .pre(&applicable, &who, a.input.clone())
                .await,
        )
    }

    /// Commits what the pre hooks decided to the calls' ledger rows, with their
    /// `hook_decision` events, in one transaction before any tool runs; each call takes its
    /// decision. A call whose rewritten input is not safe to repeat is recorded so.
    async fn record_pre(
        &self,
        to_run: &mut [Admitted],
        asked: Vec<(usize, PreRecord)>,
    ) -> Result<(), Stop> {
        if asked.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(asked.len());
        let mut events = Vec::new();
        for (i, rec) in &asked {
            let Some(a) = to_run.get(*i) else { continue };
            let rerunnable = a.tool.side_effect(&rec.input).is_rerunnable();
            let value = serde_json::to_value(rec).unwrap_or(Value::Null);
            rows.push((a.call.id.clone(), value, rerunnable));
            events.extend(rec.decisions.iter().cloned().map(RunEvent::HookDecision));
        }
        self.commit(None, async |f| {
            for (id, value, rerunnable) in &rows {
                f.ledger_pre_hooks(id, value, *rerunnable).await?;
            }
            Ok(events)
        })
        .await?;
        for (i, rec) in asked {
            if let Some(a) = to_run.get_mut(i) {
                a.pre = Some(rec);
            }
        }
        Ok(())
    }

    /// Who a hook call about `call` is about.
    fn subject<'a>(&'a self, call: &'a ToolCall) -> Subject<'a> {
        Subject {
            run_id: self.run_id().to_string(),
            tenant: self.lease.run.tenant.as_str(),
            agent: self.lease.run.agent_name.as_str(),
            tool_use_id: &call.id,
            tool: &call.name,
        }
    }

    /// Runs one admitted call: the tool with the input its pre hooks decided on (unless they
    /// denied it), then the post hooks that apply.
    async fn run_one(
        &self,
        def: &AgentContent,
        a: &Admitted,
        iteration: u32,
        hooks: &[Hook],
    ) -> Ran {
        let (input, denied) = match &a.pre {
            Some(p) => (p.input.clone(), p.denied.clone()),
            None => (a.input.clone(), None),
        };
        if let Some(denied) = denied {
            return Ran {
                out: Ok(ToolOutput::error(denied).into()),
                events: Vec::new(),
                input,
                post: None,
            };
        }
        let ctx = ToolCtx::new(self, def, &a.call, iteration);
        // The tool's name and call id only: its input and output stay out of spans.
        let span = tracing::info_span!(
            "tool",
            tool = %a.call.name,
            tool_use_id = %a.call.id,
            outcome = tracing::field::Empty
        );
        let out = tracing::Instrument::instrument(a.tool.call(&ctx, &input), span.clone()).await;
        span.record(
            "outcome",
            match &out {
                Ok(ToolOutcome::Done(o)) if o.is_error => "error",
                Ok(ToolOutcome::Done(_)) => "ok",
                Ok(ToolOutcome::Ask { .. }) => "ask",
                Err(_) => "abandoned",
            },
        );
        let mut events = ctx.take_events();
        let applicable = hooks::applicable(
            hooks,
            HookPhase::Post,
            &self.lease.run.agent_name,
            &a.call.name,
        );
        let (out, post) = match out {
            Ok(ToolOutcome::Done(o)) if !applicable.is_empty() => {
                let who = self.subject(&a.call);
                let p = self
                    .inner
                    .hooks
                    .post(&applicable, &who, &input, o.text, o.is_error)
                    .await;
                events.extend(p.events);
                let o = ToolOutput {
                    text: p.text,
                    is_error: p.is_error,
                };
                (Ok(o.into()), Some(p.record))
            }
            other => (other, None),
        };
        Ran {
            out,
            events,
            input,
            post,
        }
    }

    /// Records a call's result in the ledger and the transcript, together with the events the
    /// tool (and its post hooks) emitted, before the result; `post` is what the post hooks
    /// decided.
    async fn finish_call(
        &self,
        state: &mut LoopState,
        c: &ToolCall,
        out: &ToolOutput,
        events: Vec<RunEvent>,
        post: Option<Value>,
    ) -> Result<(), Stop> {
        let (events, done) = call_result(c, out, events, post);
        self.step_with(Some(state), events, StepChange::Events, vec![done])
            .await
    }
}

/// A call's result as the events that record it (the tool's own, then the result) and its
/// ledger row.
fn call_result(
    c: &ToolCall,
    out: &ToolOutput,
    mut events: Vec<RunEvent>,
    post: Option<Value>,
) -> (Vec<RunEvent>, LedgerDone) {
    events.push(result_event(c, out, false));
    let done = LedgerDone {
        tool_use_id: c.id.clone(),
        tool: c.name.clone(),
        input: parse_input(&c.input_json),
        result: out.text.clone(),
        is_error: out.is_error,
        post_hooks: post,
    };
    (events, done)
}

fn result_event(c: &ToolCall, out: &ToolOutput, reused: bool) -> RunEvent {
    RunEvent::ToolResult(ToolResultEvent {
        tool_use_id: c.id.clone(),
        name: c.name.clone(),
        content: out.text.clone(),
        is_error: out.is_error,
        reused,
    })
}
