//! The eight routes every kind of definition has (agents, skills, MCP servers, schedules,
//! webhooks): list, verify, get, put, versions, fork, retire, activate.
//!
//! One builder, [`def_ops`], makes them for a kind from its content type (the request body of a
//! put, the `content` of a version) and its wording ([`DefTexts`], written with
//! [`def_texts!`](crate::def_texts)). The bodies and answers other than the content are the same
//! for every kind and live here.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::{NextCursor, Timestamp};
use crate::op::Op;

/// The content of one kind of definition, as the document names it.
pub trait DefContentSchema: JsonSchema {
    /// The kind's name in schema names: `Agent` gives `AgentVersion` and `PutAgentResult`.
    const NAME: &'static str;
    /// Whether a put and a get of the active version answer with `warnings`.
    const WARNINGS: bool = false;
}

/// A definition's name: `[a-z0-9][a-z0-9_-]{0,63}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct DefName(#[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))] pub String);

/// `?version=` of a get: `sha256:<hex>` or a version number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct VersionQuery(#[schemars(length(min = 1))] pub String);

/// One page of a list: every item (lists of definitions have one page).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct DefList<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub next_cursor: NextCursor,
}

impl<T> DefList<T> {
    /// Every item, on the one page (`next_cursor` null).
    pub fn all(data: Vec<T>) -> Self {
        Self {
            data,
            next_cursor: NextCursor::default(),
        }
    }
}

/// A definition's name and where it points; what the list, retire and activate answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DefSummary {
    pub name: String,
    pub active_version: String,
    pub retired: bool,
    pub versions: u32,
    pub description: String,
    pub updated_at: Timestamp,
}

/// One version of a definition. `C` is the content: the kind's content type in the document,
/// any JSON where a version is passed on as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DefVersion<C = Value> {
    pub name: String,
    /// `sha256:<hex>` of the canonical JSON of content.
    pub version: String,
    pub number: u32,
    pub parent_version: Option<String>,
    pub created_at: Timestamp,
    /// Whether the name points to this version.
    pub active: bool,
    /// Whether the name is retired.
    pub retired: bool,
    pub content: C,
    /// Webhooks and schedules, on a put and a get of the active version: what the definition
    /// points at that is not there yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnings: Option<Vec<String>>,
}

const WARNINGS: &str = "what the definition points at that is not there yet (an agent not defined, a secret variable not set on this gateway): saved all the same, but deliveries or fires fail until it is. On a PUT and on a GET of the active version";

impl<C: DefContentSchema> JsonSchema for DefVersion<C> {
    fn schema_name() -> Cow<'static, str> {
        format!("{}Version", C::NAME).into()
    }
    fn schema_id() -> Cow<'static, str> {
        format!("weft_api::defs::DefVersion<{}>", C::schema_id()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let mut s = json_schema!({
            "type": "object",
            "required": ["name", "version", "number", "created_at", "active", "retired", "content"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string", "description": "sha256:<hex> of the canonical JSON of content"},
                "number": {"type": "integer", "minimum": 1},
                "parent_version": {"type": ["string", "null"]},
                "created_at": {"type": "string", "format": "date-time"},
                "active": {"type": "boolean", "description": "whether the name points to this version"},
                "retired": {"type": "boolean", "description": "whether the name is retired"},
                "content": g.subschema_for::<C>(),
            }
        });
        if C::WARNINGS
            && let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut)
        {
            props.insert(
                "warnings".into(),
                serde_json::json!({"type": "array", "items": {"type": "string"}, "description": WARNINGS}),
            );
        }
        s
    }
}

/// The answer of a put or a fork: the version, and whether it is new.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PutDefResult<C = Value> {
    /// Absent only if the substrate answered without a version.
    #[serde(flatten)]
    pub version: Option<DefVersion<C>>,
    pub created: bool,
}

impl<C: DefContentSchema> JsonSchema for PutDefResult<C> {
    fn schema_name() -> Cow<'static, str> {
        format!("Put{}Result", C::NAME).into()
    }
    fn schema_id() -> Cow<'static, str> {
        format!("weft_api::defs::PutDefResult<{}>", C::schema_id()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "allOf": [
                g.subschema_for::<DefVersion<C>>(),
                {"type": "object", "required": ["created"], "properties": {"created": {"type": "boolean"}}}
            ]
        })
    }
}

/// A version reference in a body: `sha256:<hex>` or a version number, given as a string or as a
/// JSON integer (`{"version": 3}`); read as the string.
pub fn version_ref<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a version: `sha256:<hex>` or a version number (1, 2, …)")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<String, E> {
            if s.is_empty() {
                return Err(E::invalid_value(Unexpected::Str(s), &self));
            }
            Ok(s.to_owned())
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<String, E> {
            // Version numbers are 1.. and fit a u32, as the document says.
            if n == 0 || n > u64::from(u32::MAX) {
                return Err(E::invalid_value(Unexpected::Unsigned(n), &self));
            }
            Ok(n.to_string())
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<String, E> {
            match u64::try_from(n) {
                Ok(n) => self.visit_u64(n),
                Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
            }
        }
    }
    d.deserialize_any(V)
}

/// [`version_ref`], or null.
pub fn optional_version_ref<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct Wrap(String);
    impl<'de> Deserialize<'de> for Wrap {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            version_ref(d).map(Wrap)
        }
    }
    Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
}

fn version_ref_variants() -> Vec<Value> {
    vec![
        serde_json::json!({"type": "string", "minLength": 1, "description": "sha256:<hex>, or a version number as text"}),
        serde_json::json!({"type": "integer", "minimum": 1, "maximum": 4294967295u32, "description": "a version number"}),
    ]
}

fn version_ref_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "oneOf": version_ref_variants(),
        "description": "sha256:<hex> or a version number (text or integer)"
    })
}

fn optional_version_ref_schema(_: &mut SchemaGenerator) -> Schema {
    let mut variants = version_ref_variants();
    variants.push(serde_json::json!({"type": "null"}));
    json_schema!({
        "oneOf": variants,
        "description": "sha256:<hex> or a version number (text or integer); default: the active version"
    })
}

/// `POST /v1/<kind>/{name}/fork`: a new version from another, with changes merged.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"changes": {"description": "Triage incoming issues, briefly"}}))]
pub struct ForkDef {
    #[serde(default, deserialize_with = "optional_version_ref")]
    #[schemars(schema_with = "optional_version_ref_schema")]
    pub from_version: Option<String>,
    /// content fields to change (JSON merge patch; null resets a field)
    #[serde(default)]
    #[schemars(schema_with = "object_or_null")]
    pub changes: Option<Value>,
}

/// `POST /v1/<kind>/{name}/activate`: the version the name points to from now on.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"version": 1}))]
pub struct ActivateDef {
    #[serde(deserialize_with = "version_ref")]
    #[schemars(schema_with = "version_ref_schema")]
    pub version: String,
}

/// `POST /v1/<kind>/verify`: whether a hash is a version of a definition of the kind.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"sha256": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}))]
pub struct VerifyDef {
    /// sha256:<hex> (or the bare hex)
    #[schemars(length(min = 1))]
    pub sha256: String,
}

// Bodies are JSON objects only: serde's derive would also read `[null, null]` as a `ForkDef`.
crate::objects_only!(ForkDef, ActivateDef, VerifyDef);

/// The answer of a verify.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = all_required)]
pub struct VerifyDefResult {
    pub known: bool,
    pub name: Option<String>,
    pub number: Option<u32>,
}

/// The wording of one kind's routes. Write it with [`def_texts!`](crate::def_texts), which
/// fills in the sentences every kind shares.
pub struct DefTexts {
    /// `/v1/agents`.
    pub path: &'static str,
    /// The path with `/verify`, `/{name}`, `/{name}/versions`, `/fork`, `/retire`, `/activate`.
    pub paths: [&'static str; 6],
    /// `agents`.
    pub tag: &'static str,
    /// A name for the path parameter's example: `triage`.
    pub example: &'static str,
    pub list: &'static str,
    pub list_ok: &'static str,
    pub verify: &'static str,
    pub get: &'static str,
    pub put: &'static str,
    pub put_description: &'static str,
    pub put_forbidden: &'static str,
    pub versions: &'static str,
    pub fork_description: &'static str,
    pub retire: &'static str,
    pub retire_description: &'static str,
    pub retire_ok: &'static str,
    pub activate: &'static str,
    pub not_found: &'static str,
}

/// [`DefTexts`] for a kind: its path, tag and example name; how it is named in the plural
/// (`MCP servers`), with an article (`an MCP server definition`), alone (`MCP server`) and as
/// the object of a put (`an MCP server definition`); the put's description and the retire's
/// summary, which differ per kind. Optional: `put_forbidden` (the put's 403) and
/// `retire_description`.
#[macro_export]
macro_rules! def_texts {
    (
        path: $path:literal, tag: $tag:literal, example: $example:literal,
        plural: $plural:literal, a: $a:literal, noun: $noun:literal, put_a: $put_a:literal,
        put_description: $put_description:literal, retire: $retire:literal
        $(, put_forbidden: $put_forbidden:literal)? $(, retire_description: $retire_description:literal)? $(,)?
    ) => {
        $crate::defs::DefTexts {
            path: $path,
            paths: [
                concat!($path, "/verify"),
                concat!($path, "/{name}"),
                concat!($path, "/{name}/versions"),
                concat!($path, "/{name}/fork"),
                concat!($path, "/{name}/retire"),
                concat!($path, "/{name}/activate"),
            ],
            tag: $tag,
            example: $example,
            list: concat!("List the ", $plural, " of your tenant (retired ones included)"),
            list_ok: concat!($plural, " by name"),
            verify: concat!("Whether a hash is a version of ", $a, " of your tenant"),
            get: concat!("The active version of ", $a, ", or ?version= (hash or number)"),
            put: concat!("Put ", $put_a, ": a new version when the content changed"),
            put_description: $put_description,
            put_forbidden: $crate::def_texts!(@or $($put_forbidden)?, "the token lacks the scope this route needs"),
            versions: concat!("Every version of ", $a, ", oldest first"),
            fork_description: concat!("Scope: tenant:admin or admin. `changes` is merged as a JSON merge patch (RFC 7386) over `from_version` (default: the active version). `from_version` may be a version of another ", $noun, " of your tenant, which starts a new name. The new version becomes active; its parent is the source."),
            retire: $retire,
            retire_description: $crate::def_texts!(@or $($retire_description)?, "Scope: tenant:admin or admin. No body. Idempotent."),
            retire_ok: concat!("the ", $noun),
            activate: concat!("Point ", $a, " at one of its versions (and un-retire it)"),
            not_found: concat!("no such ", $noun, " (or version) in your tenant"),
        }
    };
    (@or $given:literal, $default:literal) => { $given };
    (@or , $default:literal) => { $default };
}

/// The answers every native route of a definition may give.
trait Errors {
    fn errors(self, not_found: Option<&'static str>, body: bool, forbidden: &'static str) -> Op;
}

impl Errors for Op {
    fn errors(self, not_found: Option<&'static str>, body: bool, forbidden: &'static str) -> Op {
        let mut op = self
            .error(
                400,
                "invalid request: the message and `param` name the field",
            )
            .error(401, "missing, invalid, expired or revoked token")
            .error(403, forbidden);
        if let Some(d) = not_found {
            op = op.error(404, d);
        }
        if body {
            op = op
                .error(413, "body larger than gateway.max_body_bytes")
                .error(415, "body is not JSON");
        }
        op.error(503, "the substrate or the database is unreachable")
    }
}

const READ: &str = "Scope: runs:create, runs:read, tenant:admin or admin";
const WRITE: &str = "Scope: tenant:admin or admin";
const SCOPE: &str = "the token lacks the scope this route needs";

/// The eight routes of a kind whose content is `C`. `name` is the path parameter every route
/// but list and verify has; its example is the kind's.
pub fn def_ops<C: DefContentSchema>(t: &DefTexts) -> Vec<Op> {
    let [verify, one, versions, fork, retire, activate] = t.paths;
    let named = |op: Op| {
        op.tag(t.tag)
            .path::<DefName>("name", Some(t.example.into()))
    };
    vec![
        Op::get(t.path, t.list)
            .tag(t.tag)
            .describe(READ)
            .ok::<DefList<DefSummary>>(t.list_ok)
            .error(401, "missing, invalid, expired or revoked token")
            .error(403, SCOPE)
            .error(503, "the substrate or the database is unreachable"),
        Op::post(verify, t.verify)
            .tag(t.tag)
            .describe("Scope: runs:create, runs:read, tenant:admin or admin. Answers 200 with known=false for an unknown hash.")
            .body::<VerifyDef>()
            .ok::<VerifyDefResult>("the answer")
            .errors(None, true, SCOPE),
        named(Op::get(one, t.get))
            .describe(READ)
            .query::<VersionQuery>("version", Some("`sha256:<hex>` or a version number"), Some("1".into()))
            .ok::<DefVersion<C>>("the version")
            .errors(Some(t.not_found), false, SCOPE),
        named(Op::put(one, t.put))
            .describe(t.put_description)
            .body::<C>()
            .ok::<PutDefResult<C>>("the content already was a version")
            .answer::<PutDefResult<C>>(201, "a new version")
            .errors(None, true, t.put_forbidden),
        named(Op::get(versions, t.versions))
            .describe(READ)
            .ok::<DefList<DefVersion<C>>>("versions by number")
            .errors(Some(t.not_found), false, SCOPE),
        named(Op::post(fork, "A new version derived from another with changes merged"))
            .describe(t.fork_description)
            .body::<ForkDef>()
            .ok::<PutDefResult<C>>("the result already was a version")
            .answer::<PutDefResult<C>>(201, "a new version")
            .errors(Some(t.not_found), true, SCOPE),
        named(Op::post(retire, t.retire))
            .describe(t.retire_description)
            .ok::<DefSummary>(t.retire_ok)
            .errors(Some(t.not_found), false, SCOPE),
        named(Op::post(activate, t.activate))
            .describe(WRITE)
            .body::<ActivateDef>()
            .ok::<DefSummary>(t.retire_ok)
            .errors(Some(t.not_found), true, SCOPE),
    ]
}

/// The schema of an optional JSON object of any fields (`compaction`, `changes`).
pub fn object_or_null(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": ["object", "null"]})
}

/// Drops the `default` schemars derives from `#[serde(default)]`, where the document gives none
/// (a nested object's default is spelt out in its own fields).
pub(crate) fn no_default(s: &mut Schema) {
    s.remove("default");
}

/// Marks `names` as required: fields a body must have although the type reads defaults.
pub(crate) fn require(s: &mut Schema, names: &[&str]) {
    s.insert(
        "required".into(),
        names.iter().map(|n| Value::from(*n)).collect(),
    );
}

/// Marks every property required: answers that always carry each field, null included.
pub(crate) fn all_required(s: &mut Schema) {
    let names: Vec<Value> = s
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(|k| Value::from(k.as_str())).collect())
        .unwrap_or_default();
    s.insert("required".into(), names.into());
}

/// The choices of an untagged enum that never overlap: `oneOf`, not the derived `anyOf`.
pub(crate) fn one_of(s: &mut Schema) {
    if let Some(any) = s.remove("anyOf") {
        s.insert("oneOf".into(), any);
    }
}

/// A one-value string enum as `{"type": "string", "const": …}`.
pub(crate) fn string_const(s: &mut Schema) {
    if let Some(Value::Array(values)) = s.get("enum")
        && let [one] = values.as_slice()
    {
        let one = one.clone();
        s.remove("enum");
        s.insert("const".into(), one);
        s.insert("type".into(), "string".into());
    }
}
