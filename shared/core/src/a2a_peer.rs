//! An A2A peer definition: an agent of another runtime, found by its agent card, whose skills
//! the runs of this tenant may call as tools `a2a__<peer>__<skill>` (docs/a2a.md). Its headers
//! may carry the run's credentials as `${run.credentials.<name>}`; the reference is what is
//! stored and hashed, the secret is substituted per call and never stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;
use crate::def::{DefContent, DefKind};

/// Bounds enforced by [`A2aPeerContent::validate`].
pub mod limits {
    pub const DESCRIPTION_BYTES: usize = 4096;
    pub const SKILLS: usize = 256;
    /// `timeout_ms`: at most an hour (a task may wait on a slow peer).
    pub const TIMEOUT_MS: u32 = 3_600_000;
    /// The default of `timeout_ms`: five minutes.
    pub const DEFAULT_TIMEOUT_MS: u32 = 300_000;
}

/// The prefix of every A2A tool name.
pub const TOOL_PREFIX: &str = "a2a__";

/// The content fields of an A2A peer definition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2aPeerContent {
    pub description: String,
    /// The peer's agent card (`https://peer.example.com/.well-known/agent-card.json`).
    pub card_url: String,
    /// Headers sent with every request to the peer, the card's included; values may hold
    /// `${run.credentials.<name>}`.
    pub headers: BTreeMap<String, String>,
    /// The peer's skills runs may see, by id or glob (`triage_*`); empty = every skill.
    pub skills: Vec<String>,
    /// The longest one call (a task, until it ends or asks for input) may take, in
    /// milliseconds; unset: [`limits::DEFAULT_TIMEOUT_MS`].
    pub timeout_ms: Option<u32>,
}

fn bad(param: impl Into<String>, message: impl Into<String>) -> Error {
    Error::invalid(message).with_param(param)
}

impl A2aPeerContent {
    /// Checks what types cannot; the message names the field and says how to fix it.
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
        if self.card_url.is_empty() {
            return Err(bad(
                "card_url",
                "`card_url` is required: the peer's agent card, e.g. https://peer.example.com/.well-known/agent-card.json",
            ));
        }
        crate::mcp::check_http_url("card_url", &self.card_url)?;
        crate::mcp::check_headers(
            &self.headers,
            &["accept", "content-type", "a2a-version"],
            "weft's A2A client",
        )?;
        crate::mcp::check_patterns(
            "skills",
            &self.skills,
            limits::SKILLS,
            |b| matches!(b, b'_' | b'-' | b'*'),
            "name a skill of the peer by its id (`triage`) or a glob (`triage_*`): 1-128 characters of A-Z, a-z, 0-9, '_', '-' and '*'",
        )?;
        crate::mcp::check_timeout_ms(self.timeout_ms, limits::TIMEOUT_MS)?;
        crate::storable::refuse_nul(self)?;
        Ok(())
    }

    /// Whether runs may see the peer's skill `id`.
    pub fn offers(&self, id: &str) -> bool {
        self.skills.is_empty() || self.skills.iter().any(|p| crate::mcp::glob_matches(p, id))
    }
}

/// A peer skill's id as the part of a tool name (`[A-Za-z0-9_-]`, at most 64 characters): kept
/// as it is when it fits, otherwise every other character becomes `_`. `None` for an id that
/// would be empty.
pub fn tool_part(id: &str) -> Option<String> {
    let part: String = id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!part.is_empty()).then_some(part)
}

/// `a2a__<peer>__<skill>` split into (peer, skill).
pub fn split_tool(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(TOOL_PREFIX)?.split_once("__")
}

impl DefContent for A2aPeerContent {
    const KIND: DefKind = DefKind::A2aPeer;

    fn from_json(value: Value) -> Result<Self, Error> {
        crate::def::from_json_fields("an A2A peer definition", value)
    }

    fn validate(&self) -> Result<(), Error> {
        A2aPeerContent::validate(self)
    }

    fn description(&self) -> &str {
        &self.description
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn content(v: Value) -> Result<A2aPeerContent, Error> {
        let c = A2aPeerContent::from_json(v)?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn a_peer_needs_a_card_url_and_takes_credentials_in_headers() {
        let c = content(json!({
            "card_url": "https://peer.example.com/.well-known/agent-card.json",
            "headers": {"Authorization": "Bearer ${run.credentials.peer}"},
            "skills": ["echo", "triage_*"], "timeout_ms": 60000
        }))
        .unwrap();
        assert!(c.offers("echo") && c.offers("triage_bugs") && !c.offers("other"));
        assert!(
            content(json!({"card_url": "https://p.example"}))
                .unwrap()
                .offers("x")
        );
        for (v, field) in [
            (json!({}), "card_url"),
            (json!({"card_url": "ftp://p.example/card"}), "card_url"),
            (
                json!({"card_url": "https://p.example", "headers": {"A2A-Version": "0.3"}}),
                "headers.A2A-Version",
            ),
            (
                json!({"card_url": "https://p.example", "headers": {"x": "${env.HOME}"}}),
                "headers.x",
            ),
            (
                json!({"card_url": "https://p.example", "skills": ["a b"]}),
                "skills[0]",
            ),
            (
                json!({"card_url": "https://p.example", "timeout_ms": 0}),
                "timeout_ms",
            ),
        ] {
            let e = content(v.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field), "{v}: {}", e.message);
        }
        assert!(content(json!({"card_url": "https://p.example", "url": "x"})).is_err());
    }

    #[test]
    fn skill_ids_become_tool_name_parts() {
        assert_eq!(tool_part("echo").as_deref(), Some("echo"));
        assert_eq!(tool_part("route.v2/fast").as_deref(), Some("route_v2_fast"));
        assert_eq!(tool_part(""), None);
        assert_eq!(split_tool("a2a__peer__echo"), Some(("peer", "echo")));
        assert_eq!(split_tool("mcp__peer__echo"), None);
    }
}
