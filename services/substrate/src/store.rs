//! `DefStore`: definitions of every kind in Postgres (`defs`, `def_versions`, keyed by tenant,
//! [`DefKind`] and name). It reads and writes; the rules (validation, hashing, what a fork
//! merges) live in [`crate::defs`]. Every query filters by `tenant_id` and `kind`.

use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;
use weft_core::TenantId;
use weft_core::def::DefKind;
use weft_store::StoreError;

/// One version of a definition, with the state of its name.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionRecord {
    pub name: String,
    /// 1-based, per name.
    pub number: u32,
    /// `sha256:<hex>` of `content_json`.
    pub hash: String,
    /// The canonical JSON of the content.
    pub content_json: String,
    pub parent_version: Option<String>,
    pub created_by: Option<String>,
    pub created_at: OffsetDateTime,
    /// Whether the name points to this version.
    pub active: bool,
    /// Whether the name is retired.
    pub retired: bool,
}

/// The record of an agent version (the name it had before skills shared the store).
pub type AgentVersionRecord = VersionRecord;

/// A name and where it points.
#[derive(Clone, Debug, PartialEq)]
pub struct SummaryRecord {
    pub name: String,
    pub active_version: String,
    pub retired: bool,
    pub versions: u32,
    pub description: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// The summary of an agent (the name it had before skills shared the store).
pub type AgentSummaryRecord = SummaryRecord;

/// Which version a new one derives from.
#[derive(Clone, Debug, PartialEq)]
pub enum Parent {
    /// The name's active version at the time of the write (none for a new name).
    Active,
    /// A given version (a fork's source).
    Version(String),
}

/// A version to store under a name.
#[derive(Clone, Debug)]
pub struct NewVersion<'a> {
    pub kind: DefKind,
    pub tenant: &'a TenantId,
    pub name: &'a str,
    pub hash: &'a str,
    pub content_json: &'a str,
    /// The content's description, copied to the name row for listings.
    pub description: &'a str,
    pub parent: Parent,
    pub created_by: Option<&'a str>,
}

/// The result of [`DefStore::put_version`].
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    /// The version the name now points to.
    pub version: VersionRecord,
    /// Whether a new version row was written (false: the content was already a version).
    pub created: bool,
}

/// The result of [`DefStore::activate`].
#[derive(Clone, Debug, PartialEq)]
pub enum Activated {
    Done(SummaryRecord),
    NoSuchName,
    NoSuchVersion,
}

#[derive(sqlx::FromRow)]
struct VersionRow {
    name: String,
    number: i32,
    hash: String,
    content_json: String,
    parent_version: Option<String>,
    created_by: Option<String>,
    created_at: OffsetDateTime,
    active: bool,
    retired: bool,
}

#[derive(sqlx::FromRow)]
struct SummaryRow {
    name: String,
    active_version: String,
    retired: bool,
    version_count: i32,
    description: String,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

#[derive(sqlx::FromRow)]
struct LockedName {
    active_version: String,
    retired: bool,
    version_count: i32,
}

#[derive(sqlx::FromRow)]
struct ExistingVersion {
    number: i32,
    parent_version: Option<String>,
    created_by: Option<String>,
    created_at: OffsetDateTime,
}

fn number(n: i32) -> Result<u32, StoreError> {
    u32::try_from(n).map_err(|_| {
        StoreError::Db(sqlx::Error::Decode(
            format!("version number {n} is negative").into(),
        ))
    })
}

impl VersionRow {
    fn into_record(self) -> Result<VersionRecord, StoreError> {
        Ok(VersionRecord {
            number: number(self.number)?,
            name: self.name,
            hash: self.hash,
            content_json: self.content_json,
            parent_version: self.parent_version,
            created_by: self.created_by,
            created_at: self.created_at,
            active: self.active,
            retired: self.retired,
        })
    }
}

impl SummaryRow {
    fn into_record(self) -> Result<SummaryRecord, StoreError> {
        Ok(SummaryRecord {
            versions: number(self.version_count)?,
            name: self.name,
            active_version: self.active_version,
            retired: self.retired,
            description: self.description,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// The selected version columns, joined with the name row for `active` and `retired`.
macro_rules! version_select {
    () => {
        "SELECT v.name, v.number, v.hash, v.content_json, v.parent_version, v.created_by, \
         v.created_at, (d.active_version = v.hash) AS active, d.retired \
         FROM def_versions v \
         JOIN defs d ON d.tenant_id = v.tenant_id AND d.kind = v.kind AND d.name = v.name "
    };
}

macro_rules! summary_columns {
    () => {
        "name, active_version, retired, version_count, description, created_at, updated_at"
    };
}

/// Attempts of a write that lost a race (a unique violation, a serialization failure or a
/// deadlock) before giving up.
const WRITE_ATTEMPTS: usize = 5;

fn is_retryable(e: &StoreError) -> bool {
    matches!(e, StoreError::Db(sqlx::Error::Database(d))
        if matches!(d.code().as_deref(), Some("23505" | "40001" | "40P01")))
}

/// Definitions of every kind in Postgres. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DefStore {
    pool: PgPool,
}

impl DefStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The database pool (the memory store shares it).
    /// The database pool (channels share it).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Makes `new` the name's active version, writing a version row only when the content is
    /// not already a version of this name. The name row is locked for the write, so concurrent
    /// puts of one name get consecutive numbers; a lost race on a new name is retried.
    pub async fn put_version(&self, new: &NewVersion<'_>) -> Result<Stored, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.put_once(new).await {
                Err(e) if attempt < WRITE_ATTEMPTS && is_retryable(&e) => {
                    tracing::debug!(attempt, kind = %new.kind, error = %e, "definition put lost a race; retrying");
                }
                other => return other,
            }
        }
    }

    async fn lock_name(
        tx: &mut Transaction<'static, Postgres>,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<LockedName>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT active_version, retired, version_count FROM defs \
             WHERE tenant_id = $1 AND kind = $2 AND name = $3 FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?)
    }

    async fn insert_version(
        tx: &mut Transaction<'static, Postgres>,
        new: &NewVersion<'_>,
        number: i32,
        parent: Option<&str>,
    ) -> Result<OffsetDateTime, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO def_versions \
             (tenant_id, kind, name, number, hash, content_json, parent_version, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING created_at",
        )
        .bind(new.tenant.as_str())
        .bind(new.kind.as_str())
        .bind(new.name)
        .bind(number)
        .bind(new.hash)
        .bind(new.content_json)
        .bind(parent)
        .bind(new.created_by)
        .fetch_one(&mut **tx)
        .await?)
    }

    fn record(
        new: &NewVersion<'_>,
        number: i32,
        parent: Option<String>,
        created_by: Option<String>,
        created_at: OffsetDateTime,
    ) -> Result<VersionRecord, StoreError> {
        Ok(VersionRecord {
            name: new.name.to_owned(),
            number: self::number(number)?,
            hash: new.hash.to_owned(),
            content_json: new.content_json.to_owned(),
            parent_version: parent,
            created_by,
            created_at,
            active: true,
            retired: false,
        })
    }

    async fn put_once(&self, new: &NewVersion<'_>) -> Result<Stored, StoreError> {
        let tenant = new.tenant.as_str();
        let mut tx = self.pool.begin().await?;
        let mut locked = Self::lock_name(&mut tx, new.kind, new.tenant, new.name).await?;
        if locked.is_none() {
            let parent = match &new.parent {
                Parent::Active => None,
                Parent::Version(h) => Some(h.as_str()),
            };
            // A new name: the name row first (its pointer to the version is checked at commit).
            let inserted: Option<i32> = sqlx::query_scalar(
                "INSERT INTO defs (tenant_id, kind, name, active_version, version_count, description) \
                 VALUES ($1, $2, $3, $4, 1, $5) ON CONFLICT (tenant_id, kind, name) DO NOTHING RETURNING 1",
            )
            .bind(tenant)
            .bind(new.kind.as_str())
            .bind(new.name)
            .bind(new.hash)
            .bind(new.description)
            .fetch_optional(&mut *tx)
            .await?;
            if inserted.is_some() {
                let at = Self::insert_version(&mut tx, new, 1, parent).await?;
                tx.commit().await?;
                let created_by = new.created_by.map(str::to_owned);
                return Ok(Stored {
                    version: Self::record(new, 1, parent.map(str::to_owned), created_by, at)?,
                    created: true,
                });
            }
            // Another put created the name meanwhile (ON CONFLICT waited for it to commit).
            locked = Self::lock_name(&mut tx, new.kind, new.tenant, new.name).await?;
        }
        let Some(locked) = locked else {
            // The name was created and removed again between two statements; nothing removes
            // names today, so treat it as a lost race.
            return Err(StoreError::Db(sqlx::Error::RowNotFound));
        };

        let existing: Option<ExistingVersion> = sqlx::query_as(
            "SELECT number, parent_version, created_by, created_at FROM def_versions \
             WHERE tenant_id = $1 AND kind = $2 AND name = $3 AND hash = $4",
        )
        .bind(tenant)
        .bind(new.kind.as_str())
        .bind(new.name)
        .bind(new.hash)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(v) = existing {
            if locked.active_version != new.hash || locked.retired {
                sqlx::query(
                    "UPDATE defs SET active_version = $4, retired = false, description = $5, \
                     updated_at = now() WHERE tenant_id = $1 AND kind = $2 AND name = $3",
                )
                .bind(tenant)
                .bind(new.kind.as_str())
                .bind(new.name)
                .bind(new.hash)
                .bind(new.description)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            return Ok(Stored {
                version: Self::record(new, v.number, v.parent_version, v.created_by, v.created_at)?,
                created: false,
            });
        }

        let number = locked.version_count + 1;
        let parent = match &new.parent {
            Parent::Active => locked.active_version,
            Parent::Version(h) => h.clone(),
        };
        let at = Self::insert_version(&mut tx, new, number, Some(&parent)).await?;
        sqlx::query(
            "UPDATE defs SET active_version = $4, version_count = $5, retired = false, \
             description = $6, updated_at = now() WHERE tenant_id = $1 AND kind = $2 AND name = $3",
        )
        .bind(tenant)
        .bind(new.kind.as_str())
        .bind(new.name)
        .bind(new.hash)
        .bind(number)
        .bind(new.description)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let created_by = new.created_by.map(str::to_owned);
        Ok(Stored {
            version: Self::record(new, number, Some(parent), created_by, at)?,
            created: true,
        })
    }

    /// The name's active version.
    pub async fn active(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<VersionRecord>, StoreError> {
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.name = $3 AND v.hash = d.active_version"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(VersionRow::into_record).transpose()
    }

    /// A version of the name, by hash.
    pub async fn by_hash(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
        hash: &str,
    ) -> Result<Option<VersionRecord>, StoreError> {
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.name = $3 AND v.hash = $4"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(VersionRow::into_record).transpose()
    }

    /// A version of the name, by number.
    pub async fn by_number(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
        number: u32,
    ) -> Result<Option<VersionRecord>, StoreError> {
        let Ok(number) = i32::try_from(number) else {
            return Ok(None);
        };
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.name = $3 AND v.number = $4"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .bind(number)
        .fetch_optional(&self.pool)
        .await?;
        row.map(VersionRow::into_record).transpose()
    }

    /// The first version (oldest) with this hash under any name of this kind in the tenant.
    pub async fn find_hash(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        hash: &str,
    ) -> Result<Option<VersionRecord>, StoreError> {
        let row: Option<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.hash = $3 \
             ORDER BY v.created_at, v.name LIMIT 1"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(VersionRow::into_record).transpose()
    }

    /// Every version of the name, oldest first; empty when the name is unknown.
    pub async fn versions(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Vec<VersionRecord>, StoreError> {
        let rows: Vec<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.name = $3 ORDER BY v.number"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(VersionRow::into_record).collect()
    }

    /// One name.
    pub async fn summary(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<SummaryRecord>, StoreError> {
        let row: Option<SummaryRow> = sqlx::query_as(concat!(
            "SELECT ",
            summary_columns!(),
            " FROM defs WHERE tenant_id = $1 AND kind = $2 AND name = $3"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(SummaryRow::into_record).transpose()
    }

    /// Every name of this kind in the tenant, retired ones included, by name.
    pub async fn list(
        &self,
        kind: DefKind,
        tenant: &TenantId,
    ) -> Result<Vec<SummaryRecord>, StoreError> {
        let rows: Vec<SummaryRow> = sqlx::query_as(concat!(
            "SELECT ",
            summary_columns!(),
            " FROM defs WHERE tenant_id = $1 AND kind = $2 ORDER BY name LIMIT 10000"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(SummaryRow::into_record).collect()
    }

    /// The active version of every name of this kind in the tenant that is not retired, in
    /// the order the names were first put (then by name).
    pub async fn active_all(
        &self,
        kind: DefKind,
        tenant: &TenantId,
    ) -> Result<Vec<VersionRecord>, StoreError> {
        let rows: Vec<VersionRow> = sqlx::query_as(concat!(
            version_select!(),
            "WHERE v.tenant_id = $1 AND v.kind = $2 AND v.hash = d.active_version \
             AND NOT d.retired ORDER BY d.created_at, d.name LIMIT 10000"
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(VersionRow::into_record).collect()
    }

    /// Marks the name retired (idempotent). `None` when the name is unknown.
    pub async fn retire(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<SummaryRecord>, StoreError> {
        let row: Option<SummaryRow> = sqlx::query_as(concat!(
            "UPDATE defs SET retired = true, \
             updated_at = CASE WHEN retired THEN updated_at ELSE now() END \
             WHERE tenant_id = $1 AND kind = $2 AND name = $3 RETURNING ",
            summary_columns!()
        ))
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(SummaryRow::into_record).transpose()
    }

    /// Points the name at one of its versions and un-retires it. The listed description is
    /// the version's top-level `description` field, which every kind's content has.
    pub async fn activate(
        &self,
        kind: DefKind,
        tenant: &TenantId,
        name: &str,
        hash: &str,
    ) -> Result<Activated, StoreError> {
        let row: Option<SummaryRow> = sqlx::query_as(
            "UPDATE defs d SET active_version = v.hash, retired = false, \
             description = COALESCE(v.content_json::jsonb ->> 'description', ''), updated_at = now() \
             FROM def_versions v \
             WHERE d.tenant_id = $1 AND d.kind = $2 AND d.name = $3 \
               AND v.tenant_id = d.tenant_id AND v.kind = d.kind AND v.name = d.name AND v.hash = $4 \
             RETURNING d.name, d.active_version, d.retired, d.version_count, d.description, \
                       d.created_at, d.updated_at",
        )
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(name)
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(r) => Ok(Activated::Done(r.into_record()?)),
            None if self.summary(kind, tenant, name).await?.is_some() => {
                Ok(Activated::NoSuchVersion)
            }
            None => Ok(Activated::NoSuchName),
        }
    }
}
