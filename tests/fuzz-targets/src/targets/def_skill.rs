//! Skill definitions: a `PUT /v1/skills/{name}` body (first byte even) or a `SKILL.md` (odd:
//! front matter `name`, `description`; the instructions as the body, `parse_skill_markdown`).
//! Beyond "no panic" ([`crate::defs`]): refusals are 4xx naming the field, the gateway hop
//! changes nothing, accepted content is storable and has a stable content address; a
//! `SKILL.md` that parses is written back and parses to the same name and content.

use crate::defs;
use serde_json::{Map, Value};
use weft_core::def::{DefKind, validate_def_name};
use weft_core::skill::{SkillContent, parse_skill_markdown};

const HINT: &str = "folder";

fn check_skill(c: &SkillContent) {
    for name in c.files.keys() {
        assert!(
            !name.is_empty() && !name.starts_with('/') && !name.split('/').any(|s| s == ".."),
            "a file path that escapes the skill's folder was accepted: {name:?}"
        );
    }
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    if selector & 1 == 0 {
        if let Some(c) = defs::check_body::<SkillContent>(rest) {
            check_skill(&c);
        }
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (name, content) = match parse_skill_markdown(HINT, text) {
        Ok(ok) => ok,
        Err(e) => {
            defs::assert_4xx("parse_skill_markdown", &e);
            return;
        }
    };
    assert!(
        validate_def_name(DefKind::Skill, &name).is_ok(),
        "an invalid name was accepted: {name:?}"
    );
    assert!(content.files.is_empty(), "a SKILL.md alone has no files");
    assert_eq!(content.body, content.body.trim(), "the body is not trimmed");
    defs::check_valid(&content);

    let mut fields = Map::new();
    fields.insert("name".into(), Value::String(name.clone()));
    fields.insert(
        "description".into(),
        Value::String(content.description.clone()),
    );
    let md = format!("---\n{}---\n\n{}\n", defs::yaml(&fields), content.body);
    defs::check_written_back(&name, &content, &md, parse_skill_markdown("other", &md));
}
