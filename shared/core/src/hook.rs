//! Tool-use hooks (docs/hooks.md): the `hook` definition kind. A hook names the agents and
//! tools it applies to, when it is called (`pre`: before the tool runs, `post`: after), where
//! (`url`, dialled by the executor through its egress guard), what a call without a usable
//! answer decides ([`FailMode`]), how long a call may take, and which environment variable of
//! the executors holds its Standard Webhooks signing secret (the *name* only, in the tenant's
//! namespace, as inbound webhooks name theirs: [`crate::webhook::secret_namespace`]).
//!
//! The content types are the contract's ([`weft_api::hooks`]); this module validates them,
//! stores them as a [`DefContent`], and decides which hooks apply to a call ([`applies`]).

use serde_json::Value;

use crate::def::{DefContent, DefKind};
use crate::{Error, TenantId};

pub use weft_api::hooks::{
    CALL_POST, CALL_PRE, FailMode, HookAnswer, HookCall, HookContent, HookPhase, HookVerdict,
};

/// Bounds enforced by [`validate`].
pub mod limits {
    pub const DESCRIPTION_BYTES: usize = 4096;
    /// Entries of `agents`, and of `tools`.
    pub const ENTRIES: usize = 64;
    /// `timeout_ms`: at most a minute (a tool call waits on it).
    pub const TIMEOUT_MS: u32 = 60_000;
    /// The default of `timeout_ms`.
    pub const DEFAULT_TIMEOUT_MS: u32 = 5_000;
}

/// The operator's default prefix of hook secret variables (`executor.hook_secret_env_prefix`).
pub const DEFAULT_SECRET_ENV_PREFIX: &str = "WEFT_HOOK_";

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

/// The fields a hook must give, each with how to write it.
const REQUIRED: [(&str, &str); 4] = [
    (
        "phase",
        "\"pre\" (called before the tool runs: may allow, deny or rewrite the input) or \"post\" (after: may rewrite the result)",
    ),
    (
        "agents",
        "a list of agent names, or [\"*\"] for every agent of the tenant",
    ),
    (
        "tools",
        "a list of tool names (\"HTTP\") or prefixes ending in * (\"mcp__github__*\"), or [\"*\"] for every tool",
    ),
    (
        "url",
        "the receiver's http(s) URL, e.g. https://policy.example.com/weft/pre",
    ),
];

impl DefContent for HookContent {
    const KIND: DefKind = DefKind::Hook;

    fn from_json(value: Value) -> Result<Self, Error> {
        if let Value::Object(m) = &value {
            for (field, how) in REQUIRED {
                if !m.contains_key(field) {
                    return Err(bad(field, format!("`{field}` is required: {how}")));
                }
            }
        }
        crate::def::from_json_fields("a hook definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

/// Checks what types cannot; the message names the field and says how to fix it.
pub fn validate(c: &HookContent) -> Result<(), Error> {
    if c.description.len() > limits::DESCRIPTION_BYTES {
        return Err(bad(
            "description",
            format!(
                "`description` is {} bytes; at most {} are allowed",
                c.description.len(),
                limits::DESCRIPTION_BYTES
            ),
        ));
    }
    for (field, items) in [("agents", &c.agents), ("tools", &c.tools)] {
        if items.is_empty() {
            let how = REQUIRED
                .iter()
                .find(|(f, _)| *f == field)
                .map_or("", |(_, h)| h);
            return Err(bad(
                field,
                format!("`{field}` is empty, so the hook would never be called: give {how}"),
            ));
        }
        if items.len() > limits::ENTRIES {
            return Err(bad(
                field,
                format!(
                    "`{field}` has {} entries; at most {} are allowed (use a prefix glob such as \"mcp__github__*\")",
                    items.len(),
                    limits::ENTRIES
                ),
            ));
        }
    }
    for (i, a) in c.agents.iter().enumerate() {
        if a != "*" && !crate::names::is_def_name(a) {
            return Err(bad(
                format!("agents[{i}]"),
                format!(
                    "`agents[{i}]` is `{}`; name an agent (1-64 characters of a-z, 0-9, '_' and '-') or write \"*\" for every agent",
                    a.escape_default()
                ),
            ));
        }
    }
    for (i, t) in c.tools.iter().enumerate() {
        let name = t.strip_suffix('*').unwrap_or(t);
        let ok = name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !(name.is_empty() && t.is_empty());
        if !ok {
            return Err(bad(
                format!("tools[{i}]"),
                format!(
                    "`tools[{i}]` is `{}`; name a tool exactly (`HTTP`, `mcp__github__create_issue`) or by a prefix ending in a single `*` (`mcp__github__*`; `*` alone for every tool): up to 128 characters of A-Z, a-z, 0-9, '_' and '-'",
                    t.escape_default()
                ),
            ));
        }
    }
    crate::mcp::check_http_url("url", &c.url)?;
    crate::mcp::check_timeout_ms(c.timeout_ms, limits::TIMEOUT_MS)?;
    if let Some(env) = &c.secret_env
        && !is_env_name(env)
    {
        return Err(bad(
            "secret_env",
            format!(
                "`secret_env` `{}` is not an environment variable name: use A-Z, 0-9 and '_' (at most 128), e.g. `WEFT_HOOK_ACME__POLICY`, or leave it out for unsigned calls",
                env.escape_default()
            ),
        ));
    }
    crate::storable::refuse_nul(c)?;
    Ok(())
}

fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Checks that a hook's `secret_env` lies in `tenant`'s namespace under the operator's `prefix`
/// (`executor.hook_secret_env_prefix`); the error (param `secret_env`) says how to name it.
pub fn check_secret_env(prefix: &str, tenant: &TenantId, env: &str) -> Result<(), Error> {
    if crate::webhook::in_secret_namespace(prefix, tenant, env) {
        return Ok(());
    }
    let ns = crate::webhook::secret_namespace(prefix, tenant);
    Err(bad(
        "secret_env",
        format!(
            "`secret_env` `{}` is outside your tenant's hook secret namespace: name it `{ns}<NAME>` (NAME of A-Z, 0-9 and '_', starting with a letter or digit, without `__`), e.g. `{ns}POLICY`, and have the operator set that variable (a `whsec_` + base64 secret) on every executor",
            env.escape_default()
        ),
    ))
}

/// Whether hook `h` applies to a call of `tool` in a run of `agent`.
pub fn applies(h: &HookContent, agent: &str, tool: &str) -> bool {
    h.agents.iter().any(|a| a == "*" || a == agent)
        && h.tools.iter().any(|t| match t.strip_suffix('*') {
            Some(prefix) => tool.starts_with(prefix),
            None => t == tool,
        })
}

/// `timeout_ms`, or its default.
pub fn timeout_ms(h: &HookContent) -> u32 {
    h.timeout_ms.unwrap_or(limits::DEFAULT_TIMEOUT_MS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn content(v: Value) -> Result<HookContent, Error> {
        let c = HookContent::from_json(v)?;
        c.validate()?;
        Ok(c)
    }

    fn base() -> Value {
        json!({"phase": "pre", "agents": ["*"], "tools": ["HTTP"], "url": "https://h.example/pre"})
    }

    fn with(k: &str, v: Value) -> Value {
        let mut b = base();
        b[k] = v;
        b
    }

    #[test]
    fn a_hook_reads_with_defaults_and_matches_agents_and_tools() {
        let c = content(with("tools", json!(["HTTP", "mcp__github__*"]))).unwrap();
        assert_eq!(c.fail_mode, FailMode::Closed);
        assert_eq!(timeout_ms(&c), 5000);
        assert!(applies(&c, "any", "HTTP"));
        assert!(applies(&c, "any", "mcp__github__create_issue"));
        assert!(!applies(&c, "any", "HTTPS") && !applies(&c, "any", "mcp__gitlab__x"));
        let c = content(with("agents", json!(["triage"]))).unwrap();
        assert!(applies(&c, "triage", "HTTP") && !applies(&c, "other", "HTTP"));
        let all = content(with("tools", json!(["*"]))).unwrap();
        assert!(applies(&all, "a", "Memory"));
        // Canonical JSON holds every field.
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["fail_mode"], "closed");
        assert!(v["secret_env"].is_null() && v["timeout_ms"].is_null());
    }

    #[test]
    fn every_mistake_names_its_field_and_says_how_to_fix_it() {
        let mut missing = base();
        missing.as_object_mut().unwrap().remove("phase");
        for (v, field) in [
            (missing, "phase"),
            (with("phase", json!("during")), "phase"),
            (with("agents", json!([])), "agents"),
            (with("agents", json!(["Bad Name"])), "agents[0]"),
            (with("tools", json!([])), "tools"),
            (with("tools", json!(["a*b"])), "tools[0]"),
            (with("tools", json!(["mcp__*__x"])), "tools[0]"),
            (with("tools", json!([""])), "tools[0]"),
            (with("url", json!("ftp://h.example")), "url"),
            (with("url", json!("")), "url"),
            (with("timeout_ms", json!(0)), "timeout_ms"),
            (with("timeout_ms", json!(60001)), "timeout_ms"),
            (with("secret_env", json!("lower")), "secret_env"),
            (with("fail_mode", json!("maybe")), "fail_mode"),
            (with("extra", json!(1)), "extra"),
        ] {
            let e = content(v.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{v}: {}", e.message);
        }
        let e = content(with("agents", json!([]))).unwrap_err();
        assert!(e.message.contains("[\"*\"]"), "{}", e.message);
    }

    #[test]
    fn secrets_lie_in_the_tenants_namespace() {
        let t = TenantId::parse("acme-eu").unwrap();
        check_secret_env("WEFT_HOOK_", &t, "WEFT_HOOK_ACME_EU__POLICY").unwrap();
        for env in [
            "WEFT_HOOK_OTHER__POLICY",
            "WEFT_WEBHOOK_ACME_EU__POLICY",
            "WEFT_HOOK_ACME_EU__",
            "HOME",
        ] {
            let e = check_secret_env("WEFT_HOOK_", &t, env).unwrap_err();
            assert!(e.message.contains("WEFT_HOOK_ACME_EU__"), "{}", e.message);
        }
    }
}
