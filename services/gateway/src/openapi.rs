//! The OpenAPI document for every route, served at `/v1/openapi.json`. A test checks that each
//! route the gateway serves is listed.
//!
//! The document is `openapi.json` plus fragments of route families kept in their own files
//! (`openapi.agents.json`, `openapi.runs.json`, `openapi.llm.json`, `openapi.usage.json`), each
//! `{"paths": …, "components": {"schemas": …}}`, merged once on first use.

use std::sync::LazyLock;

use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The base document, kept beside the crate so reviews see it as JSON.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// Route families merged into the base document.
const FRAGMENTS: [&str; 4] = [
    include_str!("../openapi.agents.json"),
    include_str!("../openapi.runs.json"),
    include_str!("../openapi.llm.json"),
    include_str!("../openapi.usage.json"),
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
    use super::*;

    #[test]
    fn fragments_merge_into_the_document() {
        let doc: Value = serde_json::from_str(&merge(OPENAPI_JSON, &FRAGMENTS).unwrap()).unwrap();
        for path in ["/v1/tokens", "/v1/agents", "/v1/agents/{name}/fork"] {
            assert!(doc["paths"].get(path).is_some(), "{path}");
        }
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
