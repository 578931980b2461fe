//! One model turn: the request built from the loop state, streamed from the router's `Chat`
//! (`provider_chosen` / `provider_fallback` committed with the turn, or on their own when the
//! turn takes a while or streams text; text deltas published live), and the whole turn —
//! assistant message, tool calls, usage and the run's progress — committed together; a turn
//! without tool calls is committed with the step that follows it (finishing, parking).

use futures::StreamExt as _;
use weft_core::agent::AgentContent;
use weft_core::chat::{Answer, Assembler, ChatEvent, ChatRequest, Sampling};
use weft_core::message::{ContentBlock, Message, Role};
use weft_core::run::{AssistantMessage, ProviderChosen, ProviderFallback, RunEvent, ToolCallEvent};
use weft_core::{Error, ErrorCode};

use weft_store::{LedgerStart, StepChange};

use crate::driver::{Driver, parse_input};
use crate::machine::LoopState;
use crate::stop::Stop;

impl Driver {
    /// The router request of a model turn: the system prompt, the transcript as it can be
    /// replayed, the run's tools and sampling.
    async fn chat_request(&self, def: &AgentContent, state: &LoopState) -> ChatRequest {
        // The model's view: the first task, the summary of what compaction folded away, the
        // rest (tool results cut to their budget by the fold).
        let view = state.view();
        let mut messages = Vec::with_capacity(view.len() + 1);
        messages.extend(Self::system_message(def));
        messages.extend(view.into_iter().map(|m| replayable(&m).unwrap_or(m)));
        let tools = self.tool_specs(def).await;
        let tools_tokens = *self
            .tools_tokens
            .get_or_init(|| weft_core::message::estimate_tokens(&[], &tools));
        if let Ok(mut g) = self.gauge.lock() {
            g.estimated_tokens = weft_core::message::estimate_tokens(&messages, &[]) + tools_tokens;
            g.compactions = state.compactions;
        }
        let s = &self.spec.sampling;
        ChatRequest {
            model: self.spec.model.clone(),
            messages,
            tools,
            sampling: Sampling {
                temperature: s.temperature,
                top_p: s.top_p,
                max_tokens: self.spec.max_tokens,
                stop: s.stop.clone(),
                seed: s.seed,
                presence_penalty: None,
                frequency_penalty: None,
            },
            response_format: self.spec.response_format.clone(),
            stream: true,
            ..Default::default()
        }
    }

    /// One model turn. `Ok(Err(e))` is a model failure that ends the run; `Ok(Ok(ids))` names
    /// the tool calls whose ledger rows the turn's commit recorded as about to run.
    pub(crate) async fn model_turn(
        &self,
        def: &AgentContent,
        state: &mut LoopState,
    ) -> Result<Result<Vec<String>, Error>, Stop> {
        // Built for the first attempt and moved into it; a retry (rare) builds it again, so the
        // transcript is not copied once more per turn just in case.
        let mut first = Some(self.chat_request(def, state).await);
        let mut retries = ROUTER_RETRY_MS.iter();
        let mut notes = 0;
        // The note for the model after an unreadable answer: kept, so a call again after a
        // router outage carries it too.
        let mut note: Option<String> = None;
        let (turn, held) = loop {
            // After a broken attempt, the seq of the last event it committed.
            let last_seq = *self.seq.lock().await - 1;
            let req = match first.take() {
                Some(req) => req,
                None => {
                    let mut req = self.chat_request(def, state).await;
                    if let Some(n) = &note {
                        add_note(&mut req.messages, n);
                    }
                    req
                }
            };
            let call = self.stream_turn(req, last_seq);
            let turn = tokio::select! {
                () = self.cancel.cancelled() => return Ok(Err(Error::new(ErrorCode::Conflict, "cancelled"))),
                () = self.lost.cancelled() => return Err(Stop::Lost),
                () = self.stop.cancelled() => return Err(Stop::Shutdown),
                t = call => t,
            };
            match turn {
                Ok(t) => break t,
                Err(TurnError::Model(e))
                    if e.code == ErrorCode::ModelOutputInvalid && notes < UNREADABLE_NOTES =>
                {
                    // The model wrote something its provider could not read (a tool call
                    // that does not parse, an unknown tool): asked again, with what went
                    // wrong, rather than ending the run. Nothing of the failed attempt but its
                    // provider events was committed; a crash here asks again from the
                    // transcript, which is the same request.
                    self.flush_deferred().await?;
                    notes += 1;
                    tracing::warn!(error = %e.message, note = notes, "the model's output could not be read; asking again with a note");
                    metrics::counter!("weft_executor_unreadable_turns_total").increment(1);
                    let mut req = self.chat_request(def, state).await;
                    let n = unreadable_note(&e.message, &req.tools);
                    add_note(&mut req.messages, &n);
                    note = Some(n);
                    first = Some(req);
                }
                Err(TurnError::Model(mut e)) => {
                    if e.code == ErrorCode::ModelOutputInvalid {
                        e.message.push_str(
                            "; the model kept writing what its provider cannot read: try a stronger model, or (llama.cpp) a chat template that writes valid tool calls",
                        );
                    }
                    return Ok(Err(e));
                }
                Err(TurnError::Stop(s)) => return Err(s),
                Err(TurnError::Router(why)) => {
                    // What waited on this turn's hold is written before waiting on a router.
                    self.flush_deferred().await?;
                    let Some(ms) = retries.next() else {
                        return Ok(Err(Error::new(
                            ErrorCode::Unavailable,
                            format!(
                                "no router answered this model turn after {} attempts over about {} s: {why}",
                                ROUTER_RETRY_MS.len() + 1,
                                ROUTER_RETRY_MS.iter().sum::<u64>() / 1000
                            ),
                        )));
                    };
                    tracing::warn!(error = %why, retry_in_ms = ms, "the router went away during a model turn; calling again");
                    tokio::select! {
                        () = self.cancel.cancelled() => return Ok(Err(Error::new(ErrorCode::Conflict, "cancelled"))),
                        () = self.lost.cancelled() => return Err(Stop::Lost),
                        () = self.stop.cancelled() => return Err(Stop::Shutdown),
                        () = tokio::time::sleep(std::time::Duration::from_millis(*ms)) => {}
                    }
                }
            }
        };
        if let Ok(mut g) = self.gauge.lock() {
            g.last_prompt_tokens = turn.usage.prompt_tokens;
        }
        // The answer's blocks in the order the model produced them: reasoning (kept, with its
        // signature, for providers that want it back), text, tool calls.
        let calls: Vec<ToolCallEvent> = turn
            .tool_calls()
            .map(|(id, name, args)| ToolCallEvent {
                id: id.to_owned(),
                name: name.to_owned(),
                input: parse_input(args),
            })
            .collect();
        // The calls the run may make go into the ledger with the turn (as `started`, safe to
        // repeat or not by their tool's class), so running them needs no write of its own
        // first. A call to a tool it may not use is answered with an error, never started.
        let mut ledger = Vec::with_capacity(calls.len());
        for c in &calls {
            if let Some(tool) = self.tool_for(def, &c.name).await {
                ledger.push(LedgerStart {
                    tool_use_id: c.id.clone(),
                    tool: c.name.clone(),
                    input: c.input.clone(),
                    idempotent: tool.side_effect(&c.input).is_rerunnable(),
                });
            }
        }
        let recorded: Vec<String> = ledger.iter().map(|l| l.tool_use_id.clone()).collect();
        let message = Message {
            role: Role::Assistant,
            content: turn.blocks,
            name: None,
        };
        // The provider events still held go first, in the turn's own commit.
        let mut events = held;
        events.push(RunEvent::AssistantMessage(AssistantMessage {
            message,
            finish_reason: Some(turn.finish.as_openai().to_owned()),
        }));
        events.extend(calls.iter().cloned().map(RunEvent::ToolCall));
        events.push(RunEvent::Usage(turn.usage));
        // Persist the turn and the run's progress together.
        let mut total = state.usage;
        total.add(&turn.usage);
        let total = serde_json::to_value(total).unwrap_or_default();
        let iterations = i32::try_from(state.iterations + 1).unwrap_or(i32::MAX);
        if calls.is_empty() && self.inner.cfg.step_hold_ms > 0 {
            // A turn without tool calls: the run finishes, parks or takes input next, and that
            // step commits the turn first, with its progress. A crash before it calls the
            // model again; nothing of this turn was recorded.
            self.defer(state, events, Vec::new(), Some((iterations, total)))
                .await;
            return Ok(Ok(Vec::new()));
        }
        self.step(
            Some(state),
            events,
            StepChange::Turn {
                iterations,
                usage: total,
                calls: ledger,
            },
        )
        .await?;
        Ok(Ok(recorded))
    }

    /// Streams one turn from the router: text deltas go out live, and the answer is assembled
    /// by the chat contract's one assembler (a stream that ends before its finish fails the
    /// turn). Returns the answer and the `provider_chosen` / `provider_fallback` events still
    /// held, which the turn commits ahead of its message.
    ///
    /// Those events are held, not written at once: a turn that ends within
    /// `executor.step_hold_ms` of its call to the router commits them with its message, one
    /// step instead of two. They are written on their own (so a watcher knows an executor is on
    /// the turn) as soon as the hold is over — at once when they arrive after it — before the
    /// first text delta goes out (the transcript keeps them ahead of the text), and before the
    /// turn fails or breaks off. The tool results deferred before the turn
    /// ([`Driver::defer`]) wait under the same hold and go first in whichever step that is.
    async fn stream_turn(
        &self,
        req: ChatRequest,
        last_seq: i64,
    ) -> Result<(Answer, Vec<RunEvent>), TurnError> {
        let mut last_seq = last_seq;
        let mut held: Vec<RunEvent> = Vec::new();
        let hold_until = tokio::time::Instant::now()
            + std::time::Duration::from_millis(self.inner.cfg.step_hold_ms);
        let r = self.internal(weft_proto::chat_request_to_proto(req))?;
        let mut client = self.inner.router.clone();
        let hold = tokio::time::sleep_until(hold_until);
        tokio::pin!(hold);
        // The router answers at the provider's first byte, which may take a while: what was
        // deferred before the turn goes out when the hold is over, whatever the router does.
        let call = client.chat(r);
        tokio::pin!(call);
        let answered = loop {
            tokio::select! {
                biased;
                () = &mut hold, if self.has_deferred() => {
                    last_seq = self.write_held(&mut held).await?;
                }
                a = &mut call => break a,
            }
        };
        let mut stream = answered.map_err(router_err)?.into_inner();
        let mut acc = Assembler::default();
        loop {
            let next = tokio::select! {
                biased;
                () = &mut hold, if self.holding(&held) => {
                    last_seq = self.write_held(&mut held).await?;
                    continue;
                }
                ev = stream.next() => ev,
            };
            let Some(ev) = next else { break };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    self.write_held(&mut held).await?;
                    return Err(router_err(e));
                }
            };
            let Some(ev) = weft_proto::event_from_proto(ev) else {
                continue;
            };
            match &ev {
                ChatEvent::ProviderChosen {
                    provider,
                    model,
                    fallbacks,
                } => held.push(RunEvent::ProviderChosen(ProviderChosen {
                    provider: provider.clone(),
                    model: model.clone(),
                    fallbacks: *fallbacks,
                })),
                ChatEvent::Fallback(f) => held.push(RunEvent::ProviderFallback(ProviderFallback {
                    provider: f.provider.clone(),
                    model: f.model.clone(),
                    code: f.code.clone(),
                    message: f.message.clone(),
                })),
                ChatEvent::TextDelta(t) => {
                    if self.holding(&held) {
                        last_seq = self.write_held(&mut held).await?;
                    }
                    self.live_delta(last_seq, t).await;
                }
                _ => {}
            }
            // Provider events arriving after the hold go out at once.
            if self.holding(&held) && tokio::time::Instant::now() >= hold_until {
                last_seq = self.write_held(&mut held).await?;
            }
            acc.push(ev);
        }
        match acc.finish() {
            Ok(answer) => Ok((answer, held)),
            Err(e) => {
                self.write_held(&mut held).await?;
                Err(e.into())
            }
        }
    }

    /// Whether the turn holds anything back: provider events, or what was deferred before it.
    fn holding(&self, held: &[RunEvent]) -> bool {
        !held.is_empty() || self.has_deferred()
    }

    /// Writes the held provider events and what was deferred (if any) as a step of their own;
    /// the seq of the last event committed.
    async fn write_held(&self, held: &mut Vec<RunEvent>) -> Result<i64, TurnError> {
        if self.holding(held) {
            self.persist(None, std::mem::take(held))
                .await
                .map_err(TurnError::Stop)?;
        }
        Ok(*self.seq.lock().await - 1)
    }
}

/// How many times one model turn whose output its provider could not read
/// (`model_output_invalid`) is asked again, each time with [`unreadable_note`], before the run
/// fails with that error.
const UNREADABLE_NOTES: usize = 2;

/// The note appended (as a user message, to the request only) when the model's last output
/// could not be read: what the provider said, and the tools' exact names.
fn unreadable_note(error: &str, tools: &[weft_core::message::ToolSpec]) -> String {
    let error: String = error.chars().take(300).collect();
    if tools.is_empty() {
        return format!("Your last reply could not be read ({error}). Answer again in plain text.");
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    format!(
        "Your last reply could not be read ({error}). Answer again. To use a tool, call exactly \
         one of these by its exact name, with a JSON object as its arguments: {}. Otherwise \
         answer in plain text.",
        names.join(", ")
    )
}

/// Adds the note to the request's last message when that is the user's (templates that want
/// roles to alternate refuse two user messages in a row), else as a user message of its own.
fn add_note(messages: &mut Vec<Message>, note: &str) {
    if let Some(last) = messages.last_mut()
        && last.role == Role::User
    {
        if let Some(ContentBlock::Text { text }) = last.content.last_mut() {
            text.push_str("\n\n");
            text.push_str(note);
        } else {
            last.content.push(ContentBlock::text(note.to_owned()));
        }
        return;
    }
    messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::text(note.to_owned())],
        name: None,
    });
}

/// How long to wait before each call again of a model turn whose router could not be reached
/// or went away mid-stream (about 24 s in all, then the run fails).
const ROUTER_RETRY_MS: [u64; 7] = [250, 500, 1_000, 2_000, 4_000, 8_000, 8_000];

/// A failed router call: the router's own answer (it carries weft's error code) is a model
/// failure that ends the run; a call that never reached a router, or whose router went away
/// mid-stream (a transport status, no weft code), is the router's absence: the turn is called
/// again (nothing of the broken attempt but its `provider_chosen` and any `provider_fallback`
/// was committed).
fn router_err(s: tonic::Status) -> TurnError {
    use tonic::Code;
    let from_router = s.metadata().get(weft_core::error::GRPC_CODE_KEY).is_some();
    if !from_router
        && matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled | Code::Aborted
        )
    {
        return TurnError::Router(format!("{:?}: {}", s.code(), s.message()));
    }
    TurnError::Model(Error::from(&s))
}

/// Why a model turn did not complete.
pub(crate) enum TurnError {
    /// The model call failed: the run ends with this error.
    Model(Error),
    /// The lease was lost or the process is stopping.
    Stop(Stop),
    /// No router answered: unreachable, or gone in the middle of the stream.
    Router(String),
}

impl From<Error> for TurnError {
    fn from(e: Error) -> Self {
        Self::Model(e)
    }
}

/// `m` with every tool call whose arguments are not a JSON object sent back as `{}`, or `None`
/// when it has none. A small model may write invalid JSON arguments; the transcript keeps them
/// as written and the call's result says what was wrong, but providers refuse a conversation
/// that carries them (llama.cpp's templates and the Messages API parse them), which would end
/// the run at its next turn.
fn replayable(m: &Message) -> Option<Message> {
    // Checked on every turn for every earlier call: validate without building a value.
    let bad = |json: &str| {
        !json.trim_start().starts_with('{')
            || serde_json::from_str::<serde::de::IgnoredAny>(json).is_err()
    };
    if !m
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { input_json, .. } if bad(input_json)))
    {
        return None;
    }
    let mut m = m.clone();
    for b in &mut m.content {
        if let ContentBlock::ToolUse { input_json, .. } = b
            && bad(input_json)
        {
            "{}".clone_into(input_json);
        }
    }
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(args: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: "c".into(),
            name: "Memory".into(),
            input_json: args.into(),
        }
    }

    #[test]
    fn the_unreadable_note_names_the_tools_exactly() {
        let spec = |n: &str| weft_core::message::ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        };
        let n = unreadable_note("bad format", &[spec("Read"), spec("Write")]);
        assert!(
            n.contains("(bad format)") && n.contains(": Read, Write."),
            "{n}"
        );
        let n = unreadable_note(&"x".repeat(1000), &[]);
        assert!(
            n.ends_with("Answer again in plain text.") && n.len() < 400,
            "{n}"
        );
    }

    #[test]
    fn the_note_joins_a_last_user_message_and_follows_anything_else() {
        let user = |t: &str| Message {
            role: Role::User,
            content: vec![ContentBlock::text(t.to_owned())],
            name: None,
        };
        let mut m = vec![user("go")];
        add_note(&mut m, "note");
        assert_eq!(m, vec![user("go\n\nnote")]);
        let answer = Message {
            role: Role::Tool,
            content: vec![ContentBlock::text("result".to_owned())],
            name: None,
        };
        let mut m = vec![user("go"), answer.clone()];
        add_note(&mut m, "note");
        assert_eq!(m, vec![user("go"), answer, user("note")]);
    }

    #[test]
    fn invalid_tool_arguments_are_replayed_as_an_empty_object() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                call(r#"{"op": "set", "ttl_seconds?: 0}"#),
                call(r#"{"op":"get"}"#),
            ],
            name: None,
        };
        let fixed = replayable(&m).expect("one call needs fixing");
        assert_eq!(fixed.content[0], call("{}"));
        assert_eq!(fixed.content[1], call(r#"{"op":"get"}"#));
        let fine = Message {
            content: vec![call(r#"{"op":"get"}"#)],
            ..m
        };
        assert!(replayable(&fine).is_none());
    }
}
