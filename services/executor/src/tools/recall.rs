//! The `Recall` tool: the run's verbatim history read back — what compaction folded away, what a
//! budget cut from a tool result. `search` finds events by their words (Postgres full-text
//! search, ranked, each hit with its run and seq) in this run or, by `scope`, in the earlier runs
//! of the same user in the same tenant (of this agent, or of any); `range` reads events by seq,
//! from an offset in their text. Read-only.

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::context::{RecallInput, RecallOp};
use weft_api::tools::input_schema;
use weft_core::RunId;
use weft_core::message::ToolSpec;
use weft_store::{RecallFrom, event_text};

use super::{
    Abort, Field, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, common_words,
    read_op,
};

/// `Recall`.
pub struct Recall;

/// Hits a search returns unless `limit` says otherwise.
const DEFAULT_HITS: u32 = 5;
/// Events one range reads at most.
const RANGE_EVENTS: i64 = 50;

impl Tool for Recall {
    fn name(&self) -> &str {
        "Recall"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Read this run's history back exactly, including what was compacted away or cut from a long result. op=search with a query: the events whose text matches, best first, each with its seq (scope=agent or user also searches your earlier runs for the same user). op=range with from_seq (and to_seq, offset): the text of those events.".into(),
            parameters: input_schema::<RecallInput>(),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        SideEffect::ReadOnly
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
            let op = match read_op::<RecallOp>(input, common_words) {
                Ok(op) => op,
                Err(msg) => return Ok(ToolOutcome::Done(ToolOutput::error(msg))),
            };
            let out = match op {
                RecallOp::Search => search(ctx, input).await,
                RecallOp::Range => range(ctx, input).await,
            };
            Ok(ToolOutcome::Done(out))
        })
    }
}

fn from<'a>(ctx: &'a ToolCtx<'a>) -> RecallFrom<'a> {
    RecallFrom {
        tenant: ctx.tenant(),
        run: ctx.run_id(),
        subject: ctx.subject(),
        agent: ctx.agent_name(),
    }
}

async fn search(ctx: &ToolCtx<'_>, input: &Value) -> ToolOutput {
    let input: RecallInput = match Reading::new(
        &[
            Field::Need("op"),
            Field::Need("query"),
            Field::Lenient("scope"),
            Field::Lenient("limit"),
        ],
        common_words,
    )
    .parse(input)
    {
        Ok(i) => i,
        Err(out) => return out,
    };
    let query = input.query.unwrap_or_default();
    if query.trim().is_empty() || query.len() > 1000 || query.contains('\0') {
        return ToolOutput::error("`query` is 1 to 1000 bytes of words to find (no NUL)");
    }
    let scope = input.scope.unwrap_or_default();
    let limit = input.limit.unwrap_or(DEFAULT_HITS).clamp(1, 50);
    let from = from(ctx);
    let searched = ctx
        .inner()
        .store
        .recall_search(&from, scope, &query, limit)
        .await;
    match searched {
        Ok(hits) => ToolOutput::json(&hits),
        Err(e) => ToolOutput::error(format!("the search could not be made: {e}")),
    }
}

async fn range(ctx: &ToolCtx<'_>, input: &Value) -> ToolOutput {
    let input: RecallInput = match Reading::new(
        &[
            Field::Need("op"),
            Field::Need("from_seq"),
            Field::Lenient("to_seq"),
            Field::Lenient("offset"),
            Field::Lenient("run_id"),
        ],
        common_words,
    )
    .parse(input)
    {
        Ok(i) => i,
        Err(out) => return out,
    };
    let from_seq = input.from_seq.unwrap_or(1).max(1);
    let to_seq = input.to_seq.unwrap_or(from_seq).max(from_seq);
    let store = &ctx.inner().store;
    let run = match input.run_id.as_deref() {
        None => ctx.run_id(),
        Some(id) => {
            let Ok(run) = id.parse::<RunId>() else {
                return ToolOutput::error(format!("`run_id` {id:?} is not a run id"));
            };
            // Only the runs a search could have found: this user's, in this tenant.
            match store.run_of_user(ctx.tenant(), ctx.subject(), run).await {
                Ok(true) => run,
                Ok(false) => {
                    return ToolOutput::error(format!(
                        "run {id} is not one of this user's runs; Recall reads only those"
                    ));
                }
                Err(e) => return ToolOutput::error(format!("the run could not be read: {e}")),
            }
        }
    };
    let events = match store
        .events_between(ctx.tenant(), run, from_seq, to_seq, RANGE_EVENTS)
        .await
    {
        Ok(e) => e,
        Err(e) => return ToolOutput::error(format!("the events could not be read: {e}")),
    };
    if events.is_empty() {
        return ToolOutput::error(format!(
            "run {run} has no events from seq {from_seq} to {to_seq}"
        ));
    }
    // One event reads as its text; several, each after a line naming its seq and kind.
    let text = if events.len() == 1 {
        event_text(&events[0].kind, &events[0].data)
    } else {
        let mut out = String::new();
        for e in &events {
            out.push_str(&format!("[seq {} {}]\n", e.seq, e.kind));
            out.push_str(&event_text(&e.kind, &e.data));
            out.push('\n');
        }
        out
    };
    let offset = usize::try_from(input.offset.unwrap_or(0)).unwrap_or(usize::MAX);
    if offset >= text.len() && offset > 0 {
        return ToolOutput::error(format!(
            "`offset` {offset} is past the end of the text ({} bytes)",
            text.len()
        ));
    }
    let mut at = offset;
    while !text.is_char_boundary(at) {
        at += 1;
    }
    // Exactly the text from the offset: what is longer than the run's result budget is cut by
    // the fold, with a marker giving the offset in this result to go on from.
    ToolOutput::ok(text[at..].to_owned())
}
