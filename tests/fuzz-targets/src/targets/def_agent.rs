//! Agent definitions: a `PUT /v1/agents/{name}` body (first byte even) or a `<name>.md` file
//! (odd: YAML front matter and the system prompt as its body, `parse_agent_markdown`). Beyond
//! "no panic" ([`crate::defs`]): refusals are 4xx naming the field, the gateway hop changes
//! nothing, accepted content is storable and has a stable content address. A markdown
//! definition that parses is written back as markdown (its fields as YAML front matter, the
//! prompt as the body) and parses to the same name and content; and its content through the
//! JSON path hashes the same.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use crate::defs;
use serde_json::Value;
use weft_core::agent::{AgentContent, parse_agent_markdown, validate_agent_name};

const HINT: &str = "file-stem";

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    if selector & 1 == 0 {
        defs::check_body::<AgentContent>(rest);
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (name, content) = match parse_agent_markdown(HINT, text) {
        Ok(ok) => ok,
        Err(e) => {
            defs::assert_4xx("parse_agent_markdown", &e);
            return;
        }
    };
    assert!(
        validate_agent_name(&name).is_ok(),
        "an invalid name was accepted: {name:?}"
    );
    assert!(
        content.validate().is_ok(),
        "parsed content does not validate"
    );
    defs::check_valid(&content);

    // Written back as markdown, it parses to the same definition.
    let mut fields = match serde_json::to_value(&content) {
        Ok(Value::Object(m)) => m,
        other => panic!("agent content is not an object: {other:?}"),
    };
    let prompt = content.system_prompt.clone();
    let in_body = !prompt.is_empty() && prompt.trim() == prompt;
    if in_body {
        fields.remove("system_prompt");
    }
    fields.insert("name".into(), Value::String(name.clone()));
    let md = format!(
        "---\n{}---\n\n{}\n",
        defs::yaml(&fields),
        if in_body { prompt.as_str() } else { "" }
    );
    defs::check_written_back(
        &name,
        &content,
        &md,
        parse_agent_markdown("other-stem", &md),
    );
}
