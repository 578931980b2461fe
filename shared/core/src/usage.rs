//! One model call's usage record: what the router publishes after every call (JetStream) and the
//! usage writer stores in the `usage` table.

use serde::{Deserialize, Serialize};

/// One call, as accounted. `id` is a UUIDv7 chosen by the router; it is the JetStream message
/// id and the table's primary key, so a redelivered record is written once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub id: uuid::Uuid,
    /// When the call finished, in Unix milliseconds.
    pub at_ms: i64,
    pub tenant: String,
    pub subject: String,
    /// The token the caller presented, when the call came from one.
    #[serde(default)]
    pub token_id: Option<String>,
    /// `chat` or `embed`.
    pub kind: String,
    /// The provider and model that served the call.
    pub provider: String,
    pub model: String,
    /// What the caller asked for (a model, an alias or a tier).
    pub requested_model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// From the router's call to the upstream until the answer ended.
    pub latency_ms: u64,
    /// From the price table in config; 0 when the model has no price.
    pub cost_usd: f64,
    /// `ok`, or the weft error code that ended the call after the upstream accepted it.
    pub outcome: String,
}
