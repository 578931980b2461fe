//! `Delete`: removes a file as one change (only at `if_match` when given). Keyed by the call
//! (`<run_id>:<tool_use_id>`): a repeat after a crash gets the first delete's change back, so
//! it is `Idempotent`.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{DeleteInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Changed, Fail, apply, clean, finish, read_input, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// `Delete`.
pub struct Delete;

impl Tool for Delete {
    fn name(&self) -> &str {
        "Delete"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Deletes a file of a volume (relative to the volume root). With \
                if_match, only when the file's sha256 is that."
                .into(),
            parameters: input_schema::<DeleteInput>(),
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
        Box::pin(async move { finish(delete(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("path"),
    Field::Opt("if_match"),
    Field::Opt("volume"),
];

async fn delete(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: DeleteInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), true)?;
    let path = clean("path", &input.path)?;
    let op = v1::FileOp {
        path: path.clone(),
        if_match: super::unquoted(input.if_match),
        op: Some(v1::file_op::Op::Delete(v1::DeleteFile {})),
    };
    let change = apply(ctx, "Delete", &target, vec![op]).await?;
    let gone = Changed::of(&change, &path);
    Ok(ToolOutput::json(&Deleted {
        path,
        deleted: true,
        diff: gone.diff,
        replayed: gone.replayed,
    }))
}

/// What `Delete` answers.
#[derive(Serialize)]
struct Deleted {
    path: String,
    deleted: bool,
    diff: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}
