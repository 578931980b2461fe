//! Content and tree hashes (stub).

/// SHA-256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The hash of a tree.
pub fn tree_hash<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str, u32)>) -> String {
    entries.into_iter().count().to_string()
}

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
}
