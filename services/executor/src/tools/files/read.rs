//! `Read`: a text file of a volume as numbered lines (`{n:>6}\t{line}`), from `offset` for
//! `limit` lines, cut at [`MAX_READ_BYTES`]; the last line says how to read on when lines were
//! left out. A binary file is not shown: the answer says so, with its size and sha256. Only
//! reads: `ReadOnly`.

use futures::future::BoxFuture;
use serde_json::Value;
use weft_api::tools::{ReadInput, input_schema};
use weft_core::message::ToolSpec;
use weft_proto::v1;

use super::{Fail, clean, finish, read_input, rpc, target};
use crate::tools::{Abort, Field, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// Lines shown when the call names no `limit`.
pub const DEFAULT_LINES: usize = 2000;
/// The most text one `Read` answers.
pub const MAX_READ_BYTES: usize = 256 * 1024;

/// `Read`.
pub struct Read;

impl Tool for Read {
    fn name(&self) -> &str {
        "Read"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description:
                "Reads a text file of a volume as numbered lines (`<line number>\\t<text>`; \
                the numbers are not part of the file). Paths are relative to the volume root. \
                Long files come a part at a time: pass offset (the first line, 1-based) and \
                limit (how many lines) to read on."
                    .into(),
            parameters: input_schema::<ReadInput>(),
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
        Box::pin(async move { finish(read(ctx, input).await).map(ToolOutcome::Done) })
    }
}

pub(super) const FIELDS: &[Field] = &[
    Field::Need("path"),
    Field::Opt("offset"),
    Field::Opt("limit"),
    Field::Opt("volume"),
];

async fn read(ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
    let input: ReadInput = read_input(input, FIELDS)?;
    let target = target(ctx, input.volume.as_deref(), false)?;
    let path = clean("path", &input.path)?;
    let msg = v1::ReadFileRequest {
        volume: Some(target.volume),
        path: path.clone(),
    };
    let file = rpc(ctx, msg, |mut c, r| async move { c.read_file(r).await }).await?;
    let entry = file.entry.unwrap_or_default();
    Ok(ToolOutput::ok(show(
        &path,
        &entry.sha256,
        &file.content,
        input.offset,
        input.limit,
    )))
}

/// What `Read` answers for `content` (the file at `path` with hash `sha256`).
pub(crate) fn show(
    path: &str,
    sha256: &str,
    content: &[u8],
    offset: Option<u64>,
    limit: Option<u64>,
) -> String {
    if weft_volumes::text::is_binary(content) {
        return format!(
            "`{path}` is a binary file ({} bytes, sha256 {sha256}); Read shows text files only",
            content.len()
        );
    }
    let Ok(text) = std::str::from_utf8(content) else {
        return format!(
            "`{path}` is not UTF-8 text ({} bytes, sha256 {sha256}); Read shows text files only",
            content.len()
        );
    };
    if text.is_empty() {
        return format!("(`{path}` is empty)");
    }
    let offset = offset
        .map_or(1, |o| usize::try_from(o).unwrap_or(usize::MAX))
        .max(1);
    let limit = limit.map_or(DEFAULT_LINES, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let n = weft_volumes::text::numbered(text, offset, limit.max(1), MAX_READ_BYTES);
    if n.first_line > n.total_lines || n.text.is_empty() {
        return format!(
            "(`{path}` has {} lines; offset {offset} is past the end)",
            n.total_lines
        );
    }
    let mut out = n.text;
    if n.truncated && n.last_line < n.total_lines {
        out.push_str(&format!(
            "(lines {}-{} of {}; call Read with offset={} to read on)\n",
            n.first_line,
            n.last_line,
            n.total_lines,
            n.last_line + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_windows_say_how_to_read_on() {
        let text = b"one\ntwo\nthree\n";
        assert_eq!(
            show("a.txt", "s", text, None, None),
            "     1\tone\n     2\ttwo\n     3\tthree\n"
        );
        assert_eq!(
            show("a.txt", "s", text, Some(2), Some(1)),
            "     2\ttwo\n(lines 2-2 of 3; call Read with offset=3 to read on)\n"
        );
        assert_eq!(
            show("a.txt", "s", text, Some(9), None),
            "(`a.txt` has 3 lines; offset 9 is past the end)"
        );
        assert_eq!(show("e", "s", b"", None, None), "(`e` is empty)");
    }

    #[test]
    fn binary_files_are_described_not_shown() {
        let got = show("b.bin", "ab12", &[0, 159, 146, 150], None, None);
        assert_eq!(
            got,
            "`b.bin` is a binary file (4 bytes, sha256 ab12); Read shows text files only"
        );
    }
}
