//! `[ingress]`: the schedule ticker and the webhook receiver (`weft-ingress`, or `weft up`).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The ingress: the schedule ticker and the webhook receiver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngressConfig {
    /// Whether `weft up` runs the scheduler (false when separate `weft-ingress` processes fire).
    pub embedded: bool,
    /// Where `weft-ingress` serves the webhook receiver and `/healthz` (`weft up`: the gateway).
    pub listen: SocketAddr,
    /// The substrate's gRPC URL (definitions, memory, channels); ignored by `weft up`.
    pub substrate_url: String,
    /// How often each replica looks for due schedules, in milliseconds.
    pub tick_ms: u64,
    /// Schedules claimed per transaction.
    pub claim_batch: u32,
    /// Slots one schedule may fire per tick (the rest follow on the next tick).
    pub max_fires_per_tick: u32,
    /// A slot at most this late (ms) always fires; older ones follow the schedule's `catch_up_max`.
    pub misfire_grace_ms: u64,
    /// A claimed fire with no run after this long (ms) is taken over by another replica.
    pub reclaim_after_ms: u64,
    /// Attempts to make a fire's run before it is recorded as failed.
    pub max_fire_attempts: u32,
    /// Runs made at once by one replica.
    pub dispatch_concurrency: usize,
    /// How often stale claims and finished runs' `on_complete` actions are looked for (ms).
    pub sweep_ms: u64,
    /// Accepted webhook delivery ids are remembered (replays answered) for this many days.
    pub delivery_retention_days: u32,
    /// Verdicts kept per webhook for `GET /v1/webhooks/{name}/deliveries`.
    pub triage_keep: u32,
    /// Required prefix of a webhook's `secret_env` (a tenant cannot name other secrets).
    pub secret_env_prefix: String,
    /// The longest a substrate call may take, in seconds.
    pub request_timeout_secs: u64,
}

impl Default for IngressConfig {
    fn default() -> Self {
        Self {
            embedded: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 8791)),
            substrate_url: "http://127.0.0.1:8789".into(),
            tick_ms: 250,
            claim_batch: 64,
            max_fires_per_tick: 10,
            misfire_grace_ms: 5_000,
            reclaim_after_ms: 5_000,
            max_fire_attempts: 10,
            dispatch_concurrency: 32,
            sweep_ms: 1_000,
            delivery_retention_days: 7,
            triage_keep: 50,
            secret_env_prefix: "WEFT_WEBHOOK_".into(),
            request_timeout_secs: 10,
        }
    }
}
