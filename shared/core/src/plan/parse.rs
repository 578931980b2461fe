//! Reading a planner's and a verifier's answers: the JSON may stand alone, sit in a fenced code
//! block, or follow some prose; the first JSON value that reads as the expected shape wins, and
//! an answer with none says what was wrong so the writer can be asked again.

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

/// The verdict of a verifier's answer, checked against weft's schema (a confidence in 0..=1).
pub fn parse_verdict(text: &str) -> Result<Verdict, String> {
    let mut last = None;
    for v in json_values(text) {
        if !v.is_object() {
            continue;
        }
        match serde_path_to_error::deserialize::<_, Verdict>(v) {
            Ok(verdict) if (0.0..=1.0).contains(&verdict.confidence) => return Ok(verdict),
            Ok(verdict) => {
                last = Some(format!(
                    "`confidence` must be between 0 and 1, got {}",
                    verdict.confidence
                ));
            }
            Err(e) => last = Some(format!("verdict{}: {}", path_suffix(&e), e.inner())),
        }
    }
    Err(last.unwrap_or_else(|| {
        "the answer holds no JSON verdict: answer with {\"verdict\": \"pass|fail|inconclusive\", \"reason_code\", \"confidence\", \"issues\", \"missing\", \"feedback\"}".to_owned()
    }))
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
    let mut rest = text;
    while let Some(at) = rest.find("```") {
        let after = &rest[at + 3..];
        let body_start = after.find('\n').map_or(0, |n| n + 1);
        let Some(end) = after[body_start..].find("```") else {
            break;
        };
        if let Ok(v) = serde_json::from_str::<Value>(after[body_start..body_start + end].trim()) {
            out.push(v);
        }
        rest = &after[body_start + end + 3..];
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    // Bounded: at most 64 candidate spans.
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

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("héllo", 2), "h…[cut]");
        assert_eq!(cut("abc", 10), "abc");
    }
}
