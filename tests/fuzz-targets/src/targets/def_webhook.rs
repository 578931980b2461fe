//! Webhook definitions and their deliveries. Input: a selector byte, a `PUT /v1/webhooks/{name}`
//! body, then `\0` and a delivery's body (JSON, or a form when the selector's low bit is set:
//! `weft_ingress::webhooks::parse_payload`), mapped by the definition when it is accepted.
//! Beyond "no panic" ([`crate::defs`]): refusals are 4xx naming the field, the gateway hop
//! changes nothing, accepted content is storable and has a stable content address; an accepted
//! definition has exactly one target, a mapping, and header names the receiver can look up; a
//! delivery it refuses is the sender's fault (4xx); a mapped `user` is at most 256 bytes, and an
//! unmapped `input` is the whole payload.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use crate::defs;
use http::{HeaderMap, HeaderName, HeaderValue};
use weft_core::webhook::{WebhookContent, limits};
use weft_ingress::webhooks::parse_payload;

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    let (body, delivery) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(if selector & 1 == 1 {
            "application/x-www-form-urlencoded"
        } else {
            "application/json"
        }),
    );
    let payload = parse_payload(&headers, delivery);
    if let Err(e) = &payload {
        defs::assert_4xx("parse_payload", e);
    }

    let Some(def) = defs::check_body::<WebhookContent>(body) else {
        return;
    };
    assert!(def.target().is_some(), "an accepted webhook has no target");
    let mapping = match def.mapping() {
        Ok(m) => m,
        Err(e) => panic!(
            "an accepted webhook's mapping does not parse: {}",
            e.message
        ),
    };
    assert!(HeaderName::from_bytes(def.effective_header().as_bytes()).is_ok());
    if let Some(h) = def.effective_delivery_id_header() {
        assert!(
            HeaderName::from_bytes(h.as_bytes()).is_ok(),
            "delivery id header {h:?}"
        );
    }
    assert!((1..=limits::MAX_BODY_BYTES).contains(&def.effective_max_body_bytes()));
    assert!((1..=limits::TOLERANCE_SECS).contains(&def.effective_tolerance_secs()));
    assert!((1..=limits::SYNC_TIMEOUT_MS).contains(&def.effective_sync_timeout_ms()));

    let Ok(payload) = payload else {
        return;
    };
    if let Ok(mapped) = mapping.apply(&payload) {
        assert!(
            mapped
                .user
                .as_ref()
                .is_none_or(|u| !u.is_empty() && u.len() <= limits::USER_BYTES)
        );
        if mapping.input.is_none() {
            assert_eq!(mapped.input, payload.to_string());
        }
        assert!(
            mapped
                .metadata
                .keys()
                .all(|k| mapping.metadata.contains_key(k))
        );
    }
}
