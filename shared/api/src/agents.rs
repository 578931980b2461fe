//! `/v1/agents…`: agent definitions, the eight definition routes ([`crate::defs`]) over
//! [`AgentContent`].
//!
//! The content types here mirror `weft_core::agent`'s field for field (serde form, defaults);
//! weft-core keeps the validation and the content address, and a test there checks that both
//! serialize the same.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::AgentSampling;
use crate::defs::{DefContentSchema, def_ops};
use crate::op::Op;

/// The content fields of an agent. Hash: sha256 over the canonical JSON (every field present, keys sorted, no whitespace).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[schemars(extend("example" = {
    "description": "Triage incoming issues",
    "model": "mock-1",
    "system_prompt": "You triage issues. Be brief.",
    "tools": ["Context"],
    "max_iterations": 4,
    "sampling": {"temperature": 0.2, "stop": ["END"]},
    "channels": {"publish": ["alerts"]},
    "allowed_hosts": ["api.example.com"]
}))]
pub struct AgentContent {
    /// at most 4096 bytes (of UTF-8)
    #[schemars(length(max = 4096))]
    pub description: String,
    /// a model, alias or provider/model; at most one of model and tier; neither = the `default` alias
    #[schemars(length(min = 1, max = 200))]
    pub model: Option<String>,
    /// a tier name (routed as tier:<name>)
    #[schemars(length(min = 1, max = 200))]
    pub tier: Option<String>,
    /// at most 1 MiB (of UTF-8)
    #[schemars(length(max = 1048576))]
    pub system_prompt: String,
    /// allowlist: built-ins by name, MCP tools as mcp__<server>__<tool> (the tool part may be a glob)
    #[schemars(length(max = 256), inner(length(min = 1), regex(pattern = r"^[A-Za-z0-9_*-]+$")), extend("uniqueItems" = true))]
    pub tools: Vec<String>,
    #[schemars(length(max = 256), inner(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")), extend("uniqueItems" = true))]
    pub skills: Vec<String>,
    #[schemars(length(max = 256), inner(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")), extend("uniqueItems" = true))]
    pub mcp_servers: Vec<String>,
    #[schemars(range(min = 1, max = 1000))]
    pub max_iterations: u32,
    #[schemars(range(min = 1, max = 1000000))]
    pub max_tokens: Option<u32>,
    #[schemars(transform = crate::defs::no_default)]
    pub sampling: AgentSampling,
    #[schemars(schema_with = "memory_scopes")]
    pub memory_scopes: Vec<String>,
    #[schemars(transform = crate::defs::no_default)]
    pub channels: AgentChannels,
    #[schemars(range(min = 1, max = 64))]
    pub max_concurrent_children: u32,
    /// host names or *.domain; unset = the operator's list; narrows, never widens
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)), extend("uniqueItems" = true))]
    pub allowed_hosts: Option<Vec<String>>,
    /// how runs keep their model view inside the window (docs/runs.md "Long runs"); null = no automatic compaction, default tool-result budgets
    pub compaction: Option<crate::context::Compaction>,
    /// the volumes the agent's file tools may use; absent (hashed as absent) = none
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub volumes: Vec<crate::binding::VolumeBinding>,
    /// whether A2A clients see the agent as a skill of its tenant's agent card; absent (hashed as absent) = not exposed
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a2a: Option<AgentA2a>,
    /// a code agent: a script takes the run's turns instead of a model, spending no tokens (docs/code-agents.md); absent (hashed as absent) = a model agent
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::code::CodeAgent>,
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

fn memory_scopes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"enum": ["run", "agent", "user", "tenant"]},
        "default": [],
        "maxItems": 256,
        "uniqueItems": true
    })
}

/// An agent's channel grants.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct AgentChannels {
    #[schemars(length(max = 256), inner(regex(pattern = r"^[A-Za-z0-9_.:*-]{1,128}$")), extend("uniqueItems" = true))]
    pub publish: Vec<String>,
    #[schemars(length(max = 256), inner(regex(pattern = r"^[A-Za-z0-9_.:*-]{1,128}$")), extend("uniqueItems" = true))]
    pub subscribe: Vec<String>,
}

/// How an agent is offered over A2A (docs/a2a.md); off unless `expose` is true.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[schemars(inline)]
pub struct AgentA2a {
    /// the agent is a skill of its tenant's agent card, and A2A messages may start its runs
    pub expose: bool,
    /// the skill's tags on the card
    #[schemars(length(max = 32), inner(length(min = 1, max = 64)), extend("uniqueItems" = true))]
    pub tags: Vec<String>,
    /// example requests the card shows
    #[schemars(length(max = 16), inner(length(min = 1, max = 1024)), extend("uniqueItems" = true))]
    pub examples: Vec<String>,
}

crate::objects_only!(AgentChannels, AgentA2a);

impl DefContentSchema for AgentContent {
    const NAME: &'static str = "Agent";
}

pub fn ops() -> Vec<Op> {
    def_ops::<AgentContent>(&crate::def_texts!(
        path: "/v1/agents", tag: "agents", example: "triage",
        plural: "agents", a: "an agent", noun: "agent", put_a: "an agent definition",
        put_description: "Scope: tenant:admin or admin. The body is the content fields; omitted fields take their defaults. The same content returns the existing version (200, created=false) and makes it active; new content becomes the next version (201) with the previously active version as parent. A retired name is un-retired.",
        retire: "Retire an agent (it stays readable; runs of it are refused)",
    ))
}
