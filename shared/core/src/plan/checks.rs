//! Checks without a model ([`Check`]): each reads one file of the plan's volume (`None` = the
//! file does not exist) and passes or fails with a message saying what is wrong. Bounded: a
//! regex is size-limited when compiled, and files are read by the caller up to the volume's
//! file cap; every check is at most a linear scan of the file (the `regex` crate matches in
//! linear time, the parsers limit their nesting).

use std::sync::LazyLock;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::run::RunStatus;
use weft_api::plans::{Check, CheckResult, Format, Issue, ReasonCode, Verdict, VerdictKind};

/// How much of a parser's error or a JSON value a message quotes, in characters.
const QUOTE_LONG: usize = 200;
/// How much of a match or a pattern a message quotes, in characters.
const QUOTE_SHORT: usize = 80;

/// Compiles a check's regular expression, bounded in size.
pub fn compile(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())
}

/// Runs `check` over the file it names (`None` = missing).
pub fn run(check: &Check, file: Option<&[u8]>) -> CheckResult {
    let outcome = match (check, file) {
        (Check::Exists { .. }, Some(_)) => Ok(()),
        (_, None) => Err(missing_message(check.path())),
        (Check::NonEmpty { path }, Some(bytes)) => non_empty(path, bytes),
        (Check::Parses { path, format }, Some(bytes)) => parses(path, *format, bytes),
        (Check::Matches { path, pattern }, Some(bytes)) => matches(path, pattern, bytes),
        (Check::NotMatches { path, pattern }, Some(bytes)) => not_matches(path, pattern, bytes),
        (
            Check::JsonEq {
                path,
                pointer,
                value,
            },
            Some(bytes),
        ) => json_eq(path, pointer, value, bytes),
        (Check::Sha256 { path, sha256 }, Some(bytes)) => sha256_eq(path, sha256, bytes),
        (Check::NoPlaceholders { path }, Some(bytes)) => no_placeholders(path, bytes),
    };
    CheckResult {
        check: check.clone(),
        passed: outcome.is_ok(),
        message: outcome.err().unwrap_or_default(),
    }
}

/// The verdict of an attempt from its checks alone: a pass when its sub-run succeeded and every
/// check passed; otherwise a fail naming each failed check (or how the sub-run ended).
pub fn verdict_from_checks(child_status: RunStatus, results: &[CheckResult]) -> Verdict {
    let failed: Vec<&CheckResult> = results.iter().filter(|r| !r.passed).collect();
    let run_ok = child_status == RunStatus::Succeeded;
    if run_ok && failed.is_empty() {
        return Verdict {
            verdict: VerdictKind::Pass,
            reason_code: ReasonCode::Ok,
            confidence: 1.0,
            issues: Vec::new(),
            missing: Vec::new(),
            feedback: String::new(),
        };
    }

    let mut issues = Vec::with_capacity(failed.len() + 1);
    if !run_ok {
        issues.push(Issue {
            path: None,
            check: None,
            message: format!("the task's run ended `{child_status}`"),
        });
    }
    issues.extend(failed.iter().map(|r| Issue {
        path: Some(r.check.path().to_owned()),
        check: Some(r.check.name().to_owned()),
        message: r.message.clone(),
    }));

    let mut missing: Vec<String> = Vec::new();
    for r in &failed {
        if let Check::Exists { path } = &r.check
            && !missing.contains(path)
        {
            missing.push(path.clone());
        }
    }

    let (reason_code, feedback) = if !run_ok {
        let mut feedback = format!(
            "the task's run ended `{child_status}`: finish the task so that its run succeeds"
        );
        if !failed.is_empty() {
            feedback.push_str(&format!(
                ", and fix what the failed checks name: {} failed",
                failed.len()
            ));
        }
        (ReasonCode::RunFailed, feedback)
    } else {
        let reason_code = if failed.iter().all(|r| is_missing_file(r)) {
            ReasonCode::Missing
        } else if failed
            .iter()
            .all(|r| matches!(r.check, Check::NoPlaceholders { .. }))
        {
            ReasonCode::Placeholder
        } else {
            ReasonCode::CheckFailed
        };
        (
            reason_code,
            format!("fix what the failed checks name: {} failed", failed.len()),
        )
    };

    Verdict {
        verdict: VerdictKind::Fail,
        reason_code,
        confidence: 1.0,
        issues,
        missing,
        feedback,
    }
}

/// The message of any check over a file that does not exist.
fn missing_message(path: &str) -> String {
    format!("`{path}` does not exist: write it")
}

/// Whether `result` is an `exists` or `non_empty` check that failed because its file is missing.
fn is_missing_file(result: &CheckResult) -> bool {
    matches!(result.check, Check::Exists { .. } | Check::NonEmpty { .. })
        && result.message == missing_message(result.check.path())
}

fn non_empty(path: &str, bytes: &[u8]) -> Result<(), String> {
    if bytes.iter().any(|b| !b.is_ascii_whitespace()) {
        Ok(())
    } else if bytes.is_empty() {
        Err(format!("`{path}` is empty: write its content"))
    } else {
        Err(format!("`{path}` holds only whitespace: write its content"))
    }
}

/// The file as UTF-8 text, or a message saying where it is not.
fn text<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "`{path}` is not utf-8 text (invalid byte at offset {}): write it as utf-8",
            e.valid_up_to()
        )
    })
}

fn parses(path: &str, format: Format, bytes: &[u8]) -> Result<(), String> {
    let text = text(path, bytes)?;
    let (name, error) = match format {
        Format::Json => (
            "json",
            serde_json::from_str::<Value>(text)
                .err()
                .map(|e| e.to_string()),
        ),
        Format::Yaml => (
            "yaml",
            serde_yaml::from_str::<serde_yaml::Value>(text)
                .err()
                .map(|e| e.to_string()),
        ),
        Format::Toml => (
            "toml",
            // The first line of toml's error says where, its message says what.
            toml::from_str::<toml::Table>(text).err().map(|e| {
                let at = e.to_string().lines().next().unwrap_or_default().to_owned();
                let what = e.message().lines().next().unwrap_or_default().to_owned();
                format!("{at}: {what}")
            }),
        ),
        Format::Csv => ("csv", csv_error(text)),
    };
    match error {
        None => Ok(()),
        Some(error) => Err(format!(
            "`{path}` does not parse as {name}: {}: fix it so that it is valid {name}",
            first_line(&error)
        )),
    }
}

/// Reads `text` as RFC 4180 CSV (quoted fields with `""` escapes, CRLF or LF line ends, blank
/// lines skipped) and says what is wrong with it, if anything: an unterminated quote, text after
/// a closing quote, or a record whose field count differs from the first record's.
fn csv_error(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut line: usize = 1;
    let mut expected: Option<(usize, usize)> = None; // (fields, line of the first record)
    while i < bytes.len() {
        let record_line = line;
        // A blank line is no record.
        if bytes[i] == b'\n' {
            i += 1;
            line += 1;
            continue;
        }
        if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            i += 2;
            line += 1;
            continue;
        }
        let mut fields: usize = 1;
        loop {
            // One field, starting at `i`.
            if bytes.get(i) == Some(&b'"') {
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            return Some(format!(
                                "unterminated quoted field in the record on line {record_line}"
                            ));
                        }
                        Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\n') => {
                            line += 1;
                            i += 1;
                        }
                        Some(_) => i += 1,
                    }
                }
                match bytes.get(i) {
                    None | Some(b',' | b'\n') => {}
                    Some(b'\r') if bytes.get(i + 1) == Some(&b'\n') => {}
                    Some(_) => {
                        return Some(format!(
                            "text after a closing quote on line {line} (a quote inside a quoted field is written \"\")"
                        ));
                    }
                }
            } else {
                while let Some(&b) = bytes.get(i) {
                    if b == b',' || b == b'\n' || (b == b'\r' && bytes.get(i + 1) == Some(&b'\n')) {
                        break;
                    }
                    i += 1;
                }
            }
            // After the field: a separator, a line end or the end.
            match bytes.get(i) {
                Some(b',') => {
                    fields += 1;
                    i += 1;
                }
                Some(b'\r') => {
                    i += 2;
                    line += 1;
                    break;
                }
                Some(b'\n') => {
                    i += 1;
                    line += 1;
                    break;
                }
                _ => break,
            }
        }
        match expected {
            None => expected = Some((fields, record_line)),
            Some((want, first)) if want != fields => {
                return Some(format!(
                    "the record on line {record_line} has {fields} fields, the first (line {first}) has {want}"
                ));
            }
            Some(_) => {}
        }
    }
    None
}

fn matches(path: &str, pattern: &str, bytes: &[u8]) -> Result<(), String> {
    let regex = compile_for(pattern)?;
    let text = text(path, bytes)?;
    if regex.is_match(text) {
        Ok(())
    } else {
        Err(format!(
            "`{path}` has no match for `{}`: write what the pattern asks for",
            cut(pattern, QUOTE_SHORT)
        ))
    }
}

fn not_matches(path: &str, pattern: &str, bytes: &[u8]) -> Result<(), String> {
    let regex = compile_for(pattern)?;
    let text = text(path, bytes)?;
    match regex.find(text) {
        None => Ok(()),
        Some(m) => Err(format!(
            "`{path}` line {} matches `{}`: \"{}\": remove or rewrite it",
            line_of(text, m.start()),
            cut(pattern, QUOTE_SHORT),
            cut(m.as_str(), QUOTE_SHORT)
        )),
    }
}

/// Compiles a check's pattern, with a message fit for a check result.
fn compile_for(pattern: &str) -> Result<regex::Regex, String> {
    compile(pattern).map_err(|e| {
        format!(
            "the pattern `{}` is not a valid regular expression: {}: fix the check's pattern",
            cut(pattern, QUOTE_SHORT),
            first_line(&e)
        )
    })
}

fn json_eq(path: &str, pointer: &str, expected: &Value, bytes: &[u8]) -> Result<(), String> {
    let text = text(path, bytes)?;
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "`{path}` does not parse as json: {}: fix it so that it is valid json",
            first_line(&e.to_string())
        )
    })?;
    let found = if pointer.is_empty() {
        Some(&doc)
    } else {
        doc.pointer(pointer)
    };
    match found {
        None => Err(format!(
            "`{path}` has nothing at `{}`: write the value there",
            cut(pointer, QUOTE_LONG)
        )),
        Some(found) if found == expected => Ok(()),
        Some(found) => {
            let at = if pointer.is_empty() {
                String::new()
            } else {
                format!(" at `{}`", cut(pointer, QUOTE_LONG))
            };
            Err(format!(
                "`{path}`{at} is {}, expected {}: write the expected value",
                cut(&found.to_string(), QUOTE_LONG),
                cut(&expected.to_string(), QUOTE_LONG)
            ))
        }
    }
}

fn sha256_eq(path: &str, expected: &str, bytes: &[u8]) -> Result<(), String> {
    let found = hex::encode(Sha256::digest(bytes));
    if found.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(format!(
            "`{path}` has sha256 {found}, expected {}: write exactly the expected content",
            cut(expected, QUOTE_SHORT)
        ))
    }
}

/// Placeholders instead of content: the marker words as whole words, `lorem ipsum`, an ellipsis
/// alone on a line, `<placeholder>`-like tokens, and the stubs of Python and Rust.
static PLACEHOLDER: LazyLock<Result<regex::Regex, String>> = LazyLock::new(|| {
    compile(concat!(
        r"(?-u:\b)(?:TODO|FIXME|TBD|XXX)(?-u:\b)",
        r"|(?i:lorem ipsum)",
        r"|(?m:^[^\S\n]*(?:\.\.\.|…)[^\S\n]*$)",
        r"|(?i:<(?:placeholder|your[ _-][a-z_ -]+|insert[ _-][a-z_ -]+)>)",
        r"|NotImplemented|unimplemented!|todo!\(",
    ))
});

fn no_placeholders(path: &str, bytes: &[u8]) -> Result<(), String> {
    let regex = PLACEHOLDER.as_ref().map_err(|e| {
        format!("the placeholder pattern does not compile: {e}: report this as a bug in weft")
    })?;
    let text = String::from_utf8_lossy(bytes);
    match regex.find(&text) {
        None => Ok(()),
        Some(m) => Err(format!(
            "`{path}` line {} has a placeholder: \"{}\": replace it with the real content",
            line_of(&text, m.start()),
            cut(m.as_str().trim(), QUOTE_SHORT)
        )),
    }
}

/// The 1-based line of byte offset `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()
        .get(..at)
        .map_or(0, |before| before.iter().filter(|&&b| b == b'\n').count())
        + 1
}

/// The first line of `s`, cut to [`QUOTE_LONG`] characters.
fn first_line(s: &str) -> String {
    cut(s.lines().next().unwrap_or_default().trim(), QUOTE_LONG)
}

/// `s` cut to at most `max` characters (with `…` when cut).
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((end, _)) => format!("{}…", &s[..end]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn path() -> String {
        "out/f".to_owned()
    }

    fn check(c: Check, file: &str) -> CheckResult {
        run(&c, Some(file.as_bytes()))
    }

    fn parses_as(format: Format, file: &[u8]) -> CheckResult {
        run(
            &Check::Parses {
                path: path(),
                format,
            },
            Some(file),
        )
    }

    fn passed(r: &CheckResult) {
        assert!(r.passed, "expected a pass, got {:?}", r.message);
        assert!(r.message.is_empty());
    }

    fn failed(r: &CheckResult, needle: &str) {
        assert!(!r.passed, "expected a fail: {r:?}");
        assert!(
            r.message.contains(needle),
            "{:?} does not contain {needle:?}",
            r.message
        );
        assert!(r.message.contains("`out/f`") || r.message.contains("pattern"));
    }

    #[test]
    fn exists_passes_iff_the_file_is_there() {
        let c = Check::Exists { path: path() };
        passed(&run(&c, Some(b"")));
        failed(&run(&c, None), "`out/f` does not exist");
    }

    #[test]
    fn every_check_fails_on_a_missing_file() {
        let checks = [
            Check::NonEmpty { path: path() },
            Check::Parses {
                path: path(),
                format: Format::Json,
            },
            Check::Matches {
                path: path(),
                pattern: "x".into(),
            },
            Check::NotMatches {
                path: path(),
                pattern: "x".into(),
            },
            Check::JsonEq {
                path: path(),
                pointer: String::new(),
                value: json!(1),
            },
            Check::Sha256 {
                path: path(),
                sha256: "00".into(),
            },
            Check::NoPlaceholders { path: path() },
        ];
        for c in checks {
            failed(&run(&c, None), "`out/f` does not exist");
        }
    }

    #[test]
    fn non_empty_wants_something_besides_whitespace() {
        let c = || Check::NonEmpty { path: path() };
        passed(&check(c(), "  x\n"));
        failed(&check(c(), ""), "is empty");
        failed(&check(c(), " \n\t\r\n"), "only whitespace");
    }

    #[test]
    fn parses_json_yaml_toml() {
        passed(&parses_as(Format::Json, br#"{"a": [1, 2]}"#));
        failed(
            &parses_as(Format::Json, br#"{"a": "#),
            "does not parse as json",
        );
        passed(&parses_as(Format::Yaml, b"a:\n  - 1\n  - 2\n"));
        failed(
            &parses_as(Format::Yaml, b"a: [1, 2\nb: c\n"),
            "does not parse as yaml",
        );
        passed(&parses_as(Format::Toml, b"[a]\nb = 1\n"));
        failed(
            &parses_as(Format::Toml, b"a = \n"),
            "does not parse as toml",
        );
        failed(
            &parses_as(Format::Toml, b"a = \n"),
            "line 1, column 5: string values must be quoted",
        );
    }

    #[test]
    fn parses_wants_utf8() {
        for format in [Format::Json, Format::Yaml, Format::Toml, Format::Csv] {
            failed(&parses_as(format, b"{\"a\": \"\xff\"}"), "not utf-8");
        }
        failed(&parses_as(Format::Json, b"ab\xffc"), "offset 2");
    }

    #[test]
    fn parse_errors_are_one_short_line() {
        let r = parses_as(Format::Yaml, b"a: [1, 2\nb: c\n");
        assert!(!r.message.contains('\n'), "{:?}", r.message);
        assert!(r.message.chars().count() < 400);
    }

    #[test]
    fn csv_reads_quotes_and_line_ends() {
        passed(&parses_as(Format::Csv, b""));
        passed(&parses_as(Format::Csv, b"a,b\n1,2\n"));
        passed(&parses_as(Format::Csv, b"a,b\r\n1,2\r\n3,4"));
        passed(&parses_as(Format::Csv, b"a,b\n\"x, \"\"y\"\"\",2\n"));
        // A quoted newline is part of the field, not a new record.
        passed(&parses_as(Format::Csv, b"a,b\n\"line 1\nline 2\",2\n3,4\n"));
        passed(&parses_as(Format::Csv, b"a,b\n,\n\n1,\n"));
    }

    #[test]
    fn csv_ragged_rows_name_their_line() {
        failed(
            &parses_as(Format::Csv, b"a,b\n1,2\n1,2,3\n"),
            "line 3 has 3 fields",
        );
        // The quoted newline counts as a line.
        failed(
            &parses_as(Format::Csv, b"a,b\n\"x\ny\",2\n1\n"),
            "line 4 has 1 fields, the first (line 1) has 2",
        );
    }

    #[test]
    fn csv_unterminated_quote_fails() {
        failed(
            &parses_as(Format::Csv, b"a,b\n1,\"open\n2,3\n"),
            "unterminated quoted field in the record on line 2",
        );
        failed(
            &parses_as(Format::Csv, b"a,b\n\"x\"y,2\n"),
            "after a closing quote on line 2",
        );
    }

    #[test]
    fn matches_and_not_matches() {
        let m = |p: &str| Check::Matches {
            path: path(),
            pattern: p.into(),
        };
        let n = |p: &str| Check::NotMatches {
            path: path(),
            pattern: p.into(),
        };
        let file = "# title\n\nsecret = 42\nend\n";
        passed(&check(m(r"(?m)^# \w+"), file));
        failed(&check(m("absent"), file), "no match for `absent`");
        passed(&check(n("password"), file));
        let r = check(n(r"secret = \d+"), file);
        failed(&r, "line 3");
        failed(&r, "\"secret = 42\"");
        failed(&check(m("("), file), "not a valid regular expression");
        failed(&run(&m("x"), Some(b"\xff")), "not utf-8");
    }

    #[test]
    fn not_matches_quotes_a_long_match_cut() {
        let file = format!("ok\n{}\n", "a".repeat(500));
        let r = check(
            Check::NotMatches {
                path: path(),
                pattern: "a+".into(),
            },
            &file,
        );
        failed(&r, "line 2");
        failed(&r, &format!("\"{}…\"", "a".repeat(80)));
        assert!(!r.message.contains(&"a".repeat(81)));
    }

    #[test]
    fn json_eq_compares_at_a_pointer() {
        let c = |pointer: &str, value: Value| Check::JsonEq {
            path: path(),
            pointer: pointer.into(),
            value,
        };
        let file = r#"{"a": {"b": [1, "two"]}, "n": 3}"#;
        passed(&check(c("", json!({"n": 3, "a": {"b": [1, "two"]}})), file));
        passed(&check(c("/a/b/1", json!("two")), file));
        passed(&check(c("/n", json!(3)), file));
        failed(&check(c("/n", json!(4)), file), "at `/n` is 3, expected 4");
        failed(&check(c("/a/c", json!(1)), file), "nothing at `/a/c`");
        failed(
            &check(c("", json!(1)), "not json"),
            "does not parse as json",
        );
    }

    #[test]
    fn sha256_compares_hex() {
        let c = |sha256: &str| Check::Sha256 {
            path: path(),
            sha256: sha256.into(),
        };
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        passed(&check(c(abc), "abc"));
        failed(&check(c(abc), "abd"), &format!("expected {abc}"));
    }

    #[test]
    fn no_placeholders_finds_each_kind() {
        let c = || Check::NoPlaceholders { path: path() };
        passed(&check(
            c(),
            "all done\nTODOS and XXXL and mastodon are words\nwait... there is more\n",
        ));
        let cases = [
            ("a\nb TODO: c\n", 2, "TODO"),
            ("FIXME", 1, "FIXME"),
            ("x\ny\nprice: TBD\n", 3, "TBD"),
            ("XXX here", 1, "XXX"),
            ("intro\nLorem Ipsum dolor\n", 2, "Lorem Ipsum"),
            ("a\n  ...  \nb\n", 2, "..."),
            ("a\r\n…\r\nb\r\n", 2, "…"),
            ("name: <Your Name>\n", 1, "<Your Name>"),
            ("<insert-summary here>", 1, "<insert-summary here>"),
            ("<placeholder>", 1, "<placeholder>"),
            (
                "def f():\n    raise NotImplementedError\n",
                2,
                "NotImplemented",
            ),
            ("fn f() {\n    unimplemented!()\n}\n", 2, "unimplemented!"),
            ("fn f() {\n    todo!()\n}\n", 2, "todo!("),
        ];
        for (file, line, found) in cases {
            let r = check(c(), file);
            failed(&r, &format!("line {line} has a placeholder: \"{found}\""));
        }
        // The first one wins, and invalid UTF-8 is read lossily.
        failed(
            &run(&c(), Some(b"\xff ok\nFIXME TODO\n")),
            "line 2 has a placeholder: \"FIXME\"",
        );
    }

    fn result(c: Check, passed: bool, message: &str) -> CheckResult {
        CheckResult {
            check: c,
            passed,
            message: message.into(),
        }
    }

    #[test]
    fn verdict_passes_when_everything_does() {
        let results = [run(&Check::Exists { path: path() }, Some(b"x"))];
        let v = verdict_from_checks(RunStatus::Succeeded, &results);
        assert_eq!(v.verdict, VerdictKind::Pass);
        assert_eq!(v.reason_code, ReasonCode::Ok);
        assert!((v.confidence - 1.0).abs() < f64::EPSILON);
        assert!(v.issues.is_empty() && v.missing.is_empty() && v.feedback.is_empty());
        let v = verdict_from_checks(RunStatus::Succeeded, &[]);
        assert_eq!(v.verdict, VerdictKind::Pass);
    }

    #[test]
    fn verdict_of_a_failed_run() {
        let results = [run(&Check::Exists { path: path() }, Some(b"x"))];
        let v = verdict_from_checks(RunStatus::Failed, &results);
        assert_eq!(v.verdict, VerdictKind::Fail);
        assert_eq!(v.reason_code, ReasonCode::RunFailed);
        assert_eq!(v.issues.len(), 1);
        assert_eq!(v.issues[0].message, "the task's run ended `failed`");
        let v = verdict_from_checks(
            RunStatus::Cancelled,
            &[run(&Check::Exists { path: path() }, None)],
        );
        assert_eq!(v.reason_code, ReasonCode::RunFailed);
        assert_eq!(v.issues.len(), 2);
        assert_eq!(v.missing, vec![path()]);
        assert!(v.feedback.contains("`cancelled`"));
    }

    #[test]
    fn verdict_of_missing_files() {
        let results = [
            run(&Check::Exists { path: "a".into() }, None),
            run(&Check::NonEmpty { path: "b".into() }, None),
            run(&Check::Exists { path: "c".into() }, Some(b"")),
        ];
        let v = verdict_from_checks(RunStatus::Succeeded, &results);
        assert_eq!(v.verdict, VerdictKind::Fail);
        assert_eq!(v.reason_code, ReasonCode::Missing);
        assert_eq!(v.missing, vec!["a".to_owned()]);
        assert_eq!(
            v.issues,
            vec![
                Issue {
                    path: Some("a".into()),
                    check: Some("exists".into()),
                    message: "`a` does not exist: write it".into(),
                },
                Issue {
                    path: Some("b".into()),
                    check: Some("non_empty".into()),
                    message: "`b` does not exist: write it".into(),
                },
            ]
        );
        assert_eq!(v.feedback, "fix what the failed checks name: 2 failed");
        // An empty file is not a missing one.
        let results = [run(&Check::NonEmpty { path: "b".into() }, Some(b" "))];
        let v = verdict_from_checks(RunStatus::Succeeded, &results);
        assert_eq!(v.reason_code, ReasonCode::CheckFailed);
    }

    #[test]
    fn verdict_of_placeholders_and_other_failures() {
        let placeholder = run(&Check::NoPlaceholders { path: "p".into() }, Some(b"TODO"));
        let v = verdict_from_checks(RunStatus::Succeeded, std::slice::from_ref(&placeholder));
        assert_eq!(v.reason_code, ReasonCode::Placeholder);
        assert_eq!(v.issues.len(), 1);
        assert!(v.missing.is_empty());

        let other = result(
            Check::Sha256 {
                path: "s".into(),
                sha256: "00".into(),
            },
            false,
            "wrong hash",
        );
        let ok = result(Check::Exists { path: "e".into() }, true, "");
        let results = [placeholder, ok, other];
        let v = verdict_from_checks(RunStatus::Succeeded, &results);
        assert_eq!(v.reason_code, ReasonCode::CheckFailed);
        assert_eq!(v.issues.len(), 2);
        assert_eq!(v.issues[1].check.as_deref(), Some("sha256"));
        assert_eq!(v.issues[1].message, "wrong hash");
        assert_eq!(v.feedback, "fix what the failed checks name: 2 failed");
        assert_eq!(v, verdict_from_checks(RunStatus::Succeeded, &results));
    }
}
