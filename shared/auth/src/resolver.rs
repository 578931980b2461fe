//! Resolves bearer tokens to principals, with a small cache in front of the `tokens` table.
//!
//! A cache entry lives at most `ttl` (≤ 1 s by config), so a revoked or expired token stops
//! working on every replica within that time without any cross-replica messaging.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq as _;
use time::OffsetDateTime;
use weft_core::{Error, Principal};
use weft_store::{TokenRecord, TokenStore};

use crate::token::{TOKEN_PREFIX, hash_token};

/// Most entries kept; past this the cache is cleared rather than grown.
const MAX_ENTRIES: usize = 100_000;

#[derive(Clone)]
struct Entry {
    /// `None` caches a miss, so a flood of bad tokens does not become a flood of queries.
    principal: Option<Principal>,
    expires_at: Option<OffsetDateTime>,
    fetched: Instant,
}

#[derive(Clone)]
pub struct TokenResolver {
    store: TokenStore,
    ttl: Duration,
    cache: Arc<Mutex<HashMap<[u8; 32], Entry>>>,
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
        }
    }

    /// The principal of `token`, or a 401 that says what to do.
    pub async fn resolve(&self, token: &str) -> Result<Principal, Error> {
        if !token.starts_with(TOKEN_PREFIX) {
            return Err(Error::unauthenticated(
                "the bearer token is not a weft token (they start with `wft_`); create one with `weft token create`",
            ));
        }
        let hash = hash_token(token);
        let now = Instant::now();
        if let Some(e) = self.cached(&hash, now) {
            return Self::check(e.principal, e.expires_at);
        }
        let record = self.store.find_by_hash(&hash).await.map_err(|e| {
            tracing::error!(error = %e, "token lookup failed");
            e.to_api()
        })?;
        let entry = match record {
            Some(r) if verify_hash(&r, &hash) && r.is_active(OffsetDateTime::now_utc()) => Entry {
                principal: Some(Principal {
                    tenant: r.tenant,
                    subject: r.subject,
                    scopes: r.scopes,
                }),
                expires_at: r.expires_at,
                fetched: now,
            },
            _ => Entry {
                principal: None,
                expires_at: None,
                fetched: now,
            },
        };
        self.store_entry(hash, entry.clone());
        Self::check(entry.principal, entry.expires_at)
    }

    /// Drops a cached entry now (this replica); other replicas notice within the TTL.
    pub fn forget(&self, hash: &[u8]) {
        if let (Ok(mut cache), Ok(key)) = (self.cache.lock(), <[u8; 32]>::try_from(hash)) {
            cache.remove(&key);
        }
    }

    fn cached(&self, hash: &[u8; 32], now: Instant) -> Option<Entry> {
        let cache = self.cache.lock().ok()?;
        cache
            .get(hash)
            .filter(|e| now.duration_since(e.fetched) < self.ttl)
            .cloned()
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
