//! `[mcp]`: weft's own MCP server face at `<gateway>/mcp`.

use serde::{Deserialize, Serialize};

use crate::check::{Checked, invalid};

/// weft's own MCP server face, at `<gateway>/mcp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerFaceConfig {
    pub enabled: bool,
    /// `Host` values accepted (DNS-rebinding guard); empty = any. Default: loopback names only.
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted; empty = the gateway's own. A request without `Origin` passes.
    pub allowed_origins: Vec<String>,
    /// How long a 2025-11-25 session is kept in the database after it was opened, in seconds.
    pub session_ttl_secs: u64,
    /// Live sessions per principal per replica; an `initialize` past it is a 429.
    pub max_sessions_per_principal: usize,
    /// Live sessions per replica across principals; an `initialize` past it is a 429.
    pub max_sessions: usize,
    /// A session unused for this long ends on its replica, in seconds.
    pub session_idle_secs: u64,
}

impl Default for McpServerFaceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: Vec::new(),
            session_ttl_secs: 24 * 3600,
            max_sessions_per_principal: 16,
            max_sessions: 1024,
            session_idle_secs: 300,
        }
    }
}

impl McpServerFaceConfig {
    /// Refuses session limits and an idle timeout of 0.
    pub fn validate(&self) -> Checked {
        if self.max_sessions_per_principal == 0 || self.max_sessions == 0 {
            return invalid(format!(
                "mcp.max_sessions_per_principal and mcp.max_sessions must be at least 1, got {} and {}",
                self.max_sessions_per_principal, self.max_sessions
            ));
        }
        if self.session_idle_secs == 0 {
            return invalid("mcp.session_idle_secs must be at least 1, got 0");
        }
        Ok(())
    }
}
