//! The agent loop as a deterministic step function. The transcript (the persisted events of a
//! run) folds into a [`LoopState`]; [`next_action`] says what to do next. No I/O happens here:
//! the worker performs the action, persists the events it produced, folds them in, and asks
//! again. Resuming a run elsewhere is the same fold over the same transcript.

use serde_json::Value;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, Usage};
use weft_core::run::{EventKind, RunEvent, StopReason};

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model produced them (JSON text, possibly invalid).
    pub input_json: String,
}

/// Everything the loop knows about a run, rebuilt from its transcript.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopState {
    /// The conversation after the system prompt.
    pub messages: Vec<Message>,
    /// Model turns taken.
    pub iterations: u32,
    pub usage: Usage,
    /// The finish reason of the last model turn.
    pub last_finish: Option<FinishReason>,
    /// Seq of the last persisted event (0 = none).
    pub last_seq: i64,
    /// Whether the transcript already ends the run.
    pub finished: bool,
}

/// What the loop does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Ask the model for the next turn.
    CallModel,
    /// Run these calls of the last assistant turn (those without a result yet).
    RunTools(Vec<ToolCall>),
    /// Fold waiting input into the conversation first.
    TakeInput,
    /// End of turn in an interactive run: wait for input, holding nothing.
    Park,
    Finish(StopReason),
    /// The transcript already ends the run.
    Done,
}

/// What the loop needs to know besides the transcript.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Facts {
    pub max_iterations: u32,
    pub interactive: bool,
    pub cancelled: bool,
    /// Input is waiting to be taken.
    pub input_waiting: bool,
}

/// The next action for `state` given `facts`.
pub fn next_action(state: &LoopState, facts: Facts) -> Action {
    if state.finished {
        return Action::Done;
    }
    if facts.cancelled {
        return Action::Finish(StopReason::Cancelled);
    }
    let pending = pending_calls(state);
    if !pending.is_empty() {
        return Action::RunTools(pending);
    }
    if facts.input_waiting {
        return Action::TakeInput;
    }
    match state.messages.last() {
        Some(m) if m.role == Role::Assistant => {
            if state.last_finish == Some(FinishReason::Length) {
                Action::Finish(StopReason::MaxTokens)
            } else if facts.interactive {
                Action::Park
            } else {
                Action::Finish(StopReason::EndTurn)
            }
        }
        // No input at all: nothing to answer.
        None if facts.interactive => Action::Park,
        None => Action::Finish(StopReason::EndTurn),
        Some(_) if state.iterations >= facts.max_iterations => {
            Action::Finish(StopReason::MaxIterations)
        }
        Some(_) => Action::CallModel,
    }
}

/// Tool calls of the newest assistant message that have no result after it.
pub fn pending_calls(state: &LoopState) -> Vec<ToolCall> {
    let Some(at) = state
        .messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
    else {
        return Vec::new();
    };
    let answered: Vec<&str> = state.messages[at + 1..]
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    state.messages[at]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse {
                id,
                name,
                input_json,
            } if !answered.contains(&id.as_str()) => Some(ToolCall {
                id: id.clone(),
                name: name.clone(),
                input_json: input_json.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Folds one persisted event into the state. Unknown or malformed events change nothing but
/// `last_seq` (the transcript is the record; the loop reads only what it needs) — except that a
/// `run_finished` ends the run however its payload reads.
pub fn apply(state: &mut LoopState, seq: i64, kind: &str, data: &Value) {
    match RunEvent::parse(kind, data) {
        Some(event) => apply_event(state, seq, &event),
        None => {
            state.last_seq = state.last_seq.max(seq);
            if kind == EventKind::RunFinished.as_str() {
                state.finished = true;
            }
        }
    }
}

/// Folds one typed event into the state.
pub fn apply_event(state: &mut LoopState, seq: i64, event: &RunEvent) {
    state.last_seq = state.last_seq.max(seq);
    match event {
        RunEvent::UserInput(input) => {
            if let Some(msgs) = &input.messages {
                state.messages.extend(msgs.iter().cloned());
            } else if let Some(text) = &input.text {
                state.messages.push(Message {
                    role: Role::User,
                    content: vec![ContentBlock::text(text.clone())],
                    name: None,
                });
            }
        }
        RunEvent::AssistantMessage(m) => {
            state.messages.push(m.message.clone());
            state.iterations += 1;
            state.last_finish = m.finish_reason.as_deref().map(FinishReason::from_openai);
        }
        RunEvent::ToolResult(r) => {
            state
                .messages
                .push(tool_message(&r.tool_use_id, &r.content, r.is_error));
        }
        RunEvent::Usage(u) => state.usage.add(u),
        RunEvent::RunFinished(_) => state.finished = true,
        _ => {}
    }
}

/// The message carrying one tool result back to the model.
pub fn tool_message(tool_use_id: &str, text: &str, is_error: bool) -> Message {
    Message {
        role: Role::Tool,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: tool_use_id.to_owned(),
            content: vec![ContentBlock::text(text)],
            is_error,
        }],
        name: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts() -> Facts {
        Facts {
            max_iterations: 4,
            ..Facts::default()
        }
    }

    fn assistant(calls: &[(&str, &str)], text: &str) -> Value {
        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(ContentBlock::text(text));
        }
        for (id, name) in calls {
            content.push(ContentBlock::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input_json: "{}".into(),
            });
        }
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        json!({"message": Message { role: Role::Assistant, content, name: None }, "finish_reason": finish})
    }

    fn fold(events: &[(&str, Value)]) -> LoopState {
        let mut s = LoopState::default();
        for (i, (k, d)) in (1i64..).zip(events) {
            apply(&mut s, i, k, d);
        }
        s
    }

    #[test]
    fn a_fresh_run_calls_the_model() {
        let s = fold(&[
            ("run_started", json!({})),
            ("user_input", json!({"text": "hi"})),
        ]);
        assert_eq!(next_action(&s, facts()), Action::CallModel);
        assert_eq!(s.last_seq, 2);
    }

    #[test]
    fn tool_calls_without_results_are_run_and_answered_ones_are_not() {
        let s = fold(&[
            ("user_input", json!({"text": "hi"})),
            (
                "assistant_message",
                assistant(&[("a", "Context"), ("b", "HTTP")], ""),
            ),
            ("tool_result", json!({"tool_use_id": "a", "content": "ok"})),
        ]);
        match next_action(&s, facts()) {
            Action::RunTools(calls) => {
                assert_eq!(calls.len(), 1);
                assert_eq!(calls[0].id, "b");
            }
            other => panic!("expected tools, got {other:?}"),
        }
    }

    #[test]
    fn all_results_in_means_the_next_model_turn() {
        let s = fold(&[
            ("user_input", json!({"text": "hi"})),
            ("assistant_message", assistant(&[("a", "Context")], "")),
            ("tool_result", json!({"tool_use_id": "a", "content": "ok"})),
        ]);
        assert_eq!(next_action(&s, facts()), Action::CallModel);
        assert_eq!(s.iterations, 1);
    }

    #[test]
    fn a_final_answer_ends_the_turn_or_parks_an_interactive_run() {
        let s = fold(&[
            ("user_input", json!({"text": "hi"})),
            ("assistant_message", assistant(&[], "done")),
        ]);
        assert_eq!(
            next_action(&s, facts()),
            Action::Finish(StopReason::EndTurn)
        );
        let interactive = Facts {
            interactive: true,
            ..facts()
        };
        assert_eq!(next_action(&s, interactive), Action::Park);
        let woken = Facts {
            input_waiting: true,
            ..interactive
        };
        assert_eq!(next_action(&s, woken), Action::TakeInput);
    }

    #[test]
    fn iterations_are_capped() {
        let mut events = vec![("user_input", json!({"text": "hi"}))];
        for i in 0..4 {
            let id = format!("c{i}");
            events.push(("assistant_message", assistant(&[(&id, "Context")], "")));
            events.push(("tool_result", json!({"tool_use_id": id, "content": "ok"})));
        }
        let s = fold(&events);
        assert_eq!(s.iterations, 4);
        assert_eq!(
            next_action(&s, facts()),
            Action::Finish(StopReason::MaxIterations)
        );
    }

    #[test]
    fn cancel_wins_over_everything_but_a_finished_transcript() {
        let s = fold(&[("user_input", json!({"text": "hi"}))]);
        let cancelled = Facts {
            cancelled: true,
            ..facts()
        };
        assert_eq!(
            next_action(&s, cancelled),
            Action::Finish(StopReason::Cancelled)
        );
        let done = fold(&[
            ("user_input", json!({"text": "hi"})),
            ("run_finished", json!({})),
        ]);
        assert_eq!(next_action(&done, cancelled), Action::Done);
    }

    #[test]
    fn truncated_answers_stop_with_max_tokens() {
        let mut a = assistant(&[], "par");
        a["finish_reason"] = json!("length");
        let s = fold(&[
            ("user_input", json!({"text": "hi"})),
            ("assistant_message", a),
        ]);
        assert_eq!(
            next_action(&s, facts()),
            Action::Finish(StopReason::MaxTokens)
        );
    }

    #[test]
    fn usage_accumulates() {
        let s = fold(&[
            (
                "usage",
                json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
            ),
            (
                "usage",
                json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
            ),
        ]);
        assert_eq!(s.usage.total_tokens, 7);
    }
}
