//! Content and tree hashes. A file's content is addressed by its SHA-256 ([`sha256_hex`], 64
//! lowercase hex digits, the value of `If-Match` and of a changelog's before/after); a volume
//! version is the hash of its index ([`tree_hash`]): one line `<mode in octal> <sha256> <path>\n`
//! per file, sorted by path bytes, hashed with SHA-256 and written `sha256:<hex>`. Paths are
//! clean ([`crate::path::clean`] refuses newlines), so the lines cannot be read two ways.

use sha2::{Digest, Sha256};

/// The tree hash of an empty volume (SHA-256 of no bytes).
pub const EMPTY_TREE_HASH: &str =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// SHA-256 of `bytes` as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The hash of a tree of `(path, sha256 hex, mode)` entries, `sha256:<hex>`; the order of the
/// entries does not matter.
pub fn tree_hash<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str, u32)>) -> String {
    let mut entries: Vec<(&str, &str, u32)> = entries.into_iter().collect();
    // by path bytes first; the rest only orders duplicates, which a real index never has
    entries.sort_unstable();
    let mut hasher = Sha256::new();
    for (path, sha, mode) in entries {
        hasher.update(format!("{mode:o} {sha} {path}\n").as_bytes());
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

/// Whether `s` is a SHA-256 as [`sha256_hex`] writes it: 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_inputs() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&sha256_hex(b"x")));
    }

    #[test]
    fn sha256_hex_is_recognized_strictly() {
        assert!(!is_sha256_hex(""));
        assert!(!is_sha256_hex(&"A".repeat(64)));
        assert!(!is_sha256_hex(&"a".repeat(63)));
        assert!(!is_sha256_hex(&"g".repeat(64)));
        assert!(is_sha256_hex(&"0".repeat(64)));
    }

    #[test]
    fn tree_hash_ignores_input_order_and_sees_every_field() {
        let a = sha256_hex(b"a");
        let b = sha256_hex(b"b");
        let one = tree_hash([("x/a.txt", a.as_str(), 0o644), ("b.txt", b.as_str(), 0o755)]);
        let two = tree_hash([("b.txt", b.as_str(), 0o755), ("x/a.txt", a.as_str(), 0o644)]);
        assert_eq!(one, two);
        assert!(one.starts_with("sha256:") && is_sha256_hex(&one[7..]));
        // a different mode, sha or path gives a different hash
        assert_ne!(
            one,
            tree_hash([("x/a.txt", a.as_str(), 0o644), ("b.txt", b.as_str(), 0o644)])
        );
        assert_ne!(
            one,
            tree_hash([("x/a.txt", b.as_str(), 0o644), ("b.txt", b.as_str(), 0o755)])
        );
        assert_ne!(
            one,
            tree_hash([("x/a.txt", a.as_str(), 0o644), ("c.txt", b.as_str(), 0o755)])
        );
    }

    #[test]
    fn tree_hash_is_over_the_documented_lines() {
        let a = sha256_hex(b"a");
        let expected = format!(
            "sha256:{}",
            sha256_hex(format!("644 {a} a\n755 {a} b\n").as_bytes())
        );
        assert_eq!(
            tree_hash([("b", a.as_str(), 493), ("a", a.as_str(), 420)]),
            expected
        );
    }

    #[test]
    fn the_empty_tree_has_a_fixed_hash() {
        assert_eq!(tree_hash(std::iter::empty()), EMPTY_TREE_HASH);
    }
}
