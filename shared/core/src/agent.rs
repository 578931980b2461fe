//! An agent definition's content: the fields that are hashed into its version. Versioning,
//! lineage and storage belong to the substrate; this is the value every service agrees on.
//!
//! - [`AgentContent::validate`] says what is wrong with a definition and how to fix it.
//! - [`AgentContent::canonical_json`] and [`AgentContent::hash`] are the content address: the
//!   hash is `sha256:` + the lowercase hex SHA-256 of the canonical JSON, which has every field
//!   present (defaults materialised, unset options as `null`), object keys sorted by byte order
//!   at every depth, no whitespace, and serde_json's number and string formatting. Two
//!   definitions with the same content hash the same however they were written (defaults spelt
//!   out or omitted, keys in any order, JSON or YAML front matter). List order is content: the
//!   order of `tools` or `sampling.stop` is kept as given.
//! - [`AgentContent::from_json`] and [`parse_agent_markdown`] read definitions from the API and
//!   from `<name>.md` files, naming the offending field on failure.
//! - [`object_only`] and [`objects_only!`](crate::objects_only) make a request struct accept only
//!   a JSON object: serde's derive also takes a sequence of the fields in declaration order.

use std::collections::HashSet;

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Error;

/// The content fields of an agent definition (API.md, "Definitions"). Two definitions with the
/// same content — defaults included — have the same hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentContent {
    pub description: String,
    /// A model name, alias or `provider/model`. At most one of `model` and `tier` is set;
    /// neither means the `default` alias (see [`AgentContent::model_ref`]).
    pub model: Option<String>,
    /// A tier name (routed as `tier:<name>`).
    pub tier: Option<String>,
    pub system_prompt: String,
    /// The tools this agent may call (default-deny). Built-ins by name (`Context`, `Agent`,
    /// `Interruption`, `HTTP`); MCP tools as `mcp__<server>__<tool>` or globs of that form.
    pub tools: Vec<String>,
    pub skills: Vec<String>,
    pub mcp_servers: Vec<String>,
    /// Model turns a run may take before it stops with `max_iterations`.
    pub max_iterations: u32,
    /// Completion tokens per model turn; unset = the provider's default.
    pub max_tokens: Option<u32>,
    pub sampling: AgentSampling,
    pub memory_scopes: Vec<String>,
    pub channels: AgentChannels,
    /// Sub-runs of one run that may be live at once.
    pub max_concurrent_children: u32,
    /// Outbound hosts for the HTTP tool; unset = the operator's list. Narrows, never widens.
    pub allowed_hosts: Option<Vec<String>>,
    /// How runs keep their model view inside the window (compaction, tool-result budgets).
    pub compaction: Option<weft_api::context::Compaction>,
    /// The volumes the agent's file tools may use. Left out of the canonical JSON when empty,
    /// so the content address of an agent without volumes is what it was before volumes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volume::VolumeBinding>,
    /// Whether A2A clients see the agent as a skill of its tenant's agent card, and how. Left
    /// out of the canonical JSON when unset, like `volumes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a2a: Option<AgentA2a>,
    /// A code agent's script (docs/code-agents.md): it takes the run's turns instead of a model.
    /// Left out of the canonical JSON when unset, like `a2a`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<weft_api::code::CodeAgent>,
}

impl Default for AgentContent {
    fn default() -> Self {
        Self {
            description: String::new(),
            model: None,
            tier: None,
            system_prompt: String::new(),
            tools: Vec::new(),
            skills: Vec::new(),
            mcp_servers: Vec::new(),
            max_iterations: 16,
            max_tokens: None,
            sampling: AgentSampling::default(),
            memory_scopes: Vec::new(),
            channels: AgentChannels::default(),
            max_concurrent_children: 4,
            allowed_hosts: None,
            compaction: None,
            volumes: Vec::new(),
            a2a: None,
            code: None,
        }
    }
}

/// Sampling defaults of an agent; a run may override them. Only a JSON object deserializes
/// into it (see [`object_only`]), and only with values in their bounds: every place that reads
/// one from a caller (an agent definition, `POST /v1/runs`) refuses an out-of-range value with
/// an error at the field's path (`sampling.temperature`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
pub struct AgentSampling {
    /// 0 to 2.
    #[serde(deserialize_with = "temperature")]
    pub temperature: Option<f64>,
    /// 0 to 1.
    #[serde(deserialize_with = "top_p")]
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    /// At most [`limits::STOP_SEQUENCES`], none empty.
    #[serde(deserialize_with = "stop_sequences")]
    pub stop: Vec<String>,
}

fn unit_interval<'de, D: Deserializer<'de>>(d: D, max: f64) -> Result<Option<f64>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    match v {
        Some(x) if !(x.is_finite() && (0.0..=max).contains(&x)) => Err(serde::de::Error::custom(
            format!("must be between 0 and {max}, got {x}"),
        )),
        _ => Ok(v),
    }
}

fn temperature<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    unit_interval(d, 2.0)
}

fn top_p<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    unit_interval(d, 1.0)
}

fn stop_sequences<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let stop = Vec::<String>::deserialize(d)?;
    if stop.len() > limits::STOP_SEQUENCES {
        return Err(serde::de::Error::custom(format!(
            "has {} entries; at most {} are allowed",
            stop.len(),
            limits::STOP_SEQUENCES
        )));
    }
    if let Some(i) = stop.iter().position(String::is_empty) {
        return Err(serde::de::Error::custom(format!(
            "entry {i} is empty; remove it or give a stop sequence"
        )));
    }
    Ok(stop)
}

/// An agent's channel grants. Only a JSON object deserializes into it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
pub struct AgentChannels {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
}

/// How an agent is offered over A2A. Off unless `expose` is true: an agent is never reachable
/// by A2A clients by default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
pub struct AgentA2a {
    /// The agent is a skill of its tenant's agent card and A2A messages may start its runs.
    pub expose: bool,
    /// The skill's tags on the card.
    pub tags: Vec<String>,
    /// Example requests the card shows for the skill.
    pub examples: Vec<String>,
}

crate::objects_only!(AgentSampling, AgentChannels, AgentA2a);

pub(crate) use crate::names::{is_def_name, json_kind};
pub use crate::names::{normalize_hash, sha256_ref};
pub use weft_api::objects::{FromFields, object_only};

/// Bounds enforced by [`AgentContent::validate`].
pub mod limits {
    pub const MAX_ITERATIONS: u32 = 1000;
    pub const MAX_TOKENS: u32 = 1_000_000;
    pub const MAX_CONCURRENT_CHILDREN: u32 = 64;
    pub const DESCRIPTION_BYTES: usize = 4096;
    pub const SYSTEM_PROMPT_BYTES: usize = 1024 * 1024;
    pub const LIST_ENTRIES: usize = 256;
    pub const STOP_SEQUENCES: usize = 16;
    /// `a2a.tags` entries, and characters of each.
    pub const A2A_TAGS: usize = 32;
    pub const A2A_TAG_CHARS: usize = 64;
    /// `a2a.examples` entries, and characters of each.
    pub const A2A_EXAMPLES: usize = 16;
    pub const A2A_EXAMPLE_CHARS: usize = 1024;
    pub const NAME_CHARS: usize = crate::names::NAME_CHARS;
}

/// The memory scopes an agent may be granted (API.md, "Memory and channels").
pub const MEMORY_SCOPES: [&str; 4] = ["run", "agent", "user", "tenant"];

/// Agent names that would collide with a fixed route (`POST /v1/agents/verify`).
pub const RESERVED_AGENT_NAMES: [&str; 1] = ["verify"];

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

fn check_def_name(field: &str, what: &str, name: &str) -> Result<(), Error> {
    if is_def_name(name) {
        Ok(())
    } else {
        Err(bad(
            field,
            format!(
                "`{field}`: {what} name `{name}` is not valid; use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
            ),
        ))
    }
}

/// Checks an agent name: `[a-z0-9][a-z0-9_-]{0,63}`, and not a reserved word.
pub fn validate_agent_name(name: &str) -> Result<(), Error> {
    if !is_def_name(name) {
        return Err(bad(
            "name",
            format!(
                "agent name `{name}` is not valid; use 1-64 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
            ),
        ));
    }
    if RESERVED_AGENT_NAMES.contains(&name) {
        return Err(bad(
            "name",
            format!("agent name `{name}` is reserved (it is a route); choose another name"),
        ));
    }
    Ok(())
}

/// Whether `s` is 1+ characters of `[A-Za-z0-9_-]`, plus `*` when `glob`.
fn is_ident(s: &str, glob: bool) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || (glob && c == b'*'))
}

fn check_tool(field: &str, tool: &str) -> Result<(), Error> {
    if tool.is_empty() {
        return Err(bad(
            field,
            format!("`{field}` is empty; name a tool such as `HTTP` or `mcp__github__*`"),
        ));
    }
    if tool.len() > 200 {
        return Err(bad(
            field,
            format!("`{field}` is longer than 200 characters"),
        ));
    }
    if let Some(rest) = tool.strip_prefix("mcp__") {
        let parts = rest.split_once("__");
        let ok =
            parts.is_some_and(|(server, name)| is_ident(server, false) && is_ident(name, true));
        return if ok {
            Ok(())
        } else {
            Err(bad(
                field,
                format!(
                    "`{field}`: `{tool}` is not a valid MCP tool pattern; use `mcp__<server>__<tool>`, where the tool part may be a glob such as `mcp__github__*`"
                ),
            ))
        };
    }
    if let Some(rest) = tool.strip_prefix(crate::a2a_peer::TOOL_PREFIX) {
        let parts = rest.split_once("__");
        let ok = parts.is_some_and(|(peer, skill)| is_ident(peer, false) && is_ident(skill, true));
        return if ok {
            Ok(())
        } else {
            Err(bad(
                field,
                format!(
                    "`{field}`: `{tool}` is not a valid A2A tool pattern; use `a2a__<peer>__<skill>`, where the skill part may be a glob such as `a2a__support__*`"
                ),
            ))
        };
    }
    if tool.contains('*') {
        return Err(bad(
            field,
            format!(
                "`{field}`: `{tool}` is a glob; globs are allowed only in the tool part of `mcp__<server>__<tool>` (e.g. `mcp__github__*`) and the skill part of `a2a__<peer>__<skill>`"
            ),
        ));
    }
    if is_ident(tool, false) {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("`{field}`: tool name `{tool}` may contain only A-Z, a-z, 0-9, '_' and '-'"),
        ))
    }
}

fn check_channel(field: &str, channel: &str) -> Result<(), Error> {
    let ok = !channel.is_empty()
        && channel.len() <= 128
        && channel
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b':' | b'*'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!(
                "`{field}`: channel `{channel}` is not valid; use 1-128 characters of A-Z, a-z, 0-9, '_', '-', '.', ':' and '*'"
            ),
        ))
    }
}

fn check_host(field: &str, host: &str) -> Result<(), Error> {
    if host.contains("://") || host.contains('/') {
        return Err(bad(
            field,
            format!(
                "`{field}`: `{host}` is a URL; list host names such as `api.example.com` or `*.example.com`"
            ),
        ));
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    let ok = !name.is_empty()
        && host.len() <= 253
        && name
            .split('.')
            .all(|label| !label.is_empty() && is_ident(label, false) && !label.contains('_'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            field,
            format!(
                "`{field}`: `{host}` is not a host name; use names such as `api.example.com`, or `*.example.com` for its subdomains"
            ),
        ))
    }
}

/// Each entry checked by `check`, no duplicates, at most [`limits::LIST_ENTRIES`].
fn check_list(
    field: &str,
    items: &[String],
    check: impl Fn(&str, &str) -> Result<(), Error>,
) -> Result<(), Error> {
    if items.len() > limits::LIST_ENTRIES {
        return Err(bad(
            field,
            format!(
                "`{field}` has {} entries; at most {} are allowed",
                items.len(),
                limits::LIST_ENTRIES
            ),
        ));
    }
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        check(&at, item)?;
        if !seen.insert(item.as_str()) {
            return Err(bad(
                at,
                format!("`{field}` lists `{item}` twice; list each entry once"),
            ));
        }
    }
    Ok(())
}

/// `a2a`: bounded lists of non-blank tags and examples, each listed once.
fn check_a2a(a: &AgentA2a) -> Result<(), Error> {
    for (field, items, max, each) in [
        ("a2a.tags", &a.tags, limits::A2A_TAGS, limits::A2A_TAG_CHARS),
        (
            "a2a.examples",
            &a.examples,
            limits::A2A_EXAMPLES,
            limits::A2A_EXAMPLE_CHARS,
        ),
    ] {
        if items.len() > max {
            return Err(bad(
                field,
                format!(
                    "`{field}` has {} entries; at most {max} are allowed",
                    items.len()
                ),
            ));
        }
        check_list(field, items, |f, item| {
            let len = item.chars().count();
            if item.trim().is_empty() {
                Err(bad(f, format!("`{f}` is blank; remove it or write one")))
            } else if len > each {
                Err(bad(
                    f,
                    format!("`{f}` must be at most {each} characters, got {len}"),
                ))
            } else {
                Ok(())
            }
        })?;
    }
    Ok(())
}

fn check_model_ref(field: &str, value: &str) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(bad(
            field,
            format!(
                "`{field}` is empty; name one, or omit both `model` and `tier` to use the `default` alias"
            ),
        ));
    }
    if value.len() > 200 || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            field,
            format!("`{field}` must be at most 200 characters without spaces, got {value:?}"),
        ));
    }
    Ok(())
}

fn check_range(field: &str, value: u32, min: u32, max: u32) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("`{field}` must be between {min} and {max}, got {value}"),
        ))
    }
}

fn check_unit(field: &str, value: Option<f64>, max: f64) -> Result<(), Error> {
    match value {
        Some(v) if !(v.is_finite() && (0.0..=max).contains(&v)) => Err(bad(
            field,
            format!("`{field}` must be between 0 and {max}, got {v}"),
        )),
        _ => Ok(()),
    }
}

impl AgentContent {
    /// The model string a run of this agent asks the router for.
    pub fn model_ref(&self) -> String {
        match (&self.model, &self.tier) {
            (Some(m), _) => m.clone(),
            (None, Some(t)) => format!("tier:{t}"),
            (None, None) => "default".into(),
        }
    }

    /// Reads content fields from a JSON object; omitted fields take their defaults. An unknown
    /// or ill-typed field is a 400 naming its path (`sampling.temprature`). Does not
    /// [`validate`](Self::validate).
    pub fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("an agent definition", value)
    }

    /// [`from_json`](Self::from_json) for JSON text, such as `AgentVersion.content_json`.
    pub fn from_json_str(text: &str) -> Result<Self, Error> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("the agent definition is not valid JSON: {e}")))?;
        Self::from_json(value)
    }

    /// Checks what types cannot. The message names the field and says how to fix it.
    ///
    /// `model` and `tier` are each optional and at most one may be set; neither means the
    /// router's `default` alias.
    pub fn validate(&self) -> Result<(), Error> {
        // Definitions are stored, and Postgres cannot store U+0000: refused here, so a definition
        // from a file or the config is held to the same rule as one sent over HTTP.
        crate::storable::refuse_nul(self)?;
        if self.description.len() > limits::DESCRIPTION_BYTES {
            return Err(bad(
                "description",
                format!(
                    "`description` must be at most {} bytes, got {}",
                    limits::DESCRIPTION_BYTES,
                    self.description.len()
                ),
            ));
        }
        if let (Some(m), Some(t)) = (&self.model, &self.tier) {
            return Err(bad(
                "tier",
                format!(
                    "set at most one of `model` and `tier`, got model `{m}` and tier `{t}`; drop one"
                ),
            ));
        }
        if let Some(m) = &self.model {
            check_model_ref("model", m)?;
        }
        if let Some(t) = &self.tier {
            check_model_ref("tier", t)?;
            if t.starts_with("tier:") {
                return Err(bad(
                    "tier",
                    format!(
                        "`tier` is a tier name such as `fast`, without the `tier:` prefix, got `{t}`"
                    ),
                ));
            }
        }
        if self.system_prompt.len() > limits::SYSTEM_PROMPT_BYTES {
            return Err(bad(
                "system_prompt",
                format!(
                    "`system_prompt` must be at most {} bytes, got {}",
                    limits::SYSTEM_PROMPT_BYTES,
                    self.system_prompt.len()
                ),
            ));
        }
        check_list("tools", &self.tools, check_tool)?;
        check_list("skills", &self.skills, |f, n| check_def_name(f, "skill", n))?;
        check_list("mcp_servers", &self.mcp_servers, |f, n| {
            check_def_name(f, "MCP server", n)
        })?;
        check_range(
            "max_iterations",
            self.max_iterations,
            1,
            limits::MAX_ITERATIONS,
        )?;
        if let Some(t) = self.max_tokens {
            check_range("max_tokens", t, 1, limits::MAX_TOKENS)?;
        }
        check_unit("sampling.temperature", self.sampling.temperature, 2.0)?;
        check_unit("sampling.top_p", self.sampling.top_p, 1.0)?;
        if self.sampling.stop.len() > limits::STOP_SEQUENCES {
            return Err(bad(
                "sampling.stop",
                format!(
                    "`sampling.stop` has {} entries; at most {} are allowed",
                    self.sampling.stop.len(),
                    limits::STOP_SEQUENCES
                ),
            ));
        }
        if let Some(i) = self.sampling.stop.iter().position(String::is_empty) {
            return Err(bad(
                format!("sampling.stop[{i}]"),
                format!("`sampling.stop[{i}]` is empty; remove it or give a stop sequence"),
            ));
        }
        check_list("memory_scopes", &self.memory_scopes, |f, s| {
            if MEMORY_SCOPES.contains(&s) {
                Ok(())
            } else {
                Err(bad(
                    f,
                    format!(
                        "`{f}`: unknown memory scope `{s}`; use one of {}",
                        MEMORY_SCOPES.join(", ")
                    ),
                ))
            }
        })?;
        crate::volume::validate_bindings("volumes", &self.volumes)?;
        check_list("channels.publish", &self.channels.publish, check_channel)?;
        check_list(
            "channels.subscribe",
            &self.channels.subscribe,
            check_channel,
        )?;
        check_range(
            "max_concurrent_children",
            self.max_concurrent_children,
            1,
            limits::MAX_CONCURRENT_CHILDREN,
        )?;
        if let Some(hosts) = &self.allowed_hosts {
            check_list("allowed_hosts", hosts, check_host)?;
        }
        if let Some(a) = &self.a2a {
            check_a2a(a)?;
        }
        if let Some(c) = &self.compaction {
            c.check()
                .map_err(|(field, msg)| bad(format!("compaction.{field}"), msg))?;
        }
        if let Some(c) = &self.code {
            c.check()
                .map_err(|(field, msg)| bad(format!("code.{field}"), msg))?;
        }
        Ok(())
    }

    /// The canonical JSON of the content: every field present, keys sorted at every depth, no
    /// whitespace. This is the text that is hashed and stored.
    pub fn canonical_json(&self) -> String {
        crate::def::canonical_json(self)
    }

    /// The content address: `sha256:<hex>` of [`canonical_json`](Self::canonical_json).
    pub fn hash(&self) -> String {
        sha256_ref(&self.canonical_json())
    }
}

/// Splits `---` front matter off `text`: `(Some(yaml), body)`, or `(None, text)` when the first
/// line is not `---`.
pub(crate) fn split_front_matter(text: &str) -> Result<(Option<&str>, &str), Error> {
    let mut lines = text.split_inclusive('\n');
    let is_fence = |l: &str| l.trim_end_matches(['\n', '\r']).trim_end() == "---";
    match lines.next() {
        Some(first) if is_fence(first) => {
            let start = first.len();
            let mut pos = start;
            for line in lines {
                if is_fence(line) {
                    return Ok((Some(&text[start..pos]), &text[pos + line.len()..]));
                }
                pos += line.len();
            }
            Err(Error::invalid(
                "the front matter opened by `---` on the first line is never closed; end it with a line of `---`",
            ))
        }
        _ => Ok((None, text)),
    }
}

/// Parses a `<name>.md` agent definition: optional YAML front matter between `---` lines with
/// content fields (and optionally `name`), then the body, trimmed, as `system_prompt`. Without
/// `name` in the front matter the name is `name_hint` (the file stem). The result is validated.
///
/// A `system_prompt` in the front matter is allowed only when the body is empty.
pub fn parse_agent_markdown(name_hint: &str, text: &str) -> Result<(String, AgentContent), Error> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = split_front_matter(text)?;
    let mut fields = match front {
        None => Map::new(),
        Some(yaml) => {
            let value: Value = serde_yaml::from_str(yaml)
                .map_err(|e| Error::invalid(format!("the front matter is not valid YAML: {e}")))?;
            match value {
                Value::Null => Map::new(),
                Value::Object(m) => m,
                other => {
                    return Err(Error::invalid(format!(
                        "the front matter must be a YAML mapping of content fields, got {}",
                        json_kind(&other)
                    )));
                }
            }
        }
    };
    let name = match fields.remove("name") {
        None => name_hint.to_owned(),
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(bad(
                "name",
                format!("`name` must be a string, got {}", json_kind(&other)),
            ));
        }
    };
    validate_agent_name(&name)?;
    let body = body.trim();
    if !body.is_empty() {
        if fields.contains_key("system_prompt") {
            return Err(bad(
                "system_prompt",
                "`system_prompt` is set in the front matter and the body is not empty; keep the prompt in one place",
            ));
        }
        fields.insert("system_prompt".into(), Value::String(body.to_owned()));
    }
    let content = AgentContent::from_json(Value::Object(fields))?;
    content.validate()?;
    Ok((name, content))
}

impl crate::def::DefContent for AgentContent {
    const KIND: crate::def::DefKind = crate::def::DefKind::Agent;

    fn from_json(value: Value) -> Result<Self, Error> {
        AgentContent::from_json(value)
    }

    fn validate(&self) -> Result<(), Error> {
        AgentContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn content(v: Value) -> AgentContent {
        AgentContent::from_json(v).unwrap()
    }

    #[test]
    fn a_nul_anywhere_in_a_definition_is_refused_naming_the_field() {
        let c: AgentContent =
            serde_json::from_value(json!({"model": "mock-1", "system_prompt": "a\u{0}b"})).unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.param.as_deref(), Some("system_prompt"), "{}", e.message);
    }

    #[test]
    fn the_same_content_has_the_same_hash() {
        let a = content(json!({"model": "mock-1", "tools": ["HTTP"]}));
        let b = content(json!({"model": "mock-1", "tools": ["HTTP"]}));
        assert_eq!(a.hash(), b.hash());
        assert!(a.hash().starts_with("sha256:"));
        assert_eq!(a.hash().len(), 7 + 64);
        let c = content(json!({"model": "mock-1", "tools": ["Context"]}));
        assert_ne!(a.hash(), c.hash());
    }

    #[test]
    fn explicit_defaults_hash_like_omitted_ones() {
        let omitted = content(json!({"system_prompt": "hi"}));
        let explicit = content(json!({
            "description": "", "model": null, "tier": null, "system_prompt": "hi", "tools": [],
            "skills": [], "mcp_servers": [], "max_iterations": 16, "max_tokens": null,
            "sampling": {"temperature": null, "top_p": null, "seed": null, "stop": []},
            "memory_scopes": [], "channels": {"publish": [], "subscribe": []},
            "max_concurrent_children": 4, "allowed_hosts": null, "compaction": null
        }));
        assert_eq!(omitted, explicit);
        assert_eq!(omitted.hash(), explicit.hash());
        assert_eq!(AgentContent::default().max_iterations, 16);
    }

    #[test]
    fn key_order_does_not_matter_at_any_depth() {
        let a: Value = serde_json::from_str(
            r#"{"tier":"fast","sampling":{"top_p":0.5,"temperature":0.2},"compaction":{"model":"m","auto_percent":50}}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            r#"{"compaction":{"auto_percent":50,"model":"m"},"sampling":{"temperature":0.2,"top_p":0.5},"tier":"fast"}"#,
        )
        .unwrap();
        assert_eq!(content(a).hash(), content(b).hash());
    }

    #[test]
    fn canonical_json_is_sorted_compact_and_complete() {
        let c = content(json!({"compaction": {"keep_turns": 2, "auto_percent": 50}}));
        let text = c.canonical_json();
        assert!(!text.contains(' '), "{text}");
        assert!(text.starts_with(r#"{"allowed_hosts":null,"channels":{"publish":[],"subscribe":[]},"compaction":{"auto_percent":50,"keep_turns":2,"model":null,"result_max_bytes":null,"turn_result_max_bytes":null,"window_tokens":null},"description":"""#), "{text}");
        assert!(text.contains(r#""max_iterations":16"#), "{text}");
        // Round trip: the canonical text parses back to the same content and hash.
        let back = AgentContent::from_json_str(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.canonical_json(), text);
        assert_eq!(c.hash(), sha256_ref(&text));
    }

    #[test]
    fn unknown_and_ill_typed_fields_are_named() {
        let e = AgentContent::from_json(json!({"max_iteration": 3})).unwrap_err();
        assert!(e.message.contains("max_iteration"), "{}", e.message);
        assert_eq!(e.param.as_deref(), Some("max_iteration"));
        let e = AgentContent::from_json(json!({"sampling": {"temprature": 1}})).unwrap_err();
        assert!(e.message.contains("temprature"), "{}", e.message);
        assert!(e.param.as_deref().unwrap().starts_with("sampling"), "{e:?}");
        let e = AgentContent::from_json(json!({"tools": "HTTP"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(e.message.starts_with("`tools`"), "{}", e.message);
        let e = AgentContent::from_json(json!({"max_iterations": -1})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_iterations"));
        let e = AgentContent::from_json(json!(["x"])).unwrap_err();
        assert!(e.message.contains("JSON object"), "{}", e.message);
    }

    #[test]
    fn struct_fields_accept_only_objects() {
        // serde's derive would read these as the fields in declaration order.
        for (body, at) in [
            (json!({"sampling": [null, null]}), "sampling"),
            (json!({"sampling": [0.2, 1, 7, ["x"]]}), "sampling"),
            (json!({"sampling": []}), "sampling"),
            (json!({"channels": [["a"], ["b"]]}), "channels"),
        ] {
            let e = AgentContent::from_json(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(at), "{body}: {e:?}");
            assert!(
                e.message.contains("expected a JSON object"),
                "{body}: {}",
                e.message
            );
        }
        let e = serde_json::from_str::<AgentSampling>("[null,null,null,[]]").unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
        // Objects, defaults and the error paths inside them are as before.
        let c = content(json!({"sampling": {"seed": 7}, "channels": {"publish": ["a"]}}));
        assert_eq!(c.sampling.seed, Some(7));
        assert_eq!(c.channels.publish, ["a"]);
        let e = AgentContent::from_json(json!({"sampling": {"seed": "x"}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("sampling.seed"));
        // Values out of their bounds are refused where they are read, at the field's path.
        for (sampling, at) in [
            (json!({"temperature": 2.5}), "sampling.temperature"),
            (json!({"temperature": -1}), "sampling.temperature"),
            (json!({"top_p": 1e300}), "sampling.top_p"),
            (json!({"stop": [""]}), "sampling.stop"),
            (json!({"stop": vec!["x"; 17]}), "sampling.stop"),
        ] {
            let e = AgentContent::from_json(json!({ "sampling": sampling })).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(at), "{sampling}: {}", e.message);
        }
        // Serializing is unchanged: the canonical JSON (and so every stored hash) stays the same.
        assert_eq!(
            serde_json::to_string(&AgentSampling::default()).unwrap(),
            r#"{"temperature":null,"top_p":null,"seed":null,"stop":[]}"#
        );
    }

    fn invalid(v: Value) -> Error {
        content(v).validate().unwrap_err()
    }

    #[test]
    fn validation_names_the_field_and_the_fix() {
        let e = invalid(json!({"max_iterations": 0}));
        assert_eq!(
            e.message,
            "`max_iterations` must be between 1 and 1000, got 0"
        );
        assert_eq!(e.param.as_deref(), Some("max_iterations"));
        let e = invalid(json!({"max_concurrent_children": 65}));
        assert_eq!(
            e.message,
            "`max_concurrent_children` must be between 1 and 64, got 65"
        );
        let e = invalid(json!({"model": "m", "tier": "fast"}));
        assert!(
            e.message.contains("at most one of `model` and `tier`"),
            "{}",
            e.message
        );
        let e = invalid(json!({"model": ""}));
        assert_eq!(e.param.as_deref(), Some("model"));
        let e = invalid(json!({"tools": ["HTTP", ""]}));
        assert_eq!(e.param.as_deref(), Some("tools[1]"));
        let e = invalid(json!({"tools": ["bad name"]}));
        assert!(e.message.contains("`tools[0]`"), "{}", e.message);
        let e = invalid(json!({"tools": ["web*"]}));
        assert!(
            e.message.contains("globs are allowed only"),
            "{}",
            e.message
        );
        let e = invalid(json!({"tools": ["mcp__github"]}));
        assert!(e.message.contains("mcp__<server>__<tool>"), "{}", e.message);
        let e = invalid(json!({"tools": ["HTTP", "HTTP"]}));
        assert!(e.message.contains("twice"), "{}", e.message);
        let e = invalid(json!({"skills": ["Bad"]}));
        assert_eq!(e.param.as_deref(), Some("skills[0]"));
        let e = invalid(json!({"memory_scopes": ["global"]}));
        assert!(
            e.message.contains("run, agent, user, tenant"),
            "{}",
            e.message
        );
        // Refused as it is read (see struct_fields_accept_only_objects), and by validate too.
        let mut c = AgentContent::default();
        c.sampling.temperature = Some(3.0);
        let e = c.validate().unwrap_err();
        assert_eq!(e.param.as_deref(), Some("sampling.temperature"));
        let e = invalid(json!({"allowed_hosts": ["https://x.com"]}));
        assert!(e.message.contains("is a URL"), "{}", e.message);
        let e = AgentContent::from_json(json!({"compaction": 3})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("compaction"));
        let e = invalid(json!({"compaction": {"auto_percent": 99}}));
        assert_eq!(e.param.as_deref(), Some("compaction.auto_percent"));
        let e = invalid(json!({"tier": "tier:fast"}));
        assert!(
            e.message.contains("without the `tier:` prefix"),
            "{}",
            e.message
        );
        let e = invalid(json!({"max_tokens": 0}));
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
    }

    #[test]
    fn good_definitions_validate() {
        content(json!({
            "description": "triage", "tier": "fast", "system_prompt": "be brief",
            "tools": ["HTTP", "Context", "mcp__github__*", "mcp__my-server__get_issue", "mcp__s__get_*"],
            "skills": ["summarise"], "mcp_servers": ["github"], "max_iterations": 1000,
            "max_tokens": 4096, "sampling": {"temperature": 0.2, "top_p": 1, "seed": 7, "stop": ["END"]},
            "memory_scopes": ["run", "tenant"], "channels": {"publish": ["alerts"], "subscribe": ["jobs.*"]},
            "max_concurrent_children": 64, "allowed_hosts": ["api.github.com", "*.example.com"],
            "compaction": {"auto_percent": 80, "keep_turns": 2, "model": "tier:cheap"}
        }))
        .validate()
        .unwrap();
        AgentContent::default().validate().unwrap();
        assert_eq!(AgentContent::default().model_ref(), "default");
    }

    #[test]
    fn agent_names_are_checked() {
        for ok in ["a", "triage", "code-review_2", "0x", &"a".repeat(64)] {
            validate_agent_name(ok).unwrap();
        }
        for bad in ["", "-a", "_a", "A", "a b", "a.b", &"a".repeat(65), "verify"] {
            let e = validate_agent_name(bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("name"), "{bad:?}");
        }
    }

    #[test]
    fn markdown_definitions_parse() {
        let md = "---\ndescription: Triage incoming issues\ntier: fast\ntools:\n  - HTTP\n  - mcp__github__*\nsampling:\n  temperature: 0.2\n---\n\nYou triage issues.\n\nBe brief.\n";
        let (name, c) = parse_agent_markdown("triage", md).unwrap();
        assert_eq!(name, "triage");
        assert_eq!(c.description, "Triage incoming issues");
        assert_eq!(c.tier.as_deref(), Some("fast"));
        assert_eq!(c.tools, ["HTTP", "mcp__github__*"]);
        assert_eq!(c.sampling.temperature, Some(0.2));
        assert_eq!(c.system_prompt, "You triage issues.\n\nBe brief.");
        // The same content through JSON hashes the same.
        let json = content(json!({
            "description": "Triage incoming issues", "tier": "fast", "tools": ["HTTP", "mcp__github__*"],
            "sampling": {"temperature": 0.2}, "system_prompt": "You triage issues.\n\nBe brief."
        }));
        assert_eq!(c.hash(), json.hash());
    }

    #[test]
    fn markdown_name_front_matter_and_errors() {
        let (name, c) =
            parse_agent_markdown("file-stem", "---\nname: other\nmodel: mock-1\n---\nhi").unwrap();
        assert_eq!(name, "other");
        assert_eq!(c.model.as_deref(), Some("mock-1"));
        let (name, c) = parse_agent_markdown("plain", "\u{feff}just a prompt\n").unwrap();
        assert_eq!(
            (name.as_str(), c.system_prompt.as_str()),
            ("plain", "just a prompt")
        );
        let (_, c) = parse_agent_markdown("crlf", "---\r\nmodel: m\r\n---\r\nbody\r\n").unwrap();
        assert_eq!(
            (c.model.as_deref(), c.system_prompt.as_str()),
            (Some("m"), "body")
        );
        let (_, c) = parse_agent_markdown("empty", "---\n---\n").unwrap();
        assert_eq!(c, AgentContent::default());

        let e = parse_agent_markdown("x", "---\nmax_iterations: 0\n---\nhi").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_iterations"));
        let e = parse_agent_markdown("x", "---\nmodle: m\n---\nhi").unwrap_err();
        assert!(e.message.contains("modle"), "{}", e.message);
        let e = parse_agent_markdown("x", "---\nmodel: m\nhi").unwrap_err();
        assert!(e.message.contains("never closed"), "{}", e.message);
        let e = parse_agent_markdown("Bad Name", "hi").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("name"));
        let e = parse_agent_markdown("x", "---\nsystem_prompt: a\n---\nb").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("system_prompt"));
        let e = parse_agent_markdown("x", "---\n- a\n---\n").unwrap_err();
        assert!(e.message.contains("mapping"), "{}", e.message);
        let e = parse_agent_markdown("x", "---\nmodel: [\n---\n").unwrap_err();
        assert!(e.message.contains("not valid YAML"), "{}", e.message);
    }

    #[test]
    fn hashes_normalise() {
        let h = AgentContent::default().hash();
        assert_eq!(normalize_hash(&h).as_deref(), Some(h.as_str()));
        assert_eq!(
            normalize_hash(&h[7..].to_ascii_uppercase()).as_deref(),
            Some(h.as_str())
        );
        assert_eq!(
            normalize_hash(&format!("SHA256:{}", &h[7..])).as_deref(),
            Some(h.as_str())
        );
        assert_eq!(normalize_hash("sha256:abc"), None);
        assert_eq!(normalize_hash("3"), None);
    }
}
