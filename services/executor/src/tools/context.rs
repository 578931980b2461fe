//! The `Context` tool: facts about the run itself (the time, the agent, its limits, how full
//! its context is), and asking for the context to be compacted before the next step.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{ContextInput, ContextOp, input_schema};
use weft_core::RunId;
use weft_core::message::ToolSpec;
use weft_core::run::{CompactionRequested, RunEvent};

use super::{
    Abort, Field, Gauge, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, common_words,
    read_op,
};

/// `Context`.
pub struct Context;

impl Tool for Context {
    fn name(&self) -> &str {
        "Context"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Facts about this run. op=time: the current time (RFC 3339). op=self: this agent, its version hash, model, limits, the current iteration and how full the context is (estimated tokens of the prompt against the model's window). op=compact: compact the context before your next step (earlier turns become a summary; Recall reads them back exactly).".into(),
            parameters: input_schema::<ContextInput>(),
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
            let gauge = ctx.host().context_gauge().await;
            Ok(ToolOutcome::Done(context(ctx, input, gauge)))
        })
    }
}

/// `op=time`.
#[derive(Serialize)]
struct Now {
    time: String,
}

/// `op=self`.
#[derive(Serialize)]
struct Myself<'a> {
    run_id: RunId,
    agent: &'a str,
    version: &'a str,
    description: &'a str,
    model: &'a str,
    iteration: u32,
    depth: i32,
    limits: Limits,
    tools: &'a [String],
    context: Gauge,
}

#[derive(Serialize)]
struct Limits {
    max_iterations: u32,
    max_tokens: Option<u32>,
    max_concurrent_children: u32,
    max_depth: u32,
}

fn context(ctx: &ToolCtx<'_>, input: &Value, gauge: Gauge) -> ToolOutput {
    if let Err(msg) = read_op::<ContextOp>(input, common_words) {
        return ToolOutput::error(msg);
    }
    let input: ContextInput = match Reading::new(&[Field::Need("op")], common_words).parse(input) {
        Ok(i) => i,
        Err(out) => return out,
    };
    match input.op {
        ContextOp::Time => {
            let time = time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            ToolOutput::json(&Now { time })
        }
        ContextOp::Own => {
            let spec = ctx.spec();
            ToolOutput::json(&Myself {
                run_id: ctx.run_id(),
                agent: ctx.agent_name(),
                version: ctx.agent_hash(),
                description: &ctx.agent().description,
                model: &spec.model,
                iteration: ctx.iteration(),
                depth: ctx.run().depth,
                limits: Limits {
                    max_iterations: spec.max_iterations,
                    max_tokens: spec.max_tokens,
                    max_concurrent_children: spec.max_concurrent_children,
                    max_depth: ctx.inner().cfg.max_depth,
                },
                tools: &spec.tools,
                context: gauge,
            })
        }
        ContextOp::Compact => {
            // Folded by the loop: the compaction happens before the run's next step.
            ctx.emit(RunEvent::CompactionRequested(CompactionRequested {
                trigger: "self".to_owned(),
            }));
            ToolOutput::ok(format!(
                "The context will be compacted before your next step: earlier turns become a summary (about {} tokens now{}). Recall reads the exact text back by words or by seq.",
                gauge.estimated_tokens,
                gauge
                    .window_tokens
                    .map(|w| format!(" of a {w}-token window"))
                    .unwrap_or_default()
            ))
        }
    }
}
