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

/// A UUID, as text (a token's, a run's, a fire's id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Uuid(pub String);

impl JsonSchema for Uuid {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Uuid".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "uuid"})
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

/// Sampling settings, of an agent or of one run (`POST /v1/runs` overrides the agent's): a JSON
/// object (never an array). A mirror of `weft_core::agent::AgentSampling`, which reads it (and
/// refuses an out-of-range value at the field's path); this type carries its schema.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(
    description = "sampling settings; a JSON object (never an array)",
    extend("example" = {"temperature": 0.2})
)]
pub struct AgentSampling {
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    #[schemars(range(min = i64::MIN, max = i64::MAX))]
    pub seed: Option<i64>,
    /// At most 16, none empty.
    #[schemars(length(max = 16), inner(length(min = 1)))]
    pub stop: Vec<String>,
}

/// One server-sent event of a `text/event-stream` answer: `event` names its kind, `data` is its
/// JSON text, `id` (where a stream has one) is where a reconnect resumes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SseEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub data: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<u64>,
}

impl JsonSchema for SseEvent {
    fn schema_name() -> Cow<'static, str> {
        "SseEvent".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "description": "one server-sent event: `event` names its kind, `data` is its JSON text",
            "required": ["data"],
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string"},
                "id": {"type": "string"},
                "retry": {"type": "integer"}
            }
        })
    }
}

/// A field that is always present and may be null: `Option<T>`'s schema, but required (an
/// `Option` field is optional in a schema read for deserializing).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Nullable<T>(pub Option<T>);

impl<T: JsonSchema> JsonSchema for Nullable<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Nullable_{}", T::schema_name()).into()
    }
    fn schema_id() -> Cow<'static, str> {
        format!("Nullable<{}>", T::schema_id()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        <Option<T>>::json_schema(g)
    }
}

impl<T> From<Option<T>> for Nullable<T> {
    fn from(v: Option<T>) -> Self {
        Nullable(v)
    }
}
