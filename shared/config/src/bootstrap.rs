//! `[bootstrap]`: what `weft up` keeps between starts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootstrapConfig {
    /// Where `weft up` keeps the bootstrap admin token it minted (mode 0600).
    pub token_file: PathBuf,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        Self {
            token_file: PathBuf::from(".weft/admin-token"),
        }
    }
}
