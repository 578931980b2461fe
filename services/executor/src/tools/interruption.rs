//! The `Interruption` tool: ask the user a question and park the run until someone answers
//! (`ask`), or tell whoever watches the run something without waiting (`notify`: a `notice`
//! event, committed with the call's result). An ask only validates here; parking (one ask per
//! turn, the `interruption` event, the run waiting for the answer) is the orchestration's job,
//! from [`ToolOutcome::Ask`].

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::tools::{InterruptionInput, InterruptionOp, input_schema};
use weft_core::message::ToolSpec;
use weft_core::run::{Notice, RunEvent};

use super::{
    Abort, Field, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, common_words,
};

/// `Interruption`.
pub struct Interruption;

impl Tool for Interruption {
    fn name(&self) -> &str {
        "Interruption"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Talk to the people watching this run. op=ask with a question: the run pauses until someone answers. op=notify with a message: they are told, and you go on at once.".into(),
            parameters: input_schema::<InterruptionInput>(),
        }
    }

    /// Asking again is what a lost ask needs.
    fn side_effect(&self, _input: &Value) -> SideEffect {
        SideEffect::Idempotent
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
            if op(input) == Some(InterruptionOp::Notify) {
                return Ok(ToolOutcome::Done(notify(ctx, input)));
            }
            let question = question(input);
            if question.is_empty() {
                return Ok(ToolOutcome::Done(ToolOutput::error(
                    "`question` is required: Interruption {\"op\": \"ask\", \"question\": \"…\"}",
                )));
            }
            Ok(ToolOutcome::Ask { question })
        })
    }
}

/// The most characters of a notice.
const NOTICE_MAX_CHARS: usize = 4096;

/// The op asked for, when it is a known one (anything else is read as an ask, as before ops
/// were typed).
fn op(input: &Value) -> Option<InterruptionOp> {
    input
        .get("op")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// `op=notify`: the `notice` event, committed with the call's result.
fn notify(ctx: &ToolCtx<'_>, input: &Value) -> ToolOutput {
    let message = Reading::new(&[Field::Lenient("message")], common_words)
        .read::<InterruptionInput>(input)
        .ok()
        .and_then(|i| i.message)
        .unwrap_or_default();
    if message.trim().is_empty() {
        return ToolOutput::error(
            "`message` is required: Interruption {\"op\": \"notify\", \"message\": \"…\"}",
        );
    }
    let chars = message.chars().count();
    if chars > NOTICE_MAX_CHARS {
        return ToolOutput::error(format!(
            "`message` is {chars} characters; a notice is at most {NOTICE_MAX_CHARS}: shorten it"
        ));
    }
    ctx.emit(RunEvent::Notice(Notice {
        tool_use_id: ctx.tool_use_id().to_owned(),
        message,
    }));
    ToolOutput::ok("notified: the people watching this run were told; go on")
}

/// The question asked, empty if there is none. Only `question` is read, and only if it is a
/// string: `op` is not looked at (there is one op) and a question of another type is none.
pub(super) fn question(input: &Value) -> String {
    Reading::new(&[Field::Lenient("question")], common_words)
        .read::<InterruptionInput>(input)
        .ok()
        .and_then(|i| i.question)
        .unwrap_or_default()
}
