//! `ChannelStore`: channels, their partitions, messages, cursors and publish op keys in Postgres
//! (`channels`, `channel_partitions`, `channel_messages`, `channel_cursors`, `channel_ops`). It
//! reads and writes; the rules live in [`super::rules`] and [`super`]. Every query filters by
//! `tenant_id` except the expiry sweeps, which are maintenance over all tenants and return
//! nothing.

use sqlx::PgPool;
use time::OffsetDateTime;
use weft_core::TenantId;
use weft_store::StoreError;

use super::rules::{Bounds, ChannelScope, MAX_CHANNELS_PER_TENANT};

/// How long a publish's `op_key` is remembered (a repeat within it is a replay), in days.
pub const OP_RETENTION_DAYS: i32 = 7;

/// A channel.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelRecord {
    /// Names the channel in cursors and wake-up subjects; a channel created again gets a new id.
    pub id: i64,
    pub name: String,
    pub scope: ChannelScope,
    pub ttl_seconds: i64,
    pub max_messages: i64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A stored message.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct MessageRecord {
    pub seq: i64,
    /// JSON text.
    pub payload: String,
    pub published_by: String,
    pub published_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
}

/// What [`ChannelStore::put`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum PutOutcome {
    Created(ChannelRecord),
    Updated(ChannelRecord),
    /// The channel exists with another scope; nothing changed.
    ScopeDiffers(ChannelRecord),
    /// The tenant has [`MAX_CHANNELS_PER_TENANT`] channels.
    TooMany,
}

/// A publish that was stored (or found stored under the same `op_key`).
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub seq: i64,
    pub published_at: OffsetDateTime,
    /// True when the `op_key` was already stored: nothing new was appended.
    pub replayed: bool,
}

/// What [`ChannelStore::ack`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acked {
    /// The cursor is now at this seq.
    Committed(i64),
    /// The committed cursor is ahead, at this seq; nothing changed.
    Behind(i64),
    /// The channel was deleted meanwhile.
    Gone,
}

/// One partition a message addresses.
#[derive(Clone, Copy, Debug)]
pub struct Part<'a> {
    pub tenant: &'a TenantId,
    pub channel: i64,
    pub partition: &'a str,
}

#[derive(sqlx::FromRow)]
struct ChannelRow {
    id: i64,
    name: String,
    scope: String,
    ttl_seconds: i64,
    max_messages: i64,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

impl ChannelRow {
    fn into_record(self) -> Result<ChannelRecord, StoreError> {
        let scope = ChannelScope::parse("scope", &self.scope).map_err(|_| {
            StoreError::Db(sqlx::Error::Decode(
                format!("channel scope {:?} is unknown", self.scope).into(),
            ))
        })?;
        Ok(ChannelRecord {
            id: self.id,
            name: self.name,
            scope,
            ttl_seconds: self.ttl_seconds,
            max_messages: self.max_messages,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct PutRow {
    #[sqlx(flatten)]
    channel: ChannelRow,
    created: bool,
}

macro_rules! channel_columns {
    () => {
        "id, name, scope, ttl_seconds, max_messages, created_at, updated_at"
    };
}

fn is_fk_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("23503"))
}

fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Channels in Postgres. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ChannelStore {
    pool: PgPool,
}

impl ChannelStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Creates the channel, or updates the bounds of an existing one of the same scope.
    pub async fn put(
        &self,
        tenant: &TenantId,
        name: &str,
        scope: ChannelScope,
        bounds: Bounds,
    ) -> Result<PutOutcome, StoreError> {
        let row: Option<PutRow> = sqlx::query_as(
            "INSERT INTO channels AS c (tenant_id, name, scope, ttl_seconds, max_messages) \
             SELECT $1, $2, $3, $4, $5 \
             WHERE (SELECT count(*) FROM channels WHERE tenant_id = $1) < $6 \
                OR EXISTS (SELECT 1 FROM channels WHERE tenant_id = $1 AND name = $2) \
             ON CONFLICT (tenant_id, name) DO UPDATE \
               SET ttl_seconds = excluded.ttl_seconds, max_messages = excluded.max_messages, \
                   updated_at = CASE WHEN (c.ttl_seconds, c.max_messages) \
                                   = (excluded.ttl_seconds, excluded.max_messages) \
                                THEN c.updated_at ELSE now() END \
               WHERE c.scope = excluded.scope \
             RETURNING id, name, scope, ttl_seconds, max_messages, created_at, updated_at, \
                       (xmax = 0) AS created",
        )
        .bind(tenant.as_str())
        .bind(name)
        .bind(scope.as_str())
        .bind(as_i64(bounds.ttl_seconds))
        .bind(as_i64(bounds.max_messages))
        .bind(MAX_CHANNELS_PER_TENANT)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(r) = row {
            let rec = r.channel.into_record()?;
            return Ok(if r.created {
                PutOutcome::Created(rec)
            } else {
                PutOutcome::Updated(rec)
            });
        }
        Ok(match self.get(tenant, name).await? {
            Some(existing) => PutOutcome::ScopeDiffers(existing),
            None => PutOutcome::TooMany,
        })
    }

    /// The channel `name` of `tenant`.
    pub async fn get(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<ChannelRecord>, StoreError> {
        let row: Option<ChannelRow> = sqlx::query_as(concat!(
            "SELECT ",
            channel_columns!(),
            " FROM channels WHERE tenant_id = $1 AND name = $2"
        ))
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(ChannelRow::into_record).transpose()
    }

    /// Every channel of `tenant`, by name.
    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<ChannelRecord>, StoreError> {
        let rows: Vec<ChannelRow> = sqlx::query_as(concat!(
            "SELECT ",
            channel_columns!(),
            " FROM channels WHERE tenant_id = $1 ORDER BY name LIMIT $2"
        ))
        .bind(tenant.as_str())
        .bind(MAX_CHANNELS_PER_TENANT)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(ChannelRow::into_record).collect()
    }

    /// Deletes the channel with its partitions, messages and cursors; false when there was none.
    pub async fn delete(&self, tenant: &TenantId, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM channels WHERE tenant_id = $1 AND name = $2")
            .bind(tenant.as_str())
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Appends a message in one transaction: takes the partition's next seq (locking its row, so
    /// seqs follow commit order), records `op_key` in `channel_ops` (or, when it was recorded
    /// before, returns that publish's seq and time with `replayed`, even if its message was
    /// trimmed or expired since), and trims the partition to the channel's `max_messages` (which
    /// leaves `channel_ops` alone). The message row's own `op_key` column is no longer written
    /// (`channel_ops` is the record; a message may outlive its key, ttl up to 30 days). `None`
    /// when the channel was deleted meanwhile.
    pub async fn publish(
        &self,
        part: Part<'_>,
        channel: &ChannelRecord,
        payload: &str,
        op_key: Option<&str>,
        published_by: &str,
    ) -> Result<Option<Published>, StoreError> {
        let tenant = part.tenant.as_str();
        let mut tx = self.pool.begin().await?;
        let seq: Result<i64, sqlx::Error> = sqlx::query_scalar(
            "INSERT INTO channel_partitions (tenant_id, channel_id, partition, next_seq) \
             VALUES ($1, $2, $3, 2) \
             ON CONFLICT (channel_id, partition) DO UPDATE \
               SET next_seq = channel_partitions.next_seq + 1 \
             RETURNING next_seq - 1",
        )
        .bind(tenant)
        .bind(part.channel)
        .bind(part.partition)
        .fetch_one(&mut *tx)
        .await;
        let seq = match seq {
            Ok(s) => s,
            Err(e) if is_fk_violation(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut published_at: Option<OffsetDateTime> = None;
        if let Some(key) = op_key {
            match claim_op(&mut tx, part, key, seq).await? {
                Claim::New(at) => published_at = Some(at),
                Claim::Replay(earlier) => {
                    // Rolls back the seq taken above.
                    tx.rollback().await?;
                    return Ok(Some(earlier));
                }
            }
        }
        let published_at: OffsetDateTime = sqlx::query_scalar(
            "INSERT INTO channel_messages \
               (tenant_id, channel_id, partition, seq, payload, published_by, published_at, \
                expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, COALESCE($8, now()), \
                     COALESCE($8, now()) + $7 * interval '1 second') \
             RETURNING published_at",
        )
        .bind(tenant)
        .bind(part.channel)
        .bind(part.partition)
        .bind(seq)
        .bind(payload)
        .bind(published_by)
        .bind(channel.ttl_seconds)
        .bind(published_at)
        .fetch_one(&mut *tx)
        .await?;
        let keep_after = seq - channel.max_messages;
        if keep_after > 0 {
            sqlx::query(
                "DELETE FROM channel_messages \
                 WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND seq <= $4",
            )
            .bind(tenant)
            .bind(part.channel)
            .bind(part.partition)
            .bind(keep_after)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(Published {
            seq,
            published_at,
            replayed: false,
        }))
    }

    /// Unexpired messages after `after`, oldest first, at most `limit`.
    pub async fn read_after(
        &self,
        part: Part<'_>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<MessageRecord>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT seq, payload, published_by, published_at, expires_at FROM channel_messages \
             WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND seq > $4 \
               AND expires_at > now() \
             ORDER BY seq LIMIT $5",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The newest `limit` unexpired messages, oldest first.
    pub async fn newest(
        &self,
        part: Part<'_>,
        limit: u32,
    ) -> Result<Vec<MessageRecord>, StoreError> {
        let mut rows: Vec<MessageRecord> = sqlx::query_as(
            "SELECT seq, payload, published_by, published_at, expires_at FROM channel_messages \
             WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND expires_at > now() \
             ORDER BY seq DESC LIMIT $4",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.reverse();
        Ok(rows)
    }

    /// The seq of the partition's newest message ever published (0 when none).
    pub async fn head(&self, part: Part<'_>) -> Result<i64, StoreError> {
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT next_seq FROM channel_partitions \
             WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .fetch_optional(&self.pool)
        .await?;
        Ok(next.map_or(0, |n| n - 1))
    }

    /// The consumer's committed seq (0 when it never acked).
    pub async fn committed(&self, part: Part<'_>, consumer: &str) -> Result<i64, StoreError> {
        let seq: Option<i64> = sqlx::query_scalar(
            "SELECT seq FROM channel_cursors \
             WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND consumer = $4",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .bind(consumer)
        .fetch_optional(&self.pool)
        .await?;
        Ok(seq.unwrap_or(0))
    }

    /// The consumer's committed seq, and whether an unexpired message follows it.
    pub async fn unread(&self, part: Part<'_>, consumer: &str) -> Result<(i64, bool), StoreError> {
        Ok(sqlx::query_as(
            "WITH c AS (SELECT COALESCE((SELECT seq FROM channel_cursors \
                 WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND consumer = $4), \
                 0) AS seq) \
             SELECT c.seq, EXISTS (SELECT 1 FROM channel_messages m \
                 WHERE m.tenant_id = $1 AND m.channel_id = $2 AND m.partition = $3 \
                   AND m.seq > c.seq AND m.expires_at > now()) \
             FROM c",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .bind(consumer)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Moves the consumer's cursor to `seq`, unless it is already ahead.
    pub async fn ack(&self, part: Part<'_>, consumer: &str, seq: i64) -> Result<Acked, StoreError> {
        let done: Result<Option<i64>, sqlx::Error> = sqlx::query_scalar(
            "INSERT INTO channel_cursors AS c (tenant_id, channel_id, partition, consumer, seq) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (channel_id, partition, consumer) DO UPDATE \
               SET seq = excluded.seq, updated_at = now() \
               WHERE c.tenant_id = excluded.tenant_id AND c.seq <= excluded.seq \
             RETURNING seq",
        )
        .bind(part.tenant.as_str())
        .bind(part.channel)
        .bind(part.partition)
        .bind(consumer)
        .bind(seq)
        .fetch_optional(&self.pool)
        .await;
        match done {
            Ok(Some(s)) => Ok(Acked::Committed(s)),
            Ok(None) => Ok(Acked::Behind(self.committed(part, consumer).await?)),
            Err(e) if is_fk_violation(&e) => Ok(Acked::Gone),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes up to `limit` expired messages of every tenant; returns how many.
    pub async fn sweep_expired(&self, limit: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM channel_messages WHERE ctid IN \
               (SELECT ctid FROM channel_messages WHERE expires_at <= now() LIMIT $1)",
        )
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` op keys of every tenant published more than
    /// [`OP_RETENTION_DAYS`] ago; returns how many. Repeats of an older publish append anew.
    pub async fn sweep_ops(&self, limit: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM channel_ops WHERE ctid IN \
               (SELECT ctid FROM channel_ops \
                WHERE published_at < now() - make_interval(days => $1) LIMIT $2)",
        )
        .bind(OP_RETENTION_DAYS)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

/// What [`claim_op`] found.
enum Claim {
    /// The key is new and now recorded with the publish's seq; the publish's time.
    New(OffsetDateTime),
    /// The key was recorded before: the original publish.
    Replay(Published),
}

/// Records `key` for the publish taking `seq` in `part`, or returns the publish recorded under
/// it. Race-safe: `ON CONFLICT DO NOTHING` lets one transaction win, the others read its row
/// (after it committed; publishes to a partition are serialized by its row lock anyway). A
/// recorded row vanishing between the two (the retention sweep) is retried.
async fn claim_op(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    part: Part<'_>,
    key: &str,
    seq: i64,
) -> Result<Claim, StoreError> {
    let tenant = part.tenant.as_str();
    for _ in 0..3 {
        let claimed: Option<OffsetDateTime> = sqlx::query_scalar(
            "INSERT INTO channel_ops (tenant_id, channel_id, partition, op_key, seq) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (tenant_id, channel_id, partition, op_key) DO NOTHING \
             RETURNING published_at",
        )
        .bind(tenant)
        .bind(part.channel)
        .bind(part.partition)
        .bind(key)
        .bind(seq)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(at) = claimed {
            return Ok(Claim::New(at));
        }
        let earlier: Option<(i64, OffsetDateTime)> = sqlx::query_as(
            "SELECT seq, published_at FROM channel_ops \
             WHERE tenant_id = $1 AND channel_id = $2 AND partition = $3 AND op_key = $4",
        )
        .bind(tenant)
        .bind(part.channel)
        .bind(part.partition)
        .bind(key)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some((seq, published_at)) = earlier {
            return Ok(Claim::Replay(Published {
                seq,
                published_at,
                replayed: true,
            }));
        }
    }
    Err(StoreError::Db(sqlx::Error::Protocol(
        "channel op key neither recorded nor recordable".into(),
    )))
}
