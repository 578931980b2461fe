//! Opaque API tokens (`wft_…`) where they arrive: the bearer token of a request
//! (`weft_auth::bearer_token`: `Authorization: Bearer …`, else `x-api-key`) and the UI session
//! cookie (`session::cookie`). Input: a selector byte (which headers are sent), then up to three
//! values split by `\n`: `Authorization`, `x-api-key`, `Cookie`. Beyond "no panic": a token
//! found is non-empty, trimmed, and part of the header it came from (`x-api-key` only without an
//! `Authorization`); a cookie found is non-empty, trimmed and named once; a minted token has its
//! documented shape, hashes to its hash, and is found again in either header and in any case of
//! `Bearer`.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::header::{AUTHORIZATION, COOKIE};
use http::{HeaderMap, HeaderValue};
use weft_auth::session::{SESSION_COOKIE, cookie};
use weft_auth::{TOKEN_PREFIX, bearer_token, hash_token, mint_token};

fn header(headers: &mut HeaderMap, name: &'static str, value: &[u8]) {
    if let Ok(v) = HeaderValue::from_bytes(value) {
        headers.append(name, v);
    }
}

fn check_found(headers: &HeaderMap) {
    if let Some(t) = bearer_token(headers) {
        assert!(!t.is_empty() && t.trim() == t, "token {t:?}");
        let source = match headers.get(AUTHORIZATION) {
            Some(v) => v,
            None => match headers.get("x-api-key") {
                Some(v) => v,
                None => panic!("a token without a header"),
            },
        };
        let text = source.to_str().unwrap_or_default();
        assert!(text.contains(t), "{t:?} is not in {text:?}");
        if headers.contains_key(AUTHORIZATION) {
            let (scheme, _) = text.split_once(' ').unwrap_or_default();
            assert!(scheme.eq_ignore_ascii_case("bearer"), "scheme {scheme:?}");
        }
    }
    for name in [SESSION_COOKIE, "x"] {
        if let Some(c) = cookie(headers, name) {
            assert!(!c.is_empty() && c.trim() == c, "cookie {c:?}");
            let pairs = headers
                .get_all(COOKIE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(';'))
                .filter(|p| p.trim().split_once('=').is_some_and(|(k, _)| k == name))
                .count();
            assert_eq!(pairs, 1, "cookie {name} sent {pairs} times was taken");
        }
    }
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    let mut values = rest.split(|&b| b == b'\n');
    let mut headers = HeaderMap::new();
    for (bit, name) in [(1, "authorization"), (2, "x-api-key"), (4, "cookie")] {
        if let Some(v) = values.next()
            && selector & bit != 0
        {
            header(&mut headers, name, v);
        }
    }
    if selector & 8 != 0 {
        // A second Cookie header: the same values again.
        if let Some(v) = headers.get(COOKIE).cloned() {
            headers.append(COOKIE, v);
        }
    }
    check_found(&headers);
    if let Some(t) = bearer_token(&headers) {
        assert_eq!(hash_token(t), hash_token(t));
    }

    // A minted token: `wft_` and the URL-safe base64 of 32 bytes; found in every header.
    let minted = mint_token();
    let secret = minted.secret.as_str();
    let body = secret.strip_prefix(TOKEN_PREFIX).unwrap_or_default();
    assert!(
        matches!(URL_SAFE_NO_PAD.decode(body), Ok(b) if b.len() == 32),
        "{secret:?}"
    );
    assert_eq!(hash_token(secret), minted.hash);
    assert!(secret.starts_with(&minted.prefix) && minted.prefix.len() == 12);
    let scheme = ["Bearer", "bearer", "BEARER", "bEaReR"][usize::from(selector >> 6)];
    for (name, value) in [
        ("authorization", format!("{scheme} {secret}")),
        ("authorization", format!("{scheme}  {secret}\t")),
        ("x-api-key", format!(" {secret} ")),
    ] {
        let mut h = HeaderMap::new();
        header(&mut h, name, value.as_bytes());
        assert_eq!(bearer_token(&h), Some(secret), "{name}: {value:?}");
    }
    let mut h = HeaderMap::new();
    header(
        &mut h,
        "cookie",
        format!("a=1; {SESSION_COOKIE}={secret} ; b").as_bytes(),
    );
    assert_eq!(cookie(&h, SESSION_COOKIE), Some(secret));
}
