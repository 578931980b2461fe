//! The memory routes (`/v1/memory/…`): key-value entries in a scope (a run, an agent, a user, the
//! tenant) with versions, TTLs and compare-and-set, an atomic counter, and semantic search over
//! the entries written with `embed`.
//!
//! The gateway hands the bodies to the substrate, which validates them: the bounds below are the
//! substrate's, and the fields the gateway reads stay as loose as it reads them (a `scope` is a
//! string here, refused by the substrate with a message naming it).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::common::{Nullable, Timestamp};
use crate::op::Op;

/// A memory scope: `run`, `agent`, `user` or `tenant` (a string, checked by the substrate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("enum" = ["run", "agent", "user", "tenant"]))]
pub struct MemoryScope(pub String);

/// The id within a scope: a run id, an agent name, a subject, or the tenant's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct ScopeId(#[schemars(length(min = 1, max = 256))] pub String);

/// An entry's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct MemoryKey(#[schemars(length(min = 1, max = 512))] pub String);

/// A key prefix to list by.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct KeyPrefix(#[schemars(length(max = 512))] pub String);

/// Where a page of a memory list starts: the `next_cursor` of the previous page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct MemoryCursor(#[schemars(length(min = 1))] pub String);

/// `limit` of a memory list.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct MemoryListLimit(
    #[schemars(range(min = 1, max = 1000), extend("default" = 100))] pub u32,
);

/// An entry's version to compare with: 0 = no live entry.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct IfVersion(#[schemars(range(min = 0))] pub i64);

/// Present (even as `null`) or absent: `{"value": null}` stores null; `{}` is a 400.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `value` is read as an `Option` (so that its absence is a 400 that says what it wants), but
/// is required, and has no default.
fn value_required(schema: &mut Schema) {
    if let Some(Value::Object(value)) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("value"))
    {
        value.remove("default");
    }
    let required = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(r) = required {
        r.push("value".into());
    }
}

/// The body of `PUT /v1/memory/{scope}/{scope_id}/{key}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(
    extend("example" = {"value": {"city": "Lisbon"}, "ttl_seconds": 3600}),
    transform = value_required
)]
pub struct MemoryPut {
    /// any JSON, at most 64 KiB as compact JSON
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Value")]
    pub value: Option<Value>,
    /// absent = never expires
    #[schemars(range(min = 1, max = 315_360_000))]
    pub ttl_seconds: Option<i64>,
    #[schemars(range(min = 0))]
    pub if_version: Option<i64>,
    #[serde(default)]
    pub embed: bool,
}

/// The body of `POST /v1/memory/{scope}/{scope_id}/{key}/incr`; an empty body adds 1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"by": 1}))]
pub struct MemoryIncr {
    #[schemars(extend("default" = 1))]
    pub by: Option<i64>,
    #[schemars(range(min = 1, max = 315_360_000))]
    pub ttl_seconds: Option<i64>,
}

/// The body of `POST /v1/memory/search`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"scope": "user", "scope_id": "alice", "query": "where does alice live", "top_k": 5}))]
pub struct MemorySearch {
    pub scope: MemoryScope,
    pub scope_id: ScopeId,
    #[schemars(length(min = 1, max = 8192))]
    pub query: String,
    #[schemars(range(min = 1, max = 100), extend("default" = 10))]
    pub top_k: Option<u32>,
}

// Bodies are JSON objects only: serde's derive would also read an array of the fields.
crate::objects_only!(MemoryPut, MemoryIncr, MemorySearch);

/// A memory entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryEntry {
    pub scope: String,
    pub scope_id: String,
    pub key: String,
    /// any JSON
    pub value: Value,
    /// 1 when created, +1 on every change
    pub version: i64,
    pub expires_at: Nullable<Timestamp>,
    pub updated_at: Timestamp,
    pub embedded: bool,
}

/// The answer of `GET /v1/memory/{scope}/{scope_id}`: a page of entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryList {
    pub data: Vec<MemoryEntry>,
    pub next_cursor: Nullable<String>,
}

/// The answer of `DELETE /v1/memory/{scope}/{scope_id}/{key}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryDeleted {
    pub key: String,
    pub deleted: bool,
    /// the version deleted, 0 when none
    pub version: i64,
}

/// An entry found by a search, with its score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredMemoryEntry {
    #[serde(flatten)]
    pub entry: MemoryEntry,
    /// cosine similarity, -1..=1
    pub score: f64,
}

impl JsonSchema for ScoredMemoryEntry {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "ScoredMemoryEntry".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let entry = g.subschema_for::<MemoryEntry>();
        json_schema!({
            "allOf": [
                entry,
                {
                    "type": "object",
                    "required": ["score"],
                    "properties": {
                        "score": {"type": "number", "description": "cosine similarity, -1..=1"}
                    }
                }
            ]
        })
    }
}

/// How a search ranked: `exact` or `pgvector`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("enum" = ["exact", "pgvector"]))]
pub struct SearchMode(pub String);

/// The answer of `POST /v1/memory/search`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchResult {
    pub data: Vec<ScoredMemoryEntry>,
    pub mode: SearchMode,
}

const NO_SCOPE: &str = "no such scope for you (another tenant's, another user's, a run you cannot see) or no live entry at the key";
const ERRORS: [(u16, &str); 3] = [
    (
        400,
        "invalid request: the message and `param` name the field (`scope`, `scope_id`, `key`, `value`, `ttl_seconds`, `if_version`, `cursor`, `limit`, `top_k`, `query`)",
    ),
    (401, "missing, invalid, expired or revoked token"),
    (403, "the token lacks the scope this route needs"),
];

/// A memory route: its tag, and the errors every memory route answers; `conflict` (409) and
/// `body` (413, 415) where the route has them.
fn memory(mut op: Op, conflict: Option<&'static str>, body: bool) -> Op {
    op = op.tag("memory");
    for (status, description) in ERRORS {
        op = op.error(status, description);
    }
    op = op.error(404, NO_SCOPE);
    if let Some(c) = conflict {
        op = op.error(409, c);
    }
    if body {
        op = op
            .error(413, "body over the size cap")
            .error(415, "body is not JSON");
    }
    op.error(503, "the substrate or the database is unreachable")
}

/// The path parameters of a scope.
fn in_scope(op: Op) -> Op {
    op.param::<MemoryScope>(
        crate::In::Path,
        "scope",
        true,
        Some("`run` (a run id you may read), `agent` (an agent name), `user` (your subject; any user of the tenant for a tenant admin), `tenant` (your tenant)"),
        Some("user".into()),
    )
    .path::<ScopeId>("scope_id", Some("alice".into()))
}

/// The path parameters of an entry.
fn at_key(op: Op) -> Op {
    in_scope(op).param::<MemoryKey>(
        crate::In::Path,
        "key",
        true,
        Some("Any UTF-8 without NUL, at most 512 bytes; percent-encode `/`"),
        Some("notes/today".into()),
    )
}

pub fn ops() -> Vec<Op> {
    const ENTRY: &str = "/v1/memory/{scope}/{scope_id}/{key}";
    vec![
        memory(
            in_scope(Op::get("/v1/memory/{scope}/{scope_id}", "List live entries of a scope by key prefix, a page at a time"))
                .describe("Scope: memory:read. Keys in bytewise (UTF-8) order. Pass `next_cursor` back as `cursor` for the next page; it is absent on the last page.")
                .query::<KeyPrefix>("prefix", None, Some("notes/".into()))
                .query::<MemoryCursor>("cursor", Some("`next_cursor` of the previous page"), None)
                .query::<MemoryListLimit>("limit", None, Some(100.into()))
                .ok::<MemoryList>("a page of entries"),
            None,
            false,
        ),
        memory(
            at_key(Op::get(ENTRY, "Read a memory entry"))
                .describe("Scope: memory:read. Expired entries are never returned.")
                .ok::<MemoryEntry>("the entry"),
            None,
            false,
        ),
        memory(
            at_key(Op::put(ENTRY, "Write a memory entry (replaces value and TTL)"))
                .describe("Scope: memory:write. `if_version` makes it a compare-and-set: 0 = the key must not exist, n = the live entry must be at version n; a mismatch is a 409 naming the current version. `embed: true` stores an embedding of the value (a JSON string as itself, anything else as its JSON) for `/v1/memory/search`. Writes over the tenant's byte quota are a 409 naming `substrate.memory_tenant_quota_bytes`.")
                .body::<MemoryPut>()
                .ok::<MemoryEntry>("the entry as written"),
            Some("`if_version` does not match, or the write is over a quota"),
            true,
        ),
        memory(
            at_key(Op::delete(ENTRY, "Delete a memory entry"))
                .describe("Scope: memory:write. `deleted` is false when there was no live entry. With `if_version`, a mismatch is a 409.")
                .query::<IfVersion>("if_version", None, Some(1.into()))
                .ok::<MemoryDeleted>("what was deleted"),
            Some("`if_version` does not match"),
            false,
        ),
        memory(
            crate::runs::optional_body(
                at_key(Op::post("/v1/memory/{scope}/{scope_id}/{key}/incr", "Add to an integer memory entry atomically"))
                    .describe("Scope: memory:write. A missing entry starts at 0; an entry whose value is not an integer is a 409. `ttl_seconds` sets the expiry; without it the entry keeps its own. An empty body adds 1.")
                    .body::<MemoryIncr>(),
            )
            .ok::<MemoryEntry>("the entry after the increment"),
            Some("the value is not an integer, the sum overflows, or the write is over a quota"),
            true,
        ),
        memory(
            Op::post("/v1/memory/search", "Semantic search over the entries of a scope written with `embed`")
                .describe("Scope: memory:read. Ranked by cosine similarity to the embedding of `query` (the router's `Embed` with `substrate.embedding_model`), ties to the most recently updated. `mode` says how it ranked: `exact` (a scan of the newest 20,000 embedded entries of the scope) or `pgvector`.")
                .body::<MemorySearch>()
                .ok::<MemorySearchResult>("the nearest entries, best first"),
            None,
            true,
        ),
    ]
}
