//! JWTs from a tenant's identity provider, accepted as bearer tokens beside weft tokens.
//!
//! An operator trusts an issuer for one tenant (`[auth.oidc.<name>]`): its `iss`, the audiences
//! that name weft, where its keys are, which algorithms it signs with, and how its claims map to a
//! subject and scopes. A token is matched to its issuer entry by `iss` and `aud` (configuration
//! refuses two entries that share an issuer and an audience, so a token names one tenant), then
//! checked against a key of the issuer's JWKS.
//!
//! Keys: the JWKS is fetched on first use (through the issuer's discovery document when no
//! `jwks_url` is set), used for `oidc_jwks_ttl_secs`, and fetched again at once when a token
//! names a key it does not list, at most once per `oidc_jwks_min_refresh_secs` — so a rotation is
//! picked up with the first token signed by the new key, and a key the JWKS stops listing stops
//! verifying as soon as the set is fetched again. When a fetch fails the last set stays in use.
//!
//! Never accepted: `alg: none`, HS* (a shared secret the IdP's public JWKS would hand anyone), a
//! key whose type does not fit the algorithm, a token without `exp`. A JWT cannot be revoked
//! here: it lives until it expires.

use std::collections::HashMap;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use weft_config::{AuthConfig, OidcIssuerConfig};
use weft_core::{Error, Principal, Scope, Scopes, TenantId};

use crate::jwt::unix_now;

/// How long fetching a discovery document or a JWKS may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest discovery document or JWKS read.
const MAX_DOCUMENT_BYTES: usize = 256 * 1024;
/// Most verified tokens remembered; past this the cache is cleared rather than grown.
const CACHE_LIMIT: usize = 10_000;
/// Longest a verified token is remembered (and never past its `exp`, nor a key refresh).
const CACHE_TTL: Duration = Duration::from_secs(60);

/// Checks JWTs against the trusted issuers. Cheap to clone.
#[derive(Clone)]
pub struct OidcVerifier {
    inner: Arc<Inner>,
}

struct Inner {
    /// Issuer entries by `iss`.
    by_issuer: HashMap<String, Vec<Arc<Issuer>>>,
    http: reqwest::Client,
    /// Verified tokens: the principal, when the entry stops counting, and the key set's
    /// generation it was verified with.
    verified: Mutex<HashMap<String, Verified>>,
}

struct Verified {
    principal: Principal,
    until: Instant,
    exp: u64,
    keys: Arc<KeySource>,
    generation: u64,
}

struct Issuer {
    name: String,
    tenant: TenantId,
    issuer: String,
    audiences: Vec<String>,
    algorithms: Vec<Algorithm>,
    subject_claim: String,
    subject_prefix: String,
    scopes_claim: String,
    scopes: Scopes,
    max_scopes: Scopes,
    leeway: u64,
    keys: Arc<KeySource>,
}

/// One JWKS (shared by the entries that name the same one) and its cache.
struct KeySource {
    /// The configured JWKS URL, or `None` to discover it from `issuer`.
    jwks_url: Option<String>,
    issuer: String,
    ttl: Duration,
    min_refresh: Duration,
    /// Serialises fetches, so a burst of tokens naming a new key makes one request.
    fetching: tokio::sync::Mutex<()>,
    state: RwLock<KeyState>,
}

#[derive(Default)]
struct KeyState {
    keys: Arc<Vec<Key>>,
    /// When the current set was fetched (`None`: never).
    fetched: Option<Instant>,
    /// When a fetch was last tried, successful or not.
    tried: Option<Instant>,
    /// Bumped on every successful fetch; remembered verifications of an older one are redone.
    generation: u64,
}

struct Key {
    kid: Option<String>,
    /// The `alg` the JWK pins, if it names one.
    alg: Option<Algorithm>,
    kind: KeyKind,
    key: DecodingKey,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KeyKind {
    Rsa,
    P256,
    P384,
    Ed25519,
}

impl std::fmt::Debug for OidcVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcVerifier")
            .field("issuers", &self.inner.by_issuer.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl OidcVerifier {
    /// The verifier of `cfg.oidc`, or `None` when no issuer is trusted. Fails on a tenant the
    /// configuration names wrongly (configuration validation checks the rest).
    pub fn from_config(cfg: &AuthConfig) -> Result<Option<Self>, String> {
        if cfg.oidc.is_empty() {
            return Ok(None);
        }
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("auth.oidc: cannot build an HTTP client: {e}"))?;
        let mut sources: HashMap<String, Arc<KeySource>> = HashMap::new();
        let mut by_issuer: HashMap<String, Vec<Arc<Issuer>>> = HashMap::new();
        for (name, c) in &cfg.oidc {
            let source_key = c
                .jwks_url
                .clone()
                .unwrap_or_else(|| format!("discover:{}", c.issuer));
            let keys = sources
                .entry(source_key)
                .or_insert_with(|| {
                    Arc::new(KeySource {
                        jwks_url: c.jwks_url.clone(),
                        issuer: c.issuer.clone(),
                        ttl: Duration::from_secs(cfg.oidc_jwks_ttl_secs),
                        min_refresh: Duration::from_secs(cfg.oidc_jwks_min_refresh_secs),
                        fetching: tokio::sync::Mutex::new(()),
                        state: RwLock::default(),
                    })
                })
                .clone();
            let issuer = Issuer::from_config(name, c, keys)?;
            by_issuer
                .entry(c.issuer.clone())
                .or_default()
                .push(Arc::new(issuer));
        }
        Ok(Some(Self {
            inner: Arc::new(Inner {
                by_issuer,
                http,
                verified: Mutex::default(),
            }),
        }))
    }

    /// Whether `token` looks like a JWT (three base64url parts), so it is worth checking here.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    }

    /// The principal `token` stands for, or a 401 saying why not (a 503 when the issuer's keys
    /// could not be fetched at all).
    pub async fn verify(&self, token: &str) -> Result<Principal, Error> {
        if let Some(p) = self.remembered(token) {
            return Ok(p);
        }
        let (header, claims) = peek(token)?;
        let alg_name = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if alg_name.eq_ignore_ascii_case("none") || alg_name.is_empty() {
            return Err(refused(
                "the JWT is unsigned (`alg: none`); only tokens signed by a trusted issuer are accepted",
            ));
        }
        let iss = claims.get("iss").and_then(Value::as_str).ok_or_else(|| {
            refused("the JWT has no `iss` claim, so no trusted issuer can be found for it")
        })?;
        let Some(entries) = self.inner.by_issuer.get(iss) else {
            return Err(refused(format!(
                "the JWT's issuer {iss:?} is not trusted by this gateway; an operator trusts issuers under [auth.oidc], or use a weft token"
            )));
        };
        let aud = audiences(claims.get("aud"));
        let mut matching = entries
            .iter()
            .filter(|e| e.audiences.iter().any(|a| aud.contains(&a.as_str())));
        let issuer = matching.next().ok_or_else(|| {
            refused(format!(
                "wrong audience: the JWT's `aud` is not one weft accepts from issuer {iss:?}; ask the identity provider for a token for weft's audience"
            ))
        })?;
        if matching.next().is_some() {
            return Err(refused(
                "the JWT's `aud` names more than one tenant of this issuer; ask the identity provider for a token with one audience",
            ));
        }
        let alg = Algorithm::from_str(alg_name)
            .ok()
            .filter(|a| issuer.algorithms.contains(a))
            .ok_or_else(|| {
                refused(format!(
                    "the JWT is signed with {alg_name:?}, which is not accepted for issuer {iss:?} (accepted: {})",
                    issuer
                        .algorithms
                        .iter()
                        .map(|a| format!("{a:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        let kid = header.get("kid").and_then(Value::as_str);
        let (keys, generation) = issuer.keys.keys_for(&self.inner.http, kid, alg).await?;
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[iss]);
        validation.set_audience(&issuer.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = issuer.leeway;
        let mut last = None;
        let mut data = None;
        for k in keys.iter().filter(|k| k.fits(kid, alg)) {
            match jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &k.key, &validation)
            {
                Ok(d) => {
                    data = Some(d);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(data) = data else {
            return Err(match last {
                Some(e) => refused(jwt_error(&e, iss)),
                None => refused(unknown_key(kid, iss)),
            });
        };
        let principal = issuer.principal(&data.claims)?;
        let exp = data.claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        self.remember(token, &principal, exp, &issuer.keys, generation);
        Ok(principal)
    }

    /// A principal verified before, while its token is unexpired and its key set unchanged.
    fn remembered(&self, token: &str) -> Option<Principal> {
        let cache = self.inner.verified.lock().ok()?;
        let v = cache.get(token)?;
        let fresh = Instant::now() < v.until
            && unix_now() < v.exp
            && v.keys.state.read().ok()?.generation == v.generation;
        fresh.then(|| v.principal.clone())
    }

    fn remember(&self, token: &str, p: &Principal, exp: u64, keys: &Arc<KeySource>, gen_: u64) {
        if let Ok(mut cache) = self.inner.verified.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(
                token.to_owned(),
                Verified {
                    principal: p.clone(),
                    until: Instant::now() + CACHE_TTL,
                    exp,
                    keys: Arc::clone(keys),
                    generation: gen_,
                },
            );
        }
    }
}

impl Issuer {
    fn from_config(name: &str, c: &OidcIssuerConfig, keys: Arc<KeySource>) -> Result<Self, String> {
        let at = format!("auth.oidc.{name}");
        let tenant =
            TenantId::parse(&c.tenant).map_err(|e| format!("{at}.tenant: {}", e.message))?;
        let algorithms = c
            .algorithms
            .iter()
            .map(|a| Algorithm::from_str(a).map_err(|_| format!("{at}.algorithms: {a:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name: name.to_owned(),
            tenant,
            issuer: c.issuer.clone(),
            audiences: c.audiences.clone(),
            algorithms,
            subject_claim: c.subject_claim.clone(),
            subject_prefix: c.effective_subject_prefix(name),
            scopes_claim: c.scopes_claim.clone(),
            scopes: Scopes::new(c.scopes.iter().copied()),
            max_scopes: Scopes::new(c.max_scopes.iter().copied()),
            leeway: c.leeway_secs,
            keys,
        })
    }

    /// The principal of verified `claims`: this entry's tenant, the subject claim (prefixed),
    /// and the scopes the scope claim names that `max_scopes` allows, plus `scopes`.
    fn principal(&self, claims: &serde_json::Map<String, Value>) -> Result<Principal, Error> {
        let sub = claims
            .get(&self.subject_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                refused(format!(
                    "the JWT has no string `{}` claim, which issuer {:?} names as the subject",
                    self.subject_claim, self.issuer
                ))
            })?;
        let subject = format!("{}{sub}", self.subject_prefix);
        if subject.len() > 200 {
            return Err(refused(
                "the JWT's subject is longer than 200 bytes; weft subjects are at most 200",
            ));
        }
        let granted: Vec<Scope> = match claims.get(&self.scopes_claim) {
            Some(Value::String(s)) => s
                .split_whitespace()
                .filter_map(|s| s.parse().ok())
                .collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .filter_map(|s| s.parse().ok())
                .collect(),
            _ => Vec::new(),
        };
        let scopes = Scopes::new(
            granted
                .into_iter()
                .filter(|s| self.max_scopes.contains(*s))
                .chain(self.scopes.iter()),
        );
        tracing::debug!(issuer = %self.name, tenant = %self.tenant, "oidc token accepted");
        Ok(Principal {
            tenant: self.tenant.clone(),
            subject,
            scopes,
            token_id: None,
            agent: None,
        })
    }
}

impl KeySource {
    /// The current keys and their generation. They are fetched first when there are none yet,
    /// when they are past their TTL, or when none fits `kid` — but at most once per least
    /// refresh interval, whatever the reason: one request fetches while the others wait for its
    /// outcome, and a provider that is down costs one attempt per interval, not one per token.
    async fn keys_for(
        &self,
        http: &reqwest::Client,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<(Arc<Vec<Key>>, u64), Error> {
        let asked = Instant::now();
        if let Some(found) = self.usable(kid, alg) {
            return Ok(found);
        }
        let _one = self.fetching.lock().await;
        if let Some(found) = self.usable(kid, alg) {
            return Ok(found);
        }
        // A fetch tried since this request asked (while it waited) is its answer too.
        let due = self
            .read()
            .tried
            .is_none_or(|t| t < asked && t.elapsed() >= self.min_refresh);
        if due {
            let started = Instant::now();
            let result = self.fetch(http).await;
            let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
            st.tried = Some(started);
            match result {
                Ok(keys) => {
                    st.keys = Arc::new(keys);
                    st.fetched = Some(started);
                    st.generation += 1;
                }
                Err(e) => tracing::warn!(
                    issuer = %self.issuer,
                    error = %e,
                    "fetching the JWKS failed; the last keys (if any) stay in use"
                ),
            }
        }
        let st = self.read();
        if st.fetched.is_none() {
            return Err(Error::unavailable(format!(
                "cannot check the JWT: the keys of issuer {:?} could not be fetched; try again later",
                self.issuer
            )));
        }
        Ok((Arc::clone(&st.keys), st.generation))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, KeyState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The current keys, if they are within their TTL and one fits.
    fn usable(&self, kid: Option<&str>, alg: Algorithm) -> Option<(Arc<Vec<Key>>, u64)> {
        let st = self.read();
        let fresh = st.fetched?.elapsed() < self.ttl;
        let fits = st.keys.iter().any(|k| k.fits(kid, alg));
        (fresh && fits).then(|| (Arc::clone(&st.keys), st.generation))
    }

    /// The issuer's signing keys, read afresh. The error is for the log (it names URLs).
    async fn fetch(&self, http: &reqwest::Client) -> Result<Vec<Key>, String> {
        let url = match &self.jwks_url {
            Some(u) => u.clone(),
            None => {
                let doc = format!(
                    "{}/.well-known/openid-configuration",
                    self.issuer.trim_end_matches('/')
                );
                let d = get_json(http, &doc).await?;
                let uri = d.get("jwks_uri").and_then(Value::as_str).ok_or_else(|| {
                    format!("{doc} names no `jwks_uri`; set the issuer's jwks_url")
                })?;
                if !secure_url(uri) {
                    return Err(format!(
                        "{doc} names jwks_uri {uri:?}, which is neither https nor on loopback"
                    ));
                }
                uri.to_owned()
            }
        };
        let set = get_json(http, &url).await?;
        let keys = set
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("{url} is not a JWKS (no `keys` array)"))?;
        let keys: Vec<Key> = keys.iter().filter_map(Key::from_json).collect();
        tracing::info!(issuer = %self.issuer, url = %url, keys = keys.len(), "JWKS fetched");
        Ok(keys)
    }
}

impl Key {
    /// A signing key of `v`, or `None` for one weft cannot use (encryption keys, HMAC secrets,
    /// curves it does not verify).
    fn from_json(v: &Value) -> Option<Self> {
        let jwk: Jwk = serde_json::from_value(v.clone()).ok()?;
        if matches!(
            jwk.common.public_key_use,
            Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
        ) {
            return None;
        }
        let kind = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => KeyKind::Rsa,
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => KeyKind::P256,
                EllipticCurve::P384 => KeyKind::P384,
                _ => return None,
            },
            AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                KeyKind::Ed25519
            }
            _ => return None,
        };
        let alg = match &jwk.common.key_algorithm {
            None => None,
            Some(a) => Some(Algorithm::from_str(&format!("{a:?}")).ok()?),
        };
        Some(Self {
            kid: jwk.common.key_id.clone(),
            alg,
            kind,
            key: DecodingKey::from_jwk(&jwk).ok()?,
        })
    }

    /// Whether this key may check a token signed with `alg` naming `kid`: the kid matches (any
    /// key, when the token names none), the key type is the algorithm's, and a pinned `alg` is it.
    fn fits(&self, kid: Option<&str>, alg: Algorithm) -> bool {
        let kind_fits = match alg {
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512 => self.kind == KeyKind::Rsa,
            Algorithm::ES256 => self.kind == KeyKind::P256,
            Algorithm::ES384 => self.kind == KeyKind::P384,
            Algorithm::EdDSA => self.kind == KeyKind::Ed25519,
            _ => false,
        };
        kind_fits
            && self.alg.is_none_or(|a| a == alg)
            && kid.is_none_or(|k| self.kid.as_deref() == Some(k))
    }
}

/// A JSON object (a JWT's header or claims).
type JsonObject = serde_json::Map<String, Value>;

/// The header and claims of `token`, unverified: only to find which issuer and key to check it
/// against.
fn peek(token: &str) -> Result<(JsonObject, JsonObject), Error> {
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refused(
            "the bearer token is not a JWT (three base64url parts)",
        ));
    };
    let part = |p: &str| {
        URL_SAFE_NO_PAD
            .decode(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Map<String, Value>>(&b).ok())
            .ok_or_else(|| refused("the bearer token is not a JWT: a part is not base64url JSON"))
    };
    Ok((part(h)?, part(c)?))
}

/// The `aud` claim as a list (a string or an array of strings).
fn audiences(v: Option<&Value>) -> Vec<&str> {
    match v {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let fail = |why: String| format!("cannot fetch {url}: {why}");
    let mut resp = http
        .get(url)
        .header(http::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?;
    if !resp.status().is_success() {
        return Err(fail(format!("HTTP {}", resp.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| fail(e.without_url().to_string()))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(fail(format!("larger than {MAX_DOCUMENT_BYTES} bytes")));
        }
    }
    serde_json::from_slice(&body).map_err(|e| fail(format!("not JSON: {e}")))
}

/// Whether keys may be fetched from `url`: https, or plain http to a loopback host.
fn secure_url(url: &str) -> bool {
    weft_config::OidcIssuerConfig::is_secure_url(url)
}

fn jwt_error(e: &jsonwebtoken::errors::Error, iss: &str) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => {
            "the JWT has expired; get a new one from the identity provider".into()
        }
        ErrorKind::ImmatureSignature => "the JWT is not valid yet (`nbf` is in the future)".into(),
        ErrorKind::InvalidSignature => format!(
            "the JWT's signature does not verify with issuer {iss:?}'s key; it was not signed by that issuer"
        ),
        ErrorKind::InvalidAudience => "wrong audience for this issuer".into(),
        ErrorKind::InvalidIssuer => "wrong issuer".into(),
        ErrorKind::MissingRequiredClaim(c) => format!("the JWT has no `{c}` claim"),
        _ => format!("the JWT is malformed or its key does not fit it ({e})"),
    }
}

fn unknown_key(kid: Option<&str>, iss: &str) -> String {
    match kid {
        Some(k) => format!(
            "the JWT is signed with key {k:?}, which issuer {iss:?}'s JWKS does not list (a retired or foreign key); get a new token"
        ),
        None => format!("no key in issuer {iss:?}'s JWKS fits the JWT's algorithm"),
    }
}

fn refused(m: impl Into<String>) -> Error {
    Error::unauthenticated(m)
}

#[cfg(test)]
mod tests;
