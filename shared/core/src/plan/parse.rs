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
/// 0..=1). Which JSON is the verdict, in order of preference: the whole answer; else the last
/// fenced block (```` ```json ```` or unlabelled) holding an object with a `verdict` field; else
/// the last such object anywhere in the text. A model that shows an example verdict before its
/// real one gets its real one read — and a malformed real one is an error (asked again), never
/// the example. An answer with no verdict-like object is read as its last object, for the error.
pub fn parse_verdict(text: &str) -> Result<Verdict, String> {
    let Some(v) = verdict_candidate(text) else {
        return Err("the answer holds no JSON verdict: answer with {\"verdict\": \"pass|fail|inconclusive\", \"reason_code\", \"confidence\", \"issues\", \"missing\", \"feedback\"}".to_owned());
    };
    match serde_path_to_error::deserialize::<_, Verdict>(v) {
        Ok(verdict) if (0.0..=1.0).contains(&verdict.confidence) => Ok(verdict),
        Ok(verdict) => Err(format!(
            "`confidence` must be between 0 and 1, got {}",
            verdict.confidence
        )),
        Err(e) => Err(format!("verdict{}: {}", path_suffix(&e), e.inner())),
    }
}

/// The JSON object of `text` that is its verdict ([`parse_verdict`]), if any.
fn verdict_candidate(text: &str) -> Option<Value> {
    let looks_like_verdict = |v: &Value| v.get("verdict").is_some();
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        return v.is_object().then_some(v);
    }
    let fenced = fenced_blocks(text)
        .into_iter()
        .filter(|(lang, _)| lang.is_empty() || lang.eq_ignore_ascii_case("json"))
        .filter_map(|(_, body)| serde_json::from_str::<Value>(body.trim()).ok())
        .rfind(looks_like_verdict);
    if fenced.is_some() {
        return fenced;
    }
    let objects: Vec<Value> = spans(text).into_iter().filter(Value::is_object).collect();
    match objects.iter().rposition(looks_like_verdict) {
        Some(i) => objects.into_iter().nth(i),
        None => objects.into_iter().last(),
    }
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
        // No verdict-like object: the last object is read, for the error.
        let e = parse_verdict(r#"I think {"result": "pass"}"#).unwrap_err();
        assert!(e.contains("result") || e.contains("verdict"), "{e}");
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h…[cut]");
        assert_eq!(cut("abc", 10), "abc");
    }
}
