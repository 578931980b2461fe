//! `[auth]`: the key of internal JWTs.

use serde::{Deserialize, Serialize};

use crate::Secret;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HMAC key of internal JWTs; required for separate processes, random under `weft up`.
    pub internal_jwt_secret: Option<Secret>,
}
