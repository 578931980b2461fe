//! The `Interruption` tool: ask the user a question and park the run until someone answers.
//! The call only validates; parking (one ask per turn, the `interruption` event, the run
//! waiting for the answer) is the orchestration's job, from [`ToolOutcome::Ask`].

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::tools::{InterruptionInput, input_schema};
use weft_core::message::ToolSpec;

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
            description: "Ask the user a question and wait for the answer. op=ask with a question; the run pauses until someone answers.".into(),
            parameters: input_schema::<InterruptionInput>(),
        }
    }

    /// Asking again is what a lost ask needs.
    fn side_effect(&self, _input: &Value) -> SideEffect {
        SideEffect::Idempotent
    }

    fn call<'a>(
        &'a self,
        _ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move {
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

/// The question asked, empty if there is none. Only `question` is read, and only if it is a
/// string: `op` is not looked at (there is one op) and a question of another type is none.
pub(super) fn question(input: &Value) -> String {
    Reading::new(&[Field::Lenient("question")], common_words)
        .read::<InterruptionInput>(input)
        .ok()
        .and_then(|i| i.question)
        .unwrap_or_default()
}
