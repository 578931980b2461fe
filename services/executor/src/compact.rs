//! Compaction: keeping a long run's model view inside the model's window.
//!
//! A compaction is one transcript event, `context_compacted {summary, first_kept_seq, …}`:
//! folding it ([`crate::machine`]) drops the messages between the first task and
//! `first_kept_seq` from the model's view and puts the summary after the first task, so any
//! executor that folds the transcript sends the model the same prompt. Nothing leaves the
//! transcript: `Recall` reads it back.
//!
//! What is kept verbatim is the last `keep_turns` model turns, cut only where a turn starts (its
//! assistant message), so a tool call is never kept without its result or the other way round;
//! when those turns alone would not fit under the target, the oldest of them are folded too (the
//! newest turn is always kept). The summary is written by `compaction.model`, else the
//! executor's `compaction_model`, else the run's model; if that call fails the run goes on with
//! a summary that says which seqs were folded (so Recall can still read them).
//!
//! Triggers: manual (`POST /v1/runs/{id}/compact`, a `compaction_requested` event taken with the
//! run's input), self (`Context {op: compact}`, the same event), and automatic (before a model
//! turn whose estimated prompt reaches `auto_percent` of the window).

use futures::StreamExt as _;
use weft_api::context::{CompactTrigger, Compaction, DEFAULT_TARGET_PERCENT};
use weft_core::agent::AgentContent;
use weft_core::chat::{Assembler, ChatRequest, Sampling};
use weft_core::message::{ContentBlock, Message, Role, ToolSpec, Usage, estimate_tokens};
use weft_core::run::{ContextCompacted, RunEvent};
use weft_proto::v1;

use crate::driver::Driver;
use crate::machine::{LoopState, summary_text};
use crate::stop::Stop;

/// The longest summary kept, in bytes (a model that ignores `max_tokens` is cut here).
const SUMMARY_MAX_BYTES: usize = 16 * 1024;
/// The most history sent to the summary model, in bytes.
const HISTORY_MAX_BYTES: usize = 48 * 1024;

const SUMMARIZER: &str = "You condense the history of an AI agent's run so that it can go on \
with less context. Write a summary of the turns you are given: what was done, the facts found \
(names, numbers, ids, paths and values exactly as written), the decisions made and what is \
still to do. Name the [seq N] of results that hold details worth reading again. Answer with \
the summary only.";

impl Driver {
    /// The model's context window: `compaction.window_tokens`, else the router's metadata
    /// (`router.context_windows`). Read once per lease; a router that cannot answer is asked
    /// again next time.
    pub(crate) async fn window(&self) -> Option<u32> {
        if let Some(w) = self.spec.compaction.as_ref().and_then(|c| c.window_tokens) {
            return Some(w);
        }
        self.window
            .get_or_try_init(|| async {
                let req = self
                    .internal(v1::ListModelsRequest {
                        model: self.spec.model.clone(),
                    })
                    .map_err(|e| e.message)?;
                let models = self
                    .inner
                    .router
                    .clone()
                    .list_models(req)
                    .await
                    .map_err(|s| s.message().to_owned())?
                    .into_inner()
                    .models;
                Ok::<_, String>(
                    models
                        .first()
                        .map(|m| m.context_window)
                        .filter(|w| *w > 0),
                )
            })
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "the router could not say the model's context window"))
            .ok()
            .copied()
            .flatten()
    }

    /// The system message of the run's requests, if any.
    pub(crate) fn system_message(def: &AgentContent) -> Option<Message> {
        (!def.system_prompt.is_empty()).then(|| Message {
            role: Role::System,
            content: vec![ContentBlock::text(def.system_prompt.clone())],
            name: None,
        })
    }

    /// Whether the next model turn needs an automatic compaction first: `auto_percent` is set,
    /// the window is known, the estimated prompt reaches that share of it, and some turn could
    /// be folded.
    pub(crate) async fn auto_compaction_due(&self, def: &AgentContent, state: &LoopState) -> bool {
        let Some(pct) = self.spec.compaction.as_ref().and_then(|c| c.auto_percent) else {
            return false;
        };
        let Some(window) = self.window().await else {
            return false;
        };
        if state.turn_starts().len() < 2 {
            // The newest turn is always kept: with fewer than two, nothing could be folded.
            return false;
        }
        let tools = self.tool_specs(def).await;
        let est = prompt_tokens(def, &state.view(), &tools);
        est >= u64::from(window) * u64::from(pct) / 100
    }

    /// Compacts the model's view now and commits the `context_compacted` event (with the usage
    /// of the summary call). An automatic compaction with nothing to fold writes nothing:
    /// returns whether an event was written.
    pub(crate) async fn compact(
        &self,
        def: &AgentContent,
        state: &mut LoopState,
        trigger: CompactTrigger,
    ) -> Result<bool, Stop> {
        // What waits under the step hold goes out first: the summary call may take a while.
        self.flush_deferred().await?;
        let started = std::time::Instant::now();
        let settings = self.spec.compaction.clone().unwrap_or_default();
        let window = self.window().await;
        let tools = self.tool_specs(def).await;
        let before = prompt_tokens(def, &state.view(), &tools);
        let cut = tail_start(def, state, &settings, window, &tools);
        let starts = state.turn_starts();
        let folded_turns = u32::try_from(starts.iter().filter(|&&i| i < cut).count()).unwrap_or(0);
        if cut == state.head && trigger == CompactTrigger::Auto {
            return Ok(false);
        }
        let first_kept_seq = state.seqs.get(cut).copied().unwrap_or(state.last_seq + 1);
        let (summary, usage, model) = if cut == state.head {
            // Nothing to fold: the request is answered with the view as it is.
            (
                state.summary.clone().unwrap_or_default(),
                None,
                String::new(),
            )
        } else {
            self.summarize(&settings, state, cut, window).await
        };
        let mut after = state.clone();
        after.messages.drain(state.head..cut);
        after.seqs.drain(state.head..cut);
        after.summary = Some(summary.clone());
        let after_tokens = prompt_tokens(def, &after.view(), &tools);
        let mut events = vec![RunEvent::ContextCompacted(ContextCompacted {
            summary,
            before_tokens: before,
            after_tokens,
            first_kept_seq,
            trigger: trigger.as_str().to_owned(),
            folded_turns,
            model,
        })];
        if let Some(u) = usage {
            events.push(RunEvent::Usage(u));
        }
        self.persist(Some(state), events).await?;
        metrics::counter!("weft_executor_compactions_total", "trigger" => trigger.as_str())
            .increment(1);
        metrics::histogram!("weft_executor_compaction_seconds")
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            trigger = trigger.as_str(),
            before_tokens = before,
            after_tokens,
            folded_turns,
            "compacted the run's context"
        );
        Ok(true)
    }

    /// The summary of `state.messages[head..cut]` (and of the summary before it), its usage
    /// and the model that wrote it; when the summary model fails, a summary that says what was
    /// folded and where to read it back.
    async fn summarize(
        &self,
        settings: &Compaction,
        state: &LoopState,
        cut: usize,
        window: Option<u32>,
    ) -> (String, Option<Usage>, String) {
        let model = settings
            .model
            .clone()
            .filter(|m| !m.is_empty())
            .or_else(|| {
                let m = &self.inner.cfg.compaction_model;
                (!m.is_empty()).then(|| m.clone())
            })
            .unwrap_or_else(|| self.spec.model.clone());
        let history = history(state, cut, window);
        let max_tokens = window.map_or(1024, |w| (w / 8).clamp(64, 1024));
        let req = ChatRequest {
            model: model.clone(),
            messages: vec![
                Message {
                    role: Role::System,
                    content: vec![ContentBlock::text(SUMMARIZER)],
                    name: None,
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::text(history)],
                    name: None,
                },
            ],
            sampling: Sampling {
                temperature: Some(0.0),
                max_tokens: Some(max_tokens),
                ..Sampling::default()
            },
            stream: true,
            ..Default::default()
        };
        match self.call_summary(req).await {
            Ok((text, usage)) if !text.trim().is_empty() => {
                let mut text = text.trim().to_owned();
                if text.len() > SUMMARY_MAX_BYTES {
                    let mut at = SUMMARY_MAX_BYTES;
                    while !text.is_char_boundary(at) {
                        at -= 1;
                    }
                    text.truncate(at);
                }
                (text, Some(usage), model)
            }
            other => {
                let why = match other {
                    Err(e) => e,
                    Ok(_) => "it answered with no text".to_owned(),
                };
                tracing::warn!(error = %why, model = %model, "the compaction summary could not be written; folding without one");
                metrics::counter!("weft_executor_compaction_summary_failures_total").increment(1);
                let first = state.seqs.get(state.head).copied().unwrap_or(0);
                let last = state
                    .seqs
                    .get(cut.saturating_sub(1))
                    .copied()
                    .unwrap_or(first);
                let mut text = state.summary.clone().unwrap_or_default();
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&format!(
                    "Events {first} to {last} were compacted without a summary (the summary model `{model}` failed: {why}). Recall reads them back by words or by seq."
                ));
                (text, None, String::new())
            }
        }
    }

    async fn call_summary(&self, req: ChatRequest) -> Result<(String, Usage), String> {
        let r = self
            .internal(weft_proto::chat_request_to_proto(req))
            .map_err(|e| e.message)?;
        let mut client = self.inner.router.clone();
        let call = client.chat(r);
        let mut stream = tokio::select! {
            () = self.stop.cancelled() => return Err("the executor is stopping".into()),
            () = self.lost.cancelled() => return Err("the lease was lost".into()),
            r = call => r.map_err(|s| s.message().to_owned())?.into_inner(),
        };
        let mut acc = Assembler::default();
        while let Some(ev) = stream.next().await {
            let ev = ev.map_err(|s| s.message().to_owned())?;
            if let Some(ev) = weft_proto::event_from_proto(ev) {
                acc.push(ev);
            }
        }
        let answer = acc.finish().map_err(|e| e.message)?;
        Ok((answer.text(), answer.usage))
    }
}

/// The estimated prompt of a request made of `view` (with the system prompt and `tools`).
pub(crate) fn prompt_tokens(def: &AgentContent, view: &[Message], tools: &[ToolSpec]) -> u64 {
    let system = Driver::system_message(def);
    estimate_tokens(system.as_slice(), &[]) + estimate_tokens(view, tools)
}

/// Where the kept tail starts in `state.messages`: `keep_turns` turns back, fewer while they do
/// not fit under the target share of the window (the newest turn is always kept, unless
/// `keep_turns` is 0).
fn tail_start(
    def: &AgentContent,
    state: &LoopState,
    settings: &Compaction,
    window: Option<u32>,
    tools: &[ToolSpec],
) -> usize {
    let starts = state.turn_starts();
    let at = |keep: usize| {
        if keep == 0 {
            state.messages.len()
        } else {
            starts[starts.len() - keep]
        }
    };
    let mut keep = (settings.keep_turns() as usize).min(starts.len());
    if let Some(w) = window {
        let pct = settings.auto_percent.unwrap_or(DEFAULT_TARGET_PERCENT);
        let target = u64::from(w) * u64::from(pct) / 100;
        // Room for the summary the model is asked to write.
        let summary = u64::from((w / 8).clamp(64, 1024));
        let fixed = prompt_tokens(def, &state.messages[..state.head], tools)
            + summary
            + estimate_tokens(&[summary_message()], &[]);
        while keep > 1 && fixed + estimate_tokens(&state.messages[at(keep)..], &[]) > target {
            keep -= 1;
        }
    }
    at(keep)
}

fn summary_message() -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::text(summary_text(""))],
        name: None,
    }
}

/// What the summary model is sent: the summary so far and the folded messages, each line
/// marked with its seq, each message cut to its share of the whole.
fn history(state: &LoopState, cut: usize, window: Option<u32>) -> String {
    let total = window.map_or(HISTORY_MAX_BYTES, |w| {
        (w as usize * 3 * 6 / 10).clamp(2_000, HISTORY_MAX_BYTES)
    });
    let folded = &state.messages[state.head..cut];
    let per = (total / folded.len().max(1)).max(200);
    let mut out = String::new();
    if let Some(s) = &state.summary {
        out.push_str("Summary so far:\n");
        out.push_str(clip(s, total / 3));
        out.push_str("\n\nThen:\n");
    }
    for (m, seq) in folded.iter().zip(&state.seqs[state.head..cut]) {
        let who = match m.role {
            Role::Assistant => "assistant",
            Role::Tool => "tool result",
            Role::System | Role::Developer => "system",
            Role::User => "user",
        };
        let mut text = m.text();
        for b in &m.content {
            if let ContentBlock::ToolUse {
                name, input_json, ..
            } = b
            {
                text.push_str(&format!(" [called {name}({})]", clip(input_json, 300)));
            }
        }
        let text = clip(&text, per);
        out.push_str(&format!("[seq {seq}] {who}: {text}\n"));
    }
    out
}

/// The first `max` bytes of `s`, to a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut at = max;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}
