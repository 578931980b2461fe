//! `Edit`: replacements in a text file. The file is read, every edit is checked and applied in
//! memory on the blocking pool (`weft_volumes::edit::apply`: an exact, unique match first, then
//! a whitespace-tolerant match only when one candidate clearly wins, reported as `fuzzy: true`;
//! ambiguity refused, and so is a whitespace-tolerant search past its work budget),
//! and the result is written as one change with `if_match` = the sha256 read: a file changed
//! by someone else meanwhile makes the write a conflict the model is told about, never a
//! clobber.
//!
//! Exactly once (`Idempotent`): the change is keyed by the call (`<run_id>:<tool_use_id>`).
//! A repeat of the call — a run resumed after a crash — reads the file again:
//! - when the first attempt committed, the file is at that change's `after_sha`. Either the
//!   edits apply again and the keyed write gets the recorded change back (`replayed`, nothing
//!   written), or they no longer apply (the text replaced is gone) and the call finds its
//!   change in the run's changelog and answers it (`replayed`) instead of an error;
//! - when it did not commit, the file is still at `before_sha` and the edits are applied now;
//! - when the file is at neither (another writer came in between), the edits are applied to
//!   what is there if they still match, or refused with the usual message if not — the issue's
//!   "anything else" case, which here is decided by the edit itself, never by a clobber.

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::tools::{EditInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;
use weft_volumes::edit::{Edit as OneEdit, EditError};

use super::{Changed, Fail, Target, apply_status, clean, finish, put, read_input, rpc, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// `Edit`.
pub struct Edit;

impl Tool for Edit {
    fn name(&self) -> &str {
        "Edit"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Changes a text file of a volume by replacing text: each edit replaces \
                `old` (copied from the file, without Read's line numbers; it must occur once \
                unless replace_all) with `new`. Edits apply in order; if any cannot apply, \
                none is made. Answers the file's new sha256 and a unified diff."
                .into(),
            parameters: input_schema::<EditInput>(),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        // Keyed by (run, call) in the substrate; see the module header for a repeat.
        SideEffect::Idempotent
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { finish(edit(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("path"),
    Field::Need("edits"),
    Field::Opt("volume"),
];

async fn edit(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: EditInput = read_input(input, FIELDS)?;
    if input.edits.is_empty() {
        return Err(Fail::from(
            "`edits` is empty; give at least one {old, new}".to_owned(),
        ));
    }
    let target = target(ctx, input.volume.as_deref(), true)?;
    let path = clean("path", &input.path)?;
    let msg = v1::ReadFileRequest {
        volume: Some(target.volume.clone()),
        path: path.clone(),
    };
    let file = match rpc(ctx, msg, |mut c, r| async move { c.read_file(r).await }).await {
        Ok(f) => f,
        Err(s) if s.code() == tonic::Code::NotFound && file_missing(&s) => {
            return Err(Fail::from(format!(
                "`{path}` does not exist; use Write to make it"
            )));
        }
        Err(s) => return Err(s.into()),
    };
    let before_sha = file.entry.map(|e| e.sha256).unwrap_or_default();
    if weft_volumes::text::is_binary(&file.content) {
        return Err(Fail::from(format!(
            "`{path}` is a binary file; Edit changes text files only (use Write)"
        )));
    }
    let Ok(text) = String::from_utf8(file.content) else {
        return Err(Fail::from(format!(
            "`{path}` is not UTF-8 text; Edit changes text files only (use Write)"
        )));
    };
    let edits: Vec<OneEdit> = input
        .edits
        .into_iter()
        .map(|e| OneEdit {
            old: e.old,
            new: e.new,
            replace_all: e.replace_all.unwrap_or(false),
        })
        .collect();
    // Matching is CPU work over a whole file (bounded in weft-volumes, still up to
    // FUZZY_MAX_COMPARISONS line comparisons per edit): off the async workers.
    let applied = tokio::task::spawn_blocking(move || weft_volumes::edit::apply(&text, &edits))
        .await
        .map_err(|e| {
            Fail::from(format!(
                "the edits could not be worked out ({e}); no edit was made: call Edit again"
            ))
        })?;
    let edited = match applied {
        Ok(e) => e,
        Err(e) => {
            // A repeat of a call whose change committed: the text it replaced is gone.
            if let Some(change) = recorded(ctx, &target).await? {
                ctx.emit(super::file_changed(&target, ctx.tool_use_id(), &change));
                let mut answer = Changed::of(&change, &path);
                answer.replayed = true;
                return Ok(ToolOutput::json(&answer));
            }
            return Err(Fail::from(refusal(&e)));
        }
    };
    let op = put(path.clone(), edited.content.into_bytes(), Some(before_sha));
    let change = match apply_status(ctx, "Edit", &target, vec![op]).await {
        Ok(c) => c,
        Err(s) if conflict(&s) => {
            return Err(Fail::from(format!(
                "`{path}` changed while this edit was being made (another writer came in \
                 between); no edit was made: call Edit again (it reads the file anew)"
            )));
        }
        Err(s) => return Err(s.into()),
    };
    let mut answer = Changed::of(&change, &path);
    answer.fuzzy = edited.fuzzy && !change.replayed;
    Ok(ToolOutput::json(&answer))
}

/// Whether the write was refused because the file is no longer at the sha256 read.
fn conflict(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::FailedPrecondition
        && weft_core::Error::from(s)
            .param
            .is_some_and(|p| p.ends_with("if_match"))
}

/// Whether a NOT_FOUND is about the file (rather than the volume or the run).
fn file_missing(s: &tonic::Status) -> bool {
    weft_core::Error::from(s).param.as_deref() == Some("path")
}

/// The message for edits that cannot apply (`weft_volumes` says what to do next).
pub(crate) fn refusal(e: &EditError) -> String {
    format!("{e}; no edit was made")
}

/// Pages of the run's changelog looked through for this call's change.
const RECORDED_PAGES: usize = 5;

/// This call's change, when an earlier attempt of it committed one: the run's changes of the
/// volume, newest first (a resumed call's change is among the newest).
async fn recorded(ctx: &ToolCtx<'_>, target: &Target) -> Result<Option<v1::Change>, Fail> {
    let mut before_seq = None;
    for _ in 0..RECORDED_PAGES {
        let msg = v1::ListChangesRequest {
            volume: Some(target.volume.clone()),
            run_id: Some(ctx.run_id().to_string()),
            before_seq,
            limit: 100,
            with_diff: true,
        };
        let page = match rpc(ctx, msg, |mut c, r| async move { c.list_changes(r).await }).await {
            Ok(p) => p,
            // No volume yet (an ephemeral one is made by its first write): nothing recorded.
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(None),
            Err(s) => return Err(s.into()),
        };
        if let Some(c) = page
            .changes
            .iter()
            .find(|c| c.tool_use_id.as_deref() == Some(ctx.tool_use_id()))
        {
            return Ok(Some(c.clone()));
        }
        match page.changes.last() {
            Some(last) if page.changes.len() == 100 => before_seq = Some(last.seq),
            _ => return Ok(None),
        }
    }
    Ok(None)
}
