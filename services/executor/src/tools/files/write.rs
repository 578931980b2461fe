//! `Write`: a whole file's content, made or replaced as one change. `if_match` goes to the
//! substrate as is (the sha256 the file must have now; `""` = it must not exist), so a write
//! based on a stale read is refused rather than clobbering. Keyed by the call
//! (`<run_id>:<tool_use_id>`): a repeat after a crash gets the first write's change back and
//! writes nothing, so it is `Idempotent`.

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::tools::{WriteInput, input_schema};
use weft_core::message::ToolSpec;

use super::{Changed, Fail, apply, clean, finish, put, read_input, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// `Write`.
pub struct Write;

impl Tool for Write {
    fn name(&self) -> &str {
        "Write"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Writes a whole file of a volume (made if missing, replaced if not; \
                directories need no making). Paths are relative to the volume root. Answers \
                the file's new sha256 and a unified diff. To change part of a file, use Edit."
                .into(),
            parameters: input_schema::<WriteInput>(),
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
        Box::pin(async move { finish(write(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("path"),
    Field::Need("content"),
    Field::Opt("if_match"),
    Field::Opt("volume"),
];

async fn write(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: WriteInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), true)?;
    let path = clean("path", &input.path)?;
    let op = put(
        path.clone(),
        input.content.into_bytes(),
        super::unquoted(input.if_match),
    );
    let change = apply(ctx, "Write", &target, vec![op]).await?;
    Ok(ToolOutput::json(&Changed::of(&change, &path)))
}
