//! `[gateway]`: the HTTP front door.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, invalid};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// The router's gRPC URL; ignored by `weft up`, which wires the router in-process.
    pub router_url: String,
    pub max_body_bytes: usize,
    /// How long a resolved token stays cached. Revocation takes effect within this; at most 1000.
    pub token_cache_ttl_ms: u64,
    /// Deadline for one router call, in seconds.
    pub request_timeout_secs: u64,
    /// The substrate's gRPC URL; ignored by `weft up`, which wires it in-process.
    pub substrate_url: String,
    /// Runs one tenant may have queued or running, sub-runs included; more get 429.
    pub tenant_max_concurrent_runs: u32,
    /// How long an admission slot lasts without being renewed by the executor, in seconds.
    pub admission_lease_secs: u64,
    /// Run streams one principal may hold open per gateway replica; more get 429.
    pub max_streams_per_principal: u32,
    /// Lifetime of a web UI session, in seconds (it also ends with its token).
    pub ui_session_ttl_secs: u64,
    /// Always mark the UI session cookie `Secure` (behind a proxy without `X-Forwarded-Proto`).
    pub ui_cookie_secure: bool,
    /// How long a stored Responses API response (`store`, the default) can be read, deleted
    /// and continued with `previous_response_id`, in seconds.
    pub responses_ttl_secs: u64,
    /// Where the public gRPC API (`weft.public.v1`, with server reflection) listens; unset: off.
    pub grpc_listen: Option<SocketAddr>,
    /// The gateway's URL as clients reach it (`https://weft.example.com`), which the A2A agent
    /// card advertises; unset: `http://` + the `Host` the card was asked for with.
    pub public_url: Option<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            router_url: "http://127.0.0.1:8788".into(),
            max_body_bytes: 4 * 1024 * 1024,
            token_cache_ttl_ms: 1000,
            request_timeout_secs: 600,
            substrate_url: "http://127.0.0.1:8789".into(),
            tenant_max_concurrent_runs: 1000,
            admission_lease_secs: 600,
            max_streams_per_principal: 64,
            ui_session_ttl_secs: 12 * 3600,
            ui_cookie_secure: false,
            grpc_listen: None,
            public_url: None,
            responses_ttl_secs: 30 * 86_400,
        }
    }
}

impl GatewayConfig {
    /// Checks the ranges types cannot express.
    pub fn validate(&self) -> Checked {
        if self.token_cache_ttl_ms > 1000 {
            return invalid(format!(
                "gateway.token_cache_ttl_ms must be at most 1000 so revocation takes effect within 1 s, got {}",
                self.token_cache_ttl_ms
            ));
        }
        if self.max_body_bytes < 1024 {
            return invalid(format!(
                "gateway.max_body_bytes must be at least 1024, got {}",
                self.max_body_bytes
            ));
        }
        if let Some(u) = &self.public_url {
            let ok = url::Url::parse(u).is_ok_and(|p| {
                matches!(p.scheme(), "http" | "https")
                    && p.host().is_some()
                    && p.query().is_none()
                    && p.fragment().is_none()
            });
            if !ok {
                return invalid(format!(
                    "gateway.public_url must be an http(s) URL without a query, such as https://weft.example.com, got `{u}`"
                ));
            }
        }
        if self.max_streams_per_principal == 0 {
            return invalid("gateway.max_streams_per_principal must be at least 1, got 0");
        }
        if !(60..=30 * 86_400).contains(&self.ui_session_ttl_secs) {
            return invalid(format!(
                "gateway.ui_session_ttl_secs must be between 60 and 2592000 (30 days), got {}",
                self.ui_session_ttl_secs
            ));
        }
        if !(60..=365 * 86_400).contains(&self.responses_ttl_secs) {
            return invalid(format!(
                "gateway.responses_ttl_secs must be between 60 and 31536000 (365 days), got {}",
                self.responses_ttl_secs
            ));
        }
        if self.tenant_max_concurrent_runs == 0 {
            return invalid("gateway.tenant_max_concurrent_runs must be at least 1, got 0");
        }
        Ok(())
    }
}
