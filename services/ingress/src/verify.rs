//! Verification of an inbound webhook delivery (API.md, "Schedules and webhooks"): the
//! signature is checked over the raw body bytes, before anything parses the body, with the
//! scheme the definition names ([`SignatureScheme`]). Every scheme is HMAC-SHA256; they differ in
//! headers, in what besides the body is signed, in encoding and in key format.
//!
//! Any failure is a [`Rejection`], which the receiver turns into the same opaque 401 whatever
//! the cause: [`Rejection::reason`] is for logs and triage only. Computed tags are compared in
//! constant time, against every candidate signature without stopping at a mismatch, and the
//! work is bounded (header values of at most 8 KiB, at most 16 signatures per header). No input
//! makes this module panic; `fuzz/fuzz_targets/webhook_signature.rs` checks that.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};
use weft_core::webhook::{SignatureScheme, WebhookContent};

/// The most signatures considered in one header (key rotation sends two or three).
pub const MAX_SIGNATURES: usize = 16;
/// The longest header value read; a longer one is [`Rejection::Malformed`].
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// The longest delivery id accepted.
pub const MAX_DELIVERY_ID_BYTES: usize = 256;

/// An HMAC-SHA256 tag.
pub type Tag = [u8; 32];

type HmacSha256 = Hmac<Sha256>;

/// A delivery whose signature checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The delivery id, for dropping replays: from the definition's `delivery_id_header`, else
    /// the scheme's own id header (`webhook-id`, `x-github-delivery`); `None` when absent.
    pub delivery_id: Option<String>,
    /// Whether the signature covers `delivery_id` (Standard Webhooks signs `webhook-id`; every
    /// other id header is not signed, so a replay can change it: the receiver then dedupes by
    /// the body as well).
    pub id_signed: bool,
}

/// Why a delivery was refused. The caller only ever sees a 401; this is for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// A header the scheme needs is absent (its lowercase name).
    MissingHeader(String),
    /// A header is present but not in the scheme's format.
    Malformed(&'static str),
    /// The signed timestamp is further from now than the tolerance, either way.
    Expired,
    /// No signature in the request matches the one computed.
    NoMatch,
    /// The configured secret cannot be used by the scheme (empty, or for Standard Webhooks not
    /// base64): an operator's mistake, not the sender's.
    BadSecret,
}

impl Rejection {
    /// A short, lowercase description for logs and triage; never sent to the caller, and never
    /// holding a secret or a signature.
    pub fn reason(&self) -> String {
        match self {
            Rejection::MissingHeader(h) => format!("missing header `{h}`"),
            Rejection::Malformed(what) => format!("malformed signature headers: {what}"),
            Rejection::Expired => "signed timestamp outside the tolerance".to_owned(),
            Rejection::NoMatch => "no signature matches".to_owned(),
            Rejection::BadSecret => {
                "the configured secret is not usable by this scheme (empty, or not `whsec_` + base64 for standard-webhooks)".to_owned()
            }
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

impl std::error::Error for Rejection {}

/// The one value of header `name`: `None` when absent; [`Rejection::Malformed`] when repeated
/// (which value was signed would be ambiguous), longer than [`MAX_HEADER_BYTES`] or not visible
/// ASCII.
pub fn header_value<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Rejection> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Rejection::Malformed("a signature header is repeated"));
    }
    if value.len() > MAX_HEADER_BYTES {
        return Err(Rejection::Malformed("a header value is longer than 8 KiB"));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| Rejection::Malformed("a header value is not visible ASCII"))
}

fn required<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, Rejection> {
    header_value(headers, name)?.ok_or_else(|| Rejection::MissingHeader(name.to_owned()))
}

/// A unix timestamp in seconds: 1-18 decimal digits, nothing else.
pub fn parse_timestamp(value: &str) -> Result<i64, Rejection> {
    let digits_only = (1..=18).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_digit());
    match value.parse::<i64>() {
        Ok(ts) if digits_only => Ok(ts),
        _ => Err(Rejection::Malformed(
            "the timestamp is not a whole number of seconds",
        )),
    }
}

/// A SHA-256 HMAC as 64 hex digits, either case.
pub fn parse_hex_signature(value: &str) -> Result<Tag, Rejection> {
    let mut tag = [0u8; 32];
    if value.len() != 64 || hex::decode_to_slice(value, &mut tag).is_err() {
        return Err(Rejection::Malformed("a signature is not 64 hex digits"));
    }
    Ok(tag)
}

/// GitHub's `X-Hub-Signature-256: sha256=<hex>`.
pub fn parse_github_signature(value: &str) -> Result<Tag, Rejection> {
    let hex = value
        .strip_prefix("sha256=")
        .ok_or(Rejection::Malformed("x-hub-signature-256 lacks `sha256=`"))?;
    parse_hex_signature(hex)
}

/// Slack's `X-Slack-Signature: v0=<hex>`.
pub fn parse_slack_signature(value: &str) -> Result<Tag, Rejection> {
    let hex = value
        .strip_prefix("v0=")
        .ok_or(Rejection::Malformed("x-slack-signature lacks `v0=`"))?;
    parse_hex_signature(hex)
}

/// A bare `hmac-sha256` signature: `<hex>` or `sha256=<hex>`.
pub fn parse_hmac_signature(value: &str) -> Result<Tag, Rejection> {
    parse_hex_signature(value.strip_prefix("sha256=").unwrap_or(value))
}

/// Standard Webhooks' `webhook-signature`: space-separated `<version>,<base64>` entries. Only
/// `v1` entries are kept (others, such as asymmetric `v1a`, are skipped); at least one and at
/// most [`MAX_SIGNATURES`].
pub fn parse_standard_signatures(value: &str) -> Result<Vec<Tag>, Rejection> {
    let mut tags = Vec::new();
    for entry in value.split(' ').filter(|e| !e.is_empty()) {
        let Some((version, signature)) = entry.split_once(',') else {
            return Err(Rejection::Malformed(
                "a webhook-signature entry is not `<version>,<signature>`",
            ));
        };
        if version != "v1" {
            continue;
        }
        if tags.len() == MAX_SIGNATURES {
            return Err(Rejection::Malformed("more than 16 signatures"));
        }
        let tag = STANDARD
            .decode(signature)
            .ok()
            .and_then(|bytes| Tag::try_from(bytes.as_slice()).ok())
            .ok_or(Rejection::Malformed(
                "a v1 signature is not the base64 of 32 bytes",
            ))?;
        tags.push(tag);
    }
    if tags.is_empty() {
        return Err(Rejection::Malformed(
            "webhook-signature has no v1 signature",
        ));
    }
    Ok(tags)
}

/// Stripe's `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]`: the timestamp and the `v1`
/// signatures (at least one, at most [`MAX_SIGNATURES`]). Other items (`v0=`, future schemes)
/// are skipped, as Stripe's libraries do.
pub fn parse_stripe_header(value: &str) -> Result<(i64, Vec<Tag>), Rejection> {
    let mut timestamp = None;
    let mut tags = Vec::new();
    for item in value.split(',') {
        let Some((key, v)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" if timestamp.is_some() => {
                return Err(Rejection::Malformed("stripe-signature repeats `t=`"));
            }
            "t" => timestamp = Some(parse_timestamp(v)?),
            "v1" if tags.len() == MAX_SIGNATURES => {
                return Err(Rejection::Malformed("more than 16 signatures"));
            }
            "v1" => tags.push(parse_hex_signature(v)?),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(Rejection::Malformed("stripe-signature has no `t=`"))?;
    if tags.is_empty() {
        return Err(Rejection::Malformed("stripe-signature has no `v1=`"));
    }
    Ok((timestamp, tags))
}

/// The HMAC-SHA256 of the concatenation of `parts` under `key`.
fn mac(key: &[u8], parts: &[&[u8]]) -> Result<Tag, Rejection> {
    // HMAC takes keys of any length, so this never fails; the error keeps it panic-free.
    let mut m = HmacSha256::new_from_slice(key).map_err(|_| Rejection::BadSecret)?;
    for part in parts {
        m.update(part);
    }
    Ok(m.finalize().into_bytes().into())
}

/// Whether any candidate equals `expected`, comparing every candidate in constant time and
/// never stopping early.
fn any_matches(expected: &Tag, candidates: &[Tag]) -> bool {
    let mut found = Choice::from(0);
    for candidate in candidates {
        found |= expected[..].ct_eq(&candidate[..]);
    }
    found.into()
}

/// Standard Webhooks' key: the base64 after an optional `whsec_` prefix.
fn standard_key(secret: &str) -> Result<Vec<u8>, Rejection> {
    STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap_or(secret))
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or(Rejection::BadSecret)
}

fn fresh(timestamp: i64, now_unix: i64, tolerance_secs: u32) -> Result<(), Rejection> {
    if now_unix.abs_diff(timestamp) > u64::from(tolerance_secs) {
        return Err(Rejection::Expired);
    }
    Ok(())
}

fn matched(expected: &Tag, candidates: &[Tag]) -> Result<(), Rejection> {
    if any_matches(expected, candidates) {
        Ok(())
    } else {
        Err(Rejection::NoMatch)
    }
}

/// Checks that `body` with `headers` was signed with `secret` as `def` says, at `now_unix`
/// (seconds). The signature is checked before the timestamp, so [`Rejection::Expired`] means a
/// genuine but stale (or early) delivery.
pub fn verify(
    def: &WebhookContent,
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now_unix: i64,
) -> Result<Verified, Rejection> {
    if secret.is_empty() {
        return Err(Rejection::BadSecret);
    }
    let tolerance = def.effective_tolerance_secs();
    let key = secret.as_bytes();
    match def.signature {
        SignatureScheme::StandardWebhooks => {
            let id = required(headers, "webhook-id")?;
            let ts_text = required(headers, "webhook-timestamp")?;
            let ts = parse_timestamp(ts_text)?;
            let tags = parse_standard_signatures(required(headers, "webhook-signature")?)?;
            let key = standard_key(secret)?;
            let expected = mac(&key, &[id.as_bytes(), b".", ts_text.as_bytes(), b".", body])?;
            matched(&expected, &tags)?;
            fresh(ts, now_unix, tolerance)?;
        }
        SignatureScheme::Github => {
            let tag = parse_github_signature(required(headers, "x-hub-signature-256")?)?;
            matched(&mac(key, &[body])?, &[tag])?;
        }
        SignatureScheme::Stripe => {
            let (ts, tags) = parse_stripe_header(required(headers, "stripe-signature")?)?;
            // As Stripe's libraries sign it: the timestamp re-formatted as an integer.
            let expected = mac(key, &[ts.to_string().as_bytes(), b".", body])?;
            matched(&expected, &tags)?;
            fresh(ts, now_unix, tolerance)?;
        }
        SignatureScheme::Slack => {
            let ts_text = required(headers, "x-slack-request-timestamp")?;
            let ts = parse_timestamp(ts_text)?;
            let tag = parse_slack_signature(required(headers, "x-slack-signature")?)?;
            let expected = mac(key, &[b"v0:", ts_text.as_bytes(), b":", body])?;
            matched(&expected, &[tag])?;
            fresh(ts, now_unix, tolerance)?;
        }
        SignatureScheme::HmacSha256 => {
            let tag = parse_hmac_signature(required(headers, &def.effective_header())?)?;
            matched(&mac(key, &[body])?, &[tag])?;
        }
    }
    let delivery_id = delivery_id(def, headers)?;
    let id_signed = delivery_id.is_some()
        && def.signature == SignatureScheme::StandardWebhooks
        && def.effective_delivery_id_header().as_deref() == Some("webhook-id");
    Ok(Verified {
        delivery_id,
        id_signed,
    })
}

fn delivery_id(def: &WebhookContent, headers: &HeaderMap) -> Result<Option<String>, Rejection> {
    let Some(name) = def.effective_delivery_id_header() else {
        return Ok(None);
    };
    match header_value(headers, &name)? {
        None | Some("") => Ok(None),
        Some(id) if id.len() > MAX_DELIVERY_ID_BYTES => Err(Rejection::Malformed(
            "the delivery id is longer than 256 bytes",
        )),
        Some(id) => Ok(Some(id.to_owned())),
    }
}

/// The headers a sender would attach to `body` for `def`, signed with `secret` at `timestamp`
/// with delivery id `id`: what [`verify`] accepts. For tests and for tools that replay a
/// delivery; the receiver never signs.
pub fn sign(
    def: &WebhookContent,
    secret: &str,
    body: &[u8],
    id: &str,
    timestamp: i64,
) -> Result<HeaderMap, Rejection> {
    let key = secret.as_bytes();
    let ts = timestamp.to_string();
    let mut headers = HeaderMap::new();
    let mut put = |name: &str, value: String| -> Result<(), Rejection> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Rejection::Malformed("a header name is not valid"))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|_| Rejection::Malformed("a header value is not valid"))?;
        headers.insert(name, value);
        Ok(())
    };
    match def.signature {
        SignatureScheme::StandardWebhooks => {
            let tag = mac(
                &standard_key(secret)?,
                &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
            )?;
            put("webhook-id", id.to_owned())?;
            put("webhook-timestamp", ts)?;
            put("webhook-signature", format!("v1,{}", STANDARD.encode(tag)))?;
        }
        SignatureScheme::Github => {
            let tag = mac(key, &[body])?;
            put(
                "x-hub-signature-256",
                format!("sha256={}", hex::encode(tag)),
            )?;
            put("x-github-delivery", id.to_owned())?;
        }
        SignatureScheme::Stripe => {
            let tag = mac(key, &[ts.as_bytes(), b".", body])?;
            put(
                "stripe-signature",
                format!("t={ts},v1={}", hex::encode(tag)),
            )?;
        }
        SignatureScheme::Slack => {
            let tag = mac(key, &[b"v0:", ts.as_bytes(), b":", body])?;
            put("x-slack-request-timestamp", ts)?;
            put("x-slack-signature", format!("v0={}", hex::encode(tag)))?;
        }
        SignatureScheme::HmacSha256 => {
            let tag = mac(key, &[body])?;
            put(&def.effective_header(), hex::encode(tag))?;
        }
    }
    if let Some(name) = def.delivery_id_header.as_deref() {
        put(name, id.to_owned())?;
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(scheme: SignatureScheme) -> WebhookContent {
        WebhookContent {
            agent: Some("a".into()),
            signature: scheme,
            secret_env: "S".into(),
            ..WebhookContent::default()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    // Standard Webhooks: the example in the spec
    // (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md).
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TS: i64 = 1_614_265_330;
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn sw_headers(signature: &str) -> HeaderMap {
        headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", signature),
        ])
    }

    // GitHub: docs.github.com, "Validating webhook deliveries", "Testing the webhook payload
    // validation".
    const GH_SECRET: &str = "It's a Secret to Everybody";
    const GH_BODY: &[u8] = b"Hello, World!";
    const GH_SIG: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    // Slack: "Verifying requests from Slack", the worked example (a slash command body).
    const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const SLACK_TS: i64 = 1_531_420_618;
    const SLACK_BODY: &[u8] = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SLACK_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    // Stripe publishes no vector. This one was computed outside Rust, with Python's `hmac` the
    // way stripe-python's `WebhookSignature._compute_signature` does: key =
    // secret.encode("utf-8") (the whole `whsec_…` string, not decoded), message =
    // "%d.%s" % (t, payload).
    const STRIPE_SECRET: &str = "whsec_weft_stripe_test_secret";
    const STRIPE_TS: i64 = 1_700_000_000;
    const STRIPE_BODY: &[u8] = br#"{"id":"evt_1","type":"invoice.paid"}"#;
    const STRIPE_HEX: &str = "306b036d75c05ee29cbae9a3b7b21e36fe03d5755090f317aaf718563e3c24cf";

    fn hex_of(tag: Tag) -> String {
        hex::encode(tag)
    }

    #[test]
    fn standard_webhooks_spec_example_computes_and_verifies() {
        let key = standard_key(SW_SECRET).unwrap();
        let tag = mac(&key, &[SW_ID.as_bytes(), b".1614265330.", SW_BODY]).unwrap();
        assert_eq!(format!("v1,{}", STANDARD.encode(tag)), SW_SIG);

        let d = def(SignatureScheme::StandardWebhooks);
        let v = verify(&d, SW_SECRET, &sw_headers(SW_SIG), SW_BODY, SW_TS).unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some(SW_ID));
        // The key without its `whsec_` prefix is the same key.
        let bare = SW_SECRET.trim_start_matches("whsec_");
        verify(&d, bare, &sw_headers(SW_SIG), SW_BODY, SW_TS).unwrap();
        // What `sign` produces is the published header.
        let signed = sign(&d, SW_SECRET, SW_BODY, SW_ID, SW_TS).unwrap();
        assert_eq!(signed["webhook-signature"], SW_SIG);
    }

    #[test]
    fn github_docs_example_computes_and_verifies() {
        let tag = mac(GH_SECRET.as_bytes(), &[GH_BODY]).unwrap();
        assert_eq!(format!("sha256={}", hex_of(tag)), GH_SIG);

        let d = def(SignatureScheme::Github);
        let h = headers(&[
            ("x-hub-signature-256", GH_SIG),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ]);
        let v = verify(&d, GH_SECRET, &h, GH_BODY, 0).unwrap();
        assert_eq!(
            v.delivery_id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        // No timestamp: any clock will do, and the delivery id is optional.
        let h = headers(&[("X-Hub-Signature-256", GH_SIG)]);
        let v = verify(&d, GH_SECRET, &h, GH_BODY, i64::MAX).unwrap();
        assert_eq!(v.delivery_id, None);
    }

    #[test]
    fn slack_docs_example_computes_and_verifies() {
        let tag = mac(SLACK_SECRET.as_bytes(), &[b"v0:1531420618:", SLACK_BODY]).unwrap();
        assert_eq!(format!("v0={}", hex_of(tag)), SLACK_SIG);

        let d = def(SignatureScheme::Slack);
        let h = headers(&[
            ("x-slack-request-timestamp", "1531420618"),
            ("x-slack-signature", SLACK_SIG),
        ]);
        let v = verify(&d, SLACK_SECRET, &h, SLACK_BODY, SLACK_TS + 60).unwrap();
        assert_eq!(v.delivery_id, None);
        assert_eq!(
            verify(&d, SLACK_SECRET, &h, SLACK_BODY, SLACK_TS + 301),
            Err(Rejection::Expired)
        );
    }

    #[test]
    fn stripe_vector_matches_stripe_pythons_computation() {
        let tag = mac(STRIPE_SECRET.as_bytes(), &[b"1700000000.", STRIPE_BODY]).unwrap();
        assert_eq!(hex_of(tag), STRIPE_HEX);

        let d = def(SignatureScheme::Stripe);
        let value = format!(
            "t=1700000000,v1={STRIPE_HEX},v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
        );
        let h = headers(&[("stripe-signature", &value)]);
        verify(&d, STRIPE_SECRET, &h, STRIPE_BODY, STRIPE_TS).unwrap();
        let signed = sign(&d, STRIPE_SECRET, STRIPE_BODY, "", STRIPE_TS).unwrap();
        assert_eq!(
            signed["stripe-signature"],
            format!("t=1700000000,v1={STRIPE_HEX}").as_str()
        );
        // Stripe's own rotation: the old secret's v1 first, the new one's second.
        let rotated = format!("t=1700000000,v1={},v1={STRIPE_HEX}", "0".repeat(64));
        let h = headers(&[("stripe-signature", &rotated)]);
        verify(&d, STRIPE_SECRET, &h, STRIPE_BODY, STRIPE_TS + 300).unwrap();
        assert_eq!(
            verify(&d, STRIPE_SECRET, &h, STRIPE_BODY, STRIPE_TS - 301),
            Err(Rejection::Expired)
        );
        assert_eq!(
            verify(&d, "whsec_other", &h, STRIPE_BODY, STRIPE_TS),
            Err(Rejection::NoMatch)
        );
    }

    #[test]
    fn hmac_sha256_reads_its_header_with_or_without_a_prefix_in_either_case() {
        let d = def(SignatureScheme::HmacSha256);
        let hex = GH_SIG.trim_start_matches("sha256=");
        for value in [hex.to_owned(), GH_SIG.to_owned(), hex.to_ascii_uppercase()] {
            let h = headers(&[("x-signature", &value)]);
            verify(&d, GH_SECRET, &h, GH_BODY, 0).unwrap();
        }
        let d = WebhookContent {
            header: Some("X-Acme-Sig".into()),
            delivery_id_header: Some("X-Acme-Delivery".into()),
            ..d
        };
        let h = headers(&[("x-acme-sig", hex), ("x-acme-delivery", "d-1")]);
        let v = verify(&d, GH_SECRET, &h, GH_BODY, 0).unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some("d-1"));
        let h = headers(&[("x-signature", hex)]);
        assert_eq!(
            verify(&d, GH_SECRET, &h, GH_BODY, 0),
            Err(Rejection::MissingHeader("x-acme-sig".into()))
        );
    }

    #[test]
    fn a_wrong_secret_or_a_tampered_body_does_not_match() {
        let sw = def(SignatureScheme::StandardWebhooks);
        let other = format!("whsec_{}", STANDARD.encode([7u8; 24]));
        assert_eq!(
            verify(&sw, &other, &sw_headers(SW_SIG), SW_BODY, SW_TS),
            Err(Rejection::NoMatch)
        );
        assert_eq!(
            verify(
                &sw,
                SW_SECRET,
                &sw_headers(SW_SIG),
                br#"{"test": 2432232315}"#,
                SW_TS
            ),
            Err(Rejection::NoMatch)
        );
        // The id and the timestamp are signed too.
        let mut h = sw_headers(SW_SIG);
        h.insert("webhook-id", HeaderValue::from_static("msg_other"));
        assert_eq!(
            verify(&sw, SW_SECRET, &h, SW_BODY, SW_TS),
            Err(Rejection::NoMatch)
        );
        let mut h = sw_headers(SW_SIG);
        h.insert("webhook-timestamp", HeaderValue::from_static("1614265331"));
        assert_eq!(
            verify(&sw, SW_SECRET, &h, SW_BODY, SW_TS),
            Err(Rejection::NoMatch)
        );

        let gh = def(SignatureScheme::Github);
        let h = headers(&[("x-hub-signature-256", GH_SIG)]);
        assert_eq!(
            verify(&gh, "It's a secret to everybody", &h, GH_BODY, 0),
            Err(Rejection::NoMatch)
        );
        assert_eq!(
            verify(&gh, GH_SECRET, &h, b"Hello, World?", 0),
            Err(Rejection::NoMatch)
        );
        assert_eq!(verify(&gh, GH_SECRET, &h, b"", 0), Err(Rejection::NoMatch));

        let slack = def(SignatureScheme::Slack);
        let h = headers(&[
            ("x-slack-request-timestamp", "1531420618"),
            ("x-slack-signature", SLACK_SIG),
        ]);
        let mut body = SLACK_BODY.to_vec();
        body[0] ^= 1;
        assert_eq!(
            verify(&slack, SLACK_SECRET, &h, &body, SLACK_TS),
            Err(Rejection::NoMatch)
        );
    }

    #[test]
    fn missing_headers_are_named() {
        let cases = [
            (SignatureScheme::StandardWebhooks, "webhook-id"),
            (SignatureScheme::Github, "x-hub-signature-256"),
            (SignatureScheme::Stripe, "stripe-signature"),
            (SignatureScheme::Slack, "x-slack-request-timestamp"),
            (SignatureScheme::HmacSha256, "x-signature"),
        ];
        for (scheme, name) in cases {
            assert_eq!(
                verify(&def(scheme), "k", &HeaderMap::new(), b"{}", 0),
                Err(Rejection::MissingHeader(name.into())),
                "{scheme}"
            );
        }
        let sw = def(SignatureScheme::StandardWebhooks);
        for drop in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let mut h = sw_headers(SW_SIG);
            h.remove(drop);
            assert_eq!(
                verify(&sw, SW_SECRET, &h, SW_BODY, SW_TS),
                Err(Rejection::MissingHeader(drop.into()))
            );
        }
        let h = headers(&[("x-slack-request-timestamp", "1531420618")]);
        assert_eq!(
            verify(
                &def(SignatureScheme::Slack),
                SLACK_SECRET,
                &h,
                SLACK_BODY,
                SLACK_TS
            ),
            Err(Rejection::MissingHeader("x-slack-signature".into()))
        );
    }

    #[test]
    fn timestamps_outside_the_tolerance_are_refused_either_way() {
        let sw = def(SignatureScheme::StandardWebhooks);
        let h = sw_headers(SW_SIG);
        for now in [SW_TS - 300, SW_TS + 300] {
            verify(&sw, SW_SECRET, &h, SW_BODY, now).unwrap();
        }
        for now in [SW_TS - 301, SW_TS + 301, i64::MIN, i64::MAX, 0] {
            assert_eq!(
                verify(&sw, SW_SECRET, &h, SW_BODY, now),
                Err(Rejection::Expired),
                "{now}"
            );
        }
        let tight = WebhookContent {
            tolerance_secs: Some(10),
            ..sw
        };
        assert_eq!(
            verify(&tight, SW_SECRET, &h, SW_BODY, SW_TS + 11),
            Err(Rejection::Expired)
        );
        verify(&tight, SW_SECRET, &h, SW_BODY, SW_TS + 10).unwrap();
    }

    #[test]
    fn any_of_several_signatures_passes_for_rotation() {
        let sw = def(SignatureScheme::StandardWebhooks);
        let wrong = format!("v1,{}", STANDARD.encode([1u8; 32]));
        for value in [
            format!("{wrong} {SW_SIG}"),
            format!("{SW_SIG} {wrong}"),
            format!("v1a,c29tZXRoaW5n {wrong}  {SW_SIG}"),
        ] {
            verify(&sw, SW_SECRET, &sw_headers(&value), SW_BODY, SW_TS).unwrap();
        }
        assert_eq!(
            verify(
                &sw,
                SW_SECRET,
                &sw_headers(&format!("{wrong} {wrong}")),
                SW_BODY,
                SW_TS
            ),
            Err(Rejection::NoMatch)
        );
        // Sixteen candidates are considered; a seventeenth is refused outright.
        let sixteen = format!("{} {SW_SIG}", [wrong.as_str(); 15].join(" "));
        verify(&sw, SW_SECRET, &sw_headers(&sixteen), SW_BODY, SW_TS).unwrap();
        let seventeen = format!("{wrong} {sixteen}");
        assert!(matches!(
            verify(&sw, SW_SECRET, &sw_headers(&seventeen), SW_BODY, SW_TS),
            Err(Rejection::Malformed(_))
        ));
        let stripe_many = format!(
            "t=1,{}",
            vec![format!("v1={}", "a".repeat(64)); 17].join(",")
        );
        assert!(matches!(
            parse_stripe_header(&stripe_many),
            Err(Rejection::Malformed(_))
        ));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let malformed = |r: Result<Verified, Rejection>| matches!(r, Err(Rejection::Malformed(_)));
        let sw = def(SignatureScheme::StandardWebhooks);
        for sig in [
            "v1",
            "v1,",
            "v1,!!!!",
            "v1,AAAA",
            "v2,AAAA",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE",
        ] {
            assert!(
                malformed(verify(&sw, SW_SECRET, &sw_headers(sig), SW_BODY, SW_TS)),
                "{sig}"
            );
        }
        for ts in [
            "",
            "-1",
            "+1614265330",
            "1614265330.5",
            " 1614265330",
            "9999999999999999999",
        ] {
            let h = headers(&[
                ("webhook-id", SW_ID),
                ("webhook-timestamp", ts),
                ("webhook-signature", SW_SIG),
            ]);
            assert!(
                malformed(verify(&sw, SW_SECRET, &h, SW_BODY, SW_TS)),
                "{ts:?}"
            );
        }

        let gh = def(SignatureScheme::Github);
        let bare = GH_SIG.trim_start_matches("sha256=");
        for sig in [
            bare.to_owned(),
            format!("sha1={bare}"),
            format!("sha256={}", &bare[..63]),
            format!("sha256={bare}0"),
            format!("sha256={}g", &bare[..63]),
            "sha256=".to_owned(),
        ] {
            let h = headers(&[("x-hub-signature-256", &sig)]);
            assert!(malformed(verify(&gh, GH_SECRET, &h, GH_BODY, 0)), "{sig}");
        }

        let st = def(SignatureScheme::Stripe);
        for value in [
            format!("v1={STRIPE_HEX}"),
            "t=1700000000".to_owned(),
            "t=1700000000,v0=abc".to_owned(),
            format!("t=abc,v1={STRIPE_HEX}"),
            format!("t=1,t=1700000000,v1={STRIPE_HEX}"),
            "t=1700000000,v1=xyz".to_owned(),
            String::new(),
        ] {
            let h = headers(&[("stripe-signature", &value)]);
            assert!(
                malformed(verify(&st, STRIPE_SECRET, &h, STRIPE_BODY, STRIPE_TS)),
                "{value}"
            );
        }

        let slack = def(SignatureScheme::Slack);
        let hex = SLACK_SIG.trim_start_matches("v0=");
        for (ts, sig) in [
            ("1531420618", hex.to_owned()),
            ("1531420618", format!("v1={hex}")),
            ("now", SLACK_SIG.to_owned()),
        ] {
            let h = headers(&[
                ("x-slack-request-timestamp", ts),
                ("x-slack-signature", &sig),
            ]);
            assert!(
                malformed(verify(&slack, SLACK_SECRET, &h, SLACK_BODY, SLACK_TS)),
                "{sig}"
            );
        }

        // A repeated signature header is ambiguous.
        let h = headers(&[
            ("x-hub-signature-256", GH_SIG),
            ("x-hub-signature-256", GH_SIG),
        ]);
        assert!(malformed(verify(&gh, GH_SECRET, &h, GH_BODY, 0)));
        // Not visible ASCII.
        let mut h = HeaderMap::new();
        h.insert(
            "x-hub-signature-256",
            HeaderValue::from_bytes("sha256=é".as_bytes()).unwrap(),
        );
        assert!(malformed(verify(&gh, GH_SECRET, &h, GH_BODY, 0)));
    }

    #[test]
    fn huge_headers_are_refused_before_any_work() {
        let huge = format!("{SW_SIG} {}", "v2,x".repeat(3000));
        assert!(huge.len() > MAX_HEADER_BYTES);
        let sw = def(SignatureScheme::StandardWebhooks);
        assert_eq!(
            verify(&sw, SW_SECRET, &sw_headers(&huge), SW_BODY, SW_TS),
            Err(Rejection::Malformed("a header value is longer than 8 KiB"))
        );
        let gh = def(SignatureScheme::Github);
        let long_id = "d".repeat(MAX_DELIVERY_ID_BYTES + 1);
        let h = headers(&[
            ("x-hub-signature-256", GH_SIG),
            ("x-github-delivery", &long_id),
        ]);
        assert!(matches!(
            verify(&gh, GH_SECRET, &h, GH_BODY, 0),
            Err(Rejection::Malformed(_))
        ));
        let at_limit = "v2,x ".repeat(MAX_HEADER_BYTES / 5);
        assert!(at_limit.len() <= MAX_HEADER_BYTES);
        assert!(matches!(
            parse_standard_signatures(&at_limit),
            Err(Rejection::Malformed(
                "webhook-signature has no v1 signature"
            ))
        ));
    }

    #[test]
    fn an_unusable_secret_is_the_operators_fault() {
        let sw = def(SignatureScheme::StandardWebhooks);
        for secret in ["whsec_!!!not-base64", "whsec_", ""] {
            assert_eq!(
                verify(&sw, secret, &sw_headers(SW_SIG), SW_BODY, SW_TS),
                Err(Rejection::BadSecret),
                "{secret}"
            );
        }
        assert_eq!(
            verify(&def(SignatureScheme::Github), "", &HeaderMap::new(), b"", 0),
            Err(Rejection::BadSecret)
        );
    }

    #[test]
    fn sign_then_verify_round_trips_for_every_scheme() {
        for scheme in SignatureScheme::ALL {
            let d = WebhookContent {
                delivery_id_header: Some("x-delivery".into()),
                ..def(scheme)
            };
            let secret = format!(
                "whsec_{}",
                STANDARD.encode(b"0123456789abcdef0123456789abcdef")
            );
            let body = br#"{"event":"push"}"#;
            let h = sign(&d, &secret, body, "delivery-1", 1_000_000).unwrap();
            let v = verify(&d, &secret, &h, body, 1_000_100).unwrap();
            assert_eq!(v.delivery_id.as_deref(), Some("delivery-1"), "{scheme}");
            assert_eq!(
                verify(&d, &secret, &h, br#"{"event":"pusH"}"#, 1_000_100),
                Err(Rejection::NoMatch),
                "{scheme}"
            );
        }
    }

    #[test]
    fn every_prefix_of_a_valid_header_is_refused_without_panicking() {
        let sw = def(SignatureScheme::StandardWebhooks);
        for end in 0..SW_SIG.len() {
            assert!(verify(&sw, SW_SECRET, &sw_headers(&SW_SIG[..end]), SW_BODY, SW_TS).is_err());
        }
        let value = format!("t=1700000000,v1={STRIPE_HEX}");
        let st = def(SignatureScheme::Stripe);
        for end in 0..value.len() {
            let h = headers(&[("stripe-signature", &value[..end])]);
            assert!(verify(&st, STRIPE_SECRET, &h, STRIPE_BODY, STRIPE_TS).is_err());
        }
    }

    #[test]
    fn reasons_are_lowercase_and_name_no_secret() {
        for r in [
            Rejection::MissingHeader("webhook-id".into()),
            Rejection::Malformed("x"),
            Rejection::Expired,
            Rejection::NoMatch,
            Rejection::BadSecret,
        ] {
            let reason = r.reason();
            assert!(
                reason.starts_with(|c: char| c.is_ascii_lowercase()),
                "{reason}"
            );
            assert_eq!(r.to_string(), reason);
        }
    }
}
