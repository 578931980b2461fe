//! The `Context` tool: facts about the run itself (the time, the agent, its limits). Read-only.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use weft_core::message::ToolSpec;

use super::{Abort, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// `Context`.
pub struct Context;

impl Tool for Context {
    fn name(&self) -> &str {
        "Context"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Facts about this run. op=time: the current time (RFC 3339). op=self: this agent, its version hash, model, limits and the current iteration.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"op": {"type": "string", "enum": ["time", "self"]}},
                "required": ["op"]
            }),
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
        Box::pin(async move { Ok(ToolOutcome::Done(context(ctx, input))) })
    }
}

fn context(ctx: &ToolCtx<'_>, input: &Value) -> ToolOutput {
    match input.get("op").and_then(Value::as_str) {
        Some("time") => {
            let now = time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default();
            ToolOutput::ok(json!({ "time": now }).to_string())
        }
        Some("self") => {
            let spec = ctx.spec();
            ToolOutput::ok(
                json!({
                    "run_id": ctx.run_id(),
                    "agent": ctx.agent_name(),
                    "version": ctx.agent_hash(),
                    "description": ctx.agent().description,
                    "model": spec.model,
                    "iteration": ctx.iteration(),
                    "depth": ctx.run().depth,
                    "limits": {
                        "max_iterations": spec.max_iterations,
                        "max_tokens": spec.max_tokens,
                        "max_concurrent_children": spec.max_concurrent_children,
                        "max_depth": ctx.inner().cfg.max_depth,
                    },
                    "tools": spec.tools,
                })
                .to_string(),
            )
        }
        other => ToolOutput::error(format!(
            "`op` must be \"time\" or \"self\", got {}",
            other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
        )),
    }
}
