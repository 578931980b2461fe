//! The `Agent` tool: run other agents as sub-runs and wait for their answers. The call checks
//! its input and the depth limit; creating, admitting, awaiting and cancelling the children is
//! the driver's sub-run machinery ([`crate::subruns`]). Idempotent: children are keyed by
//! (parent, call, index), so a repeat finds the same children.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use weft_core::message::ToolSpec;

use super::{Abort, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// Sub-runs one call may start.
const MAX_RUNS: usize = 64;

/// `Agent`.
pub struct Agent;

impl Tool for Agent {
    fn name(&self) -> &str {
        "Agent"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Run other agents as sub-runs and wait for their answers. op=spawn runs one (agent, input); op=parallel_spawn runs several (runs: [{agent, input}]) at once, up to this agent's max_concurrent_children at a time. A failed child is reported inside the result.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["spawn", "parallel_spawn"]},
                    "agent": {"type": "string"},
                    "input": {"type": "string"},
                    "runs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"agent": {"type": "string"}, "input": {"type": "string"}},
                            "required": ["agent", "input"]
                        }
                    }
                },
                "required": ["op"]
            }),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        SideEffect::Idempotent
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { Ok(ToolOutcome::Done(spawn(ctx, input).await?)) })
    }
}

/// `Agent.spawn` / `Agent.parallel_spawn`.
async fn spawn(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    let op = input.get("op").and_then(Value::as_str);
    let items = match parse(op, input) {
        Ok(items) => items,
        Err(msg) => return Ok(ToolOutput::error(msg)),
    };
    if items.is_empty() || items.len() > MAX_RUNS {
        return Ok(ToolOutput::error(format!(
            "give between 1 and {MAX_RUNS} runs, got {}",
            items.len()
        )));
    }
    let depth = ctx.run().depth;
    let max_depth = ctx.inner().cfg.max_depth;
    if u32::try_from(depth).unwrap_or(u32::MAX).saturating_add(1) > max_depth {
        return Ok(ToolOutput::error(format!(
            "sub-runs may nest at most {max_depth} deep (executor.max_depth); this run is at depth {depth}"
        )));
    }
    let out = ctx.host().spawn_children(ctx.tool_use_id(), items).await?;
    let text = if op == Some("spawn") {
        out.into_iter().next().unwrap_or(Value::Null).to_string()
    } else {
        json!({ "results": out }).to_string()
    };
    Ok(ToolOutput::ok(text))
}

/// The (agent, input) pairs to run, or what is wrong with the input.
fn parse(op: Option<&str>, input: &Value) -> Result<Vec<(String, String)>, String> {
    match op {
        Some("spawn") => {
            let agent = input.get("agent").and_then(Value::as_str);
            let text = input.get("input").and_then(Value::as_str);
            match (agent, text) {
                (Some(a), Some(t)) => Ok(vec![(a.to_owned(), t.to_owned())]),
                _ => Err("spawn needs `agent` and `input` (strings)".into()),
            }
        }
        Some("parallel_spawn") => {
            let Some(runs) = input.get("runs").and_then(Value::as_array) else {
                return Err("parallel_spawn needs `runs`: [{agent, input}, …]".into());
            };
            let mut items = Vec::new();
            for (i, r) in runs.iter().enumerate() {
                match (
                    r.get("agent").and_then(Value::as_str),
                    r.get("input").and_then(Value::as_str),
                ) {
                    (Some(a), Some(t)) => items.push((a.to_owned(), t.to_owned())),
                    _ => return Err(format!("runs[{i}] needs `agent` and `input` (strings)")),
                }
            }
            Ok(items)
        }
        _ => Err("`op` must be \"spawn\" or \"parallel_spawn\"".into()),
    }
}
