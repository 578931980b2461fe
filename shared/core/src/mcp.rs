//! An MCP server definition (API.md, "MCP"): an external MCP server whose tools runs may use as
//! `mcp__<server>__<tool>`. Versioned and content-addressed like every definition
//! ([`crate::def`]). Two transports:
//!
//! - `http` (streamable HTTP): a `url` and `headers`. A header value may reference a per-run
//!   credential as `${run.credentials.<name>}`; the reference is what is stored and hashed, the
//!   secret is substituted by the MCP bridge for each call and never stored.
//! - `stdio`: a `command` with `args` and `env`, started by the bridge on weft's own hosts —
//!   which is why only an operator may declare one (in the config file); the substrate refuses
//!   one from a tenant.
//!
//! `tools` narrows what the server offers (names or globs of the tool part); empty = all.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;
use crate::def::{DefContent, DefKind};

/// Bounds enforced by [`McpServerContent::validate`].
pub mod limits {
    pub const DESCRIPTION_BYTES: usize = 4096;
    pub const URL_BYTES: usize = 2048;
    pub const HEADERS: usize = 32;
    pub const HEADER_VALUE_BYTES: usize = 8192;
    pub const ARGS: usize = 64;
    pub const ARG_BYTES: usize = 4096;
    pub const ENV: usize = 64;
    pub const TOOLS: usize = 256;
    /// `timeout_ms`: at most ten minutes.
    pub const TIMEOUT_MS: u32 = 600_000;
}

/// How weft reaches the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// Streamable HTTP.
    #[default]
    Http,
    /// A child process speaking MCP on its standard input and output.
    Stdio,
}

/// The content fields of an MCP server definition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerContent {
    pub description: String,
    pub transport: McpTransport,
    /// `http`: the endpoint (`https://host/mcp`).
    pub url: Option<String>,
    /// `http`: headers sent with every request; values may hold `${run.credentials.<name>}`.
    pub headers: BTreeMap<String, String>,
    /// `stdio`: the program to start.
    pub command: Option<String>,
    /// `stdio`: its arguments.
    pub args: Vec<String>,
    /// `stdio`: its environment (added to a minimal one: `PATH`, `HOME`, `LANG`).
    pub env: BTreeMap<String, String>,
    /// The tools runs may see, by name or glob of the tool name (`get_*`); empty = every tool.
    pub tools: Vec<String>,
    /// The longest one call may take, in milliseconds (default: the bridge's
    /// `mcp_bridge.call_timeout_ms`; never more than it).
    pub timeout_ms: Option<u32>,
}

/// Replaces every credential value in `text` by a marker naming it: longest first (so a secret
/// that extends another is not left half-replaced), and also as it appears JSON-escaped (inside
/// a non-text block or structured content rendered as JSON).
pub fn redact(text: &str, credentials: &BTreeMap<String, String>) -> String {
    let mut secrets: Vec<(&String, &String)> =
        credentials.iter().filter(|(_, v)| !v.is_empty()).collect();
    secrets.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    let mut out = text.to_owned();
    for (name, secret) in secrets {
        let marker = format!("[redacted: credential {name}]");
        let escaped = serde_json::to_string(secret.as_str()).unwrap_or_default();
        let escaped = escaped.trim_matches('"');
        for form in [secret.as_str(), escaped] {
            if !form.is_empty() && out.contains(form) {
                out = out.replace(form, &marker);
            }
        }
    }
    out
}

/// [`redact`] over every string and object key of a JSON value, so the value stays valid JSON
/// whatever the credential holds.
pub fn redact_value(v: &mut serde_json::Value, credentials: &BTreeMap<String, String>) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            let r = redact(s, credentials);
            if r != *s {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| redact_value(i, credentials)),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut item) in entries {
                redact_value(&mut item, credentials);
                map.insert(redact(&k, credentials), item);
            }
        }
        // A number that spells a credential (`"default": 12345678`) becomes the marker.
        Value::Number(n) => {
            let text = n.to_string();
            let r = redact(&text, credentials);
            if r != text {
                *v = Value::String(r);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// The credential names a header value references, in order (`${run.credentials.<name>}`), or
/// an error naming the first malformed reference.
pub fn credential_refs(value: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("has `${` without a closing `}`".into());
        };
        let inner = &after[..end];
        let Some(name) = inner.strip_prefix("run.credentials.") else {
            return Err(format!(
                "references `${{{inner}}}`; only `${{run.credentials.<name>}}` is supported"
            ));
        };
        if !is_credential_name(name) {
            return Err(format!(
                "references credential `{name}`; a credential name is 1-64 characters of a-z, A-Z, 0-9, '_' and '-'"
            ));
        }
        out.push(name);
        rest = &after[end + 1..];
    }
    Ok(out)
}

/// `[A-Za-z0-9_-]{1,64}`: the names callers give credentials in `POST /v1/runs`.
pub fn is_credential_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Replaces every `${run.credentials.<name>}` in `value` with the credential's secret. An
/// unknown credential is an error naming it.
pub fn substitute_credentials(
    value: &str,
    credentials: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${run.credentials.") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "${run.credentials.".len()..];
        let Some(end) = after.find('}') else {
            return Err("a credential reference has no closing `}`".into());
        };
        let name = &after[..end];
        match credentials.get(name) {
            Some(secret) => out.push_str(secret),
            None => {
                return Err(format!(
                    "this MCP server needs the credential `{name}`; pass it in the run's `credentials`"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `tool` matches `pattern`, where `*` matches any run of characters. Linear in the
/// lengths (greedy with one backtrack point), never exponential whatever the pattern.
pub fn glob_matches(pattern: &str, tool: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), tool.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

/// `items` (of `field`): at most `max` names or globs of 1-128 bytes, each ASCII alphanumeric or
/// `extra`; `hint` says what to write instead.
pub(crate) fn check_patterns(
    field: &str,
    items: &[String],
    max: usize,
    extra: fn(u8) -> bool,
    hint: &str,
) -> Result<(), Error> {
    if items.len() > max {
        return Err(bad(
            field,
            format!("`{field}` has {} entries; at most {max}", items.len()),
        ));
    }
    for (i, t) in items.iter().enumerate() {
        let ok = !t.is_empty()
            && t.len() <= 128
            && t.bytes().all(|b| b.is_ascii_alphanumeric() || extra(b));
        if !ok {
            return Err(bad(
                format!("{field}[{i}]"),
                format!("`{field}[{i}]` is `{t}`; {hint}"),
            ));
        }
    }
    Ok(())
}

/// `timeout_ms`, when set: 1 to `max`.
pub(crate) fn check_timeout_ms(value: Option<u32>, max: u32) -> Result<(), Error> {
    match value {
        Some(t) if !(1..=max).contains(&t) => Err(bad(
            "timeout_ms",
            format!("`timeout_ms` must be between 1 and {max}, got {t}"),
        )),
        _ => Ok(()),
    }
}

/// `field` as an http:// or https:// URL with a host that the client will parse, at most
/// [`limits::URL_BYTES`]. An A2A peer's card URL is held to the same rule.
pub(crate) fn check_http_url(field: &str, url: &str) -> Result<(), Error> {
    let host = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default())
        .unwrap_or_default();
    // What the client will parse: a URL it refuses (`http://[::1`, a bad port) is refused
    // here, where the author sees it, not at the first connection (the length is checked
    // below, and a URL over it is not parsed).
    let parsed = (url.len() <= limits::URL_BYTES)
        .then(|| ::url::Url::parse(url).ok())
        .flatten()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if host.is_empty()
        || (parsed.is_none() && url.len() <= limits::URL_BYTES)
        || url.bytes().any(|b| b <= b' ' || b == 0x7f)
    {
        return Err(bad(
            field,
            format!("`{field}` must be an http:// or https:// URL with a host, got `{url}`"),
        ));
    }
    if url.len() > limits::URL_BYTES {
        return Err(bad(
            field,
            format!("`{field}` is longer than {} bytes", limits::URL_BYTES),
        ));
    }
    Ok(())
}

/// `headers` of an outbound client: at most [`limits::HEADERS`], valid names, printable values
/// of at most [`limits::HEADER_VALUE_BYTES`] whose `${...}` are credential references; none of
/// the framing headers, nor `reserved` (lowercase), which `client` sets itself.
pub(crate) fn check_headers(
    headers: &BTreeMap<String, String>,
    reserved: &[&str],
    client: &str,
) -> Result<(), Error> {
    if headers.len() > limits::HEADERS {
        return Err(bad(
            "headers",
            format!("`headers` has more than {} entries", limits::HEADERS),
        ));
    }
    for (name, value) in headers {
        let field = format!("headers.{name}");
        if !is_header_name(name) {
            return Err(bad(
                field,
                format!("`{name}` is not a valid HTTP header name"),
            ));
        }
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) || reserved.contains(&lower.as_str())
        {
            return Err(bad(
                field,
                format!("header `{name}` is set by {client}; remove it"),
            ));
        }
        if value.len() > limits::HEADER_VALUE_BYTES
            || value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f)
        {
            return Err(bad(
                field,
                format!(
                    "header `{name}` must be printable text of at most {} bytes",
                    limits::HEADER_VALUE_BYTES
                ),
            ));
        }
        credential_refs(value)
            .map_err(|m| bad(format!("headers.{name}"), format!("header `{name}` {m}")))?;
    }
    Ok(())
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl McpServerContent {
    /// Checks what types cannot; the error names the field.
    pub fn validate(&self) -> Result<(), Error> {
        if self.description.len() > limits::DESCRIPTION_BYTES {
            return Err(bad(
                "description",
                format!(
                    "`description` is {} bytes; at most {} are allowed",
                    self.description.len(),
                    limits::DESCRIPTION_BYTES
                ),
            ));
        }
        self.validate_bounds()?;
        match self.transport {
            McpTransport::Http => self.validate_http()?,
            McpTransport::Stdio => self.validate_stdio()?,
        }
        check_patterns(
            "tools",
            &self.tools,
            limits::TOOLS,
            |b| matches!(b, b'_' | b'-' | b'.' | b'*' | b'/'),
            "name a tool of the server (`get_issue`) or a glob (`get_*`)",
        )?;
        check_timeout_ms(self.timeout_ms, limits::TIMEOUT_MS)?;
        // A NUL anywhere (as for agents and skills; a definition from the config file does
        // not pass the gateway's check).
        crate::storable::refuse_nul(self)?;
        Ok(())
    }

    fn validate_http(&self) -> Result<(), Error> {
        let Some(url) = self.url.as_deref() else {
            return Err(bad(
                "url",
                "`url` is required for an `http` MCP server (its streamable HTTP endpoint, e.g. https://mcp.example.com/mcp)",
            ));
        };
        check_http_url("url", url)?;
        if self.command.is_some() || !self.args.is_empty() || !self.env.is_empty() {
            return Err(bad(
                "command",
                "`command`, `args` and `env` belong to a `stdio` server; an `http` server has `url` and `headers`",
            ));
        }
        check_headers(
            &self.headers,
            &[
                "accept",
                "content-type",
                "mcp-session-id",
                "mcp-protocol-version",
            ],
            "weft's MCP client",
        )
    }

    fn validate_stdio(&self) -> Result<(), Error> {
        let command = self.command.as_deref().unwrap_or_default();
        if command.trim().is_empty() {
            return Err(bad(
                "command",
                "`command` is required for a `stdio` MCP server (the program to start, e.g. `npx`)",
            ));
        }
        if self.url.is_some() || !self.headers.is_empty() {
            return Err(bad(
                "url",
                "`url` and `headers` belong to an `http` server; a `stdio` server has `command`, `args` and `env`",
            ));
        }
        Ok(())
    }

    /// The bounds of every list and map, whatever the transport (so an oversized entry is
    /// named even where the field does not belong).
    fn validate_bounds(&self) -> Result<(), Error> {
        if self.args.len() > limits::ARGS {
            return Err(bad(
                "args",
                format!("`args` may have at most {} entries", limits::ARGS),
            ));
        }
        if let Some(i) = self.args.iter().position(|a| a.len() > limits::ARG_BYTES) {
            return Err(bad(
                format!("args[{i}]"),
                format!("`args[{i}]` is longer than {} bytes", limits::ARG_BYTES),
            ));
        }
        if self.env.len() > limits::ENV {
            return Err(bad(
                "env",
                format!("`env` has more than {} entries", limits::ENV),
            ));
        }
        for name in self.env.keys() {
            if name.is_empty() || name.contains('=') {
                return Err(bad(
                    format!("env.{name}"),
                    format!("`{name}` is not a valid environment variable name"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the def offers `tool` (its `tools` narrowing; empty = every tool).
    pub fn offers(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|p| glob_matches(p, tool))
    }
}

impl DefContent for McpServerContent {
    const KIND: DefKind = DefKind::McpServer;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("an MCP server definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        McpServerContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn operator_only(&self) -> Option<String> {
        (self.transport == McpTransport::Stdio).then(|| {
            "a `stdio` MCP server starts a program on weft's own hosts, so only an operator may declare one (in the config file, `substrate.mcp_servers`); define an `http` server with a `url` instead".to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn content(v: Value) -> Result<McpServerContent, Error> {
        let c = McpServerContent::from_json(v)?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn a_nul_anywhere_is_refused_naming_the_field() {
        // What the fuzzer found (def_mcp_server): a stdio server, which only the config file
        // declares, so the gateway's check never sees it.
        let e = content(json!({"transport": "stdio", "command": "npx", "args": ["-y", "a\u{0}b"]}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("args[1]"), "{}", e.message);
        let e = content(json!({"url": "https://x/mcp", "description": "d\u{0}"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("description"), "{}", e.message);
    }

    #[test]
    fn an_http_server_needs_a_url_and_takes_credential_references() {
        let c = content(json!({
            "transport": "http", "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer ${run.credentials.gh}"}, "tools": ["get_*"]
        }))
        .unwrap();
        assert!(c.offers("get_issue"));
        assert!(!c.offers("delete_repo"));
        let e = content(json!({"transport": "http"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("url"));
        let e =
            content(json!({"url": "https://x/mcp", "headers": {"A": "${env.HOME}"}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("headers.A"));
        assert!(e.message.contains("run.credentials"), "{}", e.message);
        let e = content(json!({"url": "file:///etc/passwd"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("url"));
        for bad_url in [
            "http://[::1",
            "http://[::1/mcp",
            "https://host:99999/mcp",
            "http://exa mple.com/",
            "http://:80/mcp",
        ] {
            let e = content(json!({"url": bad_url})).unwrap_err();
            assert!(e.to_string().contains("`url` must be"), "{bad_url}: {e}");
        }
        content(json!({"url": "http://[::1]:8080/mcp"})).unwrap();
        let e = content(json!({"url": "https://x/mcp", "headers": {"Host": "y"}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("headers.Host"));
    }

    #[test]
    fn a_stdio_server_needs_a_command_and_no_url() {
        content(json!({"transport": "stdio", "command": "python3", "args": ["s.py"]})).unwrap();
        let e = content(json!({"transport": "stdio"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("command"));
        let e = content(json!({"transport": "stdio", "command": "x", "url": "https://x/"}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("url"));
        let e = content(json!({"transport": "ftp"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("transport"));
    }

    #[test]
    fn credentials_are_substituted_and_a_missing_one_is_named() {
        let creds = BTreeMap::from([("gh".to_owned(), "s3cret".to_owned())]);
        assert_eq!(
            substitute_credentials("Bearer ${run.credentials.gh}!", &creds).unwrap(),
            "Bearer s3cret!"
        );
        let e = substitute_credentials("${run.credentials.other}", &creds).unwrap_err();
        assert!(e.contains("`other`"), "{e}");
        assert_eq!(
            credential_refs("a ${run.credentials.x} ${run.credentials.y}").unwrap(),
            ["x", "y"]
        );
    }

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches("get_*", "get_"));
        assert!(glob_matches("*_issue", "get_issue"));
        assert!(glob_matches("a*b*c", "aXbYc"));
        assert!(!glob_matches("a*b*c", "aXbY"));
        assert!(!glob_matches("get", "get_issue"));
        // A pattern built to backtrack: answered at once, not in exponential time.
        let long = "a".repeat(120);
        assert!(!glob_matches("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", &long));
        assert!(glob_matches("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*", &long));
    }

    #[test]
    fn server_names_may_not_hold_the_separator() {
        let e = crate::def::validate_def_name(DefKind::McpServer, "my__srv").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("name"));
        crate::def::validate_def_name(DefKind::McpServer, "my_srv").unwrap();
    }
}
