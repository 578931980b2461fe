//! An agent definition's content: the fields that are hashed into its version. Versioning,
//! lineage and storage belong to the substrate; this is the value every service agrees on.

use serde::{Deserialize, Serialize};

/// The content fields of an agent definition (API.md, "Definitions"). Two definitions with the
/// same content — defaults included — have the same hash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentContent {
    pub description: String,
    /// A model name, alias or `provider/model`. Exactly one of `model` and `tier` is set.
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
    /// Context compaction settings (opaque until compaction is built).
    pub compaction: Option<serde_json::Value>,
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
        }
    }
}

/// Sampling defaults of an agent; a run may override them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentChannels {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
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
}
