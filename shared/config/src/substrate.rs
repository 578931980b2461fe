//! `[substrate]`: versioned definitions, memory, channels and what is loaded at boot.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, at_least_one, invalid};

/// The substrate: versioned definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubstrateConfig {
    pub listen: SocketAddr,
    /// A folder of `<name>.md` agent definitions (front matter + prompt) loaded at boot.
    pub agents_dir: Option<PathBuf>,
    /// Agent definitions given inline, by name, with the same fields as the front matter.
    pub agents: BTreeMap<String, serde_json::Value>,
    /// The tenant that boot-loaded definitions belong to.
    pub boot_tenant: String,
    /// A folder of skills (`<name>/SKILL.md` plus text files) loaded at boot.
    pub skills_dir: Option<PathBuf>,
    /// The router's gRPC URL, for memory embeddings; ignored by `weft up`.
    pub router_url: String,
    /// Model (or alias) for memory embeddings; changing it drops older vectors from search.
    pub embedding_model: String,
    /// Bytes (keys + values) of memory one tenant may hold.
    pub memory_tenant_quota_bytes: u64,
    /// Bytes of memory the writes of one agent may hold (writes that name an agent).
    pub memory_agent_quota_bytes: u64,
    /// How often expired memory entries are deleted, ms (reads never return them).
    pub memory_sweep_interval_ms: u64,
    /// Channels created (or updated) in `boot_tenant` at start, by name.
    pub channels: BTreeMap<String, ChannelDecl>,
    /// Long-polls one substrate holds at once; more are answered 503 with `Retry-After`.
    pub max_channel_waiters: usize,
    /// MCP servers loaded at boot into `boot_tenant`; the only place for a `stdio` server.
    pub mcp_servers: BTreeMap<String, serde_json::Value>,
    /// Schedules loaded at boot into `boot_tenant` (fields of `PUT /v1/schedules/{name}`).
    pub schedules: BTreeMap<String, serde_json::Value>,
    /// Webhooks loaded at boot into `boot_tenant` (fields of `PUT /v1/webhooks/{name}`).
    pub webhooks: BTreeMap<String, serde_json::Value>,
}

/// A channel declared in the config (`substrate.channels.<name>`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelDecl {
    /// `agent`, `user` or `tenant`.
    pub scope: String,
    /// Message lifetime; default one day.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Messages kept per partition; default 1000.
    #[serde(default)]
    pub max_messages: Option<u64>,
}

impl Default for SubstrateConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8789)),
            agents_dir: None,
            agents: BTreeMap::new(),
            boot_tenant: "default".into(),
            skills_dir: None,
            router_url: "http://127.0.0.1:8788".into(),
            embedding_model: "default".into(),
            memory_tenant_quota_bytes: 256 * 1024 * 1024,
            memory_agent_quota_bytes: 32 * 1024 * 1024,
            memory_sweep_interval_ms: 30_000,
            channels: BTreeMap::new(),
            max_channel_waiters: 10_000,
            mcp_servers: BTreeMap::new(),
            schedules: BTreeMap::new(),
            webhooks: BTreeMap::new(),
        }
    }
}

impl SubstrateConfig {
    /// Refuses zero quotas and sweep intervals, an empty embedding model and no channel waiters.
    pub fn validate(&self) -> Checked {
        at_least_one(
            "substrate",
            [
                ("memory_tenant_quota_bytes", self.memory_tenant_quota_bytes),
                ("memory_agent_quota_bytes", self.memory_agent_quota_bytes),
                ("memory_sweep_interval_ms", self.memory_sweep_interval_ms),
            ],
        )?;
        if self.embedding_model.trim().is_empty() {
            return invalid("substrate.embedding_model must name a model or alias of the router");
        }
        if self.max_channel_waiters == 0 {
            return invalid("substrate.max_channel_waiters must be at least 1, got 0");
        }
        Ok(())
    }
}
