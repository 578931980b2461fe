//! The `Agent` tool: run other agents as sub-runs and wait for their answers. The call checks
//! its input and the depth limit; creating, admitting, awaiting and cancelling the children is
//! the driver's sub-run machinery ([`crate::subruns`]). Idempotent: children are keyed by
//! (parent, call, index), so a repeat finds the same children.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{AgentInput, AgentOp, input_schema};
use weft_core::RunId;
use weft_core::message::ToolSpec;
use weft_core::run::{RunStatus, StopReason};

use super::{
    Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput, read_op,
};

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
            parameters: input_schema::<AgentInput>(),
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

/// How one sub-run ended, as the model sees it: a child's failure is a value, not an error of
/// the call.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum ChildOutcome {
    /// The child ran to an end.
    Finished {
        run_id: RunId,
        agent: String,
        status: RunStatus,
        stop_reason: Option<StopReason>,
        output: Option<String>,
        error: Option<Value>,
    },
    /// The child never ran (its agent could not be read) or was cancelled while waiting.
    Stopped {
        #[serde(skip_serializing_if = "Option::is_none")]
        run_id: Option<RunId>,
        agent: String,
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl ChildOutcome {
    /// A child that could not start: `error` says why.
    pub(crate) fn failed(agent: String, error: impl Into<String>) -> Self {
        Self::Stopped {
            run_id: None,
            agent,
            status: "failed",
            error: Some(error.into()),
        }
    }

    /// A child cancelled (with its parent) before it finished, or before it was made.
    pub(crate) fn cancelled(run_id: Option<RunId>, agent: String) -> Self {
        Self::Stopped {
            run_id,
            agent,
            status: "cancelled",
            error: None,
        }
    }
}

/// `Agent.parallel_spawn`'s result.
#[derive(Serialize)]
struct Results {
    results: Vec<ChildOutcome>,
}

/// `Agent.spawn` / `Agent.parallel_spawn`.
async fn spawn(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Abort> {
    let (op, items) = match parse(input) {
        Ok(parsed) => parsed,
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
    let results = ctx.host().spawn_children(ctx.tool_use_id(), items).await?;
    Ok(match op {
        AgentOp::Spawn => match results.first() {
            Some(one) => ToolOutput::json(one),
            None => ToolOutput::ok(Value::Null.to_string()),
        },
        AgentOp::ParallelSpawn => ToolOutput::json(&Results { results }),
    })
}

/// The op and the (agent, input) pairs to run, or what is wrong with the input.
/// `Agent`'s messages: one for the op, one for each op's fields.
fn words(field: &str, _: &Problem<'_>) -> Option<String> {
    Some(match field {
        "op" => "`op` must be \"spawn\" or \"parallel_spawn\"".into(),
        "agent" | "input" => "spawn needs `agent` and `input` (strings)".into(),
        "runs" => "parallel_spawn needs `runs`: [{agent, input}, …]".into(),
        f => {
            let (i, _) = f.strip_prefix("runs[")?.split_once(']')?;
            format!("runs[{i}] needs `agent` and `input` (strings)")
        }
    })
}

pub(super) fn parse(input: &Value) -> Result<(AgentOp, Vec<(String, String)>), String> {
    let op = read_op(input, words)?;
    let fields: &[Field] = match op {
        AgentOp::Spawn => &[Field::Need("op"), Field::Opt("agent"), Field::Opt("input")],
        AgentOp::ParallelSpawn => &[Field::Need("op"), Field::Opt("runs")],
    };
    let input: AgentInput = Reading::new(fields, words).read(input)?;
    let items = match input.op {
        AgentOp::Spawn => match (input.agent, input.input) {
            (Some(a), Some(t)) => vec![(a, t)],
            _ => return Err("spawn needs `agent` and `input` (strings)".into()),
        },
        AgentOp::ParallelSpawn => match input.runs {
            Some(runs) => runs.into_iter().map(|r| (r.agent, r.input)).collect(),
            None => return Err("parallel_spawn needs `runs`: [{agent, input}, …]".into()),
        },
    };
    Ok((input.op, items))
}
