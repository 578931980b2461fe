//! Resolves bearer tokens to principals, with a small cache in front of the `tokens` table.
//!
//! A cache entry lives at most `ttl` (≤ 1 s by config), so a revoked or expired token stops
//! working on every replica within that time without any cross-replica messaging. Entries in
//! use are refreshed ahead of time: the first request that finds an entry past half its TTL
//! starts one background lookup and is answered from the still-valid entry, so busy tokens never
//! make a request wait on Postgres (nor make every concurrent request query it at once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq as _;
use time::OffsetDateTime;
use weft_core::{Error, Principal};
use weft_store::{TokenRecord, TokenStore};

use crate::OidcVerifier;
use crate::token::{TOKEN_PREFIX, hash_token};

/// Most entries kept; past this the cache is cleared rather than grown.
const MAX_ENTRIES: usize = 100_000;

#[derive(Clone)]
struct Entry {
    /// `None` caches a miss, so a flood of bad tokens does not become a flood of queries.
    principal: Option<Principal>,
    expires_at: Option<OffsetDateTime>,
    fetched: Instant,
    /// A background refresh is under way.
    refreshing: bool,
}

#[derive(Clone)]
pub struct TokenResolver {
    store: TokenStore,
    ttl: Duration,
    cache: Arc<Mutex<HashMap<[u8; 32], Entry>>>,
    /// Trusted identity providers, when an operator configured any: their JWTs resolve too.
    oidc: Option<OidcVerifier>,
}

impl std::fmt::Debug for TokenResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResolver")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl TokenResolver {
    pub fn new(store: TokenStore, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            cache: Arc::new(Mutex::new(HashMap::new())),
            oidc: None,
        }
    }

    /// Also accepts JWTs that `oidc`'s trusted issuers signed.
    pub fn with_oidc(mut self, oidc: Option<OidcVerifier>) -> Self {
        self.oidc = oidc;
        self
    }

    /// The principal of `token` (a weft token, or a JWT of a trusted issuer), or a 401 that says
    /// what to do.
    pub async fn resolve(&self, token: &str) -> Result<Principal, Error> {
        if !token.starts_with(TOKEN_PREFIX) {
            if let Some(oidc) = &self.oidc
                && OidcVerifier::looks_like_jwt(token)
            {
                return oidc.verify(token).await;
            }
            return Err(Error::unauthenticated(if self.oidc.is_some() {
                "the bearer token is neither a weft token (they start with `wft_`) nor a JWT; create a token with `weft token create`, or use one from a trusted identity provider"
            } else {
                "the bearer token is not a weft token (they start with `wft_`); create one with `weft token create`"
            }));
        }
        let hash = hash_token(token);
        if let Some((e, refresh)) = self.cached(&hash, Instant::now()) {
            if refresh {
                let this = self.clone();
                tokio::spawn(async move { this.refresh(hash).await });
            }
            return Self::check(e.principal, e.expires_at);
        }
        let entry = self.fetch(&hash).await?;
        self.store_entry(hash, entry.clone());
        Self::check(entry.principal, entry.expires_at)
    }

    /// Reads the token row and makes a fresh cache entry of it.
    async fn fetch(&self, hash: &[u8; 32]) -> Result<Entry, Error> {
        let now = Instant::now();
        let record = self.store.find_by_hash(hash).await.map_err(|e| {
            tracing::error!(error = %e, "token lookup failed");
            e.to_api()
        })?;
        Ok(match record {
            Some(r) if verify_hash(&r, hash) && r.is_active(OffsetDateTime::now_utc()) => Entry {
                principal: Some(Principal {
                    tenant: r.tenant,
                    subject: r.subject,
                    scopes: r.scopes,
                    token_id: Some(r.id.to_string()),
                    agent: None,
                }),
                expires_at: r.expires_at,
                fetched: now,
                refreshing: false,
            },
            _ => Entry {
                principal: None,
                expires_at: None,
                fetched: now,
                refreshing: false,
            },
        })
    }

    /// The background half of refresh-ahead; on failure the entry simply ages out.
    async fn refresh(&self, hash: [u8; 32]) {
        match self.fetch(&hash).await {
            Ok(entry) => self.store_entry(hash, entry),
            Err(_) => {
                if let Ok(mut cache) = self.cache.lock()
                    && let Some(e) = cache.get_mut(&hash)
                {
                    e.refreshing = false;
                }
            }
        }
    }

    /// Drops a cached entry now (this replica); other replicas notice within the TTL.
    pub fn forget(&self, hash: &[u8]) {
        if let (Ok(mut cache), Ok(key)) = (self.cache.lock(), <[u8; 32]>::try_from(hash)) {
            cache.remove(&key);
        }
    }

    /// A still-valid entry, and whether this caller should start its refresh.
    fn cached(&self, hash: &[u8; 32], now: Instant) -> Option<(Entry, bool)> {
        let mut cache = self.cache.lock().ok()?;
        let e = cache.get_mut(hash)?;
        let age = now.duration_since(e.fetched);
        if age >= self.ttl {
            return None;
        }
        let refresh = age >= self.ttl / 2 && !e.refreshing;
        if refresh {
            e.refreshing = true;
        }
        Some((e.clone(), refresh))
    }

    fn store_entry(&self, hash: [u8; 32], entry: Entry) {
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_ENTRIES {
                cache.clear();
            }
            cache.insert(hash, entry);
        }
    }

    fn check(p: Option<Principal>, expires_at: Option<OffsetDateTime>) -> Result<Principal, Error> {
        match p {
            Some(p) if expires_at.is_none_or(|e| e > OffsetDateTime::now_utc()) => Ok(p),
            _ => Err(Error::unauthenticated(
                "invalid, expired or revoked token; create a new one with `weft token create` or POST /v1/tokens",
            )),
        }
    }
}

/// The row was found through the hash index; compare the stored hash again in constant time so
/// that acceptance never rests on a variable-time comparison.
fn verify_hash(r: &TokenRecord, hash: &[u8; 32]) -> bool {
    r.hash.as_slice().ct_eq(hash.as_slice()).into()
}
