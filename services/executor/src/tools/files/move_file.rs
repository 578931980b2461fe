//! `Move`: renames a file as one change (refused when `to` exists, unless `overwrite`). Keyed by
//! the call (`<run_id>:<tool_use_id>`): a repeat after a crash gets the first move's change
//! back and moves nothing, so it is `Idempotent`.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{MoveInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Changed, Fail, apply, clean, finish, read_input, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// `Move`.
pub struct Move;

impl Tool for Move {
    fn name(&self) -> &str {
        "Move"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Moves (renames) a file of a volume from `from` to `to`, both relative \
                to the volume root. Refused when a file is at `to`, unless overwrite is true."
                .into(),
            parameters: input_schema::<MoveInput>(),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        // Keyed by (run, call) in the substrate: a repeat changes nothing.
        SideEffect::Idempotent
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { finish(move_file(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("from"),
    Field::Need("to"),
    Field::Opt("overwrite"),
    Field::Opt("volume"),
];

async fn move_file(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: MoveInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), true)?;
    let from = clean("from", &input.from)?;
    let to = clean("to", &input.to)?;
    if from == to {
        return Err(Fail::from(format!(
            "`from` and `to` are both `{to}`; name another path to move to"
        )));
    }
    let op = v1::FileOp {
        path: from.clone(),
        if_match: None,
        op: Some(v1::file_op::Op::Move(v1::MoveFile {
            to: to.clone(),
            overwrite: input.overwrite.unwrap_or(false),
        })),
    };
    let change = apply(ctx, "Move", &target, vec![op]).await?;
    let moved = Changed::of(&change, &to);
    Ok(ToolOutput::json(&Moved {
        from,
        to,
        sha256: moved.sha256,
        size: moved.size,
        replayed: moved.replayed,
    }))
}

/// What `Move` answers.
#[derive(Serialize)]
struct Moved {
    from: String,
    to: String,
    sha256: Option<String>,
    size: i64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}
