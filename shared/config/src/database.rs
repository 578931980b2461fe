//! `[database]`: Postgres.

use serde::{Deserialize, Serialize};

use crate::Secret;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    pub url: Secret,
    pub max_connections: u32,
    pub migrate_on_start: bool,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("postgres://postgres@127.0.0.1:5432/weft"),
            max_connections: 16,
            migrate_on_start: true,
        }
    }
}
