//! Code agents (docs/code-agents.md): the turn of a run whose agent has `code` is its script's,
//! not a model's. Each turn executes the script from the top in a fresh interpreter
//! ([`engine`]); the calls the transcript recorded are answered from it, and the first call past
//! them is this turn's — committed like a model's tool call (assistant message, `tool_call`,
//! ledger row), so the loop runs it through the ledger, the hooks and the tools as for any run.
//! Nothing lives in memory between turns: any executor resumes a code agent from its transcript.
//! When `main` returns, its answer is the run's last assistant message. No model is called, so
//! the run's own usage stays zero.

mod engine;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use weft_api::code::CodeAgent;
use weft_core::agent::AgentContent;
use weft_core::message::{ContentBlock, Message, Role};
use weft_core::run::{AssistantMessage, RunEvent, StopReason, ToolCallEvent};
use weft_core::{Error, ErrorCode};
use weft_store::{LedgerStart, StepChange};

use crate::driver::Driver;
use crate::machine::LoopState;
use crate::stop::Stop;

impl Driver {
    /// One turn of a code agent: the script's next call committed (`Some` with the ledger ids
    /// recorded, as for a model turn), or its answer (`Some(vec![])`); `None` when the run
    /// ended here — the script failed, diverged from its record or ran past its wall clock.
    pub(crate) async fn code_turn(
        &self,
        def: &AgentContent,
        code: &CodeAgent,
        state: &mut LoopState,
    ) -> Result<Option<Vec<String>>, Stop> {
        let wall = Duration::from_secs(u64::from(code.max_wall_s()));
        let created = self.lease.run.created_at;
        let left = created + wall - time::OffsetDateTime::now_utc();
        let Ok(left) = Duration::try_from(left) else {
            self.code_timed_out(state, code).await?;
            return Ok(None);
        };
        let recorded = recorded_calls(state);
        let made = recorded.len();
        let abandon = Arc::new(AtomicBool::new(false));
        let script = engine::Script {
            source: code.source.clone(),
            input: first_task(state),
            tools: self.spec.tools.clone(),
            seed: self.spec.sampling.seed.map_or_else(
                || seed_of(self.run_id().0.as_u128()),
                #[expect(clippy::cast_sign_loss, reason = "the seed's bits, as given")]
                |s| s as u64,
            ),
            clock_ms: i64::try_from(created.unix_timestamp_nanos() / 1_000_000).unwrap_or(0),
            deadline: Instant::now() + left,
            turn_limit: engine::TURN_LIMIT,
            abandon: abandon.clone(),
        };
        let mut job = tokio::task::spawn_blocking(move || script.run(&recorded));
        metrics::counter!("weft_executor_code_turns_total").increment(1);
        let outcome = tokio::select! {
            o = &mut job => o,
            () = self.cancel.cancelled() => {
                abandon.store(true, Ordering::Relaxed);
                let _ = job.await;
                return Ok(Some(Vec::new()));
            }
            () = self.lost.cancelled() => {
                abandon.store(true, Ordering::Relaxed);
                let _ = job.await;
                return Err(Stop::Lost);
            }
            () = self.stop.cancelled() => {
                abandon.store(true, Ordering::Relaxed);
                let _ = job.await;
                return Err(Stop::Shutdown);
            }
        };
        let outcome = match outcome {
            Ok(o) => o,
            // A panic would panic again on every retry, on every executor: the run fails.
            Err(e) if e.is_panic() => engine::Outcome::Failed(
                "the interpreter failed on this script (a bug in weft; the executor's log has it)"
                    .into(),
            ),
            Err(e) => return Err(Stop::Infra(format!("the script's task failed: {e}"))),
        };
        let iterations = i32::try_from(state.iterations + 1).unwrap_or(i32::MAX);
        let usage = serde_json::to_value(state.usage).unwrap_or_default();
        match outcome {
            engine::Outcome::Call { name, input } => {
                let id = format!("code_{}", made + 1);
                let input_json = input.to_string();
                let mut calls = Vec::new();
                if let Some(tool) = self.tool_for(def, &name).await {
                    calls.push(LedgerStart {
                        tool_use_id: id.clone(),
                        tool: name.clone(),
                        input: input.clone(),
                        idempotent: tool.side_effect(&input).is_rerunnable(),
                    });
                }
                let ids = calls.iter().map(|c| c.tool_use_id.clone()).collect();
                let events = vec![
                    RunEvent::AssistantMessage(AssistantMessage {
                        message: Message {
                            role: Role::Assistant,
                            content: vec![ContentBlock::ToolUse {
                                id: id.clone(),
                                name: name.clone(),
                                input_json,
                            }],
                            name: None,
                        },
                        finish_reason: Some("tool_calls".into()),
                    }),
                    RunEvent::ToolCall(ToolCallEvent { id, name, input }),
                ];
                self.step(
                    Some(state),
                    events,
                    StepChange::Turn {
                        iterations,
                        usage,
                        calls,
                    },
                )
                .await?;
                Ok(Some(ids))
            }
            engine::Outcome::Return(text) => {
                let events = vec![RunEvent::AssistantMessage(AssistantMessage {
                    message: Message {
                        role: Role::Assistant,
                        content: vec![ContentBlock::text(text)],
                        name: None,
                    },
                    finish_reason: Some("stop".into()),
                })];
                self.step(
                    Some(state),
                    events,
                    StepChange::Turn {
                        iterations,
                        usage,
                        calls: Vec::new(),
                    },
                )
                .await?;
                Ok(Some(Vec::new()))
            }
            engine::Outcome::Diverged(why) => {
                metrics::counter!("weft_executor_code_divergences_total").increment(1);
                let e = Error::new(
                    ErrorCode::CodeAgentReplayDivergence,
                    format!(
                        "the script, replayed from the transcript, did not repeat what it did before: {why}. A code agent must make the same calls in the same order on every replay; read inputs only from `main`'s argument and tool results"
                    ),
                );
                self.fail(state, &e).await?;
                Ok(None)
            }
            engine::Outcome::TimedOut => {
                self.code_timed_out(state, code).await?;
                Ok(None)
            }
            engine::Outcome::Failed(why) => {
                let e = Error::new(
                    ErrorCode::CodeAgentError,
                    format!("the script failed: {why}"),
                );
                self.fail(state, &e).await?;
                Ok(None)
            }
            // Cancelled or stopping meanwhile: the loop sees why at its next step.
            engine::Outcome::Abandoned => Ok(Some(Vec::new())),
        }
    }

    /// Ends the run `failed` with stop reason `timeout`: it ran past `code.max_wall_s`.
    async fn code_timed_out(&self, state: &LoopState, code: &CodeAgent) -> Result<(), Stop> {
        let e = Error::new(
            ErrorCode::CodeAgentError,
            format!(
                "the run ran past its wall clock of {} s (code.max_wall_s), counted from its creation with the time its sub-runs took",
                code.max_wall_s()
            ),
        );
        self.fail_as(state, StopReason::Timeout, &e).await
    }
}

/// The calls the transcript recorded, in order, each with its result: what a replay answers.
fn recorded_calls(state: &LoopState) -> Vec<engine::Recorded> {
    let mut results = std::collections::HashMap::new();
    for m in state.messages.iter().filter(|m| m.role == Role::Tool) {
        for b in &m.content {
            if let ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } = b
            {
                results.insert(tool_use_id.as_str(), (text_of(content), *is_error));
            }
        }
    }
    let mut calls = Vec::new();
    for m in state.messages.iter().filter(|m| m.role == Role::Assistant) {
        for b in &m.content {
            if let ContentBlock::ToolUse {
                id,
                name,
                input_json,
            } = b
            {
                let (output, is_error) = results.get(id.as_str()).cloned().unwrap_or_default();
                calls.push(engine::Recorded {
                    name: name.clone(),
                    input: serde_json::from_str(input_json).unwrap_or(Value::Null),
                    output,
                    is_error,
                });
            }
        }
    }
    calls
}

/// The text of the run's first task: `main`'s argument.
fn first_task(state: &LoopState) -> String {
    let texts: Vec<String> = state.messages[..state.head.min(state.messages.len())]
        .iter()
        .filter(|m| m.role == Role::User)
        .map(Message::text)
        .collect();
    texts.join("\n")
}

/// The text blocks of one tool result, joined.
fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// A run's random seed from its id (splitmix64 of the id's halves).
fn seed_of(id: u128) -> u64 {
    #[expect(clippy::cast_possible_truncation, reason = "the id's two halves")]
    let mut z = (id as u64) ^ ((id >> 64) as u64);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
