//! Unified diffs of a file's change, as every mutating file tool returns them and the run's
//! event stream shows them: `--- a/<path>` / `+++ b/<path>` headers and 3 lines of context
//! (the `similar` crate's Myers diff with a time budget, after which the diff is still correct
//! but may be longer than the shortest one).

use std::time::Duration;

use similar::TextDiff;

use crate::text::floor_char_boundary;

/// Lines of context around each change.
pub const CONTEXT_LINES: usize = 3;
/// How long the diff may search for the shortest edit script before settling for a longer one.
const DIFF_BUDGET: Duration = Duration::from_millis(500);

/// A unified diff of `before` → `after` for the file `path`; empty when they are equal.
pub fn unified(path: &str, before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(DIFF_BUDGET)
        .diff_lines(before, after)
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// [`unified`] for raw bytes: text diffs as text, a binary side (see
/// [`crate::text::is_binary`]) gives the one line `Binary files a/<path> and b/<path> differ`.
pub fn unified_bytes(path: &str, before: &[u8], after: &[u8]) -> String {
    if before == after {
        return String::new();
    }
    match (std::str::from_utf8(before), std::str::from_utf8(after)) {
        (Ok(b), Ok(a)) if !crate::text::is_binary(before) && !crate::text::is_binary(after) => {
            unified(path, b, a)
        }
        _ => format!("Binary files a/{path} and b/{path} differ\n"),
    }
}

/// [`unified`], at most `max_bytes` long: cut after the last whole line that fits with a final
/// marker line `... diff cut: N of M bytes shown`.
pub fn unified_capped(path: &str, before: &str, after: &str, max_bytes: usize) -> String {
    cap(unified(path, before, after), max_bytes)
}

/// Cuts a diff to `max_bytes` as [`unified_capped`] does.
pub fn cap(diff: String, max_bytes: usize) -> String {
    if diff.len() <= max_bytes {
        return diff;
    }
    let total = diff.len();
    // the marker's length depends on the number shown; reserve for the longest
    let reserve = format!("... diff cut: {total} of {total} bytes shown\n").len();
    let room = floor_char_boundary(&diff, max_bytes.saturating_sub(reserve));
    let keep = diff[..room].rfind('\n').map_or(0, |i| i + 1);
    let mut out = diff[..keep].to_owned();
    out.push_str(&format!("... diff cut: {keep} of {total} bytes shown\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_hunks_and_context() {
        let before: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        let after = before.replace("line 5\n", "line five\n");
        let d = unified("src/a.txt", &before, &after);
        assert_eq!(
            d,
            "--- a/src/a.txt\n+++ b/src/a.txt\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
        );
    }

    #[test]
    fn equal_text_has_no_diff() {
        assert_eq!(unified("a", "x\n", "x\n"), "");
        assert_eq!(unified_bytes("a", b"\0", b"\0"), "");
    }

    #[test]
    fn creation_and_a_missing_final_newline() {
        let d = unified("new.txt", "", "a\nb");
        assert!(
            d.starts_with("--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b"),
            "{d}"
        );
        assert!(d.contains("\\ No newline at end of file"), "{d}");
    }

    #[test]
    fn binary_sides_are_named_not_diffed() {
        assert_eq!(
            unified_bytes("x.bin", b"a\0b", b"a\0c"),
            "Binary files a/x.bin and b/x.bin differ\n"
        );
        assert_eq!(
            unified_bytes("x", &[0xff], b"text"),
            "Binary files a/x and b/x differ\n"
        );
        assert!(unified_bytes("t", b"a\n", b"b\n").contains("-a\n+b\n"));
    }

    #[test]
    fn capped_diffs_end_on_a_whole_line_with_a_marker() {
        let before: String = (0..200).map(|i| format!("old line {i}\n")).collect();
        let after: String = (0..200).map(|i| format!("new line {i}\n")).collect();
        let full = unified("f", &before, &after);
        assert_eq!(unified_capped("f", &before, &after, full.len()), full);
        let cut = unified_capped("f", &before, &after, 300);
        assert!(cut.len() <= 300, "{}", cut.len());
        assert!(cut.starts_with("--- a/f\n+++ b/f\n"));
        let marker = format!(" of {} bytes shown\n", full.len());
        assert!(cut.ends_with(&marker), "{cut}");
        let body = &cut[..cut.rfind("... diff cut").unwrap()];
        assert!(full.starts_with(body) && body.ends_with('\n'));
        // a cap smaller than the marker leaves the marker alone
        assert!(unified_capped("f", &before, &after, 5).starts_with("... diff cut: 0 of"));
    }
}
