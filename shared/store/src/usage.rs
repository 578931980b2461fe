//! The `usage` table: one row per model call, written in batches by the usage writer and read
//! back as per-tenant summaries (`GET /v1/usage`).
//!
//! Writes are idempotent: a row's key is the record's id, and a record written twice (a
//! redelivery after a crash between the insert and the ack) is kept once. Summaries group by any
//! subset of [`GroupBy`] in one static statement: each group column is selected as
//! `CASE WHEN <flag> THEN column END`, so an unused key is NULL for every row and groups nothing.

use std::fmt;
use std::str::FromStr;

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::{TenantId, UsageRecord};

use crate::StoreError;

/// What a summary may be grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupBy {
    /// The provider that served the call.
    Provider,
    /// The model that served the call.
    Model,
    /// What the caller asked for: a model, an alias or a tier.
    RequestedModel,
    /// The principal's subject.
    Subject,
    /// The token the call came with (`token_id`, null for calls without one).
    Token,
    /// `chat` or `embed`.
    Kind,
    /// The UTC day the call finished.
    Day,
    /// The UTC hour the call finished.
    Hour,
}

impl GroupBy {
    /// Every key, in the order the API lists them.
    pub const ALL: [GroupBy; 8] = [
        Self::Provider,
        Self::Model,
        Self::RequestedModel,
        Self::Subject,
        Self::Token,
        Self::Kind,
        Self::Day,
        Self::Hour,
    ];

    /// The name used in `group_by=` (and, except for `token`, the row field it fills).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::Model => "model",
            Self::RequestedModel => "requested_model",
            Self::Subject => "subject",
            Self::Token => "token",
            Self::Kind => "kind",
            Self::Day => "day",
            Self::Hour => "hour",
        }
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown `group_by` name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown group_by value `{0}`")]
pub struct UnknownGroupBy(pub String);

impl FromStr for GroupBy {
    type Err = UnknownGroupBy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| UnknownGroupBy(s.to_owned()))
    }
}

/// One group of a summary. A key the summary was not grouped by is `None`; so is `token_id` for
/// calls made without a token.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct UsageRow {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub requested_model: Option<String>,
    pub subject: Option<String>,
    pub token_id: Option<String>,
    pub kind: Option<String>,
    /// The start of the UTC day.
    pub day: Option<OffsetDateTime>,
    /// The start of the UTC hour.
    pub hour: Option<OffsetDateTime>,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    pub avg_latency_ms: f64,
    pub p95_latency_ms: f64,
}

/// A summary's groups, ordered by their keys (time first).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageSummary {
    /// At most [`UsageStore::MAX_GROUPS`] groups.
    pub rows: Vec<UsageRow>,
    /// There were more groups than [`UsageStore::MAX_GROUPS`]; the rest were left out.
    pub truncated: bool,
}

/// Why a record cannot be stored as it is (it would fail the whole batch it is in), or `None`.
/// The writer drops such records rather than retrying them forever.
pub fn unstorable(rec: &UsageRecord) -> Option<&'static str> {
    if at(rec).is_none() {
        return Some("`at_ms` is out of range");
    }
    let texts = [
        &rec.tenant,
        &rec.subject,
        &rec.kind,
        &rec.provider,
        &rec.model,
        &rec.requested_model,
        &rec.outcome,
    ];
    // Postgres text cannot hold NUL.
    if texts
        .into_iter()
        .chain(&rec.token_id)
        .any(|s| s.contains('\0'))
    {
        return Some("a text field contains a NUL character");
    }
    if !rec.cost_usd.is_finite() {
        return Some("`cost_usd` is not a finite number");
    }
    None
}

fn at(rec: &UsageRecord) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(rec.at_ms) * 1_000_000).ok()
}

/// Counts above `i64::MAX` cannot be real; they are stored saturated rather than refused.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Reads and writes the `usage` table.
#[derive(Clone, Debug)]
pub struct UsageStore {
    pool: PgPool,
}

impl UsageStore {
    /// The most groups one summary returns.
    pub const MAX_GROUPS: usize = 10_000;

    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Inserts `records` in one statement and returns how many rows were new; a record whose
    /// id is already stored (or repeated in `records`) is skipped. Fails without writing
    /// anything when one record is [`unstorable`].
    pub async fn insert_batch(&self, records: &[UsageRecord]) -> Result<u64, StoreError> {
        if records.is_empty() {
            return Ok(0);
        }
        let n = records.len();
        let mut ids = Vec::with_capacity(n);
        let mut ats = Vec::with_capacity(n);
        let mut tenants = Vec::with_capacity(n);
        let mut subjects = Vec::with_capacity(n);
        let mut token_ids = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut providers = Vec::with_capacity(n);
        let mut models = Vec::with_capacity(n);
        let mut requested = Vec::with_capacity(n);
        let mut input = Vec::with_capacity(n);
        let mut output = Vec::with_capacity(n);
        let mut cache_read = Vec::with_capacity(n);
        let mut cache_write = Vec::with_capacity(n);
        let mut latency = Vec::with_capacity(n);
        let mut cost = Vec::with_capacity(n);
        let mut outcomes = Vec::with_capacity(n);
        for r in records {
            let t = match (unstorable(r), at(r)) {
                (None, Some(t)) => t,
                (why, _) => {
                    let why = why.unwrap_or("`at_ms` is out of range");
                    return Err(StoreError::Db(sqlx::Error::Encode(
                        format!("usage record {}: {why}", r.id).into(),
                    )));
                }
            };
            ids.push(r.id);
            ats.push(t);
            tenants.push(r.tenant.as_str());
            subjects.push(r.subject.as_str());
            token_ids.push(r.token_id.as_deref());
            kinds.push(r.kind.as_str());
            providers.push(r.provider.as_str());
            models.push(r.model.as_str());
            requested.push(r.requested_model.as_str());
            input.push(count(r.input_tokens));
            output.push(count(r.output_tokens));
            cache_read.push(count(r.cache_read_tokens));
            cache_write.push(count(r.cache_write_tokens));
            latency.push(count(r.latency_ms));
            cost.push(r.cost_usd);
            outcomes.push(r.outcome.as_str());
        }
        let done = sqlx::query(
            "INSERT INTO usage (id, at, tenant_id, subject, token_id, kind, provider, model, \
             requested_model, input_tokens, output_tokens, cache_read_tokens, \
             cache_write_tokens, latency_ms, cost_usd, outcome) \
             SELECT * FROM UNNEST($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], \
             $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], \
             $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], \
             $15::double precision[], $16::text[]) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&ids)
        .bind(&ats)
        .bind(&tenants)
        .bind(&subjects)
        .bind(&token_ids)
        .bind(&kinds)
        .bind(&providers)
        .bind(&models)
        .bind(&requested)
        .bind(&input)
        .bind(&output)
        .bind(&cache_read)
        .bind(&cache_write)
        .bind(&latency)
        .bind(&cost)
        .bind(&outcomes)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// `tenant`'s calls that finished in `[from, to)`, grouped by `group_by` (every call in one
    /// group when it is empty; no groups when there were no calls).
    pub async fn summary(
        &self,
        tenant: &TenantId,
        from: OffsetDateTime,
        to: OffsetDateTime,
        group_by: &[GroupBy],
    ) -> Result<UsageSummary, StoreError> {
        let by = |g: GroupBy| group_by.contains(&g);
        let limit = i64::try_from(Self::MAX_GROUPS + 1).unwrap_or(i64::MAX);
        let mut rows: Vec<UsageRow> = sqlx::query_as(
            "SELECT \
               CASE WHEN $4 THEN provider END AS provider, \
               CASE WHEN $5 THEN model END AS model, \
               CASE WHEN $6 THEN requested_model END AS requested_model, \
               CASE WHEN $7 THEN subject END AS subject, \
               CASE WHEN $8 THEN token_id END AS token_id, \
               CASE WHEN $9 THEN kind END AS kind, \
               CASE WHEN $10 THEN date_trunc('day', at, 'UTC') END AS day, \
               CASE WHEN $11 THEN date_trunc('hour', at, 'UTC') END AS hour, \
               count(*) AS requests, \
               sum(input_tokens)::bigint AS input_tokens, \
               sum(output_tokens)::bigint AS output_tokens, \
               sum(cache_read_tokens)::bigint AS cache_read_tokens, \
               sum(cache_write_tokens)::bigint AS cache_write_tokens, \
               sum(cost_usd)::double precision AS cost_usd, \
               avg(latency_ms)::double precision AS avg_latency_ms, \
               percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95_latency_ms \
             FROM usage \
             WHERE tenant_id = $1 AND at >= $2 AND at < $3 \
             GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 \
             ORDER BY 7, 8, 1, 2, 3, 4, 5, 6 \
             LIMIT $12",
        )
        .bind(tenant.as_str())
        .bind(from)
        .bind(to)
        .bind(by(GroupBy::Provider))
        .bind(by(GroupBy::Model))
        .bind(by(GroupBy::RequestedModel))
        .bind(by(GroupBy::Subject))
        .bind(by(GroupBy::Token))
        .bind(by(GroupBy::Kind))
        .bind(by(GroupBy::Day))
        .bind(by(GroupBy::Hour))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let truncated = rows.len() > Self::MAX_GROUPS;
        rows.truncate(Self::MAX_GROUPS);
        Ok(UsageSummary { rows, truncated })
    }

    /// The stored row of record `id`, as a record (`None` when it is not stored). For tests and
    /// operators; the API reads summaries.
    pub async fn get(&self, id: Uuid) -> Result<Option<UsageRecord>, StoreError> {
        let row: Option<StoredRow> = sqlx::query_as(
            "SELECT id, at, tenant_id, subject, token_id, kind, provider, model, \
             requested_model, input_tokens, output_tokens, cache_read_tokens, \
             cache_write_tokens, latency_ms, cost_usd, outcome FROM usage WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(StoredRow::into_record))
    }
}

#[derive(sqlx::FromRow)]
struct StoredRow {
    id: Uuid,
    at: OffsetDateTime,
    tenant_id: String,
    subject: String,
    token_id: Option<String>,
    kind: String,
    provider: String,
    model: String,
    requested_model: String,
    input_tokens: i64,
    output_tokens: i64,
    cache_read_tokens: i64,
    cache_write_tokens: i64,
    latency_ms: i64,
    cost_usd: f64,
    outcome: String,
}

impl StoredRow {
    fn into_record(self) -> UsageRecord {
        let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
        let ms = self.at.unix_timestamp_nanos() / 1_000_000;
        UsageRecord {
            id: self.id,
            at_ms: i64::try_from(ms).unwrap_or(i64::MAX),
            tenant: self.tenant_id,
            subject: self.subject,
            token_id: self.token_id,
            kind: self.kind,
            provider: self.provider,
            model: self.model,
            requested_model: self.requested_model,
            input_tokens: unsigned(self.input_tokens),
            output_tokens: unsigned(self.output_tokens),
            cache_read_tokens: unsigned(self.cache_read_tokens),
            cache_write_tokens: unsigned(self.cache_write_tokens),
            latency_ms: unsigned(self.latency_ms),
            cost_usd: self.cost_usd,
            outcome: self.outcome,
        }
    }
}
