//! What every kind of definition shares: the substrate stores agents, skills (and the MCP-server
//! and schedule definitions that follow) with one implementation, parameterised by a
//! [`DefContent`] — how to read, validate, describe and address the content of one kind.
//!
//! The content address is the same for every kind: `sha256:` + the lowercase hex SHA-256 of the
//! [`canonical_json`] of the content (every field present, object keys sorted by byte order at
//! every depth, no whitespace, serde_json's number and string formatting).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::names::sha256_ref;

/// The kinds of definition the substrate stores. The string form ([`DefKind::as_str`]) is what
/// the `kind` column of `defs` and `def_versions` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DefKind {
    Agent,
    Skill,
    McpServer,
    /// An inbound webhook ([`crate::webhook`]).
    Webhook,
    /// A cron schedule ([`crate::schedule`]).
    Schedule,
    /// A named volume ([`crate::volume`]).
    Volume,
    /// A process: a recipe for plan runs ([`crate::process`]).
    Process,
    /// An agent of another runtime reached over A2A ([`crate::a2a_peer`]).
    A2aPeer,
    /// A tool-use hook ([`crate::hook`]).
    Hook,
}

impl DefKind {
    /// The stored form: `agent`, `skill`, `mcp_server`, `webhook`, `schedule`, `volume`,
    /// `process`, `a2a_peer`, `hook`.
    pub fn as_str(self) -> &'static str {
        match self {
            DefKind::Agent => "agent",
            DefKind::Skill => "skill",
            DefKind::McpServer => "mcp_server",
            DefKind::Webhook => "webhook",
            DefKind::Schedule => "schedule",
            DefKind::Volume => "volume",
            DefKind::Process => "process",
            DefKind::A2aPeer => "a2a_peer",
            DefKind::Hook => "hook",
        }
    }

    /// The plural, as in the routes (`/v1/agents`, `/v1/skills`).
    pub fn plural(self) -> &'static str {
        match self {
            DefKind::Agent => "agents",
            DefKind::Skill => "skills",
            DefKind::McpServer => "mcp-servers",
            DefKind::Webhook => "webhooks",
            DefKind::Schedule => "schedules",
            DefKind::Volume => "volumes",
            DefKind::Process => "processes",
            DefKind::A2aPeer => "a2a-peers",
            DefKind::Hook => "hooks",
        }
    }
}

impl std::fmt::Display for DefKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names that would collide with a fixed route (`POST /v1/<kind>s/verify`).
pub const RESERVED_NAMES: [&str; 1] = ["verify"];

/// Checks the name of a definition of `kind`: `[a-z0-9][a-z0-9_-]{0,63}`, not a reserved word.
/// The error names the field `name`.
pub fn validate_def_name(kind: DefKind, name: &str) -> Result<(), Error> {
    if !crate::names::is_def_name(name) {
        return Err(Error::invalid(format!(
            "{kind} name `{name}` is not valid; use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
        ))
        .with_param("name"));
    }
    if kind == DefKind::McpServer && name.contains("__") {
        return Err(Error::invalid(format!(
            "MCP server name `{name}` contains `__`, which separates the parts of `mcp__<server>__<tool>`; use single `_` or `-`"
        ))
        .with_param("name"));
    }
    if kind == DefKind::A2aPeer && name.contains("__") {
        return Err(Error::invalid(format!(
            "A2A peer name `{name}` contains `__`, which separates the parts of `a2a__<peer>__<skill>`; use single `_` or `-`"
        ))
        .with_param("name"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(Error::invalid(format!(
            "{kind} name `{name}` is reserved (it is a route); choose another name"
        ))
        .with_param("name"));
    }
    Ok(())
}

/// A copy of `v` whose objects list their keys in byte order at every depth, so the text does
/// not depend on serde_json's map type (a `preserve_order` feature anywhere in the build would
/// otherwise change it).
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The canonical JSON of `content`: keys sorted at every depth, no whitespace. This is the text
/// that is hashed and stored, for every kind.
pub fn canonical_json<T: Serialize + ?Sized>(content: &T) -> String {
    // Serializing plain structs, strings, maps and finite numbers to a Value cannot fail.
    let value = serde_json::to_value(content).unwrap_or(Value::Null);
    sorted(value).to_string()
}

/// Reads the content fields of `what` (`an agent definition`, `a skill`) from a JSON object;
/// omitted fields take their defaults. An unknown or ill-typed field is a 400 naming its path
/// (`sampling.temprature`).
pub fn from_json_fields<T: DeserializeOwned>(what: &str, value: Value) -> Result<T, Error> {
    if !value.is_object() {
        return Err(Error::invalid(format!(
            "{what} is a JSON object of content fields, got {}",
            crate::names::json_kind(&value)
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let msg = err.into_inner().to_string();
        if path.is_empty() || path == "." {
            let mut e = Error::invalid(msg.clone());
            e.param = msg
                .strip_prefix("unknown field `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned);
            e
        } else {
            Error::invalid(format!("`{path}`: {msg}")).with_param(path)
        }
    })
}

/// The content of one kind of definition: what is hashed into a version. The substrate's
/// generic store and rules work on any `DefContent`.
pub trait DefContent: Serialize + Sized + Send + Sync + 'static {
    /// Which kind this content is.
    const KIND: DefKind;

    /// Reads content fields from a JSON object (omitted fields take their defaults), naming
    /// the offending field on failure. Does not validate.
    fn from_json(value: Value) -> Result<Self, Error>;

    /// Checks what types cannot; the error names the field and says how to fix it.
    fn validate(&self) -> Result<(), Error>;

    /// The one-line description shown in listings.
    fn description(&self) -> &str;

    /// Why a tenant may not define this content over the API (only an operator, in the config
    /// file), or `None` when it may. Checked on every put and fork through the API.
    fn operator_only(&self) -> Option<String> {
        None
    }

    /// [`DefContent::from_json`] for JSON text, such as a stored version's `content_json`.
    fn from_json_str(text: &str) -> Result<Self, Error> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid(format!(
                "the {} definition is not valid JSON: {e}",
                Self::KIND
            ))
        })?;
        Self::from_json(value)
    }

    /// The canonical JSON of the content ([`canonical_json`]).
    fn canonical_json(&self) -> String {
        canonical_json(self)
    }

    /// The content address: `sha256:<hex>` of the canonical JSON.
    fn hash(&self) -> String {
        sha256_ref(&canonical_json(self))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a = json!({"b": 1, "a": {"d": [ {"y": 1, "x": 2} ], "c": null}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"d":[{"x":2,"y":1}]},"b":1}"#
        );
    }

    #[test]
    fn names_are_checked_for_every_kind() {
        validate_def_name(DefKind::Skill, "pdf-tools").unwrap();
        let e = validate_def_name(DefKind::Skill, "Bad").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("name"));
        assert!(e.message.starts_with("skill name"), "{}", e.message);
        let e = validate_def_name(DefKind::Agent, "verify").unwrap_err();
        assert!(e.message.contains("reserved"), "{}", e.message);
    }
}
