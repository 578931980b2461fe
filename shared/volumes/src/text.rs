//! Text for the Read tool: whether a file is text at all ([`is_binary`]), and a window of its
//! lines, numbered like `cat -n` and capped by lines and bytes ([`numbered`]). Lines are split
//! on `\n`; a `\r` before it is not shown. A line longer than [`MAX_LINE_CHARS`] characters is
//! cut with a marker; the byte cap never cuts inside a UTF-8 character.

/// How far [`is_binary`] looks for a NUL byte.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Characters of a line [`numbered`] shows before cutting it.
pub const MAX_LINE_CHARS: usize = 2000;

/// Whether `bytes` are not text: a NUL in the first [`BINARY_SNIFF_BYTES`], or not UTF-8.
pub fn is_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    head.contains(&0) || std::str::from_utf8(bytes).is_err()
}

/// A window of numbered lines, as [`numbered`] made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    /// The lines shown, each `{n:>6}\t{line}\n`.
    pub text: String,
    /// The first line asked for (1-based).
    pub first_line: usize,
    /// The last line shown; `first_line - 1` when none was.
    pub last_line: usize,
    /// Lines in the whole text (a final `\n` does not start another line).
    pub total_lines: usize,
    /// Whether lines after `last_line` exist, or the last one shown was cut by the byte cap: the
    /// caller may read on from `last_line + 1`.
    pub truncated: bool,
}

impl Numbered {
    /// How many lines were shown.
    pub fn lines_shown(&self) -> usize {
        (self.last_line + 1).saturating_sub(self.first_line)
    }
}

/// Lines of `text` from line `offset` (1-based; 0 reads as 1), at most `limit` of them and at
/// most `max_bytes` bytes of output. A first line that alone passes `max_bytes` is shown cut, so
/// a window is never empty while the file has lines and the cap is not 0.
pub fn numbered(text: &str, offset: usize, limit: usize, max_bytes: usize) -> Numbered {
    let first_line = offset.max(1);
    let total_lines = count_lines(text);
    let mut out = String::new();
    let mut last_line = first_line - 1;
    let mut cut_by_bytes = false;
    for (i, line) in lines(text).enumerate().skip(first_line - 1).take(limit) {
        let n = i + 1;
        let mut row = format!("{n:>6}\t");
        push_cut_line(&mut row, line);
        row.push('\n');
        if out.len() + row.len() > max_bytes {
            if out.is_empty() && max_bytes > 0 {
                let end = floor_char_boundary(&row, max_bytes);
                out.push_str(&row[..end]);
                last_line = n;
            }
            cut_by_bytes = true;
            break;
        }
        out.push_str(&row);
        last_line = n;
    }
    Numbered {
        text: out,
        first_line,
        last_line,
        total_lines,
        truncated: cut_by_bytes || last_line < total_lines,
    }
}

/// The lines of `text`, split on `\n`, a trailing `\r` dropped; a final `\n` ends the last line.
pub fn lines(text: &str) -> impl Iterator<Item = &str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let empty = text.is_empty();
    body.split('\n')
        .filter(move |_| !empty)
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
}

/// How many lines [`lines`] yields.
pub fn count_lines(text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        let newlines = text.bytes().filter(|&b| b == b'\n').count();
        if text.ends_with('\n') {
            newlines
        } else {
            newlines + 1
        }
    }
}

/// Appends `line` to `out`, cut after [`MAX_LINE_CHARS`] characters with a marker saying how
/// long it was.
fn push_cut_line(out: &mut String, line: &str) {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => out.push_str(line),
        Some((end, _)) => {
            out.push_str(&line[..end]);
            out.push_str(&format!(
                " … [line cut at {MAX_LINE_CHARS} of {} characters]",
                line.chars().count()
            ));
        }
    }
}

/// The largest index `<= i` on a char boundary of `s`.
pub(crate) fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_detection() {
        assert!(!is_binary(b""));
        assert!(!is_binary("héllo\nwörld\r\n".as_bytes()));
        assert!(is_binary(b"abc\0def"));
        assert!(is_binary(&[0xff, 0xfe, b'a']));
        // a NUL past the sniffed head of valid UTF-8 is text
        let mut late = vec![b'a'; BINARY_SNIFF_BYTES];
        late.push(0);
        assert!(!is_binary(&late));
        // invalid UTF-8 anywhere is binary
        let mut bad_tail = vec![b'a'; 100_000];
        bad_tail.push(0xc3);
        assert!(is_binary(&bad_tail));
    }

    #[test]
    fn lines_are_counted_like_an_editor() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("a\n\n"), 2);
        assert_eq!(lines("a\r\nb\n\n").collect::<Vec<_>>(), ["a", "b", ""]);
        assert_eq!(lines("").count(), 0);
        for t in ["", "a", "a\n", "a\nb", "\n\n", "x\r\n"] {
            assert_eq!(lines(t).count(), count_lines(t), "{t:?}");
        }
    }

    #[test]
    fn numbered_window() {
        let text = "one\ntwo\r\nthree\nfour\n";
        let all = numbered(text, 1, 100, 10_000);
        assert_eq!(
            all.text,
            "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n"
        );
        assert_eq!((all.first_line, all.last_line, all.total_lines), (1, 4, 4));
        assert!(!all.truncated);

        let mid = numbered(text, 2, 2, 10_000);
        assert_eq!(mid.text, "     2\ttwo\n     3\tthree\n");
        assert_eq!(
            (mid.first_line, mid.last_line, mid.lines_shown()),
            (2, 3, 2)
        );
        assert!(mid.truncated);

        let zero = numbered(text, 0, 1, 10_000);
        assert_eq!(zero.first_line, 1);
        assert_eq!(zero.text, "     1\tone\n");
    }

    #[test]
    fn past_the_end_shows_nothing() {
        let n = numbered("a\nb\n", 5, 10, 1000);
        assert_eq!(n.text, "");
        assert_eq!(
            (n.first_line, n.last_line, n.total_lines, n.lines_shown()),
            (5, 4, 2, 0)
        );
        assert!(!n.truncated);
        let empty = numbered("", 1, 10, 1000);
        assert_eq!(
            (empty.text.as_str(), empty.total_lines, empty.truncated),
            ("", 0, false)
        );
    }

    #[test]
    fn the_byte_cap_stops_at_a_whole_line() {
        let text = "aaaa\nbbbb\ncccc\n";
        // each row is 6 + 1 + 4 + 1 = 12 bytes
        let n = numbered(text, 1, 100, 30);
        assert_eq!(n.text, "     1\taaaa\n     2\tbbbb\n");
        assert_eq!(n.last_line, 2);
        assert!(n.truncated);
    }

    #[test]
    fn a_first_line_over_the_byte_cap_is_cut_on_a_char_boundary() {
        let text = "ééééééééé\nnext\n";
        let n = numbered(text, 1, 100, 10); // "     1\t" is 7 bytes, then 2-byte chars
        assert_eq!(n.text, "     1\té");
        assert_eq!(n.last_line, 1);
        assert!(n.truncated);
        assert!(numbered(text, 1, 100, 0).text.is_empty());
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let long = "ж".repeat(MAX_LINE_CHARS + 5);
        let n = numbered(&long, 1, 1, 1 << 20);
        assert!(n.text.contains(&"ж".repeat(MAX_LINE_CHARS)));
        assert!(!n.text.contains(&"ж".repeat(MAX_LINE_CHARS + 1)));
        assert!(
            n.text.contains("[line cut at 2000 of 2005 characters]"),
            "{}",
            &n.text[n.text.len() - 60..]
        );
        let exact = "x".repeat(MAX_LINE_CHARS);
        assert!(!numbered(&exact, 1, 1, 1 << 20).text.contains("cut"));
    }
}
