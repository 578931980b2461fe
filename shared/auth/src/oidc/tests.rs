//! The verifier against a JWKS served on loopback, with P-256 keys made for these tests only.

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::routing::get;
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;
use weft_config::OidcIssuerConfig;

use super::*;

/// Test keys (P-256, PKCS#8) and their public coordinates.
const K1: (&str, &str, &str) = (
    "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgfvEyI94ancBsMBBt\nJxnOsfhHGHqEO1UfCVxlncag6cChRANCAAT8eB5ftouIn0kH/8snAs5YpRBuBlK4\nfdMOKShk7hRnjZTZF6G3pawXkADXfZsiIdW0TpontqmZfs6xPD8L46mA\n-----END PRIVATE KEY-----\n",
    "_HgeX7aLiJ9JB__LJwLOWKUQbgZSuH3TDikoZO4UZ40",
    "lNkXobelrBeQANd9myIh1bROmie2qZl-zrE8PwvjqYA",
);
const K2: (&str, &str, &str) = (
    "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgevoyZ0KeMt8Enold\nUkh9+MLZxNGti2i/czcn6sjgeiOhRANCAAR45MQnaNu9IPQ64DtStdFi4CJ0omGt\nvHIj0Oty1sfHGmEgErMMY4ccH1wvl5+Q5mnQ1zPCFzvMyXK4Q++0LD4E\n-----END PRIVATE KEY-----\n",
    "eOTEJ2jbvSD0OuA7UrXRYuAidKJhrbxyI9DrctbHxxo",
    "YSASswxjhxwfXC-Xn5DmadDXM8IXO8zJcrhD77QsPgQ",
);
/// Never listed by the test JWKS.
const K3: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAREKovDScqHGrcf+\nucB6JVpE4vcn+gN9GYu4vsfXMpmhRANCAARQBvsPB80zRxzg+FU2vu7ZSc/FkhgH\nOuXPSntSdaVgUweR56cX459YjiuvXKa6Gc+nbFLrY7EhFqNmTvivt/x2\n-----END PRIVATE KEY-----\n";

fn jwk(kid: &str, k: (&str, &str, &str)) -> Value {
    json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid, "x": k.1, "y": k.2})
}

/// A loopback issuer: discovery and a JWKS that the test can replace, counting JWKS fetches.
struct Idp {
    url: String,
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

async fn idp(keys: Vec<Value>) -> Idp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let jwks = Arc::new(Mutex::new(json!({"keys": keys})));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (j, f, u) = (jwks.clone(), fetches.clone(), url.clone());
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            get(move || {
                let u = u.clone();
                async move { Json(json!({"issuer": u, "jwks_uri": format!("{u}/jwks")})) }
            }),
        )
        .route(
            "/jwks",
            get(move || {
                let (j, f) = (j.clone(), f.clone());
                async move {
                    f.fetch_add(1, Ordering::SeqCst);
                    Json(j.lock().unwrap().clone())
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Idp { url, jwks, fetches }
}

fn entry(tenant: &str, issuer: &str, aud: &str) -> OidcIssuerConfig {
    OidcIssuerConfig {
        tenant: tenant.into(),
        issuer: issuer.into(),
        audiences: vec![aud.into()],
        jwks_url: None,
        algorithms: vec!["ES256".into(), "RS256".into()],
        subject_claim: "sub".into(),
        subject_prefix: Some("sso:".into()),
        scopes_claim: "scope".into(),
        scopes: vec![Scope::RunsRead],
        max_scopes: vec![Scope::LlmCall, Scope::RunsCreate],
        leeway_secs: 0,
    }
}

fn verifier(entries: Vec<(&str, OidcIssuerConfig)>, min_refresh: u64) -> OidcVerifier {
    let cfg = AuthConfig {
        oidc: entries
            .into_iter()
            .map(|(n, e)| (n.to_owned(), e))
            .collect(),
        oidc_jwks_min_refresh_secs: min_refresh,
        ..AuthConfig::default()
    };
    OidcVerifier::from_config(&cfg).unwrap().unwrap()
}

fn sign(pem: &str, kid: &str, claims: Value) -> String {
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some(kid.into());
    // The PKCS#8 DER inside the PEM armour (jsonwebtoken's PEM parsing is not built here).
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    encode(&h, &claims, &EncodingKey::from_ec_der(&der)).unwrap()
}

fn claims(iss: &str, aud: &str, exp_in: i64) -> Value {
    let now = unix_now() as i64;
    json!({"iss": iss, "aud": aud, "sub": "alice", "iat": now, "exp": now + exp_in,
           "scope": "openid llm:call runs:create tenant:admin memory:write"})
}

#[tokio::test]
async fn a_trusted_token_maps_to_its_tenant_subject_and_allowed_scopes() {
    let idp = idp(vec![jwk("k1", K1)]).await;
    let v = verifier(
        vec![
            ("a", entry("acme", &idp.url, "weft-a")),
            ("b", entry("beta", &idp.url, "weft-b")),
        ],
        10,
    );
    let p = v
        .verify(&sign(K1.0, "k1", claims(&idp.url, "weft-a", 300)))
        .await
        .unwrap();
    assert_eq!(p.tenant.as_str(), "acme");
    assert_eq!(p.subject, "sso:alice");
    // The claim's weft scopes within max_scopes, plus the entry's own; never tenant:admin here.
    assert_eq!(p.scopes.to_string(), "runs:create,runs:read,llm:call");
    assert_eq!(p.token_id, None);
    // The same issuer, the other audience: the other tenant.
    let mut c = claims(&idp.url, "weft-b", 300);
    c["aud"] = json!(["something-else", "weft-b"]);
    let p = v.verify(&sign(K1.0, "k1", c)).await.unwrap();
    assert_eq!(p.tenant.as_str(), "beta");
    assert_eq!(
        idp.fetches.load(Ordering::SeqCst),
        1,
        "one JWKS fetch, cached"
    );
}

#[tokio::test]
async fn bad_tokens_are_refused_with_the_reason() {
    let idp = idp(vec![jwk("k1", K1)]).await;
    let v = verifier(vec![("a", entry("acme", &idp.url, "weft-a"))], 3600);
    let refusal = |t: String| {
        let v = v.clone();
        async move {
            let e = v.verify(&t).await.unwrap_err();
            assert_eq!(e.code, weft_core::ErrorCode::Unauthenticated, "{e:?}");
            e.message
        }
    };
    let m = refusal(sign(K1.0, "k1", claims(&idp.url, "weft-x", 300))).await;
    assert!(m.contains("wrong audience"), "{m}");
    let m = refusal(sign(K1.0, "k1", claims("https://elsewhere", "weft-a", 300))).await;
    assert!(m.contains("not trusted"), "{m}");
    let m = refusal(sign(K1.0, "k1", claims(&idp.url, "weft-a", -5))).await;
    assert!(m.contains("expired"), "{m}");
    let mut c = claims(&idp.url, "weft-a", 300);
    c.as_object_mut().unwrap().remove("exp");
    let m = refusal(sign(K1.0, "k1", c)).await;
    assert!(m.contains("`exp`"), "{m}");
    let mut c = claims(&idp.url, "weft-a", 300);
    c.as_object_mut().unwrap().remove("sub");
    let m = refusal(sign(K1.0, "k1", c)).await;
    assert!(m.contains("`sub`"), "{m}");

    // alg none: a valid token's claims, no signature.
    let good = sign(K1.0, "k1", claims(&idp.url, "weft-a", 300));
    let payload = good.split('.').nth(1).unwrap();
    let none = format!(
        "{}.{payload}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#)
    );
    assert!(refusal(none).await.contains("alg: none"));
    // HS256 "signed" with the public key material: not an accepted algorithm.
    let hs = encode(
        &Header::new(Algorithm::HS256),
        &claims(&idp.url, "weft-a", 300),
        &EncodingKey::from_secret(K1.1.as_bytes()),
    )
    .unwrap();
    assert!(refusal(hs).await.contains("not accepted"));
    // A key the JWKS never listed, under a kid it does not know or one it does.
    let m = refusal(sign(K3, "rogue", claims(&idp.url, "weft-a", 300))).await;
    assert!(m.contains("does not list"), "{m}");
    let m = refusal(sign(K3, "k1", claims(&idp.url, "weft-a", 300))).await;
    assert!(m.contains("signature does not verify"), "{m}");
    // A tampered payload.
    let mut parts: Vec<String> = good.split('.').map(str::to_owned).collect();
    let mut c = claims(&idp.url, "weft-a", 300);
    c["sub"] = json!("mallory");
    parts[1] = URL_SAFE_NO_PAD.encode(c.to_string());
    assert!(
        refusal(parts.join("."))
            .await
            .contains("signature does not verify")
    );
    // Unknown kids do not turn into a fetch each: the least refresh interval holds them.
    assert!(idp.fetches.load(Ordering::SeqCst) <= 2);
    // And the good one still passes.
    assert_eq!(v.verify(&good).await.unwrap().subject, "sso:alice");
}

#[tokio::test]
async fn a_rotation_is_picked_up_and_the_retired_key_stops_verifying() {
    let idp = idp(vec![jwk("k1", K1)]).await;
    // No least refresh interval here (configuration allows 1 s at least): a token naming an
    // unknown key fetches the set again at once.
    let v = verifier(vec![("a", entry("acme", &idp.url, "weft-a"))], 0);
    let old = sign(K1.0, "k1", claims(&idp.url, "weft-a", 300));
    v.verify(&old).await.unwrap();
    v.verify(&old).await.unwrap(); // remembered
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1);

    *idp.jwks.lock().unwrap() = json!({"keys": [jwk("k2", K2)]});
    let new = sign(K2.0, "k2", claims(&idp.url, "weft-a", 300));
    assert_eq!(v.verify(&new).await.unwrap().subject, "sso:alice");
    assert_eq!(
        idp.fetches.load(Ordering::SeqCst),
        2,
        "one fetch picked the new key up"
    );
    // The remembered verification of the old token does not outlive the key set it used.
    let e = v.verify(&old).await.unwrap_err();
    assert!(e.message.contains("does not list"), "{e:?}");
}

#[tokio::test]
async fn an_unreachable_jwks_is_a_503_and_a_configured_url_skips_discovery() {
    let mut e = entry("acme", "https://idp.invalid", "weft-a");
    e.jwks_url = Some("http://127.0.0.1:9/jwks".into());
    let v = verifier(vec![("a", e)], 10);
    let t = sign(K1.0, "k1", claims("https://idp.invalid", "weft-a", 300));
    let err = v.verify(&t).await.unwrap_err();
    assert_eq!(err.code, weft_core::ErrorCode::Unavailable, "{err:?}");

    let idp = idp(vec![jwk("k1", K1)]).await;
    let mut e = entry("acme", "https://idp.example", "weft-a");
    e.jwks_url = Some(format!("{}/jwks", idp.url));
    let v = verifier(vec![("a", e)], 10);
    let t = sign(K1.0, "k1", claims("https://idp.example", "weft-a", 300));
    assert_eq!(v.verify(&t).await.unwrap().tenant.as_str(), "acme");
}

#[test]
fn only_jwt_shaped_tokens_are_taken_for_jwts() {
    assert!(OidcVerifier::looks_like_jwt("eyJh.eyJ.sig-_"));
    assert!(!OidcVerifier::looks_like_jwt("wft_abc"));
    assert!(!OidcVerifier::looks_like_jwt("a.b"));
    assert!(!OidcVerifier::looks_like_jwt("a.b.c d"));
    assert!(
        OidcVerifier::from_config(&AuthConfig::default())
            .unwrap()
            .is_none()
    );
}
