//! The fixture server's SEP-2322 `requestState`: a JSON payload (which tool, which round, what
//! was answered so far) sealed with HMAC-SHA256 under a key drawn at start-up. The client
//! echoes it back untrusted; a value that fails the check (tampered, forged, from another tool)
//! is refused with `-32602`, which is what the suite's `input-required-result-tampered-state`
//! expects. Integrity only: the payload is readable base64url.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::ErrorData;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// Domain separation: a tag made here is never valid for anything else.
const DOMAIN: &[u8] = b"weft-mcp-conformance/request-state/v1\0";

pub struct Codec {
    key: [u8; 32],
}

impl Codec {
    /// A codec with a fresh random key (states do not survive a restart, which a fixture does
    /// not need).
    pub fn random() -> Self {
        Self {
            key: rand::random(),
        }
    }

    fn tag(&self, body: &[u8]) -> [u8; 32] {
        // HMAC-SHA256 (RFC 2104) over DOMAIN || body.
        let mut block = [0u8; 64];
        block[..32].copy_from_slice(&self.key);
        let ipad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
        let opad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
        let inner = Sha256::new()
            .chain_update(&ipad)
            .chain_update(DOMAIN)
            .chain_update(body)
            .finalize();
        Sha256::new()
            .chain_update(&opad)
            .chain_update(inner)
            .finalize()
            .into()
    }

    /// Seals `data` for round `round` of `tool`.
    pub fn seal(&self, tool: &str, round: u64, data: Value) -> String {
        let body = json!({"tool": tool, "round": round, "data": data}).to_string();
        let tag = self.tag(body.as_bytes());
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(body.as_bytes()),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Opens a state sealed for `tool`: its round and data, or `-32602`.
    pub fn open(&self, tool: &str, sealed: &str) -> Result<(u64, Value), ErrorData> {
        let refuse = || {
            ErrorData::invalid_params(
                "requestState failed integrity verification",
                Some(
                    json!({"reason": "the requestState was not issued by this server for this request"}),
                ),
            )
        };
        let (body, tag) = sealed.split_once('.').ok_or_else(refuse)?;
        let body = URL_SAFE_NO_PAD.decode(body).map_err(|_| refuse())?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| refuse())?;
        let want = self.tag(&body);
        // Constant-time comparison.
        if tag.len() != want.len()
            || tag.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0
        {
            return Err(refuse());
        }
        let v: Value = serde_json::from_slice(&body).map_err(|_| refuse())?;
        if v["tool"] != tool {
            return Err(refuse());
        }
        let round = v["round"].as_u64().ok_or_else(refuse)?;
        Ok((round, v["data"].clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_tampering() {
        let c = Codec::random();
        let s = c.seal("t", 2, json!({"name": "Alice"}));
        assert_eq!(c.open("t", &s).unwrap(), (2, json!({"name": "Alice"})));
        assert!(c.open("t", &format!("{s}-TAMPERED")).is_err());
        assert!(c.open("other", &s).is_err());
        assert!(Codec::random().open("t", &s).is_err());
        assert!(c.open("t", "garbage").is_err());
    }
}
