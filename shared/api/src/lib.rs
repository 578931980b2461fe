//! weft's public HTTP contract, one place for every face that shows it.
//!
//! Each route family is a module holding its request and response types (serde + `JsonSchema`,
//! doc comments are the descriptions) and its routes as [`op::Op`]s. [`document`] generates the
//! OpenAPI 3.1 document the gateway serves at `/v1/openapi.json` from those types and routes; it
//! is pinned by the golden file `shared/api/openapi.json` (regenerate with `UPDATE_GOLDEN=1
//! cargo test -p weft-api`), from which the web UI's TypeScript types are generated.
//!
//! Adding a capability: its types and `ops()` in a new module here, one line in [`FAMILIES`], a
//! handler per route in the gateway (which parses into these types and answers with them).

use std::sync::LazyLock;

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::transform::SetSingleExample;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub mod a2a;
pub mod agents;
pub mod base;
pub mod binding;
pub mod channels;
pub mod code;
pub mod common;
pub mod context;
pub mod defs;
pub mod face;
pub mod hooks;
pub mod ingress;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod objects;
pub mod op;
pub mod operations;
pub mod plan_spec;
pub mod plans;
pub mod processes;
pub mod responses;
pub mod runs;
pub mod skills;
pub mod tenant_archive;
pub mod tools;
pub mod ui;
pub mod usage;
pub mod volumes;

pub use op::{In, Method, Op, Security};

/// An error in the native shape: `{"error": {"code", "message", "param"?}}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Error {
    pub error: ErrorBody,
}

/// What went wrong.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
}

/// The route families, in the order their paths appear in the document.
pub const FAMILIES: &[fn() -> Vec<Op>] = &[
    base::ops,
    responses::ops,
    agents::ops,
    runs::ops,
    plans::ops,
    llm::ops,
    usage::ops,
    skills::ops,
    processes::ops,
    a2a::ops,
    hooks::ops,
    memory::ops,
    channels::ops,
    volumes::ops,
    mcp::ops,
    ingress::ops,
    operations::ops,
    tenant_archive::ops,
    ui::ops,
];

/// Every route of the public API.
pub fn ops() -> Vec<Op> {
    FAMILIES.iter().flat_map(|f| f()).collect()
}

const DESCRIPTION: &str = "weft's public HTTP API. OpenAI-compatible routes answer errors in OpenAI's shape; native routes in {\"error\":{\"code\",\"message\",\"param\"?}}; the Anthropic-compatible routes in Anthropic's. Request bodies are JSON objects (a struct is never read from an array of its fields). Native routes store what they are given and refuse U+0000 anywhere in a body, query or path with a 400 naming the field; the OpenAI- and Anthropic-compatible routes forward such text to the provider (the Responses API keeps stored responses as JSON text, where it is escaped). Every body is capped by gateway.max_body_bytes (413).";

/// The OpenAPI document, generated from [`ops`] and the types they name.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings
        .transforms
        .push(Box::new(SetSingleExample::default()));
    let mut g = SchemaGenerator::new(settings);
    let mut paths = Map::new();
    for op in ops() {
        let item = paths
            .entry(op.path)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(item) = item {
            item.insert(op.method.as_str().into(), op.to_json(&mut g));
        }
    }
    let mut schemas: Map<String, Value> = g.take_definitions(true);
    // Error first, then the rest in the order they were met.
    if let Some(e) = schemas.remove("Error") {
        let mut first = Map::new();
        first.insert("Error".into(), e);
        first.extend(schemas);
        schemas = first;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "weft", "version": env!("CARGO_PKG_VERSION"), "description": DESCRIPTION},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "wft_ API token"},
                "uiSession": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "weft_session",
                    "description": "a web UI session (POST /ui/api/session). The native /v1 routes accept it in place of a bearer token; a state-changing call made with it must also send the session's CSRF token in x-csrf-token."
                }
            },
            "schemas": schemas
        },
        "security": [{"bearer": []}],
        "paths": paths
    })
}

/// The document as served: generated once, compact.
pub fn document_json() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| document().to_string());
    DOCUMENT.as_str()
}

/// `T`'s JSON Schema, standalone (definitions inlined), for a tool's or an MCP tool's input.
pub fn json_schema<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

#[cfg(test)]
mod tests;
