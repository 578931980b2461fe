//! The OpenAPI document for every route, served at `/v1/openapi.json`. A test checks that each
//! route the gateway serves is listed.
//!
//! The document is `openapi.json` plus fragments of route families kept in their own files
//! (`openapi.agents.json`, `openapi.runs.json`, `openapi.llm.json`, `openapi.usage.json`,
//! `openapi.skills.json`, `openapi.memory.json`, `openapi.channels.json`, `openapi.mcp.json`,
//! `openapi.ingress.json`, `openapi.ui.json`), each `{"paths": …, "components": {"schemas": …}}`, merged once on
//! first use.

use std::sync::LazyLock;

use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The base document, kept beside the crate so reviews see it as JSON.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// Route families merged into the base document.
const FRAGMENTS: [&str; 10] = [
    include_str!("../openapi.agents.json"),
    include_str!("../openapi.runs.json"),
    include_str!("../openapi.llm.json"),
    include_str!("../openapi.usage.json"),
    include_str!("../openapi.skills.json"),
    include_str!("../openapi.memory.json"),
    include_str!("../openapi.channels.json"),
    include_str!("../openapi.mcp.json"),
    include_str!("../openapi.ingress.json"),
    include_str!("../openapi.ui.json"),
];

/// `base` with the paths and schemas of every fragment added.
fn merge(base: &str, fragments: &[&str]) -> Result<String, serde_json::Error> {
    let mut doc: Value = serde_json::from_str(base)?;
    for f in fragments {
        let f: Value = serde_json::from_str(f)?;
        for (section, at) in [
            ("paths", &["paths"][..]),
            ("schemas", &["components", "schemas"]),
        ] {
            let mut from = &f;
            let mut to = &mut doc;
            for key in at {
                from = &from[*key];
                to = &mut to[*key];
            }
            if let (Some(to), Some(from)) = (to.as_object_mut(), from.as_object()) {
                to.extend(from.clone());
            } else if !from.is_null() {
                tracing::warn!(section, "an OpenAPI fragment section is not an object");
            }
        }
    }
    Ok(doc.to_string())
}

static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    merge(OPENAPI_JSON, &FRAGMENTS).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the OpenAPI fragments do not parse; serving the base document");
        OPENAPI_JSON.to_owned()
    })
});

pub async fn openapi() -> Response {
    ([("content-type", "application/json")], DOCUMENT.as_str()).into_response()
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;

    use super::*;

    fn document() -> Value {
        serde_json::from_str(&merge(OPENAPI_JSON, &FRAGMENTS).unwrap()).unwrap()
    }

    /// `schema` with its `$ref` (one level, as the request schemas use them) followed.
    fn deref<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => deref(
                doc,
                &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
            ),
            None => schema,
        }
    }

    /// The request body schema of an operation.
    fn body(doc: &Value, path: &str, method: &str) -> Value {
        let s = &doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"];
        deref(doc, s).clone()
    }

    /// Whether the server's type reads `v` (the JSON extractor's parse, as the route does).
    type Reads = fn(&Value) -> Result<(), String>;

    fn reads<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
        crate::extract::parse::<T>(v.to_string().as_bytes())
            .map(drop)
            .map_err(|e| e.message)
    }

    fn agent_content(v: &Value) -> Result<(), String> {
        weft_core::agent::AgentContent::from_json(v.clone())
            .and_then(|c| c.validate())
            .map_err(|e| e.message)
    }

    fn mcp_server_content(v: &Value) -> Result<(), String> {
        <weft_core::mcp::McpServerContent as weft_core::def::DefContent>::from_json(v.clone())
            .and_then(|c| c.validate())
            .map_err(|e| e.message)
    }

    fn schedule_content(v: &Value) -> Result<(), String> {
        <weft_core::schedule::ScheduleContent as weft_core::def::DefContent>::from_json(v.clone())
            .and_then(|c| c.validate())
            .map_err(|e| e.message)
    }

    fn webhook_content(v: &Value) -> Result<(), String> {
        <weft_core::webhook::WebhookContent as weft_core::def::DefContent>::from_json(v.clone())
            .and_then(|c| c.validate())
            .map_err(|e| e.message)
    }

    fn mcp_message(v: &Value) -> Result<(), String> {
        crate::mcp::check_message(v.to_string().as_bytes()).map_err(|e| e.message)
    }

    fn skill_content(v: &Value) -> Result<(), String> {
        weft_core::skill::SkillContent::from_json(v.clone())
            .and_then(|c| c.validate())
            .map_err(|e| e.message)
    }

    /// Every request body the gateway parses itself, with the type that parses it.
    fn bodies() -> Vec<(&'static str, &'static str, Reads)> {
        vec![
            (
                "/v1/chat/completions",
                "post",
                reads::<crate::openai::ChatCompletionRequest>,
            ),
            (
                "/v1/embeddings",
                "post",
                reads::<crate::openai::EmbeddingsRequest>,
            ),
            ("/v1/tokens", "post", reads::<crate::tokens::CreateToken>),
            ("/v1/agents/{name}", "put", agent_content),
            (
                "/v1/agents/{name}/fork",
                "post",
                reads::<crate::agents::ForkBody>,
            ),
            (
                "/v1/agents/{name}/activate",
                "post",
                reads::<crate::agents::ActivateBody>,
            ),
            (
                "/v1/agents/verify",
                "post",
                reads::<crate::agents::VerifyBody>,
            ),
            ("/v1/skills/{name}", "put", skill_content),
            ("/v1/mcp-servers/{name}", "put", mcp_server_content),
            ("/mcp", "post", mcp_message),
            (
                "/v1/mcp-servers/{name}/fork",
                "post",
                reads::<crate::agents::ForkBody>,
            ),
            (
                "/v1/mcp-servers/{name}/activate",
                "post",
                reads::<crate::agents::ActivateBody>,
            ),
            (
                "/v1/mcp-servers/verify",
                "post",
                reads::<crate::agents::VerifyBody>,
            ),
            ("/v1/schedules/{name}", "put", schedule_content),
            (
                "/v1/schedules/{name}/fork",
                "post",
                reads::<crate::agents::ForkBody>,
            ),
            (
                "/v1/schedules/{name}/activate",
                "post",
                reads::<crate::agents::ActivateBody>,
            ),
            (
                "/v1/schedules/verify",
                "post",
                reads::<crate::agents::VerifyBody>,
            ),
            ("/v1/webhooks/{name}", "put", webhook_content),
            (
                "/v1/webhooks/{name}/fork",
                "post",
                reads::<crate::agents::ForkBody>,
            ),
            (
                "/v1/webhooks/{name}/activate",
                "post",
                reads::<crate::agents::ActivateBody>,
            ),
            (
                "/v1/webhooks/verify",
                "post",
                reads::<crate::agents::VerifyBody>,
            ),
            (
                "/v1/webhooks/{name}/test",
                "post",
                reads::<crate::ingress::TestBody>,
            ),
            (
                "/v1/skills/{name}/fork",
                "post",
                reads::<crate::agents::ForkBody>,
            ),
            (
                "/v1/skills/{name}/activate",
                "post",
                reads::<crate::agents::ActivateBody>,
            ),
            (
                "/v1/skills/verify",
                "post",
                reads::<crate::agents::VerifyBody>,
            ),
            ("/v1/runs", "post", reads::<crate::runs::CreateRun>),
            (
                "/v1/runs/{id}/cancel",
                "post",
                reads::<crate::runs::CancelBody>,
            ),
            (
                "/v1/runs/{id}/input",
                "post",
                reads::<crate::runs::InputBody>,
            ),
            (
                "/v1/runs/{id}/interrupts/{interrupt_id}",
                "post",
                reads::<crate::runs::AnswerBody>,
            ),
            (
                "/v1/messages",
                "post",
                reads::<crate::messages::MessagesRequest>,
            ),
            (
                "/v1/messages/count_tokens",
                "post",
                reads::<crate::messages::MessagesRequest>,
            ),
            ("/v1/llm/chat", "post", reads::<crate::llm::LlmChatRequest>),
            (
                "/v1/memory/{scope}/{scope_id}/{key}",
                "put",
                reads::<crate::memory::PutBody>,
            ),
            (
                "/v1/memory/{scope}/{scope_id}/{key}/incr",
                "post",
                reads::<crate::memory::IncrBody>,
            ),
            (
                "/v1/memory/search",
                "post",
                reads::<crate::memory::SearchBody>,
            ),
            (
                "/v1/channels/{name}",
                "put",
                reads::<crate::channels::PutChannelBody>,
            ),
            (
                "/v1/channels/{name}/publish",
                "post",
                reads::<crate::channels::PublishBody>,
            ),
            (
                "/v1/channels/{name}/read",
                "post",
                reads::<crate::channels::ReadBody>,
            ),
            (
                "/v1/channels/{name}/ack",
                "post",
                reads::<crate::channels::AckBody>,
            ),
            (
                "/v1/channels/await",
                "post",
                reads::<crate::channels::AwaitBody>,
            ),
        ]
    }

    #[test]
    fn every_request_body_has_an_example_the_server_reads() {
        // The security suites build their valid requests from these examples.
        let doc = document();
        for (path, method, read) in bodies() {
            let schema = body(&doc, path, method);
            let example = &schema["example"];
            assert!(!example.is_null(), "{method} {path}: no example");
            read(example).unwrap_or_else(|e| panic!("{method} {path}: {example}: {e}"));
        }
    }

    /// The top-level numeric fields of an object schema: (name, is_integer, minimum, maximum).
    fn numbers(schema: &Value) -> Vec<(String, bool, Option<f64>, Option<f64>)> {
        let mut out = Vec::new();
        for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
            let types: Vec<&str> = match &prop["type"] {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => continue,
            };
            if types.contains(&"integer") || types.contains(&"number") {
                let bound = |k: &str| prop[k].as_f64();
                out.push((
                    name.clone(),
                    !types.contains(&"number"),
                    bound("minimum"),
                    bound("maximum"),
                ));
            }
        }
        out
    }

    #[test]
    fn numbers_are_typed_as_the_server_reads_them() {
        // `number` where the server wants an integer refuses `1000.0` that the document allows;
        // `integer` where it takes a fraction refuses nothing but says less than is true.
        let doc = document();
        let mut checked = 0;
        for (path, method, read) in bodies() {
            let schema = body(&doc, path, method);
            for (field, integer, lo, hi) in numbers(&schema) {
                let mut v = schema["example"].clone();
                let lo = lo.unwrap_or(0.0);
                // A whole number written as a float (`1000.0`), and a fraction, both in bounds.
                let whole = hi.map_or(lo + 1.0, |hi| hi.min(lo + 1.0));
                v[&field] = serde_json::json!(whole);
                let as_float = read(&v);
                v[&field] = serde_json::json!(lo + 0.5);
                let fraction = read(&v);
                if integer {
                    assert!(
                        fraction.is_err(),
                        "{method} {path}: `{field}` is documented as an integer but {} is accepted",
                        lo + 0.5
                    );
                } else {
                    assert!(
                        as_float.is_ok() && fraction.is_ok(),
                        "{method} {path}: `{field}` is documented as a number but {whole:?} or {} is refused: {as_float:?} {fraction:?}",
                        lo + 0.5
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 10, "only {checked} numeric fields found");
    }

    #[test]
    fn fragments_merge_into_the_document() {
        let doc: Value = serde_json::from_str(&merge(OPENAPI_JSON, &FRAGMENTS).unwrap()).unwrap();
        for path in [
            "/v1/tokens",
            "/v1/agents",
            "/v1/agents/{name}/fork",
            "/v1/schedules/{name}/run-now",
            "/v1/webhooks/{name}/test",
        ] {
            assert!(doc["paths"].get(path).is_some(), "{path}");
        }
        // The webhook receiver is signed per definition, not bearer-authenticated.
        let receiver = &doc["paths"]["/v1/_webhooks/{tenant}/{name}"]["post"];
        assert_eq!(receiver["security"], serde_json::json!([]), "{receiver}");
        for schema in ["Error", "AgentContent", "AgentVersion"] {
            assert!(
                doc["components"]["schemas"].get(schema).is_some(),
                "{schema}"
            );
        }
        // Every $ref resolves.
        let text = doc.to_string();
        for r in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap();
            assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
        }
    }
}
