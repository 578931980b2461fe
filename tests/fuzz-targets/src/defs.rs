//! What every kind of definition promises (`weft_core::def`), checked on one definition body:
//! the gateway's decoding of `PUT /v1/<kind>s/{name}` and the substrate's reading of the
//! `content_json` it forwards, then validation and the content address.

use std::fmt::Debug;

use serde_json::Value;
use weft_core::Error;
use weft_core::agent::{normalize_hash, sha256_ref};
use weft_core::def::DefContent;

/// The body of a `PUT` through both hops, as a definition of kind `C`:
/// - the gateway's native decoding (`extract::parse_native`: JSON, no NUL) refuses with a 4xx;
///   what it refuses is still checked as the substrate's boot path reads it (the config file);
/// - the substrate reads what the gateway forwards (the body re-serialised) exactly as it reads
///   the raw text: the hop changes nothing;
/// - every refusal, reading or validating, is a 4xx, and a validation error names its field;
/// - an accepted definition is storable (no U+0000 anywhere: Postgres refuses it), its
///   canonical JSON is sorted and reads back to the same content with the same hash, and its
///   plain serialisation reads back equal too.
///
/// Returns the validated content, for the kind's own checks.
pub fn check_body<C>(body: &[u8]) -> Option<C>
where
    C: DefContent + PartialEq + Debug,
{
    let direct = std::str::from_utf8(body).ok().map(C::from_json_str);
    let forwarded = match weft_gateway::extract::parse_native::<Value>(body) {
        Ok(v) => v.to_string(),
        Err(e) => {
            assert_4xx("the gateway", &e);
            // What the API refuses may still come from the config file (the substrate's boot
            // path reads and puts it without the gateway): validation must hold it to the
            // store's rules on its own.
            return direct.and_then(check_content);
        }
    };
    let read = C::from_json_str(&forwarded);
    if let Some(direct) = &direct {
        match (direct, &read) {
            (Ok(a), Ok(b)) => assert!(a == b, "the gateway hop changed the definition"),
            (Err(a), Err(b)) => {
                assert!(a.message == b.message, "the gateway hop changed the error")
            }
            (a, b) => panic!("the gateway hop changed the outcome: {a:?} / {b:?}"),
        }
    }
    check_content(read)
}

/// The substrate's side of [`check_body`]: `content` as read from `content_json`.
pub fn check_content<C>(read: Result<C, Error>) -> Option<C>
where
    C: DefContent + PartialEq + Debug,
{
    let content = match read {
        Ok(c) => c,
        Err(e) => {
            assert_4xx("reading", &e);
            return None;
        }
    };
    if let Err(e) = content.validate() {
        assert_4xx("validation", &e);
        assert!(
            e.param.is_some(),
            "a validation error names no field: {}",
            e.message
        );
        return None;
    }
    check_valid(&content);
    Some(content)
}

/// The promises of validated content: storable, and a stable content address.
pub fn check_valid<C>(content: &C)
where
    C: DefContent + PartialEq + Debug,
{
    let canonical = content.canonical_json();
    let value: Value = match serde_json::from_str(&canonical) {
        Ok(v) => v,
        Err(e) => panic!("the canonical JSON is not JSON: {e}"),
    };
    if let Some(path) = weft_core::storable::nul_path(&value) {
        panic!("validated content holds U+0000 at `{path}`: the store refuses it");
    }
    assert_eq!(
        weft_core::def::canonical_json(&value),
        canonical,
        "the canonical JSON is not canonical (sorted, compact)"
    );
    let hash = content.hash();
    assert_eq!(hash, sha256_ref(&canonical));
    assert_eq!(normalize_hash(&hash).as_deref(), Some(hash.as_str()));

    let back = match C::from_json_str(&canonical) {
        Ok(b) => b,
        Err(e) => panic!("the canonical JSON does not read back: {}", e.message),
    };
    assert!(
        &back == content,
        "the canonical JSON reads back different content"
    );
    assert!(
        back.validate().is_ok(),
        "content read back no longer validates"
    );
    assert_eq!(back.canonical_json(), canonical, "the hash is not stable");

    let plain = match serde_json::to_string(content) {
        Ok(p) => p,
        Err(e) => panic!("content does not serialise: {e}"),
    };
    match C::from_json_str(&plain) {
        Ok(b) => assert!(
            &b == content,
            "the plain serialisation reads back different content"
        ),
        Err(e) => panic!("the plain serialisation does not read back: {}", e.message),
    }
}

/// A refusal is the caller's fault.
pub fn assert_4xx(who: &str, e: &Error) {
    let status = e.code.http_status();
    assert!(
        (400..500).contains(&status),
        "{who} refused with {status}: {}",
        e.message
    );
}

/// YAML front matter (without the fences) for the fields of `map`.
pub fn yaml(map: &serde_json::Map<String, Value>) -> String {
    match serde_yaml::to_string(map) {
        Ok(y) => y,
        Err(e) => panic!("content does not serialise to YAML: {e}"),
    }
}

/// A definition written back as markdown (`md`) parses (`parsed`) to the same name and content.
pub fn check_written_back<C: PartialEq + Debug>(
    name: &str,
    content: &C,
    md: &str,
    parsed: Result<(String, C), Error>,
) {
    match parsed {
        Ok((n, c)) => {
            assert_eq!(n, name, "the name changed when written back:\n{md}");
            assert!(
                c == *content,
                "the content changed when written back:\n{md}\n{c:?}\n{content:?}"
            );
        }
        Err(e) => panic!(
            "written back, the definition does not parse: {}\n{md}",
            e.message
        ),
    }
}
