//! `MemoryStore`: memory entries in Postgres (`memory_entries`, `memory_usage`, `memory_ops`).
//! It reads and writes; validation and authorization live in [`crate::memory`]. Every query
//! filters by `tenant_id` except the expiry sweep, which deletes expired rows of every tenant.
//!
//! A write (set, delete, incr) is one transaction: claim the op key (a repeat returns the
//! recorded result), take a transaction-scoped advisory lock on the entry's address (so
//! concurrent writers of one key — including the first insert — run one at a time), read the
//! row `FOR UPDATE` (so the sweep skips it), apply the change, move the byte usage of the
//! tenant and agents (refusing a write over quota), record the op's result, commit. A
//! deadlock or serialization failure is retried.
//!
//! A set runs the steps from the lock to the usage move as one statement, the Postgres function
//! `weft_memory_set`; without an op key that statement is the whole transaction, so the hot
//! path of `PUT /v1/memory/...` is one round trip instead of six.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};
use time::OffsetDateTime;
use weft_core::{Error, ErrorCode, TenantId};
use weft_store::StoreError;
use weft_store::kept::Kept;

/// How many times a write is attempted when Postgres aborts it for a deadlock or a
/// serialization failure.
const WRITE_ATTEMPTS: u32 = 4;

/// How long an op key is remembered. A run that resumes later than this after a crash may
/// apply a write twice.
const OP_RETENTION_DAYS: i32 = 7;

/// The memory scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemScope {
    Run,
    Agent,
    User,
    Tenant,
}

impl MemScope {
    /// Every scope, in the order they are documented.
    pub const ALL: [MemScope; 4] = [Self::Run, Self::Agent, Self::User, Self::Tenant];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Agent => "agent",
            Self::User => "user",
            Self::Tenant => "tenant",
        }
    }
}

/// An authorized place in memory: a tenant's scope and scope id.
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    pub tenant: &'a TenantId,
    pub scope: MemScope,
    pub scope_id: &'a str,
}

/// A live entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Entry {
    pub key: String,
    /// Compact JSON.
    pub value_json: String,
    pub version: i64,
    pub expires_at: Option<OffsetDateTime>,
    pub updated_at: OffsetDateTime,
    pub embedded: bool,
}

/// The result of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// False when there was no live entry.
    pub deleted: bool,
    /// The version deleted, 0 when none.
    pub version: i64,
}

/// A vector to store with a value.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    pub model: String,
    pub values: Vec<f32>,
}

/// What a write names, for the op record: a repeat of an op key must name the same.
#[derive(Clone, Copy, Debug)]
pub struct WriteMeta<'a> {
    pub op_key: Option<&'a str>,
    /// The writing agent ('' = none).
    pub agent: &'a str,
}

/// A set.
#[derive(Clone, Debug)]
pub struct SetInput<'a> {
    pub key: &'a str,
    pub value_json: &'a str,
    pub ttl_seconds: Option<i64>,
    pub if_version: Option<i64>,
    pub embedding: Option<Embedding>,
}

/// One search candidate of the exact scan.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Candidate {
    pub key: String,
    pub embedding: Vec<f32>,
    pub updated_at: OffsetDateTime,
}

/// The byte quotas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    pub tenant_bytes: u64,
    pub agent_bytes: u64,
}

/// A store failure: a rule the data broke (a 4xx for the caller) or the database.
#[derive(Debug)]
pub enum MemError {
    Rule(Error),
    Db(sqlx::Error),
}

impl From<sqlx::Error> for MemError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e)
    }
}

impl From<Error> for MemError {
    fn from(e: Error) -> Self {
        Self::Rule(e)
    }
}

impl MemError {
    /// The caller-facing error; database failures are logged, never shown.
    pub fn into_api(self, what: &str) -> Error {
        match self {
            Self::Rule(e) => e,
            Self::Db(e) => {
                tracing::error!(error = %e, "memory: {what} failed");
                StoreError::Db(e).to_api()
            }
        }
    }

    fn retryable(&self) -> bool {
        match self {
            Self::Db(sqlx::Error::Database(d)) => {
                matches!(d.code().as_deref(), Some("40001" | "40P01"))
            }
            _ => false,
        }
    }
}

/// What the op record keeps.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Recorded {
    Entry(Entry),
    Deleted(Deleted),
}

/// The row a writer locked.
#[derive(sqlx::FromRow)]
struct Current {
    value_json: String,
    version: i64,
    bytes: i64,
    agent: String,
    expires_at: Option<OffsetDateTime>,
    live: bool,
}

/// The op record of an op key already claimed ([`claim_op`]).
#[derive(sqlx::FromRow)]
struct OpRecord {
    target: String,
    result: Option<serde_json::Value>,
}

/// The bytes one tenant (`agent` '') or agent gets back from a sweep, and how many entries went.
#[derive(sqlx::FromRow)]
struct Gone {
    tenant_id: String,
    agent: String,
    bytes: i64,
    n: i64,
}

/// Memory entries in Postgres. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    pool: PgPool,
    /// Connections kept for the single statements of a get and a set, which would otherwise
    /// each pay the pool's test (a round trip) on release.
    kept: Arc<Kept>,
    quotas: Quotas,
}

/// At most this many connections kept by a [`MemoryStore`] beside its pool.
const KEPT_CONNECTIONS: usize = 8;

macro_rules! entry_columns {
    () => {
        "key, value_json, version, expires_at, updated_at, embedding IS NOT NULL AS embedded"
    };
}
const ENTRY_COLUMNS: &str = entry_columns!();

fn conflict(message: String) -> MemError {
    MemError::Rule(Error::new(ErrorCode::Conflict, message))
}

/// The bytes an entry counts against the quotas.
fn entry_bytes(key: &str, value_json: &str) -> i64 {
    i64::try_from(key.len() + value_json.len()).unwrap_or(i64::MAX)
}

/// The smallest string greater than every string starting with `prefix` in code-point (= UTF-8
/// byte) order, or `None` when there is none.
pub fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match u32::from(last) {
            0xD7FF => Some('\u{E000}'),
            n => char::from_u32(n + 1),
        };
        if let Some(c) = next {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

impl MemoryStore {
    pub fn new(pool: PgPool, quotas: Quotas) -> Self {
        Self {
            kept: Arc::new(Kept::new(pool.clone(), KEPT_CONNECTIONS)),
            pool,
            quotas,
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn quotas(&self) -> Quotas {
        self.quotas
    }

    /// The subject that created run `id` of `tenant`, or `None` when the tenant has no such run.
    pub async fn run_subject(
        &self,
        tenant: &TenantId,
        id: uuid::Uuid,
    ) -> Result<Option<String>, MemError> {
        Ok(
            sqlx::query_scalar("SELECT subject FROM runs WHERE tenant_id = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The live entry at `key`.
    pub async fn get(&self, at: Place<'_>, key: &str) -> Result<Option<Entry>, MemError> {
        let sql = concat!(
            "SELECT ",
            entry_columns!(),
            " FROM memory_entries
             WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND key = $4
               AND (expires_at IS NULL OR expires_at > now())"
        );
        self.kept
            .run(async |conn| {
                Ok(sqlx::query_as(sql)
                    .bind(at.tenant.as_str())
                    .bind(at.scope.as_str())
                    .bind(at.scope_id)
                    .bind(key)
                    .fetch_optional(conn)
                    .await?)
            })
            .await
    }

    /// Live entries whose key starts with `prefix` and is greater than `after`, in key order,
    /// at most `limit`.
    pub async fn list(
        &self,
        at: Place<'_>,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Entry>, MemError> {
        let mut q = QueryBuilder::<Postgres>::new("SELECT ");
        q.push(ENTRY_COLUMNS)
            .push(" FROM memory_entries WHERE tenant_id = ")
            .push_bind(at.tenant.as_str())
            .push(" AND scope = ")
            .push_bind(at.scope.as_str())
            .push(" AND scope_id = ")
            .push_bind(at.scope_id)
            .push(" AND (expires_at IS NULL OR expires_at > now())");
        if !prefix.is_empty() {
            q.push(" AND key >= ").push_bind(prefix);
            if let Some(upper) = prefix_upper_bound(prefix) {
                q.push(" AND key < ").push_bind(upper);
            }
        }
        if let Some(after) = after {
            q.push(" AND key > ").push_bind(after);
        }
        q.push(" ORDER BY key LIMIT ").push_bind(i64::from(limit));
        Ok(q.build_query_as().fetch_all(&self.pool).await?)
    }

    /// The embedded live entries of a place made with `model` and `dims` dimensions, newest
    /// first, at most `max`.
    pub async fn candidates(
        &self,
        at: Place<'_>,
        model: &str,
        dims: usize,
        max: u32,
    ) -> Result<Vec<Candidate>, MemError> {
        Ok(sqlx::query_as(
            "SELECT key, embedding, updated_at FROM memory_entries
             WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND embedding IS NOT NULL
               AND embedding_model = $4 AND cardinality(embedding) = $5
               AND (expires_at IS NULL OR expires_at > now())
             ORDER BY updated_at DESC LIMIT $6",
        )
        .bind(at.tenant.as_str())
        .bind(at.scope.as_str())
        .bind(at.scope_id)
        .bind(model)
        .bind(i32::try_from(dims).unwrap_or(i32::MAX))
        .bind(i64::from(max))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The live entries at `keys`, in no particular order.
    pub async fn get_many(&self, at: Place<'_>, keys: &[String]) -> Result<Vec<Entry>, MemError> {
        let sql = concat!(
            "SELECT ",
            entry_columns!(),
            " FROM memory_entries
             WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND key = ANY($4)
               AND (expires_at IS NULL OR expires_at > now())"
        );
        Ok(sqlx::query_as(sql)
            .bind(at.tenant.as_str())
            .bind(at.scope.as_str())
            .bind(at.scope_id)
            .bind(keys)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Bytes in use by `tenant` (agent `None`) or one of its agents.
    pub async fn usage(&self, tenant: &TenantId, agent: Option<&str>) -> Result<i64, MemError> {
        let bytes: Option<i64> = sqlx::query_scalar(
            "SELECT bytes FROM memory_usage WHERE tenant_id = $1 AND agent = $2",
        )
        .bind(tenant.as_str())
        .bind(agent.unwrap_or(""))
        .fetch_optional(&self.pool)
        .await?;
        Ok(bytes.unwrap_or(0))
    }

    /// Replaces the entry at `input.key`.
    pub async fn set(
        &self,
        at: Place<'_>,
        input: &SetInput<'_>,
        meta: WriteMeta<'_>,
    ) -> Result<Entry, MemError> {
        let target = format!("set {} {} {}", at.scope.as_str(), at.scope_id, input.key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.set_once(at, input, meta, &target).await {
                Err(e) if e.retryable() && attempt < WRITE_ATTEMPTS => continue,
                Ok(Recorded::Entry(e)) => return Ok(e),
                Ok(Recorded::Deleted(_)) => return Err(op_reused()),
                Err(e) => return Err(e),
            }
        }
    }

    async fn set_once(
        &self,
        at: Place<'_>,
        input: &SetInput<'_>,
        meta: WriteMeta<'_>,
        target: &str,
    ) -> Result<Recorded, MemError> {
        // Without an op key the write is one statement (its own transaction): one round trip.
        if meta.op_key.is_none() {
            let entry = self
                .kept
                .run(async |conn| {
                    // Postgres's own answer (an entry, or a rule it enforced) leaves the
                    // connection ready for the next statement: kept.
                    match self.set_statement(conn, at, input, meta.agent).await {
                        Err(MemError::Db(e)) if !weft_store::kept::answered(&e) => {
                            Err(MemError::Db(e))
                        }
                        answered => Ok(answered),
                    }
                })
                .await??;
            return Ok(Recorded::Entry(entry));
        }
        let mut tx = self.pool.begin().await?;
        if let Some(done) = claim_op(&mut tx, at.tenant, meta.op_key, target).await? {
            return Ok(done);
        }
        let entry = self.set_statement(&mut *tx, at, input, meta.agent).await?;
        let done = Recorded::Entry(entry);
        finish_op(&mut tx, at.tenant, meta.op_key, &done).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// The set itself, in one statement (`weft_memory_set`, migration
    /// `20261123000040_memory_perf.sql`): the advisory lock on the address, the row `FOR
    /// UPDATE`, the `if_version` check, the upsert and the usage move with the quota check —
    /// the same steps, in the same order, as [`lock_entry`] + [`Self::charge`].
    async fn set_statement<'e, E>(
        &self,
        db: E,
        at: Place<'_>,
        input: &SetInput<'_>,
        agent: &str,
    ) -> Result<Entry, MemError>
    where
        E: sqlx::Executor<'e, Database = Postgres>,
    {
        let bytes = entry_bytes(input.key, input.value_json);
        let (embedding, model) = match &input.embedding {
            Some(e) => (Some(e.values.as_slice()), Some(e.model.as_str())),
            None => (None, None),
        };
        let limit = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        sqlx::query_as(
            "SELECT key, value_json, version, expires_at, updated_at, embedded
             FROM weft_memory_set($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(at.tenant.as_str())
        .bind(at.scope.as_str())
        .bind(at.scope_id)
        .bind(input.key)
        .bind(input.value_json)
        .bind(i32::try_from(bytes).unwrap_or(i32::MAX))
        .bind(agent)
        .bind(input.ttl_seconds)
        .bind(input.if_version)
        .bind(embedding)
        .bind(model)
        .bind(limit(self.quotas.tenant_bytes))
        .bind(limit(self.quotas.agent_bytes))
        .fetch_one(db)
        .await
        .map_err(|e| self.set_error(input, e))
    }

    /// The rule a `weft_memory_set` error stands for (`WM001` quota, `WM002` version), or the
    /// database error.
    fn set_error(&self, input: &SetInput<'_>, e: sqlx::Error) -> MemError {
        let sqlx::Error::Database(d) = &e else {
            return MemError::Db(e);
        };
        let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() else {
            return MemError::Db(e);
        };
        let detail: Option<i64> = pg.detail().and_then(|s| s.parse().ok());
        match (pg.code(), detail) {
            ("WM001", Some(now)) => quota_error(self.quotas, pg.hint().unwrap_or(""), now),
            ("WM002", Some(live)) => {
                let live = (live > 0).then_some(live);
                match check_version(input.key, input.if_version.unwrap_or(0), live) {
                    Err(rule) => rule,
                    // Postgres and this side disagree on the rule; never expected.
                    Ok(()) => MemError::Db(e),
                }
            }
            _ => MemError::Db(e),
        }
    }

    /// Deletes the entry at `key`.
    pub async fn delete(
        &self,
        at: Place<'_>,
        key: &str,
        if_version: Option<i64>,
        meta: WriteMeta<'_>,
    ) -> Result<Deleted, MemError> {
        let target = format!("delete {} {} {}", at.scope.as_str(), at.scope_id, key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.delete_once(at, key, if_version, meta, &target).await {
                Err(e) if e.retryable() && attempt < WRITE_ATTEMPTS => continue,
                Ok(Recorded::Deleted(d)) => return Ok(d),
                Ok(Recorded::Entry(_)) => return Err(op_reused()),
                Err(e) => return Err(e),
            }
        }
    }

    async fn delete_once(
        &self,
        at: Place<'_>,
        key: &str,
        if_version: Option<i64>,
        meta: WriteMeta<'_>,
        target: &str,
    ) -> Result<Recorded, MemError> {
        let mut tx = self.pool.begin().await?;
        if let Some(done) = claim_op(&mut tx, at.tenant, meta.op_key, target).await? {
            return Ok(done);
        }
        let current = lock_entry(&mut tx, at, key).await?;
        let live = current.as_ref().filter(|c| c.live);
        if let Some(expected) = if_version {
            check_version(key, expected, live.map(|c| c.version))?;
        }
        if current.is_some() {
            sqlx::query(
                "DELETE FROM memory_entries
                 WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND key = $4",
            )
            .bind(at.tenant.as_str())
            .bind(at.scope.as_str())
            .bind(at.scope_id)
            .bind(key)
            .execute(&mut *tx)
            .await?;
            self.charge(&mut tx, at.tenant, current.as_ref(), meta.agent, 0)
                .await?;
        }
        let done = Recorded::Deleted(Deleted {
            deleted: live.is_some(),
            version: live.map_or(0, |c| c.version),
        });
        finish_op(&mut tx, at.tenant, meta.op_key, &done).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// Adds `by` to the integer at `key` (a missing entry starts at 0).
    pub async fn incr(
        &self,
        at: Place<'_>,
        key: &str,
        by: i64,
        ttl_seconds: Option<i64>,
        meta: WriteMeta<'_>,
    ) -> Result<Entry, MemError> {
        let target = format!("incr {} {} {}", at.scope.as_str(), at.scope_id, key);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .incr_once(at, key, by, ttl_seconds, meta, &target)
                .await
            {
                Err(e) if e.retryable() && attempt < WRITE_ATTEMPTS => continue,
                Ok(Recorded::Entry(e)) => return Ok(e),
                Ok(Recorded::Deleted(_)) => return Err(op_reused()),
                Err(e) => return Err(e),
            }
        }
    }

    async fn incr_once(
        &self,
        at: Place<'_>,
        key: &str,
        by: i64,
        ttl_seconds: Option<i64>,
        meta: WriteMeta<'_>,
        target: &str,
    ) -> Result<Recorded, MemError> {
        let mut tx = self.pool.begin().await?;
        if let Some(done) = claim_op(&mut tx, at.tenant, meta.op_key, target).await? {
            return Ok(done);
        }
        let current = lock_entry(&mut tx, at, key).await?;
        let live = current.as_ref().filter(|c| c.live);
        let old = match live {
            None => 0,
            Some(c) => match serde_json::from_str::<serde_json::Value>(&c.value_json)
                .ok()
                .and_then(|v| v.as_i64())
            {
                Some(n) => n,
                None => {
                    return Err(conflict(format!(
                        "the value at `{key}` is not an integer, so it cannot be incremented; set it to an integer or use another key"
                    )));
                }
            },
        };
        let new = old.checked_add(by).ok_or_else(|| {
            conflict(format!(
                "adding {by} to {old} at `{key}` overflows a 64-bit integer"
            ))
        })?;
        let value_json = new.to_string();
        let version = live.map_or(1, |c| c.version + 1);
        let bytes = entry_bytes(key, &value_json);
        // A live entry keeps its expiry unless a TTL is given; a new one never expires unless
        // one is given.
        let keep_expiry = match (ttl_seconds, live) {
            (None, Some(c)) => c.expires_at,
            _ => None,
        };
        let sql = concat!(
            "INSERT INTO memory_entries
               (tenant_id, scope, scope_id, key, value_json, bytes, version, agent, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                     COALESCE(now() + make_interval(secs => $9::bigint), $10))
             ON CONFLICT (tenant_id, scope, scope_id, key) DO UPDATE SET
               value_json = EXCLUDED.value_json, bytes = EXCLUDED.bytes,
               version = EXCLUDED.version, agent = EXCLUDED.agent,
               expires_at = EXCLUDED.expires_at, embedding = NULL, embedding_model = NULL,
               updated_at = now()
             RETURNING ",
            entry_columns!(),
            ""
        );
        let entry: Entry = sqlx::query_as(sql)
            .bind(at.tenant.as_str())
            .bind(at.scope.as_str())
            .bind(at.scope_id)
            .bind(key)
            .bind(&value_json)
            .bind(i32::try_from(bytes).unwrap_or(i32::MAX))
            .bind(version)
            .bind(meta.agent)
            .bind(ttl_seconds)
            .bind(keep_expiry)
            .fetch_one(&mut *tx)
            .await?;
        self.charge(&mut tx, at.tenant, current.as_ref(), meta.agent, bytes)
            .await?;
        let done = Recorded::Entry(entry);
        finish_op(&mut tx, at.tenant, meta.op_key, &done).await?;
        tx.commit().await?;
        Ok(done)
    }

    /// Moves the usage from the replaced row (its owner, its bytes) to the new one (`agent`,
    /// `bytes`; 0 for a delete), refusing growth over a quota. Rows are updated in
    /// `(tenant, agent)` order, the tenant's total ('') first.
    async fn charge(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        tenant: &TenantId,
        old: Option<&Current>,
        agent: &str,
        bytes: i64,
    ) -> Result<(), MemError> {
        let (old_agent, old_bytes) = old.map_or(("", 0), |c| (c.agent.as_str(), c.bytes));
        let mut deltas: Vec<(&str, i64)> = vec![("", bytes - old_bytes)];
        if old_agent == agent {
            if !agent.is_empty() {
                deltas.push((agent, bytes - old_bytes));
            }
        } else {
            if !old_agent.is_empty() {
                deltas.push((old_agent, -old_bytes));
            }
            if !agent.is_empty() {
                deltas.push((agent, bytes));
            }
        }
        deltas.sort_by(|a, b| a.0.cmp(b.0));
        for (who, delta) in deltas {
            if delta == 0 {
                continue;
            }
            let now: i64 = sqlx::query_scalar(
                "INSERT INTO memory_usage (tenant_id, agent, bytes) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant_id, agent) DO UPDATE SET bytes = memory_usage.bytes + EXCLUDED.bytes
                 RETURNING bytes",
            )
            .bind(tenant.as_str())
            .bind(who)
            .bind(delta)
            .fetch_one(&mut **tx)
            .await?;
            let limit = if who.is_empty() {
                self.quotas.tenant_bytes
            } else {
                self.quotas.agent_bytes
            };
            if delta > 0 && now > i64::try_from(limit).unwrap_or(i64::MAX) {
                return Err(quota_error(self.quotas, who, now));
            }
        }
        Ok(())
    }

    /// Deletes up to `batch` expired entries of every tenant, giving their bytes back, and
    /// forgets op keys older than the retention. Returns how many entries went.
    pub async fn sweep_expired(&self, batch: i64) -> Result<u64, MemError> {
        let mut tx = self.pool.begin().await?;
        // Cross-tenant by design: expiry is the operator's housekeeping, not a tenant's read.
        let rows: Vec<Gone> = sqlx::query_as(
            "WITH gone AS (
                 DELETE FROM memory_entries WHERE ctid IN (
                     SELECT ctid FROM memory_entries
                     WHERE expires_at IS NOT NULL AND expires_at <= now()
                     ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
                 RETURNING tenant_id, agent, bytes)
             SELECT tenant_id, agent, sum(bytes)::bigint AS bytes, count(*) AS n FROM (
                 SELECT tenant_id, '' AS agent, bytes FROM gone
                 UNION ALL
                 SELECT tenant_id, agent, bytes FROM gone WHERE agent <> '') t
             GROUP BY tenant_id, agent ORDER BY tenant_id, agent",
        )
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?;
        let mut deleted = 0u64;
        for r in &rows {
            if r.agent.is_empty() {
                deleted += u64::try_from(r.n).unwrap_or(0);
            }
            sqlx::query(
                "UPDATE memory_usage SET bytes = bytes - $3 WHERE tenant_id = $1 AND agent = $2",
            )
            .bind(&r.tenant_id)
            .bind(&r.agent)
            .bind(r.bytes)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("DELETE FROM memory_ops WHERE created_at < now() - make_interval(days => $1)")
            .bind(OP_RETENTION_DAYS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(deleted)
    }
}

/// The 409 of a write that would bring `who`'s usage ('' = the tenant's total) to `now` bytes,
/// over its quota.
fn quota_error(quotas: Quotas, who: &str, now: i64) -> MemError {
    let (limit, what, key) = if who.is_empty() {
        (
            quotas.tenant_bytes,
            "the tenant's memory quota".to_owned(),
            "substrate.memory_tenant_quota_bytes",
        )
    } else {
        (
            quotas.agent_bytes,
            format!("agent `{who}`'s memory quota"),
            "substrate.memory_agent_quota_bytes",
        )
    };
    conflict(format!(
        "this write would bring {what} to {now} bytes, over its {limit} bytes ({key}); delete entries or let them expire, or ask the operator to raise {key}"
    ))
}

fn op_reused() -> MemError {
    MemError::Rule(
        Error::invalid("`op_key` was already used for another kind of write; use a new op key")
            .with_param("op_key"),
    )
}

fn check_version(key: &str, expected: i64, live: Option<i64>) -> Result<(), MemError> {
    match (expected, live) {
        (0, None) => Ok(()),
        (0, Some(v)) => Err(conflict(format!(
            "`{key}` already exists at version {v}, but `if_version` 0 requires it not to; read it and retry with `if_version` {v}"
        ))),
        (e, Some(v)) if e == v => Ok(()),
        (e, Some(v)) => Err(conflict(format!(
            "`{key}` is at version {v}, not {e} (`if_version`); read it and retry with the current version"
        ))),
        (e, None) => Err(conflict(format!(
            "`{key}` does not exist (current version 0), but `if_version` is {e}; use `if_version` 0 to create it"
        ))),
    }
}

/// Claims `op_key` for this transaction, or returns what an earlier write under it recorded.
/// A concurrent claim of the same key waits for the first transaction to end.
async fn claim_op(
    tx: &mut Transaction<'_, Postgres>,
    tenant: &TenantId,
    op_key: Option<&str>,
    target: &str,
) -> Result<Option<Recorded>, MemError> {
    let Some(op_key) = op_key else {
        return Ok(None);
    };
    let claimed = sqlx::query(
        "INSERT INTO memory_ops (tenant_id, op_key, target) VALUES ($1, $2, $3)
         ON CONFLICT (tenant_id, op_key) DO NOTHING",
    )
    .bind(tenant.as_str())
    .bind(op_key)
    .bind(target)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if claimed == 1 {
        return Ok(None);
    }
    let op: OpRecord = sqlx::query_as(
        "SELECT target, result FROM memory_ops WHERE tenant_id = $1 AND op_key = $2",
    )
    .bind(tenant.as_str())
    .bind(op_key)
    .fetch_one(&mut **tx)
    .await?;
    if op.target != target {
        return Err(MemError::Rule(
            Error::invalid(
                "`op_key` was already used for a write to another key or of another kind; use a new op key",
            )
            .with_param("op_key"),
        ));
    }
    let recorded = op
        .result
        .and_then(|v| serde_json::from_value::<Recorded>(v).ok())
        .ok_or_else(|| {
            tracing::error!("memory: op record without a readable result");
            MemError::Rule(Error::internal())
        })?;
    Ok(Some(recorded))
}

async fn finish_op(
    tx: &mut Transaction<'_, Postgres>,
    tenant: &TenantId,
    op_key: Option<&str>,
    done: &Recorded,
) -> Result<(), MemError> {
    let Some(op_key) = op_key else {
        return Ok(());
    };
    let result = serde_json::to_value(done).map_err(|e| {
        tracing::error!(error = %e, "memory: op result not serializable");
        MemError::Rule(Error::internal())
    })?;
    sqlx::query("UPDATE memory_ops SET result = $3 WHERE tenant_id = $1 AND op_key = $2")
        .bind(tenant.as_str())
        .bind(op_key)
        .bind(result)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Serializes writers of one address (the advisory lock also covers a key that does not exist
/// yet) and reads its row, expired or not, locked.
async fn lock_entry(
    tx: &mut Transaction<'_, Postgres>,
    at: Place<'_>,
    key: &str,
) -> Result<Option<Current>, MemError> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended(
             $1 || '/' || $2 || '/' || length($3)::text || '/' || $3 || '/' || $4, 7))",
    )
    .bind(at.tenant.as_str())
    .bind(at.scope.as_str())
    .bind(at.scope_id)
    .bind(key)
    .execute(&mut **tx)
    .await?;
    Ok(sqlx::query_as(
        "SELECT value_json, version, bytes::bigint AS bytes, agent, expires_at,
                (expires_at IS NULL OR expires_at > now()) AS live
         FROM memory_entries
         WHERE tenant_id = $1 AND scope = $2 AND scope_id = $3 AND key = $4
         FOR UPDATE",
    )
    .bind(at.tenant.as_str())
    .bind(at.scope.as_str())
    .bind(at.scope_id)
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_bound_follows_code_point_order() {
        assert_eq!(prefix_upper_bound("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_upper_bound("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_upper_bound("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
        assert_eq!(prefix_upper_bound(""), None);
    }
}
