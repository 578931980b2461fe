//! Names, content addresses and JSON wording every definition kind shares (agents, skills, MCP
//! servers, schedules, webhooks), kept apart from any one kind so `def` and the kinds do not
//! import each other.

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The longest definition name.
pub const NAME_CHARS: usize = 64;

/// Whether `name` is a definition name: `[a-z0-9][a-z0-9_-]{0,63}`.
pub(crate) fn is_def_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= NAME_CHARS
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// `sha256:` + the lowercase hex SHA-256 of `text`.
pub fn sha256_ref(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// Normalises a version reference: `sha256:<64 hex>` or bare 64 hex digits, any case, to
/// `sha256:<lowercase hex>`. `None` when it is neither.
pub fn normalize_hash(s: &str) -> Option<String> {
    let s = s.trim();
    let hex_part = match s.get(..7) {
        Some(p) if p.eq_ignore_ascii_case("sha256:") => &s[7..],
        _ => s,
    };
    (hex_part.len() == 64 && hex_part.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| format!("sha256:{}", hex_part.to_ascii_lowercase()))
}

/// The JSON type of `v` as a message names it ("a string", "null", …).
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
