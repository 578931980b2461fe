//! `[redis]`: cancel flags, fairness leases and quotas.

use serde::{Deserialize, Serialize};

use crate::Secret;
use crate::check::{Checked, name_prefix};

/// Redis: cancel flags, fairness leases, quotas (used by later services; `weft doctor` checks it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    pub url: Secret,
    /// Prefix of every key and channel, so fleets (and tests) can share one Redis.
    pub prefix: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("redis://127.0.0.1:6379"),
            prefix: "weft".into(),
        }
    }
}

impl RedisConfig {
    /// Refuses a prefix that is not a plain name.
    pub fn validate(&self) -> Checked {
        name_prefix("redis", &self.prefix)
    }
}
