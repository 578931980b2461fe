//! The `responses` table: the Responses API's stored responses, each owned by the principal
//! (tenant and subject) that made it; another principal's id reads as missing.

use sqlx::PgPool;
use time::OffsetDateTime;
use weft_core::TenantId;

use crate::StoreError;

/// The longest chain of `previous_response_id` links a continuation reads; a longer one is
/// refused (a client that resends its history, as most do, never builds one).
pub const MAX_CHAIN: i64 = 1_000;

/// The most bytes of stored messages a continuation reads (the request then goes to the router
/// whole, under the internal message cap of 16 MiB, beside this turn's own input).
pub const MAX_CHAIN_BYTES: i64 = 8 << 20;

/// One response to keep.
#[derive(Clone, Debug)]
pub struct NewResponse<'a> {
    pub id: &'a str,
    pub tenant: &'a TenantId,
    pub subject: &'a str,
    pub previous_id: Option<&'a str>,
    /// This turn's messages (weft's message model) as JSON text: its input and its answer.
    pub items: &'a str,
    /// The response object as it is read back, as JSON text.
    pub response: &'a str,
    pub expires_at: OffsetDateTime,
}

/// A chain read for a continuation.
#[derive(Clone, Debug, PartialEq)]
pub enum Chain {
    /// Each response's messages (JSON text), oldest first.
    Found(Vec<String>),
    /// The id is unknown, expired, deleted, or another principal's.
    Missing,
    /// Longer than [`MAX_CHAIN`].
    TooLong,
    /// More than [`MAX_CHAIN_BYTES`] of messages.
    TooLarge,
}

#[derive(Clone)]
pub struct ResponseStore {
    pool: PgPool,
}

impl ResponseStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    pub async fn insert(&self, r: NewResponse<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO responses (id, tenant_id, subject, previous_id, items, response, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(r.id)
        .bind(r.tenant.as_str())
        .bind(r.subject)
        .bind(r.previous_id)
        .bind(r.items)
        .bind(r.response)
        .bind(r.expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The response object (JSON text), when the principal owns a live one of this id.
    pub async fn get(
        &self,
        tenant: &TenantId,
        subject: &str,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        let v: Option<String> = sqlx::query_scalar(
            "SELECT response FROM responses \
             WHERE id = $1 AND tenant_id = $2 AND subject = $3 AND expires_at > now()",
        )
        .bind(id)
        .bind(tenant.as_str())
        .bind(subject)
        .fetch_optional(&self.pool)
        .await?;
        Ok(v)
    }

    /// Deletes the principal's response; whether there was one.
    pub async fn delete(
        &self,
        tenant: &TenantId,
        subject: &str,
        id: &str,
    ) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "DELETE FROM responses \
             WHERE id = $1 AND tenant_id = $2 AND subject = $3 AND expires_at > now()",
        )
        .bind(id)
        .bind(tenant.as_str())
        .bind(subject)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// The messages of the chain ending at `id`, oldest first, every link owned by the
    /// principal. The response named must be live; the ones it continued are read whatever
    /// their own expiry (the sweeper keeps a response while a live one continues it, so a
    /// conversation lives as long as its newest response). A link that is gone (deleted) makes
    /// the whole chain missing: a continuation never runs on a conversation with a hole in it.
    pub async fn chain(
        &self,
        tenant: &TenantId,
        subject: &str,
        id: &str,
    ) -> Result<Chain, StoreError> {
        // Each step follows `previous_id` within the principal's rows; a link whose row is not
        // there has no items. `bytes` is the running size, which stops the walk past the cap.
        let rows: Vec<(i64, Option<String>, Option<String>, i64)> = sqlx::query_as(
            "WITH RECURSIVE chain (depth, items, previous_id, bytes) AS ( \
                 SELECT 0::bigint, r.items, r.previous_id, \
                     coalesce(octet_length(r.items), 0)::bigint FROM (SELECT 1) one \
                 LEFT JOIN responses r ON r.id = $1 AND r.tenant_id = $2 AND r.subject = $3 \
                     AND r.expires_at > now() \
               UNION ALL \
                 SELECT c.depth + 1, r.items, r.previous_id, \
                     c.bytes + coalesce(octet_length(r.items), 0) FROM chain c \
                 LEFT JOIN responses r ON r.id = c.previous_id AND r.tenant_id = $2 \
                     AND r.subject = $3 \
                 WHERE c.previous_id IS NOT NULL AND c.items IS NOT NULL \
                     AND c.depth + 1 < $4 AND c.bytes <= $5 \
             ) SELECT depth, items, previous_id, bytes FROM chain ORDER BY depth DESC",
        )
        .bind(id)
        .bind(tenant.as_str())
        .bind(subject)
        .bind(MAX_CHAIN)
        .bind(MAX_CHAIN_BYTES)
        .fetch_all(&self.pool)
        .await?;
        if rows.iter().any(|(_, items, _, _)| items.is_none()) {
            return Ok(Chain::Missing);
        }
        // The walk stops at the first response (no previous id), or at a bound.
        if let Some((_, _, prev, bytes)) = rows.first() {
            if *bytes > MAX_CHAIN_BYTES {
                return Ok(Chain::TooLarge);
            }
            if prev.is_some() {
                return Ok(Chain::TooLong);
            }
        }
        Ok(Chain::Found(
            rows.into_iter()
                .filter_map(|(_, items, _, _)| items)
                .collect(),
        ))
    }

    /// Deletes up to `batch` expired responses that no live response continues; how many. A
    /// conversation's older responses go once its newest has expired, a link per round.
    pub async fn sweep_expired(&self, batch: i64) -> Result<u64, StoreError> {
        let n = sqlx::query(
            "DELETE FROM responses WHERE id IN \
             (SELECT r.id FROM responses r WHERE r.expires_at < now() AND NOT EXISTS \
                 (SELECT 1 FROM responses c WHERE c.previous_id = r.id \
                     AND c.tenant_id = r.tenant_id AND c.subject = r.subject) \
              LIMIT $1)",
        )
        .bind(batch)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n)
    }
}
