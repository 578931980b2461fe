//! Reading a planner's and a verifier's answers: the JSON may stand alone, sit in a fenced code
//! block, or follow some prose. A plan is the first JSON value that reads as one; a verdict is
//! the answer's *last* word (the whole text, else the last fenced block, else the last object),
//! so a model that thinks aloud with an example verdict first gets its real one read. An answer
//! with none says what was wrong so the writer can be asked again.

use serde_json::Value;

use weft_api::plans::{Task, Verdict};

/// The tasks of a planner's answer: `{"tasks": [...]}` or a bare `[...]`.
pub fn parse_plan(text: &str) -> Result<Vec<Task>, String> {
    let mut last = None;
    for v in json_values(text) {
        let tasks = match &v {
            Value::Object(o) => match o.get("tasks") {
                Some(t) => t.clone(),
                None => {
                    last = Some("the JSON object has no `tasks` array".to_owned());
                    continue;
                }
            },
            Value::Array(_) => v.clone(),
            _ => continue,
        };
        match serde_path_to_error::deserialize::<_, Vec<Task>>(tasks) {
            Ok(t) => return Ok(t),
            Err(e) => last = Some(format!("tasks{}: {}", path_suffix(&e), e.inner())),
        }
    }
    Err(last.unwrap_or_else(|| {
        "the answer holds no JSON plan: answer with {\"tasks\": [{\"id\", \"description\", \"depends_on\", \"checks\", \"acceptance\", \"verify\"}, …]}".to_owned()
    }))
}

/// The verdict of a verifier's answer, checked strictly against weft's schema (a confidence in
/// 0..=1). Which JSON is the verdict: the whole answer when it is a JSON object; else the object
/// around the answer's **last** `"verdict":` key (the innermost `{…}` that holds it and parses),
/// fenced or not. A model that shows an example verdict before its real one gets its real one
/// read, and a real one that does not parse (a trailing comma, a cut-off object) is an error, so
/// the verification is asked again; an earlier example is never read instead.
pub fn parse_verdict(text: &str) -> Result<Verdict, String> {
    let v = verdict_candidate(text)?;
    match serde_path_to_error::deserialize::<_, Verdict>(v) {
        Ok(verdict) if (0.0..=1.0).contains(&verdict.confidence) => Ok(verdict),
        Ok(verdict) => Err(format!(
            "`confidence` must be between 0 and 1, got {}",
            verdict.confidence
        )),
        Err(e) => Err(format!("verdict{}: {}", path_suffix(&e), e.inner())),
    }
}

/// The JSON object of `text` that is its verdict ([`parse_verdict`]).
fn verdict_candidate(text: &str) -> Result<Value, String> {
    const NONE: &str = "the answer holds no JSON verdict: answer with {\"verdict\": \"pass|fail|inconclusive\", \"reason_code\", \"confidence\", \"issues\", \"missing\", \"feedback\"}";
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        return if v.is_object() {
            Ok(v)
        } else {
            Err(NONE.to_owned())
        };
    }
    let Some(key) = last_key(text, "verdict") else {
        return Err(NONE.to_owned());
    };
    // The nearest `{` before the key whose object reaches past it; bounded, from the key back.
    let mut first_error = None;
    for (tried, (open, _)) in text[..key].rmatch_indices('{').enumerate() {
        if tried >= 64 {
            break;
        }
        let mut de = serde_json::Deserializer::from_str(&text[open..]).into_iter::<Value>();
        match de.next() {
            Some(Ok(v)) if open + de.byte_offset() > key => {
                return if v.is_object() {
                    Ok(v)
                } else {
                    Err(NONE.to_owned())
                };
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                first_error.get_or_insert_with(|| e.to_string());
            }
            None => {}
        }
    }
    Err(format!(
        "the verdict is not valid JSON ({}); answer with the verdict object alone",
        first_error.unwrap_or_else(|| "no `{` opens it".to_owned())
    ))
}

/// The byte offset of the last `"<name>"` in `text` that is followed by a `:` (a JSON key).
fn last_key(text: &str, name: &str) -> Option<usize> {
    let quoted = format!("\"{name}\"");
    text.rmatch_indices(&quoted)
        .map(|(at, _)| at)
        .find(|at| text[at + quoted.len()..].trim_start().starts_with(':'))
}

fn path_suffix<E>(e: &serde_path_to_error::Error<E>) -> String {
    let p = e.path().to_string();
    if p == "." || p.is_empty() {
        String::new()
    } else {
        format!(" at `{p}`")
    }
}

/// Every JSON object or array in `text`, in order: the whole text, then each fenced block, then
/// each balanced `{…}`/`[…]` span starting at a brace.
fn json_values(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        out.push(v);
    }
    out.extend(
        fenced_blocks(text)
            .into_iter()
            .filter_map(|(_, body)| serde_json::from_str::<Value>(body.trim()).ok()),
    );
    out.extend(spans(text));
    out
}

/// Each closed fenced block of `text`, in order: its info string (e.g. `json`, trimmed) and its
/// body.
fn fenced_blocks(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("```") {
        let after = &rest[at + 3..];
        let (lang, body_start) = match after.find('\n') {
            Some(n) => (after[..n].trim(), n + 1),
            None => ("", 0),
        };
        let Some(end) = after[body_start..].find("```") else {
            break;
        };
        out.push((lang, &after[body_start..body_start + end]));
        rest = &after[body_start + end + 3..];
    }
    out
}

/// Each balanced top-level `{…}`/`[…]` JSON span of `text`, in order (a span's inner values are
/// not listed again). Bounded: at most 64 candidate starts are tried.
fn spans(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut tried = 0;
    while i < bytes.len() && tried < 64 {
        if matches!(bytes[i], b'{' | b'[') {
            tried += 1;
            let mut de = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            if let Some(Ok(v)) = de.next() {
                let used = de.byte_offset();
                out.push(v);
                i += used.max(1);
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `text` cut to at most `max` bytes on a char boundary, marked when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[cut]", &text[..end])
}

#[cfg(test)]
mod tests {
    use weft_api::plans::VerdictKind;

    use super::*;

    #[test]
    fn a_plan_reads_bare_fenced_or_after_prose() {
        let plan = r#"{"tasks": [{"id": "a", "description": "do a"}]}"#;
        assert_eq!(parse_plan(plan).unwrap()[0].id, "a");
        assert_eq!(
            parse_plan(&format!("Here it is:\n```json\n{plan}\n```\n")).unwrap()[0].id,
            "a"
        );
        assert_eq!(
            parse_plan(&format!("Sure. {plan} Done.")).unwrap()[0].id,
            "a"
        );
        assert_eq!(
            parse_plan(r#"[{"id": "b", "description": "do b"}]"#).unwrap()[0].id,
            "b"
        );
    }

    #[test]
    fn a_bad_plan_says_what_is_wrong() {
        let e = parse_plan("no plan here").unwrap_err();
        assert!(e.contains("no JSON plan"), "{e}");
        let e = parse_plan(r#"{"tasks": [{"id": "a"}]}"#).unwrap_err();
        assert!(e.contains("description"), "{e}");
        let e =
            parse_plan(r#"{"tasks": [{"id": "a", "description": "x", "bogus": 1}]}"#).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn a_verdict_must_fit_the_schema() {
        let ok = r#"{"verdict": "pass", "reason_code": "ok", "confidence": 0.9, "issues": [], "missing": [], "feedback": ""}"#;
        assert!(parse_verdict(ok).is_ok());
        assert!(parse_verdict(&format!("```\n{ok}\n```")).is_ok());
        let e = parse_verdict(r#"{"verdict": "maybe", "reason_code": "ok", "confidence": 1}"#)
            .unwrap_err();
        assert!(e.contains("verdict"), "{e}");
        let e = parse_verdict(r#"{"verdict": "pass", "reason_code": "ok", "confidence": 3}"#)
            .unwrap_err();
        assert!(e.contains("confidence"), "{e}");
        assert!(parse_verdict("looks good to me").is_err());
    }

    const EXAMPLE: &str = r#"{"verdict": "pass", "reason_code": "ok", "confidence": 1, "issues": [], "missing": [], "feedback": ""}"#;
    const REAL: &str = r#"{"verdict": "fail", "reason_code": "missing", "confidence": 0.8, "issues": [], "missing": ["report.md"], "feedback": "write report.md"}"#;

    #[test]
    fn a_verdict_is_the_whole_answer_when_it_is_json() {
        let v = parse_verdict(&format!("  {REAL}\n")).unwrap();
        assert_eq!(v.verdict, VerdictKind::Fail);
    }

    #[test]
    fn a_verdict_is_the_last_fenced_json_block() {
        let text = format!(
            "A verdict looks like this:\n```json\n{EXAMPLE}\n```\nHaving read the files, mine is:\n```json\n{REAL}\n```\nThat is all."
        );
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
        // An unlabelled fence counts too.
        let text = format!("```\n{EXAMPLE}\n```\n```\n{REAL}\n```");
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
        // A later fenced block that is not a verdict (a file it quotes) is passed over.
        let text = format!("```json\n{REAL}\n```\nThe file held:\n```json\n{{\"a\": 1}}\n```");
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
    }

    #[test]
    fn a_verdict_is_the_last_object_after_prose() {
        let text =
            format!("For instance {EXAMPLE} would pass. But report.md is absent, so: {REAL}");
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
        // Its nested objects are not candidates of their own.
        let nested = r#"{"verdict": "fail", "reason_code": "incorrect", "confidence": 0.5, "issues": [{"path": "a", "message": "wrong"}], "missing": [], "feedback": "fix a"}"#;
        let v = parse_verdict(&format!("Verdict: {nested}")).unwrap();
        assert_eq!(v.issues.len(), 1);
    }

    #[test]
    fn a_malformed_real_verdict_is_an_error_not_the_example() {
        let bad = r#"{"verdict": "fail", "reason_code": "ok", "confidence": 7}"#;
        let e = parse_verdict(&format!("e.g. {EXAMPLE}; mine: {bad}")).unwrap_err();
        assert!(e.contains("confidence"), "{e}");
        // No verdict-like object: said so.
        let e = parse_verdict(r#"I think {"result": "pass"}"#).unwrap_err();
        assert!(e.contains("holds no JSON verdict"), "{e}");
        // A real verdict that is not valid JSON (a trailing comma) is an error, never the
        // example before it.
        let cut = r#"{"verdict": "fail", "reason_code": "missing", "confidence": 0.8, "issues": [], "missing": [], "feedback": "x",}"#;
        let e = parse_verdict(&format!("e.g. {EXAMPLE} mine: {cut}")).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = parse_verdict(&format!(
            "```json\n{EXAMPLE}\n```\nmine:\n```json\n{cut}\n```"
        ))
        .unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
    }

    #[test]
    fn a_fenced_example_does_not_beat_a_later_unfenced_verdict() {
        let text = format!("Like this:\n```json\n{EXAMPLE}\n```\nMine: {REAL}");
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
        // Many braces before it (quoted code, links) do not hide it.
        let noise = "[link](x) {a} ".repeat(100);
        let text = format!("{noise}{EXAMPLE} then {REAL}");
        assert_eq!(parse_verdict(&text).unwrap().verdict, VerdictKind::Fail);
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h…[cut]");
        assert_eq!(cut("abc", 10), "abc");
    }
}
