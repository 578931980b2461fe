//! The Edit tool's matching: replace `old` by `new` in a file, for a list of edits applied in
//! order (each against the result of the ones before), all of them validated before a result is
//! returned: one failing edit fails the call and changes nothing.
//!
//! An edit is found by an **exact** match first: `old` must occur exactly once, or several times
//! with `replace_all`. Only when `old` does not occur at all is a **whitespace-tolerant** match
//! tried, for small models that get indentation or spacing wrong: the file and `old` are compared
//! line by line, each line trimmed and its inner runs of whitespace collapsed (so CRLF and LF
//! compare equal too), and a window of whole lines of the file matching `old`'s lines is a
//! candidate. It is used only when exactly one candidate exists (or, with `replace_all`, for
//! every non-overlapping candidate); several are refused, never guessed. A fuzzy replacement
//! takes whole lines: `new` is re-indented by the difference between the matched line's
//! indentation and `old`'s, written with the file's line ending, and the result says
//! `fuzzy: true`.
//!
//! Errors carry the edit's index and say what to do next: which lines matched when several did,
//! and the closest text in the file when nothing did.

use crate::path::shown;
use crate::text::floor_char_boundary;

/// One replacement of the Edit tool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Edit {
    /// The text to replace, copied from the file.
    pub old: String,
    /// Its replacement.
    pub new: String,
    /// Replace every match instead of requiring exactly one.
    pub replace_all: bool,
}

/// The result of [`apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The file after every edit.
    pub content: String,
    /// Whether any edit was placed by the whitespace-tolerant match.
    pub fuzzy: bool,
    /// Replacements made, over all edits.
    pub replacements: usize,
}

/// Why the edits were refused. Line numbers are 1-based, in the file as the edits before this
/// one left it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// `old` is empty.
    #[error(
        "edits[{index}].old is empty; copy the exact text to replace from the file (use Write to set a whole file)"
    )]
    EmptyOld {
        /// Which edit (0-based).
        index: usize,
    },
    /// `old` and `new` are the same text.
    #[error(
        "edits[{index}].old and edits[{index}].new are the same, so the edit changes nothing; drop it or change `new`"
    )]
    Unchanged {
        /// Which edit (0-based).
        index: usize,
    },
    /// `old` is in the file neither exactly nor ignoring whitespace.
    #[error("edits[{index}].old was not found in the file, not even ignoring whitespace{}; Read the file and copy the text to replace exactly", .hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    NotFound {
        /// Which edit (0-based).
        index: usize,
        /// The closest text in the file, quoted with its line number.
        hint: Option<String>,
    },
    /// `old` occurs several times and `replace_all` is not set.
    #[error("edits[{index}].old matches {count} places ({}); include more surrounding lines so it matches one, or set replace_all", lines_list(.lines))]
    AmbiguousExact {
        /// Which edit (0-based).
        index: usize,
        /// How many places.
        count: usize,
        /// The lines the places start on, each once.
        lines: Vec<usize>,
    },
    /// `old` is not in the file exactly, and looking for it ignoring whitespace would take too
    /// many line comparisons (a long `old` in a long, repetitive file).
    #[error(
        "edits[{index}].old is not in the file exactly, and looking for its {old_lines} lines ignoring whitespace in this file of {file_lines} lines is too much work; copy the text to replace exactly from the file (Read it), or use a shorter `old` (fewer lines) that occurs once"
    )]
    TooCostly {
        /// Which edit (0-based).
        index: usize,
        /// Lines of the file.
        file_lines: usize,
        /// Lines of `old`.
        old_lines: usize,
    },
    /// `old` is not in the file exactly, and ignoring whitespace it matches several places.
    #[error("edits[{index}].old is not in the file exactly, and ignoring whitespace it matches {count} places ({}); copy the text exactly, include more surrounding lines so it matches one, or set replace_all", lines_list(.lines))]
    AmbiguousFuzzy {
        /// Which edit (0-based).
        index: usize,
        /// How many places.
        count: usize,
        /// The line each place starts on.
        lines: Vec<usize>,
    },
}

impl EditError {
    /// Which edit failed (0-based).
    pub fn index(&self) -> usize {
        match self {
            EditError::EmptyOld { index }
            | EditError::Unchanged { index }
            | EditError::NotFound { index, .. }
            | EditError::AmbiguousExact { index, .. }
            | EditError::TooCostly { index, .. }
            | EditError::AmbiguousFuzzy { index, .. } => *index,
        }
    }

    /// The input field to report: `edits[i].old`.
    pub fn field(&self) -> String {
        format!("edits[{}].old", self.index())
    }
}

/// Lines listed in a message: at most ten, then how many more.
fn lines_list(lines: &[usize]) -> String {
    const SHOWN: usize = 10;
    let word = if lines.len() == 1 { "line" } else { "lines" };
    let mut list: Vec<String> = lines.iter().take(SHOWN).map(ToString::to_string).collect();
    if lines.len() > SHOWN {
        list.push(format!("and {} more", lines.len() - SHOWN));
    }
    format!("{word} {}", list.join(", "))
}

/// Line comparisons one edit's whitespace-tolerant match may make (at most file lines × `old`'s
/// lines; far fewer unless the file repeats `old`'s first lines); past it the edit is refused
/// with [`EditError::TooCostly`].
pub const FUZZY_MAX_COMPARISONS: usize = 50_000_000;

/// Applies `edits` to `content` in order; any failing edit fails the whole call.
pub fn apply(content: &str, edits: &[Edit]) -> Result<Edited, EditError> {
    apply_within(content, edits, FUZZY_MAX_COMPARISONS)
}

/// [`apply`] with a budget of line comparisons per fuzzy match.
fn apply_within(content: &str, edits: &[Edit], budget: usize) -> Result<Edited, EditError> {
    let mut current = content.to_owned();
    let mut fuzzy = false;
    let mut replacements = 0;
    for (index, edit) in edits.iter().enumerate() {
        let one = apply_one(&current, edit, index, budget)?;
        current = one.content;
        fuzzy |= one.fuzzy;
        replacements += one.replacements;
    }
    Ok(Edited {
        content: current,
        fuzzy,
        replacements,
    })
}

fn apply_one(content: &str, edit: &Edit, index: usize, budget: usize) -> Result<Edited, EditError> {
    if edit.old.is_empty() {
        return Err(EditError::EmptyOld { index });
    }
    if edit.old == edit.new {
        return Err(EditError::Unchanged { index });
    }
    let starts: Vec<usize> = content
        .match_indices(edit.old.as_str())
        .map(|(i, _)| i)
        .collect();
    match starts.len() {
        0 => fuzzy_one(content, edit, index, budget),
        1 => Ok(Edited {
            content: content.replacen(edit.old.as_str(), &edit.new, 1),
            fuzzy: false,
            replacements: 1,
        }),
        count if edit.replace_all => Ok(Edited {
            content: content.replace(edit.old.as_str(), &edit.new),
            fuzzy: false,
            replacements: count,
        }),
        count => {
            let mut lines = line_numbers(content, &starts);
            lines.dedup();
            Err(EditError::AmbiguousExact {
                index,
                count,
                lines,
            })
        }
    }
}

/// The 1-based line of each byte offset in `starts` (ascending).
fn line_numbers(content: &str, starts: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(starts.len());
    let mut line = 1;
    let mut from = 0;
    for &s in starts {
        line += content.as_bytes()[from..s]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        from = s;
        out.push(line);
    }
    out
}

/// A line of the file: where it starts and ends (its `\n` excluded), and its ending.
struct Line<'a> {
    start: usize,
    /// The text, `\r` excluded.
    text: &'a str,
    /// `"\r\n"`, `"\n"` or `""` (the last line without a newline).
    eol: &'a str,
}

fn split_lines(content: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < content.len() {
        let (end, next) = match content[start..].find('\n') {
            Some(i) => (start + i, start + i + 1),
            None => (content.len(), content.len()),
        };
        let raw = &content[start..end];
        let (text, eol) = match raw.strip_suffix('\r') {
            Some(t) if next > end => (t, "\r\n"),
            _ => (raw, if next > end { "\n" } else { "" }),
        };
        out.push(Line { start, text, eol });
        start = next;
    }
    out
}

/// A line trimmed, its inner runs of whitespace collapsed to one space.
fn normalize(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    normalize_into(line, &mut out);
    out
}

fn normalize_into(line: &str, out: &mut String) {
    out.clear();
    for (i, word) in line.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
}

/// The start of `normalize(line)`: at least its first `max_chars` characters (all of it when
/// shorter), without looking at the rest of the line.
fn normalize_capped(line: &str, out: &mut String, max_chars: usize) {
    out.clear();
    let mut chars = 0;
    for (i, word) in line.split_whitespace().enumerate() {
        if chars >= max_chars {
            break;
        }
        if i > 0 {
            out.push(' ');
            chars += 1;
        }
        let word = cut_chars(word, max_chars.saturating_sub(chars));
        out.push_str(word);
        chars += word.chars().count();
    }
}

/// Whether `normalize(line) == normed`, without allocating.
fn norm_eq(line: &str, normed: &str) -> bool {
    if normed.is_empty() {
        line.trim().is_empty()
    } else {
        line.split_whitespace().eq(normed.split(' '))
    }
}

/// The lines of `old` or `new`: split on `\n`, `\r` dropped, one final newline ignored.
fn text_lines(s: &str) -> Vec<&str> {
    let body = s.strip_suffix('\n').unwrap_or(s);
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn fuzzy_one(content: &str, edit: &Edit, index: usize, budget: usize) -> Result<Edited, EditError> {
    let lines = split_lines(content);
    let old_lines = text_lines(&edit.old);
    let norm_old: Vec<String> = old_lines.iter().map(|l| normalize(l)).collect();
    if norm_old.iter().all(String::is_empty) {
        // whitespace only: ignoring whitespace it would match every blank line
        return Err(EditError::NotFound { index, hint: None });
    }
    let m = norm_old.len();
    // For each line of the file, how many of old's first lines match from there: `m` is a
    // window; the longest shorter run is the not-found hint (only worth it for several lines).
    let mut windows: Vec<usize> = Vec::new();
    let mut longest: Option<(usize, usize)> = None; // (start, matched lines)
    let want_run = m > 1 && !norm_old[0].is_empty();
    let mut comparisons = 0usize;
    for s in 0..lines.len() {
        let k = lines[s..]
            .iter()
            .zip(&norm_old)
            .take_while(|(l, o)| norm_eq(l.text, o))
            .count();
        comparisons += (k + 1).min(m);
        if comparisons > budget {
            return Err(EditError::TooCostly {
                index,
                file_lines: lines.len(),
                old_lines: m,
            });
        }
        if k == m {
            windows.push(s);
        } else if want_run && k > 0 && longest.is_none_or(|(_, bk)| k > bk) {
            longest = Some((s, k));
        }
    }
    if windows.is_empty() {
        return Err(EditError::NotFound {
            index,
            hint: not_found_hint(&lines, &norm_old, longest),
        });
    }
    if windows.len() > 1 && !edit.replace_all {
        return Err(EditError::AmbiguousFuzzy {
            index,
            count: windows.len(),
            lines: windows.iter().map(|s| s + 1).collect(),
        });
    }
    // non-overlapping, from the top
    let mut chosen = Vec::new();
    let mut next_free = 0;
    for s in windows {
        if s >= next_free {
            chosen.push(s);
            next_free = s + m;
        }
    }
    let mut out = String::with_capacity(content.len() + edit.new.len());
    let mut copied = 0;
    for &s in &chosen {
        let first = &lines[s];
        let last = &lines[s + m - 1];
        out.push_str(&content[copied..first.start]);
        let old_indent = old_lines
            .iter()
            .find(|l| !l.trim().is_empty())
            .map_or("", |l| indent_of(l));
        let file_indent = lines[s..s + m]
            .iter()
            .find(|l| !l.text.trim().is_empty())
            .map_or("", |l| indent_of(l.text));
        let eol = if first.eol.is_empty() {
            "\n"
        } else {
            first.eol
        };
        if !edit.new.is_empty() {
            let new_lines = reindent(&text_lines(&edit.new), old_indent, file_indent);
            out.push_str(&new_lines.join(eol));
            out.push_str(last.eol);
        }
        copied = last.start + last.text.len() + last.eol.len();
    }
    out.push_str(&content[copied..]);
    Ok(Edited {
        content: out,
        fuzzy: true,
        replacements: chosen.len(),
    })
}

/// `new`'s lines moved from `old`'s indentation to the file's: a line starting with
/// `old_indent` gets `file_indent` instead; a line indented less than `old_indent` keeps its
/// distance to it (taken from the end of `file_indent` when it can be); blank lines become empty.
/// Nothing moves when the indents are equal or when `new` already starts at the file's indent.
fn reindent(new_lines: &[&str], old_indent: &str, file_indent: &str) -> Vec<String> {
    let new_indent = new_lines
        .iter()
        .find(|l| !l.trim().is_empty())
        .map_or("", |l| indent_of(l));
    if old_indent == file_indent || new_indent == file_indent {
        return new_lines.iter().map(|l| (*l).to_owned()).collect();
    }
    new_lines
        .iter()
        .map(|line| {
            if line.trim().is_empty() {
                return String::new();
            }
            if let Some(rest) = line.strip_prefix(old_indent) {
                return format!("{file_indent}{rest}");
            }
            let own = indent_of(line);
            if old_indent.starts_with(own) {
                let less = old_indent.len() - own.len();
                let keep = floor_char_boundary(file_indent, file_indent.len().saturating_sub(less));
                let base = &file_indent[..keep];
                return format!("{base}{}", line.trim_start());
            }
            (*line).to_owned()
        })
        .collect()
}

/// Characters of the file's lines (each cut at [`HINT_MAX_CHARS`]) the hint compares at most,
/// and characters of each line.
const HINT_MAX_WORK: usize = 4_000_000;
const HINT_MAX_CHARS: usize = 400;
/// The least similarity (0..=1) for a line to be offered as the closest.
const HINT_MIN_SIMILARITY: f64 = 0.3;

/// What is closest to `old` in the file: the longest run of `old`'s first lines found
/// (`longest`: where it starts and how many lines match; the line where it stops matching is
/// named), else the line most like `old`'s first non-blank line, among the lines whose first
/// [`HINT_MAX_WORK`] characters in all are looked at.
fn not_found_hint(
    lines: &[Line<'_>],
    norm_old: &[String],
    longest: Option<(usize, usize)>,
) -> Option<String> {
    if let Some((s, k)) = longest {
        let first_of = if k == 1 {
            "the first line of old matches".to_owned()
        } else {
            format!("the first {k} lines of old match")
        };
        let differs = match lines.get(s + k) {
            Some(line) => format!("line {} of the file is {}", s + k + 1, shown(line.text)),
            None => "the file ends there".to_owned(),
        };
        return Some(format!(
            "{first_of} at line {}, but old's line {} {} differs: {differs}",
            s + 1,
            k + 1,
            shown(&norm_old[k]),
        ));
    }
    let target = norm_old.iter().find(|l| !l.is_empty())?;
    let target = Bigrams::new(cut_chars(target, HINT_MAX_CHARS));
    let mut best: Option<(f64, usize)> = None;
    let mut norm = String::new();
    let mut left = Vec::new();
    let mut work = 0usize;
    for (i, line) in lines.iter().enumerate() {
        normalize_capped(line.text, &mut norm, HINT_MAX_CHARS);
        let norm = cut_chars(&norm, HINT_MAX_CHARS);
        if norm.is_empty() {
            continue;
        }
        let chars = norm.chars().count();
        work += chars;
        if work > HINT_MAX_WORK {
            break;
        }
        // Dice cannot pass 2·min/(a+b): skip a line too short or long to beat the best
        let grams = chars.saturating_sub(1).max(1);
        let bound = 2.0 * grams.min(target.len) as f64 / (grams + target.len) as f64;
        if best.is_some_and(|(b, _)| bound <= b) {
            continue;
        }
        let score = target.dice(norm, &mut left);
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, i));
        }
    }
    match best {
        Some((score, i)) if score >= HINT_MIN_SIMILARITY => Some(format!(
            "the closest line is {}: {}",
            i + 1,
            shown(lines[i].text)
        )),
        _ => None,
    }
}

fn cut_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The character bigrams of a text, as a multiset: the distinct ones sorted, with counts.
struct Bigrams {
    grams: Vec<(char, char)>,
    counts: Vec<u32>,
    /// How many, with repeats.
    len: usize,
}

/// The bigrams of `s`: each pair of neighbouring characters; a single character is one bigram
/// with itself.
fn bigrams_of(s: &str) -> impl Iterator<Item = (char, char)> + '_ {
    let mut chars = s.chars();
    let first = chars.next();
    let single = first.filter(|_| s.chars().nth(1).is_none()).map(|c| (c, c));
    let pairs = first.into_iter().flat_map(move |f| {
        chars.clone().scan(f, |prev, c| {
            let pair = (*prev, c);
            *prev = c;
            Some(pair)
        })
    });
    single.into_iter().chain(pairs)
}

impl Bigrams {
    fn new(s: &str) -> Self {
        let mut all: Vec<(char, char)> = bigrams_of(s).collect();
        all.sort_unstable();
        let len = all.len();
        let mut grams: Vec<(char, char)> = Vec::new();
        let mut counts: Vec<u32> = Vec::new();
        for g in all {
            match (grams.last(), counts.last_mut()) {
                (Some(last), Some(n)) if *last == g => *n += 1,
                _ => {
                    grams.push(g);
                    counts.push(1);
                }
            }
        }
        Bigrams { grams, counts, len }
    }

    /// Sørensen–Dice similarity of these bigrams and those of `other`, 0..=1; `left` is a
    /// scratch buffer.
    fn dice(&self, other: &str, left: &mut Vec<u32>) -> f64 {
        left.clear();
        left.extend_from_slice(&self.counts);
        let (mut shared, mut other_len) = (0usize, 0usize);
        for g in bigrams_of(other) {
            other_len += 1;
            if let Ok(i) = self.grams.binary_search(&g)
                && left[i] > 0
            {
                left[i] -= 1;
                shared += 1;
            }
        }
        let total = self.len + other_len;
        if total == 0 {
            return 1.0;
        }
        2.0 * shared as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(old: &str, new: &str) -> Edit {
        Edit {
            old: old.into(),
            new: new.into(),
            replace_all: false,
        }
    }

    fn all(old: &str, new: &str) -> Edit {
        Edit {
            old: old.into(),
            new: new.into(),
            replace_all: true,
        }
    }

    #[test]
    fn exact_unique_match_is_replaced() {
        let r = apply("let a = 1;\nlet b = 2;\n", &[e("b = 2", "b = 3")]).unwrap();
        assert_eq!(r.content, "let a = 1;\nlet b = 3;\n");
        assert!(!r.fuzzy);
        assert_eq!(r.replacements, 1);
    }

    #[test]
    fn exact_match_inside_a_line_and_across_lines() {
        let r = apply(
            "fn a() {\n    x();\n}\n",
            &[e("{\n    x();", "{\n    y();\n    z();")],
        )
        .unwrap();
        assert_eq!(r.content, "fn a() {\n    y();\n    z();\n}\n");
        // deletion
        let r = apply("a\nb\nc\n", &[e("b\n", "")]).unwrap();
        assert_eq!(r.content, "a\nc\n");
    }

    #[test]
    fn ambiguous_exact_match_is_refused_with_its_lines() {
        let content = "x = 1\ny = 2\nx = 1\nz\nx = 1\n";
        let err = apply(content, &[e("x = 1", "x = 9")]).unwrap_err();
        assert_eq!(
            err,
            EditError::AmbiguousExact {
                index: 0,
                count: 3,
                lines: vec![1, 3, 5]
            }
        );
        assert_eq!(
            err.to_string(),
            "edits[0].old matches 3 places (lines 1, 3, 5); include more surrounding lines so it matches one, or set replace_all"
        );
        assert_eq!(err.field(), "edits[0].old");
    }

    #[test]
    fn replace_all_replaces_every_exact_match() {
        let r = apply("x = 1\ny\nx = 1\n", &[all("x = 1", "x = 2")]).unwrap();
        assert_eq!(r.content, "x = 2\ny\nx = 2\n");
        assert_eq!(r.replacements, 2);
        // replace_all with a single match is fine too
        let r = apply("a b", &[all("a", "c")]).unwrap();
        assert_eq!((r.content.as_str(), r.replacements), ("c b", 1));
    }

    #[test]
    fn exact_matches_are_counted_without_overlap() {
        // "aa" occurs once without overlap in "aaa", so it is unique
        let r = apply("aaa", &[e("aa", "b")]).unwrap();
        assert_eq!(r.content, "ba");
        let err = apply("aaaa", &[e("aa", "b")]).unwrap_err();
        assert_eq!(
            err,
            EditError::AmbiguousExact {
                index: 0,
                count: 2,
                lines: vec![1]
            }
        );
        assert!(
            err.to_string().contains("matches 2 places (line 1)"),
            "{err}"
        );
    }

    #[test]
    fn a_partial_line_matches_fuzzily_only_as_a_whole_line() {
        // the whole line, ignoring whitespace: replaced and re-indented
        let r = apply(
            "fn f() {\n    let x  =  1;\n}\n",
            &[e("let x = 1;", "let x = 2;")],
        )
        .unwrap();
        assert_eq!(r.content, "fn f() {\n    let x = 2;\n}\n");
        assert!(r.fuzzy);
        // part of a line with different spacing is not guessed at
        let err = apply("foo(a,  b); bar();\n", &[e("foo(a, b);", "x")]).unwrap_err();
        assert!(
            matches!(err, EditError::NotFound { hint: Some(_), .. }),
            "{err:?}"
        );
    }

    #[test]
    fn empty_and_unchanged_edits_are_refused() {
        assert_eq!(
            apply("abc", &[e("", "x")]).unwrap_err(),
            EditError::EmptyOld { index: 0 }
        );
        let err = apply("abc", &[e("b", "B"), e("c", "c")]).unwrap_err();
        assert_eq!(err, EditError::Unchanged { index: 1 });
        assert!(
            err.to_string()
                .starts_with("edits[1].old and edits[1].new are the same")
        );
    }

    #[test]
    fn fuzzy_match_with_wrong_indentation_is_reindented() {
        let content = "def f():\n    if x:\n        return 1\n    return 2\n";
        // the model dropped the indentation of old and new alike
        let r = apply(
            content,
            &[e(
                "if x:\n    return 1\n",
                "if x and y:\n    return 1\nelse:\n    pass\n",
            )],
        )
        .unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.replacements, 1);
        assert_eq!(
            r.content,
            "def f():\n    if x and y:\n        return 1\n    else:\n        pass\n    return 2\n"
        );
    }

    #[test]
    fn fuzzy_keeps_new_as_given_when_it_already_has_the_files_indent() {
        let content = "fn f() {\n    let a = 1;\n    let b = 2;\n}\n";
        let r = apply(
            content,
            &[e(
                "let a = 1;\nlet  b = 2;",
                "    let a = 10;\n    let b = 20;",
            )],
        )
        .unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.content, "fn f() {\n    let a = 10;\n    let b = 20;\n}\n");
    }

    #[test]
    fn fuzzy_dedented_lines_of_new_keep_their_distance() {
        let content = "class A:\n    def f(self):\n        pass\n";
        // old indented by 2 where the file has 4 (and 6 vs 8 inside)
        let r = apply(
            content,
            &[e(
                "  def f(self):\n      pass",
                "  def f(self):\n      return 1\n  x = 2\nz = 3",
            )],
        )
        .unwrap();
        assert_eq!(
            r.content,
            "class A:\n    def f(self):\n        return 1\n    x = 2\n  z = 3\n"
        );
    }

    #[test]
    fn fuzzy_match_with_trailing_and_inner_whitespace_differences() {
        let content = "a = 1\nfoo(x,  y)   \nbar()\nend\n";
        let r = apply(content, &[e("foo(x, y)\nbar()  \n", "foo(y, x)\nbar()\n")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.content, "a = 1\nfoo(y, x)\nbar()\nend\n");
    }

    #[test]
    fn fuzzy_match_keeps_crlf_line_endings() {
        let content = "one\r\n  two\r\nthree\r\n";
        let r = apply(content, &[e("one\ntwo", "uno\n  dos\n  dos bis")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.content, "uno\r\n  dos\r\n  dos bis\r\nthree\r\n");
    }

    #[test]
    fn fuzzy_match_at_the_end_without_a_final_newline() {
        let r = apply("a\n  b  c", &[e("b c", "d")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.content, "a\n  d");
        // a fuzzy deletion removes the whole lines
        let r = apply("a\n  b\nc\n", &[e("b ", "")]).unwrap();
        assert_eq!(r.content, "a\nc\n");
    }

    #[test]
    fn ambiguous_fuzzy_match_is_refused_not_guessed() {
        let content = "if x:\n    y()\nelse:\n  y()\n";
        let err = apply(content, &[e("y( )", "z()")]).unwrap_err();
        assert!(matches!(err, EditError::NotFound { .. }), "{err:?}");
        let err = apply(content, &[e(" y()", "z()")]).unwrap_err();
        assert_eq!(
            err,
            EditError::AmbiguousExact {
                index: 0,
                count: 2,
                lines: vec![2, 4]
            }
        );
        // one window ignoring whitespace is used
        let r = apply(content, &[e("y()\n\telse:", "z()")]).unwrap();
        assert_eq!(r.content, "if x:\n    z()\n  y()\n");
        assert!(r.fuzzy);
        let content = "a\n    b  ()\nc\n  b ()\n";
        // an exact match wins over a whitespace-tolerant one
        let r = apply(content, &[e("b ()\n", "z()\n")]).unwrap();
        assert_eq!(r.content, "a\n    b  ()\nc\n  z()\n");
        assert!(!r.fuzzy);
        let err = apply(content, &[e("\tb ()", "z()")]).unwrap_err();
        assert_eq!(
            err,
            EditError::AmbiguousFuzzy {
                index: 0,
                count: 2,
                lines: vec![2, 4]
            }
        );
        assert!(
            err.to_string().contains("matches 2 places (lines 2, 4)"),
            "{err}"
        );
        assert!(err.to_string().contains("ignoring whitespace"), "{err}");
    }

    #[test]
    fn fuzzy_replace_all_replaces_every_window() {
        let content = "  x =  1\ny\n\tx = 1\n";
        let r = apply(content, &[all("x = 1 ", "x = 2")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.replacements, 2);
        assert_eq!(r.content, "  x = 2\ny\n\tx = 2\n");
        // overlapping windows count once each, from the top
        let r = apply("a\na\na\n", &[all("a \na", "b")]).unwrap();
        assert_eq!((r.content.as_str(), r.replacements), ("b\na\n", 1));
    }

    #[test]
    fn whitespace_only_old_does_not_match_blank_lines_fuzzily() {
        let err = apply("a\n\n\nb\n", &[e(" \n \t", "x")]).unwrap_err();
        assert_eq!(
            err,
            EditError::NotFound {
                index: 0,
                hint: None
            }
        );
    }

    #[test]
    fn a_fuzzy_match_past_its_budget_is_refused() {
        // every start matches old's first 10 lines: 100 starts × ~10 comparisons
        let content = format!("start\n{}", "x\n".repeat(99));
        let old = format!("{}y\n", "  x\n".repeat(10));
        let err = apply_within(&content, &[e("start", "begin"), e(&old, "z\n")], 500).unwrap_err();
        assert_eq!(
            err,
            EditError::TooCostly {
                index: 1,
                file_lines: 100,
                old_lines: 11
            }
        );
        assert_eq!(err.field(), "edits[1].old");
        let msg = err.to_string();
        assert!(msg.starts_with("edits[1].old is not in the file exactly, and looking for its 11 lines ignoring whitespace in this file of 100 lines is too much work"), "{msg}");
        assert!(msg.contains("use a shorter `old`"), "{msg}");
        // the first edit is exact, so it is not refused for the budget; with room the second
        // is an ordinary not-found with its hint
        let err = apply_within(&content, &[e(&old, "z\n")], 2_000).unwrap_err();
        assert!(
            matches!(&err, EditError::NotFound { hint: Some(h), .. } if h.starts_with("the first 10 lines of old match at line 2")),
            "{err:?}"
        );
        assert!(apply_within(&content, &[e("x\nx\n", "y\n")], 0).is_err());
        let r = apply_within("a\n  b\nc\n", &[e("b\n", "d\n")], 0).unwrap();
        assert!(!r.fuzzy);
    }

    #[test]
    fn a_long_old_in_a_long_file_is_matched_when_the_file_does_not_repeat_it() {
        // 100k lines × 600 lines of old is past the budget as a product, but each start stops
        // at its first line
        let content: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let old: String = (50_000..50_600)
            .map(|i| format!("    line {i}\n"))
            .collect();
        let r = apply(&content, &[e(&old, "replaced\n")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.replacements, 1);
        assert!(r.content.contains("line 49999\nreplaced\nline 50600\n"));
    }

    #[test]
    fn the_not_found_hint_looks_at_a_bounded_part_of_the_file() {
        let filler = format!("{}\n", "q".repeat(HINT_MAX_CHARS));
        let near = "let total = compute(1, 2);\n";
        let old = "let totl = compute(1, 2);";
        let within = format!("{}{near}", filler.repeat(100));
        let err = apply(&within, &[e(old, "x")]).unwrap_err();
        assert!(
            matches!(&err, EditError::NotFound { hint: Some(h), .. } if h.starts_with("the closest line is 101")),
            "{err:?}"
        );
        // past HINT_MAX_WORK characters of lines, nothing more is looked at
        let past = format!(
            "{}{near}",
            filler.repeat(HINT_MAX_WORK / HINT_MAX_CHARS + 1)
        );
        let err = apply(&past, &[e(old, "x")]).unwrap_err();
        assert!(
            matches!(&err, EditError::NotFound { hint: None, .. }),
            "{err:?}"
        );
        // a huge line is normalized only as far as it is compared
        let mut norm = String::new();
        normalize_capped(&format!("  a  b {}", "c ".repeat(10_000)), &mut norm, 5);
        assert!(norm.starts_with("a b c"), "{norm}");
        assert!(norm.chars().count() <= 6, "{norm}");
    }

    #[test]
    fn not_found_names_the_closest_line() {
        let content =
            "fn main() {\n    let total = compute(1, 2);\n    println!(\"{total}\");\n}\n";
        let err = apply(content, &[e("let total = compute(1, 3);", "x")]).unwrap_err();
        let EditError::NotFound {
            index: 0,
            hint: Some(hint),
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(
            hint,
            "the closest line is 2: `    let total = compute(1, 2);`"
        );
        assert!(err.to_string().starts_with("edits[0].old was not found in the file, not even ignoring whitespace (the closest line is 2"), "{err}");
        assert!(
            err.to_string()
                .ends_with("Read the file and copy the text to replace exactly")
        );
    }

    #[test]
    fn not_found_names_where_a_multi_line_old_stops_matching() {
        let content = "a()\nb()\nc()\nd()\n";
        let err = apply(content, &[e("b()\n  c()\nx()\n", "y")]).unwrap_err();
        let EditError::NotFound {
            hint: Some(hint), ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(
            hint,
            "the first 2 lines of old match at line 2, but old's line 3 `x()` differs: line 4 of the file is `d()`"
        );
        let err = apply(content, &[e("d()\ne()", "y")]).unwrap_err();
        let EditError::NotFound {
            hint: Some(hint), ..
        } = &err
        else {
            panic!("{err:?}")
        };
        assert!(hint.ends_with("the file ends there"), "{hint}");
    }

    #[test]
    fn dice_similarity() {
        let close = |a: &str, b: &str| Bigrams::new(a).dice(b, &mut Vec::new());
        assert_eq!(close("night", "night"), 1.0);
        assert_eq!(close("abc", "xyz"), 0.0);
        // night/nacht share only "ht" of 4 + 4 bigrams
        assert!((close("night", "nacht") - 0.25).abs() < 1e-9);
        // repeats count once each
        assert!((close("aaa", "aa") - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(close("a", "a"), 1.0);
        assert_eq!(bigrams_of("ab").collect::<Vec<_>>(), [('a', 'b')]);
        assert_eq!(bigrams_of("a").collect::<Vec<_>>(), [('a', 'a')]);
        assert_eq!(bigrams_of("").count(), 0);
    }

    #[test]
    fn nothing_similar_gives_no_hint() {
        let err = apply("aaaa\nbbbb\n", &[e("zzzz", "x")]).unwrap_err();
        assert_eq!(
            err,
            EditError::NotFound {
                index: 0,
                hint: None
            }
        );
        assert_eq!(
            err.to_string(),
            "edits[0].old was not found in the file, not even ignoring whitespace; Read the file and copy the text to replace exactly"
        );
    }

    #[test]
    fn edits_apply_in_order_and_all_or_nothing() {
        let content = "alpha\nbeta\ngamma\n";
        // the second edit sees the first one's result
        let r = apply(content, &[e("alpha", "ALPHA"), e("ALPHA\nbeta", "A\nB")]).unwrap();
        assert_eq!(r.content, "A\nB\ngamma\n");
        assert_eq!(r.replacements, 2);
        // a failure in the third edit fails the whole call, naming it
        let err = apply(content, &[e("alpha", "a"), e("beta", "b"), e("delta", "d")]).unwrap_err();
        assert_eq!(err.index(), 2);
        assert!(err.to_string().starts_with("edits[2].old was not found"));
        // the fuzzy flag is set if any edit was fuzzy
        let r = apply(content, &[e("alpha", "a"), e("  beta  ", "b")]).unwrap();
        assert!(r.fuzzy);
        assert_eq!(r.content, "a\nb\ngamma\n");
    }

    #[test]
    fn long_line_lists_are_shortened() {
        let content = "x\n".repeat(12);
        let err = apply(&content, &[e("x", "y")]).unwrap_err();
        assert!(
            err.to_string()
                .contains("(lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, and 2 more)"),
            "{err}"
        );
    }

    /// Random texts over an alphabet of whitespace, line endings and multi-byte characters:
    /// no panic, and every outcome agrees with the rules.
    #[test]
    fn random_edits_follow_the_rules() {
        const ALPHABET: [&str; 12] = [
            "a", "b", " ", "  ", "\t", "\n", "\r\n", "é", "\u{3000}", "x(", ")", "\u{a0}",
        ];
        let mut seed: u64 = 0x5eed;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            usize::try_from(seed >> 33).unwrap() % n
        };
        let text = |len: usize, next: &mut dyn FnMut(usize) -> usize| -> String {
            (0..next(len) + 1)
                .map(|_| ALPHABET[next(ALPHABET.len())])
                .collect()
        };
        let mut seen = [0usize; 6];
        for _ in 0..20_000 {
            let content = text(40, &mut next);
            let old = text(6, &mut next);
            let new = text(6, &mut next);
            let replace_all = next(2) == 0;
            let edit = Edit {
                old: old.clone(),
                new: new.clone(),
                replace_all,
            };
            let exact = content.matches(old.as_str()).count();
            match apply(&content, std::slice::from_ref(&edit)) {
                Ok(r) if !r.fuzzy => {
                    seen[0] += 1;
                    assert!(exact == 1 || (exact > 1 && replace_all));
                    assert_eq!(r.replacements, exact);
                    assert_eq!(r.content, content.replace(old.as_str(), &new));
                }
                Ok(r) => {
                    seen[1] += 1;
                    assert_eq!(exact, 0);
                    assert!(r.replacements == 1 || (r.replacements > 1 && replace_all));
                }
                Err(EditError::AmbiguousExact { count, .. }) => {
                    seen[2] += 1;
                    assert!(!replace_all && count == exact && count > 1);
                }
                Err(EditError::AmbiguousFuzzy { count, .. }) => {
                    seen[3] += 1;
                    assert!(exact == 0 && !replace_all && count > 1);
                }
                Err(EditError::NotFound { .. }) => {
                    seen[4] += 1;
                    assert_eq!(exact, 0);
                }
                Err(EditError::Unchanged { .. }) => {
                    seen[5] += 1;
                    assert_eq!(old, new);
                }
                Err(EditError::EmptyOld { .. }) => unreachable!("old is never empty here"),
                Err(EditError::TooCostly { .. }) => unreachable!("small files stay in budget"),
            }
        }
        // every outcome was reached, so each rule above was checked
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    #[test]
    fn unicode_whitespace_indentation_is_not_cut_inside_a_character() {
        // the file indents with two ideographic spaces (3 bytes each), old with one ASCII space
        let content = "a\n\u{3000}\u{3000}b\n\u{3000}\u{3000}c\n";
        let r = apply(content, &[e(" b\n c", " b2\nd")]).unwrap();
        assert!(r.fuzzy);
        // `d` is one byte less indented than old: one byte off the file's indent would cut a
        // character, so it keeps what a whole character allows
        assert_eq!(r.content, "a\n\u{3000}\u{3000}b2\n\u{3000}d\n");
    }

    #[test]
    fn multibyte_text_is_handled() {
        let r = apply("日本語\n  ünï  cödé\n", &[e("ünï cödé", "ok")]).unwrap();
        assert_eq!(r.content, "日本語\n  ok\n");
        assert!(r.fuzzy);
        let err = apply("日本語のテキスト\n", &[e("日本語のテキストX", "y")]).unwrap_err();
        assert!(
            matches!(err, EditError::NotFound { hint: Some(_), .. }),
            "{err:?}"
        );
    }
}
