//! The agent loop as a deterministic step function. The transcript (the persisted events of a
//! run) folds into a [`LoopState`]; [`next_action`] says what to do next. No I/O happens here:
//! the worker performs the action, persists the events it produced, folds them in, and asks
//! again. Resuming a run elsewhere is the same fold over the same transcript.

use serde_json::Value;
use weft_api::context::{CompactTrigger, Compaction};
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

/// What of each tool result the model is sent: a per-result and a per-turn byte budget
/// (`compaction.result_max_bytes`, `compaction.turn_result_max_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub result: usize,
    pub turn: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self::of(None)
    }
}

impl Budget {
    /// No budget: every result whole (a code agent's replay).
    pub const UNLIMITED: Self = Self {
        result: usize::MAX,
        turn: usize::MAX,
    };

    /// The budget a run's compaction settings give.
    pub fn of(c: Option<&Compaction>) -> Self {
        let d = Compaction::default();
        let c = c.unwrap_or(&d);
        Self {
            result: c.result_max_bytes(),
            turn: c.turn_result_max_bytes(),
        }
    }
}

/// Everything the loop knows about a run, rebuilt from its transcript.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopState {
    /// The conversation after the system prompt, as the model is sent it (less the summary,
    /// which [`LoopState::view`] puts after the first task): what a compaction folded away is
    /// gone from here, and tool results are cut to the [`Budget`].
    pub messages: Vec<Message>,
    /// The seq of the event each message of `messages` came from.
    pub seqs: Vec<i64>,
    /// How many messages at the start of `messages` are the first task (the first
    /// `user_input`'s): always sent verbatim.
    pub head: usize,
    /// The summary of what the last compaction folded away.
    pub summary: Option<String>,
    /// A compaction asked for and not done yet.
    pub compact_pending: Option<CompactTrigger>,
    /// Compactions so far.
    pub compactions: u32,
    /// The tool-result budgets the fold applies.
    pub budget: Budget,
    /// Bytes of tool results the model is sent since the last model turn.
    pub turn_result_bytes: usize,
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
            let first = state.messages.is_empty() && state.summary.is_none();
            if let Some(msgs) = &input.messages {
                for m in msgs {
                    state.push(seq, m.clone());
                }
            } else if let Some(text) = &input.text {
                state.push(
                    seq,
                    Message {
                        role: Role::User,
                        content: vec![ContentBlock::text(text.clone())],
                        name: None,
                    },
                );
            }
            if first {
                state.head = state.messages.len();
            }
        }
        RunEvent::AssistantMessage(m) => {
            state.push(seq, m.message.clone());
            state.iterations += 1;
            state.last_finish = m.finish_reason.as_deref().map(FinishReason::from_openai);
            state.turn_result_bytes = 0;
        }
        RunEvent::ToolResult(r) => {
            let left = state.budget.turn.saturating_sub(state.turn_result_bytes);
            let (shown, cut) = bounded(&r.content, state.budget.result.min(left), seq);
            state.turn_result_bytes += cut.unwrap_or(r.content.len()).min(r.content.len());
            state.push(seq, tool_message(&r.tool_use_id, &shown, r.is_error));
        }
        RunEvent::Usage(u) => state.usage.add(u),
        RunEvent::RunFinished(_) => state.finished = true,
        RunEvent::CompactionRequested(r) => {
            state.compact_pending = Some(match r.trigger.as_str() {
                "self" => CompactTrigger::Own,
                _ => CompactTrigger::Manual,
            });
        }
        RunEvent::ContextCompacted(c) => {
            let keep_from = state.seqs[state.head..]
                .iter()
                .position(|s| *s >= c.first_kept_seq)
                .map_or(state.messages.len(), |p| p + state.head);
            state.messages.drain(state.head..keep_from);
            state.seqs.drain(state.head..keep_from);
            state.summary = Some(c.summary.clone());
            state.compact_pending = None;
            state.compactions += 1;
        }
        _ => {}
    }
}

impl LoopState {
    /// A state whose fold cuts tool results to `budget`.
    pub fn with_budget(budget: Budget) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    fn push(&mut self, seq: i64, m: Message) {
        self.messages.push(m);
        self.seqs.push(seq);
    }

    /// The conversation the model is sent after the system prompt: the first task verbatim,
    /// the summary of what compaction folded away (added to the first task's last message when
    /// that is the user's, so roles still alternate), then the rest.
    pub fn view(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(self.messages.len() + 1);
        out.extend_from_slice(&self.messages[..self.head]);
        if let Some(s) = &self.summary {
            let text = summary_text(s);
            match out.last_mut() {
                Some(m) if m.role == Role::User => m.content.push(ContentBlock::text(text)),
                _ => out.push(Message {
                    role: Role::User,
                    content: vec![ContentBlock::text(text)],
                    name: None,
                }),
            }
        }
        out.extend_from_slice(&self.messages[self.head..]);
        out
    }

    /// The index in `messages` where each model turn after the first task starts (its
    /// assistant message): the places a compaction may cut without separating a tool call from
    /// its result.
    pub fn turn_starts(&self) -> Vec<usize> {
        (self.head..self.messages.len())
            .filter(|&i| self.messages[i].role == Role::Assistant)
            .collect()
    }
}

/// How the summary reads in the model's view.
pub fn summary_text(summary: &str) -> String {
    format!(
        "[Summary of the earlier part of this run: those turns were compacted away. Recall \
         reads their exact text back by words or by seq.]\n{summary}"
    )
}

/// `text` as the model is sent it under a budget of `max` bytes: whole when it fits, else its
/// first bytes (to a character boundary) and a marker saying how to read the rest (`Recall`
/// range by the event's seq, from the offset where the cut is). The second value is the length
/// kept when cut.
pub fn bounded(text: &str, max: usize, seq: i64) -> (std::borrow::Cow<'_, str>, Option<usize>) {
    if text.len() <= max {
        return (std::borrow::Cow::Borrowed(text), None);
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let shown = format!(
        "{}\n[cut by weft: this result is {} bytes and the model is shown the first {at}; the whole \
         result is event {seq} of this run. Read on with Recall {{\"op\": \"range\", \"from_seq\": \
         {seq}, \"offset\": {at}}}]",
        &text[..at],
        text.len(),
    );
    (std::borrow::Cow::Owned(shown), Some(at))
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

    fn result(id: &str, content: &str) -> Value {
        json!({"tool_use_id": id, "content": content})
    }

    /// A run of `turns` tool-calling turns: seq 1 input, then per turn an assistant message and
    /// its result.
    fn long_run(turns: usize) -> Vec<(&'static str, Value)> {
        let mut events = vec![("user_input", json!({"text": "the task"}))];
        for i in 0..turns {
            let id: &'static str = Box::leak(format!("c{i}").into_boxed_str());
            events.push(("assistant_message", assistant(&[(id, "Context")], "")));
            events.push(("tool_result", result(id, &format!("result {i}"))));
        }
        events
    }

    #[test]
    fn a_compaction_keeps_the_first_task_the_summary_and_the_tail() {
        let mut events = long_run(5);
        // Seqs: 1 input; turn i at 2 + 2i (assistant) and 3 + 2i (result). Keep the last two
        // turns: from seq 8.
        events.push((
            "context_compacted",
            json!({"summary": "did 0..2", "before_tokens": 90, "after_tokens": 40,
                   "first_kept_seq": 8, "trigger": "auto", "folded_turns": 3}),
        ));
        let s = fold(&events);
        assert_eq!(s.head, 1);
        assert_eq!(s.seqs, vec![1, 8, 9, 10, 11]);
        assert_eq!(s.compactions, 1);
        let view = s.view();
        // The summary joins the first task's message: roles still alternate.
        assert_eq!(view.len(), 5);
        assert_eq!(view[0].role, Role::User);
        assert_eq!(view[0].content.len(), 2);
        assert!(
            view[0]
                .text()
                .starts_with("the task[Summary of the earlier part")
        );
        assert!(view[0].text().ends_with("did 0..2"));
        assert_eq!(view[1].role, Role::Assistant);
        // The loop goes on where it was: the iterations count every turn, and what follows
        // folds after the tail.
        assert_eq!(s.iterations, 5);
        assert_eq!(
            next_action(
                &s,
                Facts {
                    max_iterations: 9,
                    ..facts()
                }
            ),
            Action::CallModel
        );
        // A second compaction replaces the summary and folds from the tail.
        let mut more = events.clone();
        more.push((
            "context_compacted",
            json!({"summary": "did 0..3", "first_kept_seq": 10, "trigger": "manual"}),
        ));
        let s2 = fold(&more);
        assert_eq!(s2.seqs, vec![1, 10, 11]);
        assert!(s2.view()[0].text().ends_with("did 0..3"));
        // Nothing kept: the first task and the summary only.
        let mut none = long_run(2);
        none.push((
            "context_compacted",
            json!({"summary": "all", "first_kept_seq": 6}),
        ));
        let s3 = fold(&none);
        assert_eq!(s3.messages.len(), 1);
        assert_eq!(s3.view().len(), 1);
    }

    #[test]
    fn the_view_is_the_same_however_the_transcript_is_folded() {
        // Folding the same transcript twice (another executor after a crash) gives the same
        // view, message for message.
        let mut events = long_run(6);
        events.push((
            "context_compacted",
            json!({"summary": "s", "first_kept_seq": 10}),
        ));
        events.push(("assistant_message", assistant(&[("d", "Context")], "more")));
        assert_eq!(fold(&events).view(), fold(&events).view());
    }

    #[test]
    fn turn_starts_are_the_assistant_messages_after_the_first_task() {
        let s = fold(&long_run(3));
        assert_eq!(s.turn_starts(), vec![1, 3, 5]);
    }

    #[test]
    fn a_compaction_request_is_pending_until_the_compaction() {
        let mut events = long_run(2);
        events.push(("compaction_requested", json!({"trigger": "self"})));
        assert_eq!(fold(&events).compact_pending, Some(CompactTrigger::Own));
        events.push((
            "context_compacted",
            json!({"summary": "s", "first_kept_seq": 4}),
        ));
        assert_eq!(fold(&events).compact_pending, None);
        let manual = vec![("compaction_requested", json!({"trigger": "manual"}))];
        assert_eq!(fold(&manual).compact_pending, Some(CompactTrigger::Manual));
    }

    #[test]
    fn tool_results_are_cut_to_their_budgets_with_a_marker() {
        let mut s = LoopState::with_budget(Budget {
            result: 10,
            turn: 15,
        });
        let events = [
            ("user_input", json!({"text": "go"})),
            (
                "assistant_message",
                assistant(&[("a", "Context"), ("b", "Context"), ("c", "Context")], ""),
            ),
            ("tool_result", result("a", "0123456789abcdef")),
            ("tool_result", result("b", "0123456789")),
            ("tool_result", result("c", "xyz")),
        ];
        for (i, (k, d)) in (1i64..).zip(&events) {
            apply(&mut s, i, k, d);
        }
        let text = |i: usize| s.messages[i].text();
        // Over the per-result budget: the first 10 bytes and how to read the rest.
        assert!(
            text(2).starts_with("0123456789\n[cut by weft: this result is 16 bytes"),
            "{}",
            text(2)
        );
        assert!(
            text(2).contains(r#"Recall {"op": "range", "from_seq": 3, "offset": 10}"#),
            "{}",
            text(2)
        );
        // The turn's budget has 5 bytes left for the second result, none for the third.
        assert!(text(3).starts_with("01234\n[cut by weft"), "{}", text(3));
        assert!(
            text(4).starts_with("\n[cut by weft: this result is 3 bytes"),
            "{}",
            text(4)
        );
        // A new turn has its whole budget again.
        apply(
            &mut s,
            6,
            "assistant_message",
            &assistant(&[("d", "Context")], ""),
        );
        apply(&mut s, 7, "tool_result", &result("d", "short"));
        assert_eq!(s.messages[6].text(), "short");
        // A cut never splits a character.
        let (shown, kept) = bounded("ééééé", 3, 9);
        assert_eq!(kept, Some(2));
        assert!(shown.starts_with("é\n[cut"));
    }
}
