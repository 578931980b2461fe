//! `[nats]`: JetStream run dispatch and live events.

use serde::{Deserialize, Serialize};

use crate::check::{Checked, name_prefix};

/// NATS with JetStream: run dispatch and live events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    pub url: String,
    /// Prefix of every subject, stream and consumer name (fleets and tests share a server).
    pub prefix: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            prefix: "weft".into(),
        }
    }
}

impl NatsConfig {
    /// Refuses a prefix that is not a plain name.
    pub fn validate(&self) -> Checked {
        name_prefix("nats", &self.prefix)
    }
}
