//! Inbound webhook signatures on hostile headers: every header parser of
//! `weft_ingress::verify` on each value, then `verify` for every scheme with the values in that
//! scheme's headers, under several secrets and clocks. Input: a selector byte (low two bits: the
//! clock; the rest: which header the first value goes to), up to four header values separated by
//! `\n`, then `\0` and the body. Beyond "no panic": what `sign` makes for the body verifies, and
//! the same headers on a changed body do not.
#![expect(
    clippy::panic,
    reason = "fuzz targets are test code: a panic is how they report a broken property"
)]

use http::{HeaderMap, HeaderName, HeaderValue};
use weft_core::webhook::{SignatureScheme, WebhookContent};
use weft_ingress::verify::{self, Rejection};

/// The secrets of the published vectors (Standard Webhooks, GitHub, Slack) and of the Stripe
/// test vector, so seeds built from them verify; and one Standard Webhooks cannot decode.
const SECRETS: [&str; 5] = [
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "It's a Secret to Everybody",
    "8f742231b10e8888abcd99yyyzzz85a5",
    "whsec_weft_stripe_test_secret",
    "whsec_!!",
];

/// The clocks: the vectors' timestamps, and the extremes.
const NOW: [i64; 4] = [1_614_265_330, 1_531_420_618, 1_700_000_000, i64::MIN];

fn header_names(scheme: SignatureScheme) -> &'static [&'static str] {
    match scheme {
        SignatureScheme::StandardWebhooks => {
            &["webhook-id", "webhook-timestamp", "webhook-signature"]
        }
        SignatureScheme::Github => &["x-hub-signature-256", "x-github-delivery"],
        SignatureScheme::Stripe => &["stripe-signature"],
        SignatureScheme::Slack => &["x-slack-request-timestamp", "x-slack-signature"],
        SignatureScheme::HmacSha256 => &["x-signature", "x-delivery"],
    }
}

fn parse_everything(text: &str) {
    let _ = verify::parse_timestamp(text);
    let _ = verify::parse_hex_signature(text);
    let _ = verify::parse_github_signature(text);
    let _ = verify::parse_slack_signature(text);
    let _ = verify::parse_hmac_signature(text);
    if let Ok(tags) = verify::parse_standard_signatures(text) {
        assert!((1..=verify::MAX_SIGNATURES).contains(&tags.len()));
    }
    if let Ok((_, tags)) = verify::parse_stripe_header(text) {
        assert!((1..=verify::MAX_SIGNATURES).contains(&tags.len()));
    }
}

/// One input, as the fuzzer gives it: a panic is a broken property.
pub fn run(data: &[u8]) {
    let [selector, rest @ ..] = data else {
        return;
    };
    let (head, body) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let values: Vec<&[u8]> = head.split(|&b| b == b'\n').take(4).collect();
    for value in &values {
        if let Ok(text) = std::str::from_utf8(value) {
            parse_everything(text);
        }
    }
    let now = NOW[usize::from(selector & 3)];
    let shift = usize::from(selector >> 2);

    for scheme in SignatureScheme::ALL {
        let names = header_names(scheme);
        let mut headers = HeaderMap::new();
        for (i, value) in values.iter().enumerate() {
            let name = names[(i + shift) % names.len()];
            if let Ok(v) = HeaderValue::from_bytes(value) {
                headers.append(HeaderName::from_static(name), v);
            }
        }
        let mut def = WebhookContent {
            signature: scheme,
            ..WebhookContent::default()
        };
        if scheme == SignatureScheme::HmacSha256 {
            def.delivery_id_header = Some("x-delivery".into());
        }
        for secret in SECRETS {
            if let Ok(v) = verify::verify(&def, secret, &headers, body, now) {
                let id_ok = v
                    .delivery_id
                    .as_ref()
                    .is_none_or(|id| !id.is_empty() && id.len() <= verify::MAX_DELIVERY_ID_BYTES);
                assert!(id_ok, "a delivery id out of bounds was accepted");
            }
        }

        // Round trip: what a sender signs verifies; the same headers on another body do not.
        // (Senders sign with a non-negative unix time.)
        let ts = if now >= 0 { now } else { NOW[0] };
        let secret = SECRETS[0];
        let signed = match verify::sign(&def, secret, body, "msg_fuzz", ts) {
            Ok(h) => h,
            Err(e) => panic!("signing failed for {scheme}: {}", e.reason()),
        };
        if let Err(e) = verify::verify(&def, secret, &signed, body, ts) {
            panic!(
                "{scheme}: a signed delivery does not verify: {}",
                e.reason()
            );
        }
        let mut other = body.to_vec();
        other.push(b'!');
        assert_eq!(
            verify::verify(&def, secret, &signed, &other, ts),
            Err(Rejection::NoMatch),
            "{scheme}: a changed body still verifies"
        );
    }

    // A custom signature header named by the input (validation would refuse most of them).
    if let Some(name) = values.get(3).and_then(|v| std::str::from_utf8(v).ok()) {
        let def = WebhookContent {
            header: Some(name.to_owned()),
            delivery_id_header: Some(name.to_owned()),
            ..WebhookContent::default()
        };
        let mut headers = HeaderMap::new();
        if let (Ok(n), Some(Ok(v))) = (
            HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()),
            values.first().map(|v| HeaderValue::from_bytes(v)),
        ) {
            headers.insert(n, v);
        }
        let _ = verify::verify(&def, SECRETS[1], &headers, body, now);
        let _ = verify::sign(&def, SECRETS[1], body, "id", now);
    }
}
