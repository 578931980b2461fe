//! Small types many routes share: names, times, cursors.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tenant's name: lowercase letters, digits and `-`, starting with a letter or digit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TenantName(#[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]{0,62}$"))] pub String);

/// An RFC 3339 time, such as `2026-11-22T00:00:00Z`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub String);

impl JsonSchema for Timestamp {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Timestamp".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "date-time"})
    }
}

/// Where the next page of a list starts: a string or a sequence number; null on the last page.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NextCursor(pub Option<Value>);

impl JsonSchema for NextCursor {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "NextCursor".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": ["string", "integer", "null"],
            "description": "where the next page starts (null: this is the last page; lists without pages always answer null)"
        })
    }
}
