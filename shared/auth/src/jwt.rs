//! Short-lived internal JWTs (HS256) that carry the caller's principal between services.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation, decode, encode};
use serde::{Deserialize, Serialize};
use weft_core::{Error, Principal, Scopes, TenantId};

/// The `aud` of every internal token.
pub const JWT_AUDIENCE: &str = "weft-internal";
const ISSUER: &str = "weft-gateway";

#[derive(Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    sub: String,
    tenant: TenantId,
    scopes: Scopes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tid: Option<String>,
    /// [`Principal::agent`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agt: Option<String>,
    iat: u64,
    exp: u64,
}

/// How long an internal token stays valid. Short: it only has to cover one hop.
pub const INTERNAL_JWT_TTL: Duration = Duration::from_secs(60);

/// Most entries in either cache; past this a cache is cleared rather than grown.
const CACHE_LIMIT: usize = 10_000;

/// Signs and verifies internal tokens with one shared key.
///
/// Both directions are cached, because every request crosses the gateway → router hop: a signed
/// token is reused for its principal until half its lifetime has passed, and a verified token's
/// principal is remembered until the token expires. A cached verification is as strong as the
/// first: the cache is keyed by the whole token string.
#[derive(Clone)]
pub struct InternalJwt {
    /// Shared, so a clone (one per request where a handler's state is cloned) allocates nothing.
    keys: Arc<Keys>,
    ttl: Duration,
    signed: Arc<Mutex<HashMap<Principal, (String, u64)>>>,
    verified: Arc<Mutex<HashMap<String, (Principal, u64)>>>,
}

struct Keys {
    enc: EncodingKey,
    dec: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for InternalJwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalJwt")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl InternalJwt {
    /// Signs and verifies with `secret`, tokens living [`INTERNAL_JWT_TTL`].
    pub fn from_secret(secret: &[u8]) -> Self {
        Self::new(secret, INTERNAL_JWT_TTL)
    }

    /// `secret` should be at least 32 bytes of entropy; `ttl` is how long a token stays valid.
    pub fn new(secret: &[u8], ttl: Duration) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[JWT_AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
        validation.leeway = 5;
        Self {
            keys: Arc::new(Keys {
                enc: EncodingKey::from_secret(secret),
                dec: DecodingKey::from_secret(secret),
                validation,
            }),
            ttl,
            signed: Arc::default(),
            verified: Arc::default(),
        }
    }

    /// A token for `p`, fresh or reused while more than half its lifetime remains.
    pub fn sign(&self, p: &Principal) -> Result<String, Error> {
        let now = unix_now();
        let half = (self.ttl.as_secs() / 2).max(1);
        if let Ok(cache) = self.signed.lock()
            && let Some((token, exp)) = cache.get(p)
            && *exp > now + half
        {
            return Ok(token.clone());
        }
        let token = self.sign_fresh(p, now)?;
        if let Ok(mut cache) = self.signed.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(p.clone(), (token.clone(), now + self.ttl.as_secs().max(1)));
        }
        Ok(token)
    }

    fn sign_fresh(&self, p: &Principal, now: u64) -> Result<String, Error> {
        let claims = Claims {
            iss: ISSUER.into(),
            aud: JWT_AUDIENCE.into(),
            sub: p.subject.clone(),
            tenant: p.tenant.clone(),
            scopes: p.scopes.clone(),
            tid: p.token_id.clone(),
            agt: p.agent.clone(),
            iat: now,
            exp: now + self.ttl.as_secs().max(1),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.keys.enc).map_err(|e| {
            tracing::error!(error = %e, "signing internal jwt failed");
            Error::internal()
        })
    }

    /// The principal in `token`, if its signature, audience, issuer and expiry check out.
    pub fn verify(&self, token: &str) -> Result<Principal, Error> {
        let now = unix_now();
        if let Ok(cache) = self.verified.lock()
            && let Some((p, exp)) = cache.get(token)
            && *exp > now
        {
            return Ok(p.clone());
        }
        let data = decode::<Claims>(token, &self.keys.dec, &self.keys.validation).map_err(|e| {
            Error::unauthenticated(format!("internal token rejected: {}", e.kind_name()))
        })?;
        let exp = data.claims.exp;
        let p = Principal {
            tenant: data.claims.tenant,
            subject: data.claims.sub,
            scopes: data.claims.scopes,
            token_id: data.claims.tid,
            agent: data.claims.agt,
        };
        if let Ok(mut cache) = self.verified.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(token.to_owned(), (p.clone(), exp));
        }
        Ok(p)
    }
}

trait KindName {
    fn kind_name(&self) -> &'static str;
}

impl KindName for jsonwebtoken::errors::Error {
    fn kind_name(&self) -> &'static str {
        use jsonwebtoken::errors::ErrorKind;
        match self.kind() {
            ErrorKind::ExpiredSignature => "expired",
            ErrorKind::InvalidSignature => "bad signature",
            ErrorKind::InvalidAudience => "wrong audience",
            ErrorKind::InvalidIssuer => "wrong issuer",
            _ => "malformed",
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::Scope;

    fn principal() -> Principal {
        Principal {
            tenant: TenantId::parse("acme").unwrap(),
            subject: "svc".into(),
            scopes: Scopes::new([Scope::LlmCall]),
            token_id: None,
            agent: None,
        }
    }

    #[test]
    fn a_signed_token_verifies_to_the_same_principal() {
        let j = InternalJwt::new(b"0123456789abcdef0123456789abcdef", Duration::from_secs(60));
        let t = j.sign(&principal()).unwrap();
        assert_eq!(j.verify(&t).unwrap(), principal());
        // A run's call carries its agent across the hop.
        let run = Principal {
            agent: Some("triage".into()),
            ..principal()
        };
        assert_eq!(j.verify(&j.sign(&run).unwrap()).unwrap(), run);
    }

    #[test]
    fn another_key_or_garbage_is_refused() {
        let a = InternalJwt::new(b"0123456789abcdef0123456789abcdef", Duration::from_secs(60));
        let b = InternalJwt::new(b"ffffffffffffffffffffffffffffffff", Duration::from_secs(60));
        let t = a.sign(&principal()).unwrap();
        assert!(b.verify(&t).unwrap_err().message.contains("bad signature"));
        assert!(a.verify("not.a.jwt").is_err());
    }

    #[test]
    fn signing_reuses_a_fresh_token_and_verification_is_cached_by_the_whole_token() {
        let j = InternalJwt::new(b"0123456789abcdef0123456789abcdef", Duration::from_secs(60));
        let t1 = j.sign(&principal()).unwrap();
        assert_eq!(j.sign(&principal()).unwrap(), t1);
        assert_eq!(j.verify(&t1).unwrap(), principal());
        assert_eq!(j.verify(&t1).unwrap(), principal(), "cached");
        let mut other = principal();
        other.subject = "other".into();
        assert_ne!(j.sign(&other).unwrap(), t1);
        let mut tampered = t1.clone();
        tampered.pop();
        assert!(
            j.verify(&tampered).is_err(),
            "a different string is verified afresh"
        );
    }

    #[test]
    fn an_expired_token_is_refused() {
        let j = InternalJwt::new(b"0123456789abcdef0123456789abcdef", Duration::from_secs(60));
        let now = unix_now();
        let claims = Claims {
            iss: ISSUER.into(),
            aud: JWT_AUDIENCE.into(),
            sub: "s".into(),
            tenant: TenantId::parse("a").unwrap(),
            scopes: Scopes::default(),
            tid: None,
            agt: None,
            iat: now - 120,
            exp: now - 60,
        };
        let t = encode(&Header::new(Algorithm::HS256), &claims, &j.keys.enc).unwrap();
        assert!(j.verify(&t).unwrap_err().message.contains("expired"));
    }
}
