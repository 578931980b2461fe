//! `Grep`: lines matching a regex across a volume's text files (binaries skipped), as paths
//! (`files`, the default), lines (`content`, as `path:line:text`, context lines as
//! `path-line-text`) or counts (`count`); output capped by the substrate's limit and
//! [`MAX_GREP_BYTES`]. Only reads: `ReadOnly`.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use weft_api::tools::{GrepInput, GrepMode, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Fail, cut, finish, read_input, rpc, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// Lines (content mode) or files (otherwise) one `Grep` asks for.
pub const MAX_HITS: u32 = 200;
/// The most text of matching lines one `Grep` answers.
pub const MAX_GREP_BYTES: usize = 64 * 1024;

/// `Grep`.
pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "Grep"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Searches a volume's text files for a regular expression. mode=files \
                (default): the paths with a match; mode=content: the matching lines as \
                `path:line:text` (with `context` lines around each); mode=count: matches per \
                file. glob limits the files searched (e.g. `**/*.py`)."
                .into(),
            parameters: input_schema::<GrepInput>(),
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
        Box::pin(async move { finish(grep(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("pattern"),
    Field::Opt("glob"),
    Field::Opt("mode"),
    Field::Opt("case_insensitive"),
    Field::Opt("context"),
    Field::Opt("volume"),
];

fn mode_name(mode: GrepMode) -> &'static str {
    match mode {
        GrepMode::Files => "files",
        GrepMode::Content => "content",
        GrepMode::Count => "count",
    }
}

async fn grep(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: GrepInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), false)?;
    let mode = input.mode.unwrap_or_default();
    let context = input.context.unwrap_or(0);
    if context > 10 {
        return Err(Fail::from(format!(
            "`context` must be an integer from 0 to 10, got {context}"
        )));
    }
    let msg = v1::GrepRequest {
        volume: Some(target.volume),
        pattern: input.pattern,
        glob: input.glob,
        mode: mode_name(mode).to_owned(),
        case_insensitive: input.case_insensitive.unwrap_or(false),
        context,
        limit: MAX_HITS,
    };
    let r = rpc(ctx, msg, |mut c, r| async move { c.grep(r).await }).await?;
    Ok(ToolOutput::json(&answer(mode, r)))
}

/// What `Grep` answers in `mode`.
pub(crate) fn answer(mode: GrepMode, r: v1::GrepResponse) -> Value {
    let mut out = match mode {
        GrepMode::Files => json!({"files": r.files, "truncated": r.truncated}),
        GrepMode::Count => {
            let counts: Vec<Value> = r
                .counts
                .into_iter()
                .map(|c| json!({"path": c.path, "count": c.count}))
                .collect();
            json!({"counts": counts, "truncated": r.truncated})
        }
        GrepMode::Content => {
            let mut text = String::new();
            let mut cut_short = false;
            for l in &r.lines {
                let sep = if l.is_match { ':' } else { '-' };
                let line = format!("{}{sep}{}{sep}{}\n", l.path, l.line, l.text);
                if text.len() + line.len() > MAX_GREP_BYTES {
                    if text.is_empty() {
                        text = cut(&line, MAX_GREP_BYTES, "…\n");
                    }
                    cut_short = true;
                    break;
                }
                text.push_str(&line);
            }
            json!({"lines": text, "truncated": r.truncated || cut_short})
        }
    };
    if r.skipped_binary > 0
        && let Value::Object(m) = &mut out
    {
        m.insert("skipped_binary".into(), r.skipped_binary.into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(path: &str, n: u32, text: &str, is_match: bool) -> v1::GrepLine {
        v1::GrepLine {
            path: path.into(),
            line: n,
            text: text.into(),
            is_match,
        }
    }

    #[test]
    fn content_is_ripgrep_shaped_and_capped() {
        let r = v1::GrepResponse {
            lines: vec![line("a.py", 3, "x = 1", true), line("a.py", 4, "y", false)],
            skipped_binary: 2,
            ..Default::default()
        };
        assert_eq!(
            answer(GrepMode::Content, r),
            json!({"lines": "a.py:3:x = 1\na.py-4-y\n", "truncated": false, "skipped_binary": 2})
        );
        let long = "é".repeat(MAX_GREP_BYTES);
        let r = v1::GrepResponse {
            lines: vec![line("a", 1, &long, true), line("a", 2, "b", true)],
            ..Default::default()
        };
        let got = answer(GrepMode::Content, r);
        assert_eq!(got["truncated"], true);
        assert!(got["lines"].as_str().unwrap().len() <= MAX_GREP_BYTES + 4);
        let r = v1::GrepResponse {
            counts: vec![v1::GrepCount {
                path: "a".into(),
                count: 2,
            }],
            ..Default::default()
        };
        assert_eq!(
            answer(GrepMode::Count, r),
            json!({"counts": [{"path": "a", "count": 2}], "truncated": false})
        );
    }
}
