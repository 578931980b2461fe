//! Internal JWTs (`weft_auth::InternalJwt`, HS256): what every internal service believes about
//! its caller. The first byte picks the input's meaning:
//! - 0: a token, as sent in `authorization: Bearer …` to a gRPC service (`JwtInterceptor`);
//! - 1: a header and claims (split by `\0`), signed here with the service key, so that the
//!   claims checks behind the signature are reached;
//! - 2: a principal (tenant, subject, token id split by `\n`; the selector's high bits are the
//!   scopes), signed by `InternalJwt::sign`.
//!
//! Beyond "no panic": nothing verifies unless it carries a valid HMAC-SHA256 under the key
//! (checked here independently), names `HS256`, and has the audience, issuer and a live expiry;
//! what verifies under another key is signed with that key, and not under the service's; the interceptor and `verify` agree; a verified token
//! carries exactly its claims, and a minted token verifies to the principal it was minted for;
//! and no one-byte change (substitution, deletion, insertion) of a token that verifies does.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use serde_json::Value;
use sha2::Sha256;
use tonic::service::Interceptor as _;
use weft_auth::{InternalJwt, JWT_AUDIENCE, JwtInterceptor};
use weft_core::{Principal, Scope, Scopes, TenantId};

/// The key of the services under test (the unit tests' key) and another one.
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
const OTHER_KEY: &[u8] = b"ffffffffffffffffffffffffffffffff";
const ISSUER: &str = "weft-gateway";
const LEEWAY: u64 = 5;

fn mac(message: &[u8], key: &[u8]) -> Vec<u8> {
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(message);
            m.finalize().into_bytes().to_vec()
        }
        Err(e) => panic!("hmac key: {e}"),
    }
}

/// `header.claims.signature` with the signature made under `key`.
fn sign_raw(header: &[u8], claims: &[u8], key: &[u8]) -> String {
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let sig = URL_SAFE_NO_PAD.encode(mac(message.as_bytes(), key));
    format!("{message}.{sig}")
}

/// Whether the last segment of `token` is the HMAC-SHA256 under `key` of the rest.
fn signed_with(token: &str, key: &[u8]) -> bool {
    token.rsplit_once('.').is_some_and(|(message, sig)| {
        URL_SAFE_NO_PAD
            .decode(sig)
            .is_ok_and(|sig| sig == mac(message.as_bytes(), key))
    })
}

fn part(segment: &str) -> Option<Value> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).ok()?).ok()
}

/// A claim that names `want`: the string, or an array holding it.
fn names(claim: &Value, want: &str) -> bool {
    match claim {
        Value::String(s) => s == want,
        Value::Array(items) => items.iter().any(|i| i.as_str() == Some(want)),
        _ => false,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a verified token must be, checked without jsonwebtoken: signed under the key, `HS256`,
/// for weft's audience from its issuer, live, and carrying exactly the principal `p`.
fn check_genuine(token: &str, p: &Principal) {
    let segments: Vec<&str> = token.split('.').collect();
    let [h, c, _] = segments[..] else {
        panic!("a token of {} segments verified", segments.len());
    };
    assert!(
        signed_with(token, KEY),
        "a token verified without a valid signature: {token}"
    );
    let header = part(h).unwrap_or_default();
    assert_eq!(
        header["alg"], "HS256",
        "a token verified with header {header}"
    );
    let claims = part(c).unwrap_or_default();
    assert!(
        names(&claims["aud"], JWT_AUDIENCE),
        "audience {}",
        claims["aud"]
    );
    assert!(names(&claims["iss"], ISSUER), "issuer {}", claims["iss"]);
    let exp = claims["exp"].as_f64().unwrap_or(0.0);
    assert!(exp + LEEWAY as f64 >= now() as f64, "expired at {exp}");
    assert_eq!(claims["sub"].as_str(), Some(p.subject.as_str()));
    assert_eq!(claims["tenant"].as_str(), Some(p.tenant.as_str()));
    assert_eq!(claims["tid"].as_str(), p.token_id.as_deref());
    let scopes: Option<Vec<Scope>> = serde_json::from_value(claims["scopes"].clone()).ok();
    assert_eq!(scopes.map(Scopes::new).as_ref(), Some(&p.scopes));
}

/// The positions to change: all of a short token; of a long one its ends, the dots and a
/// sample.
fn positions(len: usize, token: &str) -> Vec<usize> {
    if len <= 256 {
        return (0..len).collect();
    }
    let mut at: Vec<usize> = (0..16).chain(len - 16..len).collect();
    for (i, _) in token.match_indices('.') {
        at.extend(i.saturating_sub(2)..(i + 3).min(len));
    }
    at.extend((0..64).map(|k| k * len / 64));
    at.sort_unstable();
    at.dedup();
    at
}

/// No one-byte change of `token` (which verifies) verifies.
fn check_one_byte_changes(jwt: &InternalJwt, token: &str, salt: u8) {
    const OTHER: &[u8] = b"Aa0-_.=+/ ";
    let bytes = token.as_bytes();
    let refuse = |changed: Vec<u8>, what: &str, i: usize| {
        let Ok(text) = String::from_utf8(changed) else {
            return;
        };
        if text != token {
            assert!(
                jwt.verify(&text).is_err(),
                "{what} at {i} still verifies: {text}"
            );
        }
    };
    for i in positions(bytes.len(), token) {
        let b = bytes[i];
        for sub in [b ^ 1, OTHER[(i + usize::from(salt)) % OTHER.len()]] {
            if sub != b && sub.is_ascii() {
                let mut changed = bytes.to_vec();
                changed[i] = sub;
                refuse(changed, "a substitution", i);
            }
        }
        let mut deleted = bytes.to_vec();
        deleted.remove(i);
        refuse(deleted, "a deletion", i);
        let mut inserted = bytes.to_vec();
        inserted.insert(i, OTHER[usize::from(salt) % OTHER.len()]);
        refuse(inserted, "an insertion", i);
    }
}

/// Verifies `token` every way a service can; the principal when it verifies.
fn verify(jwt: &InternalJwt, token: &str) -> Option<Principal> {
    let result = jwt.verify(token);
    if let Err(e) = &result {
        assert_eq!(e.code.http_status(), 401, "{}", e.message);
    }
    if InternalJwt::new(OTHER_KEY, Duration::from_secs(60))
        .verify(token)
        .is_ok()
    {
        assert!(
            signed_with(token, OTHER_KEY),
            "a token verified under another key: {token}"
        );
        assert!(result.is_err(), "a token verified under two keys: {token}");
    }
    if let Ok(v) = tonic::metadata::MetadataValue::try_from(format!("Bearer {token}")) {
        let mut req = tonic::Request::new(());
        req.metadata_mut().insert("authorization", v);
        let through = JwtInterceptor::new(jwt.clone()).call(req);
        assert_eq!(
            through
                .as_ref()
                .ok()
                .and_then(|r| r.extensions().get::<Principal>()),
            result.as_ref().ok(),
            "the interceptor and verify disagree"
        );
    }
    let p = result.ok()?;
    check_genuine(token, &p);
    Some(p)
}

fn scopes(bits: u8) -> Scopes {
    Scopes::new(
        Scope::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << (i % 8)) != 0)
            .map(|(_, s)| s),
    )
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    let jwt = InternalJwt::new(KEY, Duration::from_secs(60));
    match selector % 3 {
        0 => {
            let Ok(token) = std::str::from_utf8(rest) else {
                return;
            };
            if verify(&jwt, token).is_some() {
                check_one_byte_changes(&jwt, token, *selector);
            }
        }
        1 => {
            let (header, claims) = match rest.iter().position(|&b| b == 0) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (&b"{\"alg\":\"HS256\",\"typ\":\"JWT\"}"[..], rest),
            };
            let token = sign_raw(header, claims, KEY);
            if let Some(p) = verify(&jwt, &token) {
                check_one_byte_changes(&jwt, &token, *selector);
                // What the service read, signed again, reads the same.
                match jwt.sign(&p) {
                    Ok(again) => assert_eq!(verify(&jwt, &again).as_ref(), Some(&p)),
                    Err(e) => panic!("a verified principal does not sign: {}", e.message),
                }
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let mut fields = text.splitn(3, '\n');
            let (Some(tenant), subject, tid) = (fields.next(), fields.next(), fields.next()) else {
                return;
            };
            let Ok(tenant) = TenantId::parse(tenant) else {
                return;
            };
            let p = Principal {
                tenant,
                subject: subject.unwrap_or_default().to_owned(),
                scopes: scopes(selector / 3),
                token_id: tid.map(str::to_owned),
                agent: None,
            };
            let token = match jwt.sign(&p) {
                Ok(t) => t,
                Err(e) => panic!("signing failed: {}", e.message),
            };
            assert_eq!(
                verify(&jwt, &token).as_ref(),
                Some(&p),
                "a minted token does not round-trip"
            );
            assert_eq!(
                jwt.sign(&p).ok().as_deref(),
                Some(token.as_str()),
                "not reused"
            );
            check_one_byte_changes(&jwt, &token, *selector);
        }
    }
}
