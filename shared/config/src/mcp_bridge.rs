//! `[mcp_bridge]`: the session pool that mounts external MCP servers into runs.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, at_least_one, cidrs};

/// The MCP bridge's client side: the session pool that mounts external MCP servers into runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpBridgeConfig {
    /// Address of the bridge's gRPC server (`weft mcp-bridge`); `weft up` wires it in-process.
    pub listen: SocketAddr,
    /// The substrate's gRPC URL (server definitions); ignored by `weft up`.
    pub substrate_url: String,
    /// Longest one tool call may take, ms (a definition's `timeout_ms` may only lower it).
    pub call_timeout_ms: u64,
    /// How long connecting and listing tools may take, ms, retries included.
    pub connect_timeout_ms: u64,
    /// The largest tool result handed back, in bytes; longer results are cut with a note.
    pub max_result_bytes: usize,
    /// Sessions open at once across tenants and servers; least recently used closed beyond it.
    pub max_sessions: usize,
    pub idle_timeout_ms: u64,
    /// CIDRs a tenant-defined `http` server may resolve to although private or loopback.
    pub private_exempt: Vec<String>,
}

impl Default for McpBridgeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8790)),
            substrate_url: "http://127.0.0.1:8789".into(),
            call_timeout_ms: 60_000,
            connect_timeout_ms: 15_000,
            max_result_bytes: 256 * 1024,
            max_sessions: 1024,
            idle_timeout_ms: 300_000,
            private_exempt: Vec::new(),
        }
    }
}

impl McpBridgeConfig {
    /// Refuses zero timeouts and sizes, and `private_exempt` entries that are not CIDRs.
    pub fn validate(&self) -> Checked {
        at_least_one(
            "mcp_bridge",
            [
                ("call_timeout_ms", self.call_timeout_ms),
                ("connect_timeout_ms", self.connect_timeout_ms),
                ("idle_timeout_ms", self.idle_timeout_ms),
                ("max_result_bytes", self.max_result_bytes as u64),
                ("max_sessions", self.max_sessions as u64),
            ],
        )?;
        cidrs("mcp_bridge", "private_exempt", &self.private_exempt)
    }
}
