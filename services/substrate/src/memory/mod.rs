//! Memory: JSON values by key per scope (`run`, `agent`, `user`, `tenant`) and scope id, served
//! as `weft.v1.Memory`. The substrate is the one place that decides whether a principal may use
//! a scope id — the tenant always comes from the internal JWT:
//!
//! - `tenant`: the scope id is the principal's tenant;
//! - `user`: the principal's subject (any user of the tenant for a tenant admin);
//! - `run`: a run of the tenant that the principal created (any of the tenant's runs for a
//!   tenant admin);
//! - `agent`: any agent name.
//!
//! Anything else is `not_found`, the same answer as for a scope that does not exist, so nothing
//! leaks. Layers: [`grpc`] (scopes of the token, prost) → [`Memory`] (validation,
//! authorization, embeddings, ranking) → [`store::MemoryStore`] (Postgres).

pub mod grpc;
pub mod store;

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use weft_auth::InternalJwt;
use weft_core::{Error, Principal, TenantId};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;
use weft_proto::v1::router_client::RouterClient;

pub use store::{
    Deleted, Embedding, Entry, MemError, MemScope, MemoryStore, Place, Quotas, SetInput, WriteMeta,
};

/// Largest value, as compact JSON.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest scope id, in bytes.
pub const MAX_SCOPE_ID_BYTES: usize = 256;
/// Longest op key, in bytes.
pub const MAX_OP_KEY_BYTES: usize = 256;
/// Longest search query, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Longest TTL: ten years.
pub const MAX_TTL_SECONDS: i64 = 10 * 365 * 24 * 3600;
/// Largest page of a list.
pub const MAX_LIST_LIMIT: u32 = 1000;
/// Page size when none is given.
pub const DEFAULT_LIST_LIMIT: u32 = 100;
/// Most hits of a search.
pub const MAX_TOP_K: u32 = 100;
/// Hits when none is asked for.
pub const DEFAULT_TOP_K: u32 = 10;
/// Most embedded entries one exact-scan search compares (the newest).
pub const MAX_SCAN: u32 = 20_000;
/// How long an embedding call may take.
const EMBED_TIMEOUT: Duration = Duration::from_secs(30);
/// Expired entries deleted per sweep transaction.
const SWEEP_BATCH: i64 = 1000;

/// How search ranks: in Postgres with pgvector, or by an exact scan here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchMode {
    Pgvector,
    Exact,
}

impl SearchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pgvector => "pgvector",
            Self::Exact => "exact",
        }
    }
}

/// What the database offers for vector search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorSupport {
    /// The `vector` extension is installed in this database.
    pub installed: bool,
    /// The server could install it (`CREATE EXTENSION vector`).
    pub available: bool,
}

/// Looks up pgvector in `pg_extension` and `pg_available_extensions`.
pub async fn vector_support(pool: &sqlx::PgPool) -> Result<VectorSupport, sqlx::Error> {
    let (installed, available): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'),
                EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')",
    )
    .fetch_one(pool)
    .await?;
    Ok(VectorSupport {
        installed,
        available,
    })
}

/// How search runs. Ranking always happens here by an exact cosine scan: vectors are stored as
/// `real[]`, which works on every Postgres. With pgvector installed the database could rank
/// with an index instead; that path is not built yet (see docs/api.md), so the mode reported is
/// always [`SearchMode::Exact`].
pub fn search_mode(_support: VectorSupport) -> SearchMode {
    SearchMode::Exact
}

/// Makes embeddings through the router's `Embed`, as the calling principal (so the tenant's
/// usage and limits apply).
#[derive(Clone)]
pub struct Embedder {
    client: RouterClient<GrpcTransport>,
    jwt: InternalJwt,
    model: String,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    pub fn new(router: GrpcTransport, jwt: InternalJwt, model: String) -> Self {
        Self {
            client: weft_proto::transport::router_client(router),
            jwt,
            model,
        }
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// One vector for `text`.
    pub async fn embed(&self, p: &Principal, text: &str) -> Result<Vec<f32>, Error> {
        let msg = v1::EmbedRequest {
            model: self.model.clone(),
            input: vec![text.to_owned()],
            dimensions: None,
            user: String::new(),
            provider_hint: None,
            tier_hint: None,
        };
        let req = weft_auth::rpc::request(&self.jwt, p, msg)?;
        let mut client = self.client.clone();
        let resp = match tokio::time::timeout(EMBED_TIMEOUT, client.embed(req)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(s)) => {
                let e = Error::from(&s);
                tracing::warn!(error = %e.message, "memory: embedding failed");
                return Err(Error::new(
                    e.code,
                    format!(
                        "embedding with `{}` (substrate.embedding_model) failed: {}",
                        self.model, e.message
                    ),
                ));
            }
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "embedding with `{}` took longer than {} s; retry shortly",
                    self.model,
                    EMBED_TIMEOUT.as_secs()
                )));
            }
        };
        let values = resp
            .data
            .into_iter()
            .next()
            .map(|e| e.values)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Error::unavailable(format!(
                    "the router returned no embedding from `{}`; check substrate.embedding_model",
                    self.model
                ))
            })?;
        Ok(values)
    }
}

/// A search hit.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub entry: Entry,
    /// Cosine similarity.
    pub score: f64,
}

/// The memory service's rules over a [`MemoryStore`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Memory {
    store: MemoryStore,
    embedder: Option<Embedder>,
    mode: SearchMode,
}

pub(crate) fn invalid(field: &str, message: String) -> Error {
    Error::invalid(message).with_param(field)
}

/// Checks a caller's text field: non-empty (unless `may_be_empty`), at most `max` bytes, no NUL.
pub(crate) fn check_text(
    field: &str,
    s: &str,
    max: usize,
    may_be_empty: bool,
) -> Result<(), Error> {
    if s.is_empty() && !may_be_empty {
        return Err(invalid(field, format!("`{field}` must not be empty")));
    }
    if s.len() > max {
        return Err(invalid(
            field,
            format!("`{field}` is {} bytes; at most {max} are allowed", s.len()),
        ));
    }
    if s.contains('\0') {
        return Err(weft_core::storable::nul_error(field));
    }
    Ok(())
}

/// Parses a scope name; an unknown one is a 400 naming `scope`.
pub fn parse_scope(s: &str) -> Result<MemScope, Error> {
    MemScope::parse(s).ok_or_else(|| {
        invalid(
            "scope",
            format!(
                "unknown memory scope `{}`; use one of run, agent, user, tenant",
                s.escape_debug()
            ),
        )
    })
}

fn check_ttl(ttl: Option<i64>) -> Result<(), Error> {
    match ttl {
        Some(t) if !(1..=MAX_TTL_SECONDS).contains(&t) => Err(invalid(
            "ttl_seconds",
            format!(
                "`ttl_seconds` must be between 1 and {MAX_TTL_SECONDS}, got {t}; leave it out for an entry that never expires"
            ),
        )),
        _ => Ok(()),
    }
}

fn check_meta<'a>(op_key: Option<&'a str>, agent: Option<&'a str>) -> Result<WriteMeta<'a>, Error> {
    if let Some(k) = op_key {
        check_text("op_key", k, MAX_OP_KEY_BYTES, false)?;
    }
    let agent = agent.unwrap_or("");
    if !agent.is_empty() {
        weft_core::agent::validate_agent_name(agent).map_err(|e| e.with_param("agent"))?;
    }
    Ok(WriteMeta { op_key, agent })
}

/// A list cursor: `k` + the hex of the last key of the page.
fn encode_cursor(key: &str) -> String {
    format!("k{}", hex::encode(key.as_bytes()))
}

fn decode_cursor(c: &str) -> Result<String, Error> {
    let bad = || {
        invalid(
            "cursor",
            "`cursor` is not a cursor this API returned; pass `next_cursor` of the previous page unchanged, or leave it out to start at the beginning".into(),
        )
    };
    let hexed = c.strip_prefix('k').ok_or_else(bad)?;
    if hexed.len() > MAX_KEY_BYTES * 2 {
        return Err(bad());
    }
    let bytes = hex::decode(hexed).map_err(|_| bad())?;
    let key = String::from_utf8(bytes).map_err(|_| bad())?;
    if key.contains('\0') {
        return Err(bad());
    }
    Ok(key)
}

/// The compact JSON of a caller's value, validated: JSON, at most 64 KiB, no NUL.
pub fn compact_value(value_json: &str) -> Result<String, Error> {
    if value_json.len() > MAX_VALUE_BYTES * 8 {
        return Err(too_big(value_json.len()));
    }
    let v: Value = serde_json::from_str(value_json)
        .map_err(|e| invalid("value", format!("`value` is not valid JSON: {e}")))?;
    if let Some(path) = weft_core::storable::nul_path(&v) {
        let at = if path.is_empty() {
            "value".to_owned()
        } else {
            format!("value.{path}")
        };
        return Err(weft_core::storable::nul_error(&at).with_param("value"));
    }
    let compact = v.to_string();
    if compact.len() > MAX_VALUE_BYTES {
        return Err(too_big(compact.len()));
    }
    Ok(compact)
}

fn too_big(n: usize) -> Error {
    invalid(
        "value",
        format!("`value` is {n} bytes as JSON; at most {MAX_VALUE_BYTES} (64 KiB) are allowed"),
    )
}

/// The text embedded for a value: a JSON string as itself, anything else as its JSON.
fn embed_text(value_json: &str) -> String {
    match serde_json::from_str::<Value>(value_json) {
        Ok(Value::String(s)) => s,
        _ => value_json.to_owned(),
    }
}

/// Cosine similarity; 0 when either vector is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// A scope a caller named, not yet authorized.
#[derive(Clone, Copy, Debug)]
pub struct ScopeRef<'a> {
    pub scope: &'a str,
    pub scope_id: &'a str,
}

impl Memory {
    pub fn new(store: MemoryStore, embedder: Option<Embedder>, mode: SearchMode) -> Self {
        Self {
            store,
            embedder,
            mode,
        }
    }

    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    pub fn mode(&self) -> SearchMode {
        self.mode
    }

    /// Validates the scope and decides whether `p` may use the scope id.
    pub async fn authorize<'a>(
        &self,
        p: &'a Principal,
        r: ScopeRef<'a>,
    ) -> Result<Place<'a>, Error> {
        let scope = parse_scope(r.scope)?;
        check_text("scope_id", r.scope_id, MAX_SCOPE_ID_BYTES, false)?;
        let hidden = || {
            Error::not_found(format!(
                "no memory scope `{}/{}` for you; use your tenant, your own user id, your own runs or an agent name",
                scope.as_str(),
                r.scope_id.escape_debug()
            ))
        };
        let tenant: &TenantId = &p.tenant;
        let admin = p.administers(tenant);
        let allowed = match scope {
            MemScope::Tenant => r.scope_id == tenant.as_str(),
            MemScope::User => admin || r.scope_id == p.subject,
            MemScope::Agent => {
                weft_core::agent::validate_agent_name(r.scope_id)
                    .map_err(|e| invalid("scope_id", e.message))?;
                true
            }
            MemScope::Run => match uuid::Uuid::parse_str(r.scope_id) {
                Err(_) => false,
                Ok(id) => match self
                    .store
                    .run_subject(tenant, id)
                    .await
                    .map_err(|e| e.into_api("reading a run"))?
                {
                    Some(subject) => admin || subject == p.subject,
                    None => false,
                },
            },
        };
        if allowed {
            Ok(Place {
                tenant,
                scope,
                scope_id: r.scope_id,
            })
        } else {
            Err(hidden())
        }
    }

    fn no_entry(key: &str) -> Error {
        Error::not_found(format!(
            "no memory entry `{}` in this scope (it may have expired)",
            key.escape_debug()
        ))
        .with_param("key")
    }

    /// The live entry at `key`.
    pub async fn get(&self, p: &Principal, r: ScopeRef<'_>, key: &str) -> Result<Entry, Error> {
        let at = self.authorize(p, r).await?;
        check_text("key", key, MAX_KEY_BYTES, false)?;
        self.store
            .get(at, key)
            .await
            .map_err(|e| e.into_api("reading an entry"))?
            .ok_or_else(|| Self::no_entry(key))
    }

    /// Replaces the entry at `key`.
    #[expect(clippy::too_many_arguments, reason = "the fields of one write request")]
    pub async fn set(
        &self,
        p: &Principal,
        r: ScopeRef<'_>,
        key: &str,
        value_json: &str,
        ttl_seconds: Option<i64>,
        if_version: Option<i64>,
        embed: bool,
        op_key: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Entry, Error> {
        let at = self.authorize(p, r).await?;
        check_text("key", key, MAX_KEY_BYTES, false)?;
        let value = compact_value(value_json)?;
        check_ttl(ttl_seconds)?;
        if let Some(v) = if_version.filter(|v| *v < 0) {
            return Err(invalid(
                "if_version",
                format!("`if_version` must be 0 (must not exist) or a version ≥ 1, got {v}"),
            ));
        }
        let meta = check_meta(op_key, agent)?;
        let embedding = if embed {
            let embedder = self.embedder.as_ref().ok_or_else(|| {
                Error::unavailable(
                    "this substrate has no router for embeddings; set substrate.router_url, or write without `embed`",
                )
            })?;
            let values = embedder.embed(p, &embed_text(&value)).await?;
            Some(Embedding {
                model: embedder.model().to_owned(),
                values,
            })
        } else {
            None
        };
        let input = SetInput {
            key,
            value_json: &value,
            ttl_seconds,
            if_version,
            embedding,
        };
        self.store
            .set(at, &input, meta)
            .await
            .map_err(|e| e.into_api("writing an entry"))
    }

    /// Deletes the entry at `key`.
    pub async fn delete(
        &self,
        p: &Principal,
        r: ScopeRef<'_>,
        key: &str,
        if_version: Option<i64>,
        op_key: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Deleted, Error> {
        let at = self.authorize(p, r).await?;
        check_text("key", key, MAX_KEY_BYTES, false)?;
        if let Some(v) = if_version.filter(|v| *v < 0) {
            return Err(invalid(
                "if_version",
                format!("`if_version` must be 0 or a version ≥ 1, got {v}"),
            ));
        }
        let meta = check_meta(op_key, agent)?;
        self.store
            .delete(at, key, if_version, meta)
            .await
            .map_err(|e| e.into_api("deleting an entry"))
    }

    /// Adds `by` to the integer at `key`.
    #[expect(clippy::too_many_arguments, reason = "the fields of one write request")]
    pub async fn incr(
        &self,
        p: &Principal,
        r: ScopeRef<'_>,
        key: &str,
        by: i64,
        ttl_seconds: Option<i64>,
        op_key: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Entry, Error> {
        let at = self.authorize(p, r).await?;
        check_text("key", key, MAX_KEY_BYTES, false)?;
        check_ttl(ttl_seconds)?;
        let meta = check_meta(op_key, agent)?;
        self.store
            .incr(at, key, by, ttl_seconds, meta)
            .await
            .map_err(|e| e.into_api("incrementing an entry"))
    }

    /// A page of live entries under `prefix`, and the cursor of the next page when there may
    /// be one.
    pub async fn list(
        &self,
        p: &Principal,
        r: ScopeRef<'_>,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<Entry>, Option<String>), Error> {
        let at = self.authorize(p, r).await?;
        check_text("prefix", prefix, MAX_KEY_BYTES, true)?;
        let after = cursor.map(decode_cursor).transpose()?;
        let limit = match limit {
            0 => DEFAULT_LIST_LIMIT,
            n if n > MAX_LIST_LIMIT => {
                return Err(invalid(
                    "limit",
                    format!("`limit` must be between 1 and {MAX_LIST_LIMIT}, got {n}"),
                ));
            }
            n => n,
        };
        let mut entries = self
            .store
            .list(at, prefix, after.as_deref(), limit + 1)
            .await
            .map_err(|e| e.into_api("listing entries"))?;
        let more = entries.len() > limit as usize;
        entries.truncate(limit as usize);
        let next = if more {
            entries.last().map(|e| encode_cursor(&e.key))
        } else {
            None
        };
        Ok((entries, next))
    }

    /// The embedded entries nearest to `query`, best first; ties go to the most recently
    /// updated.
    pub async fn search(
        &self,
        p: &Principal,
        r: ScopeRef<'_>,
        query: &str,
        top_k: u32,
    ) -> Result<Vec<Hit>, Error> {
        let at = self.authorize(p, r).await?;
        check_text("query", query, MAX_QUERY_BYTES, false)?;
        let top_k = match top_k {
            0 => DEFAULT_TOP_K,
            n if n > MAX_TOP_K => {
                return Err(invalid(
                    "top_k",
                    format!("`top_k` must be between 1 and {MAX_TOP_K}, got {n}"),
                ));
            }
            n => n,
        };
        let embedder = self.embedder.as_ref().ok_or_else(|| {
            Error::unavailable(
                "this substrate has no router for embeddings; set substrate.router_url",
            )
        })?;
        let q = embedder.embed(p, query).await?;
        let candidates = self
            .store
            .candidates(at, embedder.model(), q.len(), MAX_SCAN)
            .await
            .map_err(|e| e.into_api("searching"))?;
        let mut scored: Vec<(f64, store::Candidate)> = candidates
            .into_iter()
            .map(|c| (cosine(&q, &c.embedding), c))
            .collect();
        scored.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| b.1.updated_at.cmp(&a.1.updated_at))
                .then_with(|| a.1.key.cmp(&b.1.key))
        });
        scored.truncate(top_k as usize);
        let keys: Vec<String> = scored.iter().map(|(_, c)| c.key.clone()).collect();
        let entries = self
            .store
            .get_many(at, &keys)
            .await
            .map_err(|e| e.into_api("searching"))?;
        Ok(scored
            .into_iter()
            .filter_map(|(score, c)| {
                entries.iter().find(|e| e.key == c.key).map(|e| Hit {
                    entry: e.clone(),
                    score,
                })
            })
            .collect())
    }
}

/// Deletes expired entries every `every` until `shutdown`. Reads never return expired entries;
/// the sweep gives their bytes back to the quotas and keeps the table small.
pub async fn sweep_until(store: MemoryStore, every: Duration, shutdown: CancellationToken) {
    let (store, shutdown) = (&store, &shutdown);
    crate::sweep::every_until(every, shutdown, move || async move {
        let n = crate::sweep::in_batches(SWEEP_BATCH, shutdown, move |b| async move {
            store
                .sweep_expired(b)
                .await
                .map_err(|e| e.into_api("sweeping expired entries"))
        })
        .await;
        if n > 0 {
            tracing::debug!(deleted = n, "memory: expired entries swept");
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let c = encode_cursor("a/b ü");
        assert_eq!(decode_cursor(&c).unwrap_or_default(), "a/b ü");
        for bad in ["", "zz", "kzz", "k00"] {
            let e = decode_cursor(bad).err();
            assert_eq!(e.and_then(|e| e.param).as_deref(), Some("cursor"), "{bad}");
        }
    }

    #[test]
    fn values_are_compacted_and_bounded() {
        assert_eq!(
            compact_value("{ \"a\" : 1 }").ok().as_deref(),
            Some("{\"a\":1}")
        );
        let big = format!("\"{}\"", "x".repeat(MAX_VALUE_BYTES));
        assert_eq!(
            compact_value(&big).err().and_then(|e| e.param).as_deref(),
            Some("value")
        );
        assert_eq!(
            compact_value("{").err().and_then(|e| e.param).as_deref(),
            Some("value")
        );
        assert_eq!(
            compact_value("{\"a\":\"x\\u0000\"}")
                .err()
                .and_then(|e| e.param)
                .as_deref(),
            Some("value")
        );
    }

    #[test]
    fn cosine_of_equal_vectors_is_one() {
        assert!((cosine(&[1.0, 2.0], &[1.0, 2.0]) - 1.0).abs() < 1e-9);
        assert!(cosine(&[1.0, 0.0], &[0.0, 1.0]).abs() < 1e-9);
        assert!(cosine(&[0.0, 0.0], &[0.0, 1.0]).abs() < 1e-9);
    }
}
