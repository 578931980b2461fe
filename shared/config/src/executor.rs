//! `[executor]`: the run-executor pool and its HTTP tool.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, at_least_one, cidrs, invalid};

/// The run-executor pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorConfig {
    /// Whether `weft up` runs an executor (false when separate `weft-executor` processes do).
    pub embedded: bool,
    /// With `embedded`: hand new runs to this executor in memory and stream their events from
    /// memory (docs/runs.md, "The in-process fast path"). False: everything through JetStream.
    pub local_fast_path: bool,
    /// The router's gRPC URL; ignored by `weft up`, which wires it in-process.
    pub router_url: String,
    /// The substrate's gRPC URL; ignored by `weft up`.
    pub substrate_url: String,
    /// The MCP bridge's gRPC URL; ignored by `weft up`.
    pub mcp_bridge_url: String,
    /// Where the standalone executor serves Prometheus `/metrics`; unset = nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Lease lifetime without a heartbeat, ms; also JetStream's ack wait.
    pub lease_ttl_ms: u64,
    /// How often a held lease is renewed, in milliseconds; well under `lease_ttl_ms`.
    pub heartbeat_ms: u64,
    /// Runs one executor process works on at once.
    pub max_concurrent_runs: usize,
    /// Tool calls of one model turn run at once.
    pub max_parallel_tools: usize,
    /// How long a model turn holds its `provider_chosen` and the last read-only tool result to
    /// commit them with its message, ms; a longer or streaming turn commits them first. 0 = never.
    pub step_hold_ms: u64,
    /// Deepest sub-run nesting allowed (a top-level run has depth 0).
    pub max_depth: u32,
    /// The model, alias or `tier:<name>` that writes compaction summaries when a run's
    /// `compaction.model` is unset (a cheap tier is a good choice); empty = the run's own model.
    pub compaction_model: String,
    /// Deliveries of a dispatch message, and executor losses of a run, before it is given up.
    pub max_deliver: i64,
    /// How often this executor looks for runs nothing is working on, in milliseconds.
    pub sweep_interval_ms: u64,
    /// How long a run may sit queued or under a lapsed lease before re-dispatch, ms (doubling).
    pub sweep_after_ms: u64,
    /// Outbound host allowlist for the HTTP tool (`*.example.com`: subdomains); empty = none.
    pub allowed_hosts: Vec<String>,
    /// Largest HTTP tool response body kept, in bytes.
    pub http_max_bytes: usize,
    pub http_timeout_ms: u64,
    /// CIDRs the HTTP tool may reach although non-public; the host allowlist still applies.
    /// A2A peers and hook receivers are dialled under the same exemptions.
    pub http_private_exempt: Vec<String>,
    /// Required prefix of a hook's `secret_env` (a tenant cannot name other secrets): a tenant's
    /// hook secrets are `<prefix><TENANT>__<NAME>`, set on every executor.
    pub hook_secret_env_prefix: String,
    /// How long an executor keeps a tenant's list of hooks before reading it again, ms; a new
    /// or changed hook applies to tool calls made at most this much later. 0 = read it for
    /// every turn's tool calls.
    pub hooks_cache_ms: u64,
    /// How long a paused run's tool calls under way may go on before they are abandoned and the
    /// run parks, ms (an effectful one's outcome is then unknown to the resumed run).
    pub pause_grace_ms: u64,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            embedded: true,
            local_fast_path: true,
            router_url: "http://127.0.0.1:8788".into(),
            substrate_url: "http://127.0.0.1:8789".into(),
            mcp_bridge_url: "http://127.0.0.1:8790".into(),
            metrics_listen: None,
            lease_ttl_ms: 15_000,
            heartbeat_ms: 3_000,
            max_concurrent_runs: 256,
            max_parallel_tools: 8,
            step_hold_ms: 50,
            max_depth: 4,
            compaction_model: String::new(),
            max_deliver: 20,
            sweep_interval_ms: 5_000,
            sweep_after_ms: 30_000,
            allowed_hosts: Vec::new(),
            http_max_bytes: 1024 * 1024,
            http_timeout_ms: 10_000,
            http_private_exempt: Vec::new(),
            hook_secret_env_prefix: "WEFT_HOOK_".into(),
            hooks_cache_ms: 1_000,
            pause_grace_ms: 30_000,
        }
    }
}

impl ExecutorConfig {
    /// Checks the lease timing, pool sizes, redelivery, sweeps and the HTTP tool's exemptions.
    pub fn validate(&self) -> Checked {
        if self.heartbeat_ms == 0 || self.heartbeat_ms.saturating_mul(2) > self.lease_ttl_ms {
            return invalid(format!(
                "executor.heartbeat_ms must be positive and at most half of executor.lease_ttl_ms ({}), got {}",
                self.lease_ttl_ms, self.heartbeat_ms
            ));
        }
        at_least_one(
            "executor",
            [
                ("max_concurrent_runs", self.max_concurrent_runs as u64),
                ("max_parallel_tools", self.max_parallel_tools as u64),
            ],
        )?;
        if self.max_deliver < 2 {
            return invalid(format!(
                "executor.max_deliver must be at least 2 so a crashed executor's runs are redelivered, got {}",
                self.max_deliver
            ));
        }
        if self.sweep_interval_ms < 100 || self.sweep_after_ms < 1_000 {
            return invalid(format!(
                "executor.sweep_interval_ms must be at least 100 and executor.sweep_after_ms at least 1000, got {} and {}",
                self.sweep_interval_ms, self.sweep_after_ms
            ));
        }
        if self.step_hold_ms > 10_000 {
            return invalid(format!(
                "executor.step_hold_ms must be at most 10000 (a watcher learns the provider of a turn, or a tool's result, this late at worst), got {}",
                self.step_hold_ms
            ));
        }
        if self.pause_grace_ms > 3_600_000 {
            return invalid(format!(
                "executor.pause_grace_ms must be at most 3600000 (a drain waits this long for a tool call at worst), got {}",
                self.pause_grace_ms
            ));
        }
        if self.hooks_cache_ms > 60_000 {
            return invalid(format!(
                "executor.hooks_cache_ms must be at most 60000 (a changed hook applies this late at worst), got {}",
                self.hooks_cache_ms
            ));
        }
        let p = self.hook_secret_env_prefix.as_bytes();
        if p.is_empty()
            || p.len() > 64
            || !p[0].is_ascii_uppercase()
            || !p
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
        {
            return invalid(format!(
                "executor.hook_secret_env_prefix must be 1-64 characters of A-Z, 0-9 and '_', starting with a letter (e.g. WEFT_HOOK_), got `{}`",
                self.hook_secret_env_prefix.escape_default()
            ));
        }
        cidrs("executor", "http_private_exempt", &self.http_private_exempt)
    }
}
