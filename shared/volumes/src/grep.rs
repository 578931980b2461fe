//! Grep over one file's bytes, for the Grep tool: a regular expression (the `regex` crate's
//! syntax, no look-around or backreferences, linear time), matched line by line so a match never
//! spans lines. Binary files (see [`crate::text::is_binary`]) are skipped. The three modes give
//! the files that match, the matching lines with context, or a count per file. Content mode lists
//! at most a budget of lines per file (counting on exactly past it); the caller caps what it
//! returns across files.

use std::collections::VecDeque;

use regex::{Regex, RegexBuilder};

use crate::text::lines;

/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// The most context lines shown around a match; more is capped to it.
pub const MAX_CONTEXT: u32 = 10;
/// Characters of a line shown before it is cut.
pub const MAX_LINE_CHARS: usize = 500;
/// The most lines (matches and context) [`Grep::search`] lists for one file in content mode.
pub const DEFAULT_MAX_LINES: usize = 10_000;
/// The largest compiled program a pattern may make, in bytes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// What a search reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GrepMode {
    /// The files that match.
    #[default]
    Files,
    /// The matching lines, with context.
    Content,
    /// How many lines match, per file.
    Count,
}

impl GrepMode {
    /// Parses `files`, `content` or `count`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "files" => Some(GrepMode::Files),
            "content" => Some(GrepMode::Content),
            "count" => Some(GrepMode::Count),
            _ => None,
        }
    }

    /// `files`, `content` or `count`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrepMode::Files => "files",
            GrepMode::Content => "content",
            GrepMode::Count => "count",
        }
    }
}

/// The options of a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepOptions {
    /// The regular expression.
    pub pattern: String,
    /// Match regardless of case.
    pub case_insensitive: bool,
    /// Lines of context before and after each match (content mode; capped at [`MAX_CONTEXT`]).
    pub context: u32,
    /// What to report.
    pub mode: GrepMode,
}

/// A refused search: the message names the field `pattern` and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GrepError {
    /// What is wrong and how to fix it.
    pub message: String,
}

impl GrepError {
    /// The input field to report.
    pub fn field(&self) -> &'static str {
        "pattern"
    }
}

/// A compiled search.
#[derive(Debug, Clone)]
pub struct Grep {
    regex: Regex,
    /// `regex` in multi-line mode, run over a whole file without `\r` first: a line's match is
    /// also a match of the whole text, so a file it does not match has no matching line.
    whole: Option<Regex>,
    context: u32,
    mode: GrepMode,
}

/// A line of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitLine {
    /// The 1-based line number.
    pub line: u32,
    /// The line (`\r` dropped), cut after [`MAX_LINE_CHARS`] characters with a marker.
    pub text: String,
    /// Whether the line matches (else it is context).
    pub is_match: bool,
}

/// One file's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileHits {
    /// How many lines match.
    pub count: u32,
    /// In content mode, the matching lines and their context, in order, each once, up to the
    /// search's budget; else empty.
    pub lines: Vec<HitLine>,
    /// Whether content mode left lines out for the budget (`count` still counts every match).
    pub truncated: bool,
}

impl Grep {
    /// Compiles a search.
    pub fn new(opts: GrepOptions) -> Result<Grep, GrepError> {
        if opts.pattern.is_empty() {
            return Err(GrepError {
                message: "`pattern` must not be empty; give a regular expression such as `fn main` or `TODO|FIXME`".to_owned(),
            });
        }
        if opts.pattern.len() > MAX_PATTERN_BYTES {
            return Err(GrepError {
                message: format!(
                    "`pattern` must be at most {MAX_PATTERN_BYTES} bytes, got {}; use a shorter regular expression",
                    opts.pattern.len()
                ),
            });
        }
        let build = |multi_line: bool| {
            RegexBuilder::new(&opts.pattern)
                .case_insensitive(opts.case_insensitive)
                .multi_line(multi_line)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(2 * REGEX_SIZE_LIMIT)
                .build()
        };
        let regex = build(false).map_err(|e| GrepError {
                message: match e {
                    regex::Error::CompiledTooBig(_) => "`pattern` compiles to too large a program; use a simpler regular expression (fewer or smaller repetitions)".to_owned(),
                    e => format!(
                        "`pattern` is not a valid regular expression (Rust regex syntax; escape special characters such as `(` as `\\(`): {e}"
                    ),
                },
            })?;
        // the same pattern compiled, so it cannot fail here; without it every line is tried
        let whole = build(true).ok();
        Ok(Grep {
            regex,
            whole,
            context: opts.context.min(MAX_CONTEXT),
            mode: opts.mode,
        })
    }

    /// The mode searched in.
    pub fn mode(&self) -> GrepMode {
        self.mode
    }

    /// Searches one file's bytes: `None` for a binary file, else its hits (count 0 when nothing
    /// matches). Content mode lists at most [`DEFAULT_MAX_LINES`] lines; see
    /// [`Grep::search_capped`].
    pub fn search(&self, bytes: &[u8]) -> Option<FileHits> {
        self.search_capped(bytes, DEFAULT_MAX_LINES)
    }

    /// [`Grep::search`] listing at most `max_lines` lines (matches and context) in content mode:
    /// lines stop being collected once the budget is spent, and `truncated` says some were left
    /// out. `count` is always exact, and no line is ever built in the other modes.
    pub fn search_capped(&self, bytes: &[u8], max_lines: usize) -> Option<FileHits> {
        if crate::text::is_binary(bytes) {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        // most files end here (with a `\r`, `$` would not match before it in the whole text)
        if let Some(whole) = &self.whole
            && !text.contains('\r')
            && !whole.is_match(text)
        {
            return Some(FileHits::default());
        }
        if self.mode != GrepMode::Content {
            let count = lines(text).filter(|l| self.regex.is_match(l)).count();
            return Some(FileHits {
                count: u32::try_from(count).unwrap_or(u32::MAX),
                ..FileHits::default()
            });
        }
        let context = usize::try_from(self.context).unwrap_or(usize::MAX);
        let mut out = FileHits::default();
        let mut count = 0usize;
        // the lines just before the current one, for a match's leading context
        let mut before: VecDeque<(usize, &str)> = VecDeque::with_capacity(context + 1);
        let mut next = 0; // the first line not yet emitted
        let mut after_to: Option<usize> = None; // the last line of trailing context owed
        let mut collecting = true;
        for (i, line) in lines(text).enumerate() {
            let is_match = self.regex.is_match(line);
            if is_match {
                count += 1;
            }
            if collecting && (is_match || after_to.is_some_and(|to| i <= to)) {
                // leading context not shown yet (none after a line just shown)
                let leading: Vec<(usize, &str)> =
                    before.iter().filter(|(j, _)| *j >= next).copied().collect();
                let room = max_lines - out.lines.len();
                for &(j, l) in leading.iter().take(room) {
                    out.lines.push(hit(j, l, false));
                }
                if leading.len() < room {
                    out.lines.push(hit(i, line, is_match));
                    next = i + 1;
                    if is_match {
                        after_to = Some(i + context);
                    }
                } else {
                    // the budget is spent: count on, list nothing more
                    out.truncated = true;
                    collecting = false;
                }
            }
            if collecting && context > 0 {
                if before.len() == context {
                    before.pop_front();
                }
                before.push_back((i, line));
            }
        }
        out.count = u32::try_from(count).unwrap_or(u32::MAX);
        Some(out)
    }
}

fn hit(i: usize, line: &str, is_match: bool) -> HitLine {
    HitLine {
        line: u32::try_from(i + 1).unwrap_or(u32::MAX),
        text: cut(line),
        is_match,
    }
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => line.to_owned(),
        Some((end, _)) => {
            format!(
                "{} … [line cut at {MAX_LINE_CHARS} of {} characters]",
                &line[..end],
                line.chars().count()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grep(pattern: &str, mode: GrepMode, context: u32, ci: bool) -> Grep {
        Grep::new(GrepOptions {
            pattern: pattern.into(),
            case_insensitive: ci,
            context,
            mode,
        })
        .unwrap()
    }

    fn shown(hits: &FileHits) -> Vec<(u32, bool)> {
        hits.lines.iter().map(|l| (l.line, l.is_match)).collect()
    }

    const TEXT: &str = "alpha\nbeta\nGamma\ndelta\nepsilon\nzeta\neta\ntheta\n";

    #[test]
    fn modes() {
        assert_eq!(GrepMode::parse("files"), Some(GrepMode::Files));
        assert_eq!(GrepMode::parse("content"), Some(GrepMode::Content));
        assert_eq!(GrepMode::parse("count"), Some(GrepMode::Count));
        assert_eq!(GrepMode::parse("lines"), None);
        for m in [GrepMode::Files, GrepMode::Content, GrepMode::Count] {
            assert_eq!(GrepMode::parse(m.as_str()), Some(m));
        }
    }

    #[test]
    fn count_and_files_modes_count_matching_lines_without_listing_them() {
        let hits = grep("eta", GrepMode::Count, 0, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(
            hits,
            FileHits {
                count: 4,
                lines: vec![],
                truncated: false,
            }
        );
        let hits = grep("eta", GrepMode::Files, 3, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(hits.count, 4);
        assert!(hits.lines.is_empty());
        let none = grep("omega", GrepMode::Files, 0, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(none.count, 0);
    }

    #[test]
    fn content_mode_lists_matches_with_numbers() {
        let hits = grep("^(beta|zeta)$", GrepMode::Content, 0, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(hits.count, 2);
        assert_eq!(
            hits.lines,
            vec![
                HitLine {
                    line: 2,
                    text: "beta".into(),
                    is_match: true
                },
                HitLine {
                    line: 6,
                    text: "zeta".into(),
                    is_match: true
                },
            ]
        );
    }

    #[test]
    fn context_lines_are_merged_in_order_once() {
        // matches on lines 2 and 4 with 1 line of context: 1..=5, line 3 once
        let hits = grep("^(beta|delta)$", GrepMode::Content, 1, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(
            shown(&hits),
            [(1, false), (2, true), (3, false), (4, true), (5, false)]
        );
        // matches on 2, 6, 7 and 8 with context 2: one run from 1 to 8
        let hits = grep("eta$", GrepMode::Content, 2, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(
            shown(&hits),
            [
                (1, false),
                (2, true),
                (3, false),
                (4, false),
                (5, false),
                (6, true),
                (7, true),
                (8, true)
            ]
        );
        // far apart: two separate groups
        let hits = grep("^(alpha|theta)$", GrepMode::Content, 1, false)
            .search(TEXT.as_bytes())
            .unwrap();
        assert_eq!(shown(&hits), [(1, true), (2, false), (7, false), (8, true)]);
    }

    #[test]
    fn context_is_capped() {
        let text: String = (1..=40).map(|i| format!("l{i}\n")).collect();
        let hits = grep("^l20$", GrepMode::Content, 1000, false)
            .search(text.as_bytes())
            .unwrap();
        assert_eq!(hits.lines.first().unwrap().line, 10);
        assert_eq!(hits.lines.last().unwrap().line, 30);
    }

    #[test]
    fn a_capped_search_lists_a_prefix_and_says_it_was_cut() {
        let text: String = (1..=30)
            .map(|i| {
                if i % 4 == 0 {
                    format!("hit {i}\n")
                } else {
                    format!("l{i}\n")
                }
            })
            .collect();
        for context in [0, 1, 2, 5] {
            let g = grep("hit", GrepMode::Content, context, false);
            let full = g.search(text.as_bytes()).unwrap();
            assert!(!full.truncated);
            assert_eq!(full.count, 7);
            for n in 0..=full.lines.len() + 2 {
                let capped = g.search_capped(text.as_bytes(), n).unwrap();
                assert_eq!(capped.count, 7, "context {context}, budget {n}");
                assert_eq!(
                    capped.lines,
                    full.lines[..n.min(full.lines.len())],
                    "context {context}, budget {n}"
                );
                assert_eq!(
                    capped.truncated,
                    n < full.lines.len(),
                    "context {context}, budget {n}"
                );
            }
        }
    }

    #[test]
    fn a_huge_file_of_matches_stays_bounded_and_counts_exactly() {
        let text = "a\n".repeat(4 * 1024 * 1024); // 8 MiB, 4M matching lines
        let g = grep(".", GrepMode::Content, 3, false);
        let hits = g.search_capped(text.as_bytes(), 100).unwrap();
        assert_eq!(hits.count, 4 * 1024 * 1024);
        assert_eq!(hits.lines.len(), 100);
        assert!(hits.truncated);
        assert_eq!(hits.lines.last().unwrap().line, 100);
        let hits = g.search(text.as_bytes()).unwrap();
        assert_eq!(hits.count, 4 * 1024 * 1024);
        assert!(hits.lines.len() <= DEFAULT_MAX_LINES);
        assert!(hits.truncated);
        // count mode never lists lines
        let hits = grep(".", GrepMode::Count, 3, false)
            .search(text.as_bytes())
            .unwrap();
        assert_eq!(hits.count, 4 * 1024 * 1024);
        assert!(hits.lines.is_empty() && !hits.truncated);
    }

    #[test]
    fn case_insensitivity() {
        assert_eq!(
            grep("gamma", GrepMode::Count, 0, false)
                .search(TEXT.as_bytes())
                .unwrap()
                .count,
            0
        );
        assert_eq!(
            grep("gamma", GrepMode::Count, 0, true)
                .search(TEXT.as_bytes())
                .unwrap()
                .count,
            1
        );
        assert_eq!(
            grep("(?i)GAMMA", GrepMode::Count, 0, false)
                .search(TEXT.as_bytes())
                .unwrap()
                .count,
            1
        );
    }

    #[test]
    fn binary_files_are_skipped() {
        let g = grep("a", GrepMode::Content, 0, false);
        assert_eq!(g.search(b"abc\0abc"), None);
        assert_eq!(g.search(&[b'a', 0xff]), None);
        assert!(g.search(b"").is_some());
    }

    #[test]
    fn matches_do_not_span_lines_and_crlf_is_handled() {
        let text = "foo\r\nbar\r\n";
        let g = grep(r"foo\s+bar", GrepMode::Count, 0, false);
        assert_eq!(g.search(text.as_bytes()).unwrap().count, 0);
        let hits = grep("^bar$", GrepMode::Content, 0, false)
            .search(text.as_bytes())
            .unwrap();
        assert_eq!(
            hits.lines,
            vec![HitLine {
                line: 2,
                text: "bar".into(),
                is_match: true
            }]
        );
    }

    #[test]
    fn anchors_match_at_every_line_with_and_without_cr() {
        for text in ["a\nfoo\nb\n", "a\r\nfoo\r\nb\r\n", "a\nfoo"] {
            let hits = grep("^foo$", GrepMode::Count, 0, false)
                .search(text.as_bytes())
                .unwrap();
            assert_eq!(hits.count, 1, "{text:?}");
        }
        // a lone CR inside a line is an ordinary character to `.`
        assert_eq!(
            grep("o.b", GrepMode::Count, 0, false)
                .search(b"foo\rbar")
                .unwrap()
                .count,
            1
        );
    }

    #[test]
    fn long_lines_are_cut() {
        let text = format!("{}\n", "x".repeat(MAX_LINE_CHARS * 3));
        let hits = grep("x", GrepMode::Content, 0, false)
            .search(text.as_bytes())
            .unwrap();
        let line = &hits.lines[0].text;
        assert!(line.starts_with(&"x".repeat(MAX_LINE_CHARS)));
        assert!(
            line.ends_with("… [line cut at 500 of 1500 characters]"),
            "{line}"
        );
    }

    #[test]
    fn bad_patterns_name_the_field() {
        let err = |p: &str| {
            Grep::new(GrepOptions {
                pattern: p.into(),
                case_insensitive: false,
                context: 0,
                mode: GrepMode::Files,
            })
            .unwrap_err()
        };
        for p in ["", "foo(", "a{2,1}", "(?<=x)y"] {
            let e = err(p);
            assert!(e.to_string().starts_with("`pattern` "), "{p}: {e}");
            assert_eq!(e.field(), "pattern");
        }
        assert!(
            err("foo(")
                .to_string()
                .contains("not a valid regular expression")
        );
        assert!(
            err(&"a".repeat(MAX_PATTERN_BYTES + 1))
                .to_string()
                .contains("at most 1024 bytes")
        );
        let big = err(r"\w{1000}\w{1000}");
        assert!(big.to_string().contains("too large"), "{big}");
    }
}
