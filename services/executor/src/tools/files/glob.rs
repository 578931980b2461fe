//! `Glob`: the paths of a volume matching a pattern, newest first, at most [`MAX_PATHS`]. Only
//! reads: `ReadOnly`.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{GlobInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Fail, finish, read_input, rpc, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// The most paths one `Glob` answers.
pub const MAX_PATHS: u32 = 200;

/// `Glob`.
pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &str {
        "Glob"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Finds files of a volume by path pattern (`*` within a directory, `**` \
                across directories, e.g. `**/*.md`), newest first."
                .into(),
            parameters: input_schema::<GlobInput>(),
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
        Box::pin(async move { finish(glob(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[Field::Need("pattern"), Field::Opt("volume")];

/// One path found.
#[derive(Serialize)]
pub(crate) struct Found {
    pub path: String,
    pub size: i64,
    pub sha256: String,
    pub updated_at: String,
}

impl From<v1::FileEntry> for Found {
    fn from(e: v1::FileEntry) -> Self {
        Self {
            path: e.path,
            size: e.size,
            sha256: e.sha256,
            updated_at: e.updated_at,
        }
    }
}

async fn glob(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: GlobInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), false)?;
    let msg = v1::GlobRequest {
        volume: Some(target.volume),
        pattern: input.pattern,
        limit: MAX_PATHS,
    };
    let r = rpc(ctx, msg, |mut c, r| async move { c.glob(r).await }).await?;
    let files: Vec<Found> = r.files.into_iter().map(Found::from).collect();
    Ok(ToolOutput::json(&serde_json::json!({
        "files": files,
        "truncated": r.truncated,
    })))
}
