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

use std::collections::HashMap;

use futures::StreamExt as _;
use serde_json::Value;
use weft_core::agent::AgentContent;
use weft_core::run::{Interruption, RunEvent, ToolResultEvent};
use weft_store::{LedgerDone, LedgerEntry, LedgerStart, StepChange};

use crate::driver::{Driver, parse_input};
use crate::machine::{LoopState, ToolCall};
use crate::stop::Stop;
use crate::tools::{SideEffect, ToolCtx, ToolOutcome, ToolOutput};

/// A call that passed the ledger rules and default-deny, to be run.
struct Admitted {
    index: usize,
    call: ToolCall,
    input: Value,
    tool: std::sync::Arc<dyn crate::tools::Tool>,
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
                // Started without a recorded result, and not safe to repeat.
                Some(l) if !l.idempotent => {
                    let out = ToolOutput::error(format!(
                        "the outcome of this `{}` call is unknown: it started before the run moved to another executor and its result was never recorded, so it may or may not have taken effect; check before repeating it",
                        c.name
                    ));
                    self.finish_call(state, &c, &out, Vec::new()).await?;
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
                    self.finish_call(state, &c, &out, Vec::new()).await?;
                }
                Some(tool) => to_run.push(Admitted {
                    index,
                    input: parse_input(&c.input_json),
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
        let limit = self.inner.cfg.max_parallel_tools.max(1);
        let iteration = state.iterations;
        let mut outstanding = to_run.len();
        let mut running = futures::stream::iter(to_run.into_iter().map(|a| async move {
            let ctx = ToolCtx::new(self, def, &a.call, iteration);
            let out = a.tool.call(&ctx, &a.input).await;
            let events = ctx.take_events();
            (a, out, events)
        }))
        .buffer_unordered(limit);
        // A result is recorded as soon as its call returns, so a crash or an abort of a sibling
        // later in the turn cannot turn a known outcome into an unknown one.
        let mut asks = Vec::new();
        loop {
            let next = tokio::select! {
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                // A cancelled run stops waiting on its calls (a long Channel wait, say): the
                // loop finishes it next, whatever is still pending.
                () = self.cancel.cancelled() => return Ok(None),
                n = running.next() => n,
            };
            let Some((a, out, events)) = next else { break };
            outstanding -= 1;
            match out.map_err(|e| e.0)? {
                ToolOutcome::Done(out) => {
                    // The turn's last result, of a read-only call, goes with the run's next
                    // step (the next model turn's, within its hold); any other at once. (An
                    // idempotent call may have written to the transcript, as `Agent` does: run
                    // again, it would write that again.)
                    if outstanding == 0
                        && self.inner.cfg.step_hold_ms > 0
                        && matches!(a.tool.side_effect(&a.input), SideEffect::ReadOnly)
                    {
                        let (events, done) = call_result(&a.call, &out, events);
                        self.defer(state, events, vec![done], None).await;
                    } else {
                        self.finish_call(state, &a.call, &out, events).await?;
                    }
                    ledger.remove(&a.call.id);
                }
                ToolOutcome::Ask { question } => asks.push((a, question, events)),
            }
        }
        drop(running);
        // The first ask of the turn (in call order) parks the run.
        asks.sort_by_key(|(a, _, _)| a.index);
        let mut ask = None;
        for (a, question, events) in asks {
            if ask.is_none() {
                ask = Some((a, question, events));
            } else {
                let out = ToolOutput::error(format!(
                    "only one `{}` ask per turn: ask again after this one is answered",
                    a.call.name
                ));
                self.finish_call(state, &a.call, &out, events).await?;
                ledger.remove(&a.call.id);
            }
        }
        let Some((a, question, mut events)) = ask else {
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
            idempotent: a.tool.side_effect(&a.input).is_rerunnable(),
        }];
        self.step(Some(state), events, StepChange::LedgerStart(call))
            .await?;
        Ok(Some(value))
    }

    /// Records a call's result in the ledger and the transcript, together with the events the
    /// tool emitted (before the result).
    async fn finish_call(
        &self,
        state: &mut LoopState,
        c: &ToolCall,
        out: &ToolOutput,
        events: Vec<RunEvent>,
    ) -> Result<(), Stop> {
        let (events, done) = call_result(c, out, events);
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
) -> (Vec<RunEvent>, LedgerDone) {
    events.push(result_event(c, out, false));
    let done = LedgerDone {
        tool_use_id: c.id.clone(),
        tool: c.name.clone(),
        input: parse_input(&c.input_json),
        result: out.text.clone(),
        is_error: out.is_error,
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
