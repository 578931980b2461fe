//! Opaque API tokens: `wft_` followed by 43 URL-safe base64 characters (32 random bytes).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore as _;
use sha2::{Digest, Sha256};

/// Every weft API token starts with this.
pub const TOKEN_PREFIX: &str = "wft_";

/// A freshly minted token: the secret (shown once), its hash (stored) and a display prefix.
pub struct MintedToken {
    pub secret: String,
    pub hash: [u8; 32],
    pub prefix: String,
}

impl std::fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MintedToken")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

pub fn mint_token() -> MintedToken {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = hash_token(&secret);
    let prefix = secret.chars().take(12).collect();
    MintedToken {
        secret,
        hash,
        prefix,
    }
}

/// SHA-256 of the whole token string.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_are_unique_prefixed_and_hash_to_themselves() {
        let a = mint_token();
        let b = mint_token();
        assert!(a.secret.starts_with("wft_"));
        assert_eq!(a.secret.len(), 4 + 43);
        assert_ne!(a.secret, b.secret);
        assert_eq!(hash_token(&a.secret), a.hash);
        assert!(a.secret.starts_with(&a.prefix));
        assert!(!format!("{a:?}").contains(&a.secret));
    }
}
