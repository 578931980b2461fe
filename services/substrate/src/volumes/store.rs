//! `VolumeStore`: volumes in Postgres (`volumes`, `volume_files`, `volume_changes`,
//! `volume_change_files`, `volume_snapshots`, `volume_usage`, `volume_blobs`). It reads and
//! writes; validation and resolution live in [`crate::volumes`], the rules of a change in
//! [`super::plan`]. Every query filters by `tenant_id` (tables without the column are reached
//! through their volume's row, itself filtered), except the purge of ended runs' volumes, which
//! is the operator's housekeeping across tenants.
//!
//! A change (`Apply`, `Undo`, `Restore`) is one transaction: lock the volume row `FOR UPDATE`
//! (writers of one volume run one at a time), return the recorded change when the op key was
//! used (`replayed`), refuse a `ro` volume, read the index, plan (every precondition checked
//! before anything is written), check the volume's caps, write the blob rows, the index, the
//! change and its files, the volume's counts, and last the tenant's usage (locked, so the
//! tenant cap holds under concurrency; taken last so writers of different volumes of one tenant
//! wait on each other as briefly as possible). Locks are taken volume row → usage row,
//! everywhere, so writers never deadlock on them. A deadlock, a serialization failure or a
//! concurrent first use of the same op key is retried.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;
use weft_core::{Error, TenantId};
use weft_store::StoreError;

use super::blobs::{BlobError, Blobs, lock_blobs};
use super::plan::{self, Entry, Index, Planned};

/// How many times a change is attempted when Postgres aborts it for a deadlock, a
/// serialization failure or a concurrent claim of its op key.
const WRITE_ATTEMPTS: u32 = 4;

/// How long a blob that no index, change or snapshot names is kept after a write last stored
/// or named it (`volume_blobs.touched_at`): blobs put ahead by `PutBlobs` for an `Apply` still
/// on its way are not collected, and `Apply` may name them by sha.
pub const BLOB_GRACE: Duration = Duration::from_secs(10 * 60);

/// Most snapshots one volume keeps.
pub const MAX_SNAPSHOTS: i64 = 100;

/// The caps of `[volumes]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub max_file_bytes: u64,
    pub max_volume_bytes: u64,
    pub max_files: u64,
    pub max_tenant_bytes: u64,
}

impl Caps {
    pub fn from_config(cfg: &weft_config::VolumesConfig) -> Self {
        Self {
            max_file_bytes: cfg.max_file_bytes,
            max_volume_bytes: cfg.max_volume_bytes,
            max_files: cfg.max_files,
            max_tenant_bytes: cfg.max_tenant_bytes,
        }
    }
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A store failure: a rule the data broke (a 4xx for the caller) or the database.
#[derive(Debug)]
pub enum VolError {
    Rule(Error),
    Db(sqlx::Error),
}

impl From<sqlx::Error> for VolError {
    fn from(e: sqlx::Error) -> Self {
        Self::Db(e)
    }
}

impl From<Error> for VolError {
    fn from(e: Error) -> Self {
        Self::Rule(e)
    }
}

impl From<BlobError> for VolError {
    fn from(e: BlobError) -> Self {
        match e {
            BlobError::Db(e) => Self::Db(e),
            e => Self::Rule(e.into_api("storing a blob")),
        }
    }
}

impl VolError {
    /// The caller-facing error; database failures are logged, never shown.
    pub fn into_api(self, what: &str) -> Error {
        match self {
            Self::Rule(e) => e,
            Self::Db(e) => {
                tracing::error!(error = %e, "volumes: {what} failed");
                StoreError::Db(e).to_api()
            }
        }
    }

    fn retryable(&self) -> bool {
        match self {
            Self::Db(sqlx::Error::Database(d)) => {
                matches!(d.code().as_deref(), Some("40001" | "40P01" | "23505"))
            }
            _ => false,
        }
    }
}

macro_rules! volume_columns {
    () => {
        "id, tenant_id, name, kind, root_run_id, mode, quota_bytes, bytes, files, tree_hash, seq, description, created_at, updated_at"
    };
}
macro_rules! change_columns {
    () => {
        "id, volume_id, seq, op_key, run_id, tool_use_id, source, subject, undoes, undone_by, tree_before, tree_after, created_at"
    };
}
macro_rules! snapshot_columns {
    () => {
        "id, label, tree_hash, seq, files, bytes, created_at"
    };
}

/// A volume's row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct VolumeRow {
    pub id: Uuid,
    pub tenant_id: String,
    pub name: String,
    /// `named` or `ephemeral`.
    pub kind: String,
    pub root_run_id: Option<Uuid>,
    /// `rw` or `ro`.
    pub mode: String,
    pub quota_bytes: i64,
    pub bytes: i64,
    pub files: i32,
    pub tree_hash: String,
    pub seq: i64,
    pub description: String,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// One file of the index.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct FileRow {
    pub path: String,
    pub sha256: String,
    pub size: i64,
    pub mode: i32,
    pub updated_at: OffsetDateTime,
}

/// A change's row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ChangeRow {
    pub id: Uuid,
    pub volume_id: Uuid,
    pub seq: i64,
    pub op_key: Option<String>,
    pub run_id: Option<Uuid>,
    pub tool_use_id: Option<String>,
    pub source: String,
    pub subject: String,
    pub undoes: Option<Uuid>,
    pub undone_by: Option<Uuid>,
    pub tree_before: String,
    pub tree_after: String,
    pub created_at: OffsetDateTime,
}

/// A file a change touched.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ChangeFileRow {
    pub change_id: Uuid,
    pub path: String,
    pub before_sha: Option<String>,
    pub after_sha: Option<String>,
    pub before_mode: Option<i32>,
    pub after_mode: Option<i32>,
    pub before_size: Option<i64>,
    pub after_size: Option<i64>,
}

/// A snapshot's row (without its entries).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct SnapshotRow {
    pub id: Uuid,
    pub label: String,
    pub tree_hash: String,
    pub seq: i64,
    pub files: i32,
    pub bytes: i64,
    pub created_at: OffsetDateTime,
}

/// Who makes a change and why, as recorded with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Meta {
    pub op_key: Option<String>,
    pub run_id: Option<Uuid>,
    pub tool_use_id: Option<String>,
    /// A tool name, `http`, `import`, `undo`, `restore`.
    pub source: String,
    pub subject: String,
}

/// What an undo reverts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UndoTarget {
    Change(Uuid),
    /// Every change of the run not undone yet, newest first.
    Run(Uuid),
}

/// A blob sent inline with an `Apply`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineBlob {
    pub sha256: String,
    pub bytes: Vec<u8>,
}

/// A change to make.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// `inline`: the blobs the puts send, each once.
    Apply {
        ops: Vec<plan::Op>,
        replace: bool,
        inline: Vec<InlineBlob>,
    },
    Undo(UndoTarget),
    Restore {
        snapshot: Uuid,
        if_tree: Option<String>,
    },
}

impl Mutation {
    /// The source a change of this mutation records (`apply_source` for an `Apply`).
    fn source<'a>(&self, apply_source: &'a str) -> &'a str {
        match self {
            Self::Apply { .. } => apply_source,
            Self::Undo(_) => "undo",
            Self::Restore { .. } => "restore",
        }
    }
}

/// A change made (or replayed).
#[derive(Clone, Debug, PartialEq)]
pub struct Mutated {
    pub change: ChangeRow,
    /// In path order.
    pub files: Vec<ChangeFileRow>,
    /// True when the op key had been used: nothing was written.
    pub replayed: bool,
}

/// The bytes and count of volumes a purge deleted, per tenant.
#[derive(sqlx::FromRow)]
struct Gone {
    tenant_id: String,
    bytes: i64,
    n: i64,
}

/// Volumes in Postgres. Cheap to clone.
#[derive(Clone, Debug)]
pub struct VolumeStore {
    pool: PgPool,
    blobs: Blobs,
    caps: Caps,
    blob_grace: Duration,
}

/// A blob the collector deleted the row of.
#[derive(sqlx::FromRow)]
struct Collected {
    sha256: String,
    store: String,
}

fn vol_gone(name: &str) -> VolError {
    VolError::Rule(Error::not_found(format!(
        "no volume `{name}` in your tenant (it was just deleted)"
    )))
}

async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    Box::pin(pool.begin()).await
}

impl VolumeStore {
    pub fn new(pool: PgPool, blobs: Blobs, caps: Caps) -> Self {
        Self {
            pool,
            blobs,
            caps,
            blob_grace: BLOB_GRACE,
        }
    }

    /// The same store with another blob grace period (see [`BLOB_GRACE`]); tests shorten it.
    #[must_use]
    pub fn with_blob_grace(mut self, grace: Duration) -> Self {
        self.blob_grace = grace;
        self
    }

    fn grace_secs(&self) -> f64 {
        self.blob_grace.as_secs_f64()
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The volume `name` of `tenant`.
    pub async fn find(&self, tenant: &TenantId, name: &str) -> Result<Option<VolumeRow>, VolError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            volume_columns!(),
            " FROM volumes WHERE tenant_id = $1 AND name = $2"
        ))
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The root of run `id` of `tenant` and the root's status, `None` when the tenant has no
    /// such run.
    pub async fn run_root(
        &self,
        tenant: &TenantId,
        id: Uuid,
    ) -> Result<Option<(Uuid, String)>, VolError> {
        Ok(sqlx::query_as(
            "SELECT r.root_run_id, root.status FROM runs r
             JOIN runs root ON root.id = r.root_run_id AND root.tenant_id = r.tenant_id
             WHERE r.tenant_id = $1 AND r.id = $2",
        )
        .bind(tenant.as_str())
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The ephemeral volume of root run `root` (named `name`), made empty when missing.
    pub async fn ensure_ephemeral(
        &self,
        tenant: &TenantId,
        name: &str,
        root: Uuid,
        empty_tree: &str,
    ) -> Result<VolumeRow, VolError> {
        sqlx::query(
            "INSERT INTO volumes (id, tenant_id, name, kind, root_run_id, mode, quota_bytes, tree_hash)
             VALUES ($1, $2, $3, 'ephemeral', $4, 'rw', $5, $6)
             ON CONFLICT (tenant_id, name) DO NOTHING",
        )
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(name)
        .bind(root)
        .bind(i64_of(self.caps.max_volume_bytes))
        .bind(empty_tree)
        .execute(&self.pool)
        .await?;
        self.find(tenant, name).await?.ok_or_else(|| vol_gone(name))
    }

    /// Makes the named volume `name`, or sets its mode, quota and description.
    pub async fn upsert_named(
        &self,
        tenant: &TenantId,
        name: &str,
        mode: &str,
        quota_bytes: i64,
        description: &str,
        empty_tree: &str,
    ) -> Result<VolumeRow, VolError> {
        Ok(sqlx::query_as(concat!(
            "INSERT INTO volumes (id, tenant_id, name, kind, mode, quota_bytes, tree_hash, description)
             VALUES ($1, $2, $3, 'named', $4, $5, $6, $7)
             ON CONFLICT (tenant_id, name) DO UPDATE SET
               mode = EXCLUDED.mode, quota_bytes = EXCLUDED.quota_bytes,
               description = EXCLUDED.description, updated_at = now()
             RETURNING ",
            volume_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(name)
        .bind(mode)
        .bind(quota_bytes)
        .bind(empty_tree)
        .bind(description)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The named volumes of `tenant`, by name.
    pub async fn list_named(&self, tenant: &TenantId) -> Result<Vec<VolumeRow>, VolError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            volume_columns!(),
            " FROM volumes WHERE tenant_id = $1 AND kind = 'named' ORDER BY name"
        ))
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await?)
    }

    /// Deletes the volume `name` (files, history, snapshots) and gives its bytes back to the
    /// tenant. False when there was none.
    pub async fn delete(&self, tenant: &TenantId, name: &str) -> Result<bool, VolError> {
        let mut tx = begin(&self.pool).await?;
        let bytes: Option<i64> = sqlx::query_scalar(
            "DELETE FROM volumes WHERE tenant_id = $1 AND name = $2 RETURNING bytes",
        )
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(bytes) = bytes else {
            return Ok(false);
        };
        if bytes != 0 {
            sqlx::query("UPDATE volume_usage SET bytes = bytes - $2 WHERE tenant_id = $1")
                .bind(tenant.as_str())
                .bind(bytes)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Deletes up to `batch` ephemeral volumes whose root run ended (or is gone), of every
    /// tenant, giving their bytes back. Returns how many went.
    pub async fn purge_ended(&self, batch: i64) -> Result<u64, VolError> {
        let mut tx = begin(&self.pool).await?;
        // Cross-tenant by design: the operator's housekeeping, not a tenant's read.
        let gone: Vec<Gone> = sqlx::query_as(
            "WITH gone AS (
                 DELETE FROM volumes WHERE id IN (
                     SELECT v.id FROM volumes v
                     LEFT JOIN runs r ON r.id = v.root_run_id AND r.tenant_id = v.tenant_id
                     WHERE v.kind = 'ephemeral'
                       AND (r.id IS NULL OR r.status IN ('succeeded', 'failed', 'cancelled'))
                     LIMIT $1 FOR UPDATE OF v SKIP LOCKED)
                 RETURNING tenant_id, bytes)
             SELECT tenant_id, sum(bytes)::bigint AS bytes, count(*) AS n FROM gone
             GROUP BY tenant_id ORDER BY tenant_id",
        )
        .bind(batch)
        .fetch_all(&mut *tx)
        .await?;
        let mut n = 0u64;
        for g in &gone {
            n += u64::try_from(g.n).unwrap_or(0);
            if g.bytes != 0 {
                sqlx::query("UPDATE volume_usage SET bytes = bytes - $2 WHERE tenant_id = $1")
                    .bind(&g.tenant_id)
                    .bind(g.bytes)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(n)
    }

    /// Collects unreferenced blobs of every tenant: for each tenant that has blobs, batches of
    /// at most `batch` until one is not full. Returns how many blobs went.
    pub async fn collect_blobs(&self, batch: i64) -> Result<u64, VolError> {
        // Cross-tenant by design: the operator's housekeeping. A loose index scan of the
        // primary key: one probe per tenant, not a read of every row.
        let tenants: Vec<String> = sqlx::query_scalar(
            "WITH RECURSIVE t AS (
                 (SELECT tenant_id FROM volume_blobs ORDER BY tenant_id LIMIT 1)
                 UNION ALL
                 SELECT (SELECT b.tenant_id FROM volume_blobs b WHERE b.tenant_id > t.tenant_id
                         ORDER BY b.tenant_id LIMIT 1)
                 FROM t WHERE t.tenant_id IS NOT NULL)
             SELECT tenant_id FROM t WHERE tenant_id IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut n = 0;
        for tenant in &tenants {
            loop {
                let got = self.collect_blobs_of(tenant, batch).await?;
                n += got;
                if got < u64::try_from(batch).unwrap_or(0) {
                    break;
                }
            }
        }
        Ok(n)
    }

    /// Deletes up to `batch` blobs of `tenant` that no file, change or snapshot of the tenant
    /// names and that no write touched within the grace period, then their external objects
    /// (best effort: an object left behind is only space). Returns how many rows went.
    ///
    /// Against a concurrent write that names an old blob: the write updates the blob's
    /// `touched_at` (holding its row lock) in its transaction. Rows locked are skipped; a row
    /// updated by a write that committed after this statement began is re-checked by the row
    /// lock, and its fresh `touched_at` keeps it; a row this statement locked first makes the
    /// write wait, then find no blob (an `Apply` by sha is refused, an inline put inserts the
    /// row again).
    pub async fn collect_blobs_of(&self, tenant: &str, batch: i64) -> Result<u64, VolError> {
        let gone: Vec<Collected> = sqlx::query_as(
            "WITH doomed AS (
                 SELECT b.sha256 FROM volume_blobs b
                 WHERE b.tenant_id = $1 AND b.touched_at < now() - make_interval(secs => $2)
                   AND NOT EXISTS (SELECT 1 FROM volume_files f JOIN volumes v ON v.id = f.volume_id
                                   WHERE f.sha256 = b.sha256 AND v.tenant_id = $1)
                   AND NOT EXISTS (SELECT 1 FROM volume_change_files cf
                                   JOIN volume_changes c ON c.id = cf.change_id
                                   WHERE cf.after_sha = b.sha256 AND c.tenant_id = $1)
                   AND NOT EXISTS (SELECT 1 FROM volume_change_files cf
                                   JOIN volume_changes c ON c.id = cf.change_id
                                   WHERE cf.before_sha = b.sha256 AND c.tenant_id = $1)
                   AND NOT EXISTS (SELECT 1 FROM volume_snapshots n
                                   WHERE n.tenant_id = $1
                                     AND n.entries @> jsonb_build_array(jsonb_build_array(b.sha256)))
                 LIMIT $3 FOR UPDATE OF b SKIP LOCKED)
             DELETE FROM volume_blobs b USING doomed d
             WHERE b.tenant_id = $1 AND b.sha256 = d.sha256
             RETURNING b.sha256, b.store",
        )
        .bind(tenant)
        .bind(self.grace_secs())
        .bind(batch)
        .fetch_all(&self.pool)
        .await?;
        let n = u64::try_from(gone.len()).unwrap_or(u64::MAX);
        let external: Vec<&Collected> = gone.iter().filter(|c| c.store != "pg").collect();
        if !external.is_empty()
            && let Err(e) = self.delete_objects(tenant, &external).await
        {
            let _ = e.into_api("deleting collected blobs' objects");
        }
        if n > 0 {
            tracing::debug!(tenant, blobs = n, "volumes: unreferenced blobs collected");
        }
        Ok(n)
    }

    /// Deletes the objects of collected blobs that still have no row, under the blobs' locks
    /// (a writer that made the row again in between made sure of its object).
    async fn delete_objects(&self, tenant: &str, gone: &[&Collected]) -> Result<(), VolError> {
        let mut tx = begin(&self.pool).await?;
        let shas: Vec<&str> = gone.iter().map(|c| c.sha256.as_str()).collect();
        lock_blobs(&mut tx, tenant, &shas).await?;
        let back: Vec<String> = sqlx::query_scalar(
            "SELECT sha256 FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)",
        )
        .bind(tenant)
        .bind(&shas)
        .fetch_all(&mut *tx)
        .await?;
        for c in gone.iter().filter(|c| !back.contains(&c.sha256)) {
            let Some(ext) = self.blobs.external_named(&c.store) else {
                tracing::warn!(
                    sha256 = %c.sha256,
                    store = %c.store,
                    "volumes: a collected blob is in a store this substrate is not configured for; its object stays"
                );
                continue;
            };
            if let Err(e) = ext.delete(tenant, &c.sha256).await {
                tracing::warn!(error = %e, sha256 = %c.sha256, "volumes: a collected blob's object was not deleted");
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Bytes of files in every volume of `tenant`.
    pub async fn usage(&self, tenant: &TenantId) -> Result<i64, VolError> {
        let bytes: Option<i64> =
            sqlx::query_scalar("SELECT bytes FROM volume_usage WHERE tenant_id = $1")
                .bind(tenant.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(bytes.unwrap_or(0))
    }

    /// Every file of a volume, in path order.
    pub async fn files(&self, tenant: &TenantId, volume: Uuid) -> Result<Vec<FileRow>, VolError> {
        Ok(sqlx::query_as(
            "SELECT f.path, f.sha256, f.size, f.mode, f.updated_at
             FROM volume_files f JOIN volumes v ON v.id = f.volume_id
             WHERE v.tenant_id = $1 AND f.volume_id = $2 ORDER BY f.path",
        )
        .bind(tenant.as_str())
        .bind(volume)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Files under the directory `dir` (every file when `None`) after `after`, in path order, at
    /// most `limit`.
    pub async fn tree_page(
        &self,
        tenant: &TenantId,
        volume: Uuid,
        dir: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<FileRow>, VolError> {
        // Paths under `d` are those in [`d/`, `d0`): '0' follows '/' in byte order.
        let (lo, hi) = match dir {
            Some(d) => (Some(format!("{d}/")), Some(format!("{d}0"))),
            None => (None, None),
        };
        Ok(sqlx::query_as(
            "SELECT f.path, f.sha256, f.size, f.mode, f.updated_at
             FROM volume_files f JOIN volumes v ON v.id = f.volume_id
             WHERE v.tenant_id = $1 AND f.volume_id = $2
               AND ($3::text IS NULL OR f.path >= $3) AND ($4::text IS NULL OR f.path < $4)
               AND ($5::text IS NULL OR f.path > $5)
             ORDER BY f.path LIMIT $6",
        )
        .bind(tenant.as_str())
        .bind(volume)
        .bind(lo)
        .bind(hi)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    /// One file of a volume.
    pub async fn file(
        &self,
        tenant: &TenantId,
        volume: Uuid,
        path: &str,
    ) -> Result<Option<FileRow>, VolError> {
        Ok(sqlx::query_as(
            "SELECT f.path, f.sha256, f.size, f.mode, f.updated_at
             FROM volume_files f JOIN volumes v ON v.id = f.volume_id
             WHERE v.tenant_id = $1 AND f.volume_id = $2 AND f.path = $3",
        )
        .bind(tenant.as_str())
        .bind(volume)
        .bind(path)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The hashes of `shas` that the volume's index, history or snapshots name.
    pub async fn referenced(
        &self,
        tenant: &TenantId,
        volume: Uuid,
        shas: &[String],
    ) -> Result<HashSet<String>, VolError> {
        let mut conn = self.pool.acquire().await?;
        referenced_by(&mut conn, tenant, volume, shas).await
    }

    /// The sizes of the blobs of `shas` the tenant has.
    pub async fn blob_sizes(
        &self,
        tenant: &TenantId,
        shas: &[String],
    ) -> Result<HashMap<String, i64>, VolError> {
        let found: Vec<(String, i64)> = sqlx::query_as(
            "SELECT sha256, size FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)",
        )
        .bind(tenant.as_str())
        .bind(shas)
        .fetch_all(&self.pool)
        .await?;
        Ok(found.into_iter().collect())
    }

    /// The shas of `shas` the tenant has blobs for.
    pub async fn stored_blobs(
        &self,
        tenant: &TenantId,
        shas: &[String],
    ) -> Result<HashSet<String>, VolError> {
        let found: Vec<String> = sqlx::query_scalar(
            "SELECT sha256 FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)",
        )
        .bind(tenant.as_str())
        .bind(shas)
        .fetch_all(&self.pool)
        .await?;
        Ok(found.into_iter().collect())
    }

    /// A page of the changelog, newest first: changes below `before_seq`, of `run` when given.
    pub async fn changes(
        &self,
        tenant: &TenantId,
        volume: Uuid,
        run: Option<Uuid>,
        before_seq: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ChangeRow>, VolError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            change_columns!(),
            " FROM volume_changes
             WHERE tenant_id = $1 AND volume_id = $2
               AND ($3::uuid IS NULL OR run_id = $3) AND ($4::bigint IS NULL OR seq < $4)
             ORDER BY seq DESC LIMIT $5"
        ))
        .bind(tenant.as_str())
        .bind(volume)
        .bind(run)
        .bind(before_seq)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?)
    }

    /// The files of the changes `ids` (changes of `tenant`), in path order per change.
    pub async fn change_files(
        &self,
        tenant: &TenantId,
        ids: &[Uuid],
    ) -> Result<Vec<ChangeFileRow>, VolError> {
        let mut conn = self.pool.acquire().await?;
        change_files(&mut conn, tenant, ids).await
    }

    /// Snapshots the volume as it is now.
    pub async fn create_snapshot(
        &self,
        tenant: &TenantId,
        target: &VolumeRow,
        label: &str,
    ) -> Result<SnapshotRow, VolError> {
        let volume = target.id;
        let mut tx = begin(&self.pool).await?;
        let vol: Option<VolumeRow> = sqlx::query_as(concat!(
            "SELECT ",
            volume_columns!(),
            " FROM volumes WHERE id = $1 AND tenant_id = $2 FOR UPDATE"
        ))
        .bind(volume)
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let vol = vol.ok_or_else(|| vol_gone(&target.name))?;
        // Counted under the volume's lock, so concurrent snapshots cannot pass the cap.
        let have: i64 =
            sqlx::query_scalar("SELECT count(*) FROM volume_snapshots WHERE volume_id = $1")
                .bind(volume)
                .fetch_one(&mut *tx)
                .await?;
        if have >= MAX_SNAPSHOTS {
            return Err(plan::exhausted(format!(
                "volume `{}` already has {have} snapshots, the most a volume keeps ({MAX_SNAPSHOTS}); snapshots are kept until the volume is deleted, so restore or diff against one you have"
            , vol.name))
            .with_param("volume")
            .into());
        }
        let index = load_index(&mut tx, volume).await?;
        let entries: Vec<(&str, &str, i64, i32)> = index
            .iter()
            .map(|(p, e)| (p.as_str(), e.sha256.as_str(), e.size, e.mode))
            .collect();
        let row: SnapshotRow = sqlx::query_as(concat!(
            "INSERT INTO volume_snapshots
               (id, tenant_id, volume_id, label, tree_hash, seq, files, bytes, entries)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING ",
            snapshot_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(volume)
        .bind(label)
        .bind(&vol.tree_hash)
        .bind(vol.seq)
        .bind(vol.files)
        .bind(vol.bytes)
        .bind(sqlx::types::Json(&entries))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    /// The snapshots of a volume, newest first.
    pub async fn snapshots(
        &self,
        tenant: &TenantId,
        volume: Uuid,
    ) -> Result<Vec<SnapshotRow>, VolError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            snapshot_columns!(),
            " FROM volume_snapshots WHERE tenant_id = $1 AND volume_id = $2
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(tenant.as_str())
        .bind(volume)
        .fetch_all(&self.pool)
        .await?)
    }

    /// A snapshot of a volume and the index it names.
    pub async fn snapshot(
        &self,
        tenant: &TenantId,
        volume: Uuid,
        id: Uuid,
    ) -> Result<Option<(SnapshotRow, Index)>, VolError> {
        let mut conn = self.pool.acquire().await?;
        snapshot(&mut conn, tenant, volume, id).await
    }

    /// Makes a change to the volume `volume` (see the module's notes). Blobs that go to the
    /// external store are written first, outside the transaction.
    pub async fn mutate(
        &self,
        tenant: &TenantId,
        volume: &VolumeRow,
        meta: &Meta,
        m: &Mutation,
    ) -> Result<Mutated, VolError> {
        if let Mutation::Apply { inline, .. } = m {
            self.stage_external(tenant, inline).await?;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.mutate_once(tenant, volume, meta, m).await {
                Err(e) if e.retryable() && attempt < WRITE_ATTEMPTS => continue,
                r => return r,
            }
        }
    }

    /// Writes the inline blobs bound for the external store that the tenant does not have yet.
    async fn stage_external(
        &self,
        tenant: &TenantId,
        inline: &[InlineBlob],
    ) -> Result<(), VolError> {
        let big: Vec<&InlineBlob> = inline
            .iter()
            .filter(|b| self.blobs.external_for(b.bytes.len()).is_some())
            .collect();
        if big.is_empty() {
            return Ok(());
        }
        let shas: Vec<String> = big.iter().map(|b| b.sha256.clone()).collect();
        let have = self.stored_blobs(tenant, &shas).await?;
        for b in big.into_iter().filter(|b| !have.contains(&b.sha256)) {
            if let Some(ext) = self.blobs.external_for(b.bytes.len()) {
                ext.put(tenant.as_str(), &b.sha256, &b.bytes).await?;
            }
        }
        Ok(())
    }

    async fn mutate_once(
        &self,
        tenant: &TenantId,
        target: &VolumeRow,
        meta: &Meta,
        m: &Mutation,
    ) -> Result<Mutated, VolError> {
        let volume = target.id;
        let mut tx = begin(&self.pool).await?;
        let vol: Option<VolumeRow> = sqlx::query_as(concat!(
            "SELECT ",
            volume_columns!(),
            " FROM volumes WHERE id = $1 AND tenant_id = $2 FOR UPDATE"
        ))
        .bind(volume)
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let vol = vol.ok_or_else(|| vol_gone(&target.name))?;
        let source = m.source(&meta.source);
        if let Some(key) = &meta.op_key
            && let Some(done) = replay(&mut tx, tenant, &vol, key, source).await?
        {
            return Ok(done);
        }
        if vol.mode == "ro" {
            return Err(plan::conflict(format!(
                "volume `{}` is read-only; its definition's mode is `ro` (a tenant admin can make it `rw`)",
                vol.name
            ))
            .into());
        }
        let index = load_index(&mut tx, vol.id).await?;
        let (planned, undone) = match m {
            Mutation::Apply {
                ops,
                replace,
                inline,
            } => {
                let mut sizes: HashMap<String, i64> = inline
                    .iter()
                    .map(|b| {
                        (
                            b.sha256.clone(),
                            i64::try_from(b.bytes.len()).unwrap_or(i64::MAX),
                        )
                    })
                    .collect();
                let named: Vec<String> = ops
                    .iter()
                    .filter_map(|o| match &o.kind {
                        plan::OpKind::Put { sha256, .. } if !sizes.contains_key(sha256) => {
                            Some(sha256.clone())
                        }
                        _ => None,
                    })
                    .collect();
                if !named.is_empty() {
                    sizes.extend(
                        self.named_blobs(&mut tx, tenant, &vol, &index, &named)
                            .await?,
                    );
                }
                let planned = plan::apply(&index, ops, *replace, &sizes, self.caps.max_file_bytes)?;
                (planned, Vec::new())
            }
            Mutation::Undo(target) => {
                let changes = undo_targets(&mut tx, tenant, &vol, *target).await?;
                let ids: Vec<Uuid> = changes.iter().map(|c| c.id).collect();
                let files = change_files(&mut tx, tenant, &ids).await?;
                let recorded: Vec<plan::RecordedChange> = changes
                    .iter()
                    .map(|c| plan::RecordedChange {
                        id: c.id.to_string(),
                        files: files
                            .iter()
                            .filter(|f| f.change_id == c.id)
                            .map(|f| plan::Recorded {
                                path: f.path.clone(),
                                before: f.before_sha.as_ref().map(|s| Entry {
                                    sha256: s.clone(),
                                    size: f.before_size.unwrap_or(0),
                                    mode: f.before_mode.unwrap_or(plan::MODE_FILE),
                                }),
                                after_sha: f.after_sha.clone(),
                                after_mode: f.after_mode,
                            })
                            .collect(),
                    })
                    .collect();
                (plan::undo(&index, &recorded)?, ids)
            }
            Mutation::Restore {
                snapshot: id,
                if_tree,
            } => {
                if let Some(want) = if_tree
                    && want != &vol.tree_hash
                {
                    return Err(plan::conflict(format!(
                        "volume `{}` is now at tree {}, not {want} (`if_tree`); look at its changes, then retry with the current tree hash",
                        vol.name, vol.tree_hash
                    ))
                    .with_param("if_tree")
                    .into());
                }
                let (_, target) = snapshot(&mut tx, tenant, vol.id, *id)
                    .await?
                    .ok_or_else(|| no_snapshot(&vol.name, *id, "snapshot_id"))?;
                (plan::restore(&index, &target), Vec::new())
            }
        };
        self.check_volume_caps(&vol, &planned)?;
        if let Mutation::Apply { inline, .. } = m {
            self.insert_blob_rows(&mut tx, tenant, inline, &planned)
                .await?;
        }
        write_index(&mut tx, vol.id, &planned).await?;
        let seq = vol.seq + 1;
        let tree_after = plan::tree_hash(&planned.index);
        let undoes = undone.first().copied();
        let change: ChangeRow = sqlx::query_as(concat!(
            "INSERT INTO volume_changes (id, tenant_id, volume_id, seq, op_key, run_id, tool_use_id,
               source, subject, undoes, tree_before, tree_after)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING ",
            change_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(tenant.as_str())
        .bind(vol.id)
        .bind(seq)
        .bind(meta.op_key.as_deref())
        .bind(meta.run_id)
        .bind(meta.tool_use_id.as_deref())
        .bind(source)
        .bind(&meta.subject)
        .bind(undoes)
        .bind(&vol.tree_hash)
        .bind(&tree_after)
        .fetch_one(&mut *tx)
        .await?;
        let files = insert_change_files(&mut tx, change.id, &planned).await?;
        if !undone.is_empty() {
            // Undoing an undo makes the changes it had undone current again.
            sqlx::query(
                "UPDATE volume_changes SET undone_by = NULL
                 WHERE tenant_id = $1 AND volume_id = $2 AND undone_by = ANY($3)",
            )
            .bind(tenant.as_str())
            .bind(vol.id)
            .bind(&undone)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE volume_changes SET undone_by = $3 WHERE tenant_id = $1 AND id = ANY($2)",
            )
            .bind(tenant.as_str())
            .bind(&undone)
            .bind(change.id)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "UPDATE volumes SET bytes = $3, files = $4, tree_hash = $5, seq = $6, updated_at = now()
             WHERE id = $1 AND tenant_id = $2",
        )
        .bind(vol.id)
        .bind(tenant.as_str())
        .bind(planned.bytes)
        .bind(i32::try_from(planned.count).unwrap_or(i32::MAX))
        .bind(&tree_after)
        .bind(seq)
        .execute(&mut *tx)
        .await?;
        self.charge(&mut tx, tenant, planned.bytes - vol.bytes)
            .await?;
        tx.commit().await?;
        Ok(Mutated {
            change,
            files,
            replayed: false,
        })
    }

    /// Refuses a change that grows the volume past its quota or `volumes.max_files` (a volume
    /// already over may still shrink).
    fn check_volume_caps(&self, vol: &VolumeRow, p: &Planned) -> Result<(), VolError> {
        if p.bytes > vol.quota_bytes && p.bytes > vol.bytes {
            return Err(plan::exhausted(format!(
                "this change would bring volume `{}` to {} bytes, over its quota of {} bytes; delete files first, or raise the volume's `quota_bytes` (at most volumes.max_volume_bytes, {})",
                vol.name, p.bytes, vol.quota_bytes, self.caps.max_volume_bytes
            ))
            .into());
        }
        let files = i64::from(vol.files);
        if p.count > i64_of(self.caps.max_files) && p.count > files {
            return Err(plan::exhausted(format!(
                "this change would bring volume `{}` to {} files, over volumes.max_files ({}); delete files first",
                vol.name, p.count, self.caps.max_files
            ))
            .into());
        }
        Ok(())
    }

    /// Moves the tenant's usage by `delta`, refusing growth over `volumes.max_tenant_bytes`.
    async fn charge(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        tenant: &TenantId,
        delta: i64,
    ) -> Result<(), VolError> {
        if delta == 0 {
            return Ok(());
        }
        let now: i64 = sqlx::query_scalar(
            "INSERT INTO volume_usage (tenant_id, bytes) VALUES ($1, $2)
             ON CONFLICT (tenant_id) DO UPDATE SET bytes = volume_usage.bytes + EXCLUDED.bytes
             RETURNING bytes",
        )
        .bind(tenant.as_str())
        .bind(delta)
        .fetch_one(&mut **tx)
        .await?;
        let max = i64_of(self.caps.max_tenant_bytes);
        if delta > 0 && now > max {
            return Err(plan::exhausted(format!(
                "this change would bring your tenant's volumes to {now} bytes, over volumes.max_tenant_bytes ({max}); delete files or volumes first, or ask the operator to raise volumes.max_tenant_bytes"
            ))
            .into());
        }
        Ok(())
    }

    /// The blobs of `named` (puts by sha) this change may use, with their sizes: a blob this
    /// volume's index, history or snapshots name, or one a write stored or named within the
    /// grace period (put ahead by `PutBlobs`). Another volume's old blob is not reachable by
    /// its hash alone. The rows are locked and their `touched_at` updated, so the collector
    /// cannot take them before this change commits (see [`Self::collect_blobs_of`]).
    async fn named_blobs(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        tenant: &TenantId,
        vol: &VolumeRow,
        index: &Index,
        named: &[String],
    ) -> Result<Vec<(String, i64)>, VolError> {
        let found: Vec<(String, i64, bool)> = sqlx::query_as(
            "SELECT sha256, size, touched_at >= now() - make_interval(secs => $3)
             FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)
             ORDER BY sha256 FOR NO KEY UPDATE",
        )
        .bind(tenant.as_str())
        .bind(named)
        .bind(self.grace_secs())
        .fetch_all(&mut **tx)
        .await?;
        let in_index: HashSet<&str> = index.values().map(|e| e.sha256.as_str()).collect();
        let older: Vec<String> = found
            .iter()
            .filter(|(s, _, recent)| !recent && !in_index.contains(s.as_str()))
            .map(|(s, _, _)| s.clone())
            .collect();
        let history = if older.is_empty() {
            HashSet::new()
        } else {
            referenced_by(tx, tenant, vol.id, &older).await?
        };
        let ok: Vec<(String, i64)> = found
            .into_iter()
            .filter(|(s, _, recent)| {
                *recent || in_index.contains(s.as_str()) || history.contains(s)
            })
            .map(|(s, z, _)| (s, z))
            .collect();
        let shas: Vec<&str> = ok.iter().map(|(s, _)| s.as_str()).collect();
        if !shas.is_empty() {
            sqlx::query(
                "UPDATE volume_blobs SET touched_at = now() WHERE tenant_id = $1 AND sha256 = ANY($2)",
            )
            .bind(tenant.as_str())
            .bind(&shas)
            .execute(&mut **tx)
            .await?;
        }
        Ok(ok)
    }

    /// The `volume_blobs` rows of the inline blobs the plan keeps: data in the row, or (for a
    /// blob staged in the external store) the store's name. A row the tenant has is touched
    /// (locked, `touched_at` updated, so the collector leaves it); a row made here for an
    /// external blob gets its object checked under the blob's lock (the collector may have
    /// deleted it since it was staged) and written again when missing.
    async fn insert_blob_rows(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        tenant: &TenantId,
        inline: &[InlineBlob],
        planned: &Planned,
    ) -> Result<(), VolError> {
        let kept: HashSet<&str> = planned
            .files
            .iter()
            .filter_map(|t| t.after.as_ref().map(|e| e.sha256.as_str()))
            .collect();
        let mut rows: Vec<&InlineBlob> = inline
            .iter()
            .filter(|b| kept.contains(b.sha256.as_str()))
            .collect();
        if rows.is_empty() {
            return Ok(());
        }
        // One order for every writer: row locks never deadlock between changes.
        rows.sort_by(|a, b| a.sha256.cmp(&b.sha256));
        let external: Vec<&str> = rows
            .iter()
            .filter(|b| self.blobs.external_for(b.bytes.len()).is_some())
            .map(|b| b.sha256.as_str())
            .collect();
        lock_blobs(tx, tenant.as_str(), &external).await?;
        let mut shas = Vec::new();
        let mut sizes = Vec::new();
        let mut stores = Vec::new();
        let mut datas: Vec<Option<&[u8]>> = Vec::new();
        for b in &rows {
            shas.push(b.sha256.as_str());
            sizes.push(i64::try_from(b.bytes.len()).unwrap_or(i64::MAX));
            match self.blobs.external_for(b.bytes.len()) {
                Some(ext) => {
                    stores.push(ext.name());
                    datas.push(None);
                }
                None => {
                    stores.push("pg");
                    datas.push(Some(&b.bytes));
                }
            }
        }
        let made: Vec<(String, bool)> = sqlx::query_as(
            "INSERT INTO volume_blobs (tenant_id, sha256, size, store, data)
             SELECT $1, s, z, st, d FROM UNNEST($2::text[], $3::int8[], $4::text[], $5::bytea[])
               AS t(s, z, st, d)
             ON CONFLICT (tenant_id, sha256) DO UPDATE SET touched_at = now()
             RETURNING sha256, (xmax = 0)",
        )
        .bind(tenant.as_str())
        .bind(&shas)
        .bind(&sizes)
        .bind(&stores)
        .bind(&datas)
        .fetch_all(&mut **tx)
        .await?;
        for (sha, inserted) in made {
            if !inserted {
                continue;
            }
            let Some(b) = rows.iter().find(|b| b.sha256 == sha) else {
                continue;
            };
            if let Some(ext) = self.blobs.external_for(b.bytes.len())
                && !ext.exists(tenant.as_str(), &b.sha256).await?
            {
                ext.put(tenant.as_str(), &b.sha256, &b.bytes).await?;
            }
        }
        Ok(())
    }
}

/// The hashes of `shas` that the volume's index, history or snapshots name.
async fn referenced_by(
    conn: &mut sqlx::PgConnection,
    tenant: &TenantId,
    volume: Uuid,
    shas: &[String],
) -> Result<HashSet<String>, VolError> {
    // Each set is read once (a hashed subplan), not once per sha.
    let found: Vec<String> = sqlx::query_scalar(
        "SELECT s FROM unnest($3::text[]) AS s
             WHERE EXISTS (SELECT 1 FROM volumes v WHERE v.id = $2 AND v.tenant_id = $1)
               AND (s IN (SELECT f.sha256 FROM volume_files f WHERE f.volume_id = $2)
                 OR s IN (SELECT cf.after_sha FROM volume_change_files cf
                          JOIN volume_changes c ON c.id = cf.change_id
                          WHERE c.volume_id = $2 AND c.tenant_id = $1
                            AND cf.after_sha IS NOT NULL)
                 OR s IN (SELECT cf.before_sha FROM volume_change_files cf
                          JOIN volume_changes c ON c.id = cf.change_id
                          WHERE c.volume_id = $2 AND c.tenant_id = $1
                            AND cf.before_sha IS NOT NULL)
                 OR EXISTS (SELECT 1 FROM volume_snapshots n
                            WHERE n.volume_id = $2 AND n.tenant_id = $1
                              AND n.entries @> jsonb_build_array(jsonb_build_array(s))))",
    )
    .bind(tenant.as_str())
    .bind(volume)
    .bind(shas)
    .fetch_all(&mut *conn)
    .await?;
    Ok(found.into_iter().collect())
}

fn no_snapshot(volume: &str, id: Uuid, field: &str) -> VolError {
    VolError::Rule(
        Error::not_found(format!("no snapshot `{id}` of volume `{volume}`")).with_param(field),
    )
}

/// The change recorded under `key`, when there is one; a key used for another volume or
/// another kind of change is refused.
async fn replay(
    tx: &mut Transaction<'_, Postgres>,
    tenant: &TenantId,
    vol: &VolumeRow,
    key: &str,
    source: &str,
) -> Result<Option<Mutated>, VolError> {
    let found: Option<ChangeRow> = sqlx::query_as(concat!(
        "SELECT ",
        change_columns!(),
        " FROM volume_changes WHERE tenant_id = $1 AND op_key = $2"
    ))
    .bind(tenant.as_str())
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(change) = found else {
        return Ok(None);
    };
    if change.volume_id != vol.id || change.source != source {
        return Err(VolError::Rule(
            Error::invalid(
                "`op_key` was already used for another change (of another volume, or of another kind); use a new op key",
            )
            .with_param("op_key"),
        ));
    }
    let files = change_files(tx, tenant, &[change.id]).await?;
    Ok(Some(Mutated {
        change,
        files,
        replayed: true,
    }))
}

/// The changes an undo reverts, newest first.
async fn undo_targets(
    tx: &mut Transaction<'_, Postgres>,
    tenant: &TenantId,
    vol: &VolumeRow,
    target: UndoTarget,
) -> Result<Vec<ChangeRow>, VolError> {
    match target {
        UndoTarget::Change(id) => {
            let c: Option<ChangeRow> = sqlx::query_as(concat!(
                "SELECT ",
                change_columns!(),
                " FROM volume_changes WHERE tenant_id = $1 AND volume_id = $2 AND id = $3"
            ))
            .bind(tenant.as_str())
            .bind(vol.id)
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?;
            let c = c.ok_or_else(|| {
                VolError::Rule(
                    Error::not_found(format!("no change `{id}` in volume `{}`", vol.name))
                        .with_param("change_id"),
                )
            })?;
            if let Some(by) = c.undone_by {
                return Err(plan::conflict(format!(
                    "change {id} was already undone by change {by}; undo {by} to bring it back"
                ))
                .with_param("change_id")
                .into());
            }
            Ok(vec![c])
        }
        UndoTarget::Run(run) => {
            let cs: Vec<ChangeRow> = sqlx::query_as(concat!(
                "SELECT ",
                change_columns!(),
                " FROM volume_changes
                 WHERE tenant_id = $1 AND volume_id = $2 AND run_id = $3 AND undone_by IS NULL
                 ORDER BY seq DESC"
            ))
            .bind(tenant.as_str())
            .bind(vol.id)
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
            if cs.is_empty() {
                return Err(plan::conflict(format!(
                    "run {run} has no changes in volume `{}` that are not undone yet",
                    vol.name
                ))
                .with_param("run_id")
                .into());
            }
            Ok(cs)
        }
    }
}

async fn change_files(
    conn: &mut sqlx::PgConnection,
    tenant: &TenantId,
    ids: &[Uuid],
) -> Result<Vec<ChangeFileRow>, VolError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(
        "SELECT cf.change_id, cf.path, cf.before_sha, cf.after_sha, cf.before_mode, cf.after_mode,
                cf.before_size, cf.after_size
         FROM volume_change_files cf
         WHERE cf.change_id = ANY($2)
           AND EXISTS (SELECT 1 FROM volume_changes c WHERE c.id = cf.change_id AND c.tenant_id = $1)
         ORDER BY cf.change_id, cf.path",
    )
        .bind(tenant.as_str())
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?)
}

async fn snapshot(
    conn: &mut sqlx::PgConnection,
    tenant: &TenantId,
    volume: Uuid,
    id: Uuid,
) -> Result<Option<(SnapshotRow, Index)>, VolError> {
    #[derive(sqlx::FromRow)]
    struct WithEntries {
        #[sqlx(flatten)]
        row: SnapshotRow,
        entries: sqlx::types::Json<Vec<(String, String, i64, i32)>>,
    }
    let found: Option<WithEntries> = sqlx::query_as(concat!(
        "SELECT ",
        snapshot_columns!(),
        ", entries FROM volume_snapshots WHERE tenant_id = $1 AND volume_id = $2 AND id = $3"
    ))
    .bind(tenant.as_str())
    .bind(volume)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.map(|w| {
        let index = w
            .entries
            .0
            .into_iter()
            .map(|(path, sha256, size, mode)| (path, Entry { sha256, size, mode }))
            .collect();
        (w.row, index)
    }))
}

async fn load_index(tx: &mut Transaction<'_, Postgres>, volume: Uuid) -> Result<Index, VolError> {
    let rows: Vec<(String, String, i64, i32)> =
        sqlx::query_as("SELECT path, sha256, size, mode FROM volume_files WHERE volume_id = $1")
            .bind(volume)
            .fetch_all(&mut **tx)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(path, sha256, size, mode)| (path, Entry { sha256, size, mode }))
        .collect())
}

/// Writes the plan's files to the index: deletes, and upserts of what changed.
async fn write_index(
    tx: &mut Transaction<'_, Postgres>,
    volume: Uuid,
    p: &Planned,
) -> Result<(), VolError> {
    let gone: Vec<&str> = p
        .files
        .iter()
        .filter(|t| t.after.is_none())
        .map(|t| t.path.as_str())
        .collect();
    if !gone.is_empty() {
        sqlx::query("DELETE FROM volume_files WHERE volume_id = $1 AND path = ANY($2)")
            .bind(volume)
            .bind(&gone)
            .execute(&mut **tx)
            .await?;
    }
    let (mut paths, mut shas, mut sizes, mut modes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for t in &p.files {
        if let Some(a) = &t.after
            && t.before.as_ref() != Some(a)
        {
            paths.push(t.path.as_str());
            shas.push(a.sha256.as_str());
            sizes.push(a.size);
            modes.push(a.mode);
        }
    }
    if !paths.is_empty() {
        sqlx::query(
            "INSERT INTO volume_files (volume_id, path, sha256, size, mode)
             SELECT $1, p, s, z, m FROM UNNEST($2::text[], $3::text[], $4::int8[], $5::int4[])
               AS t(p, s, z, m)
             ON CONFLICT (volume_id, path) DO UPDATE SET
               sha256 = EXCLUDED.sha256, size = EXCLUDED.size, mode = EXCLUDED.mode,
               updated_at = now()",
        )
        .bind(volume)
        .bind(&paths)
        .bind(&shas)
        .bind(&sizes)
        .bind(&modes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// One row per file the change touched; returns them.
async fn insert_change_files(
    tx: &mut Transaction<'_, Postgres>,
    change: Uuid,
    p: &Planned,
) -> Result<Vec<ChangeFileRow>, VolError> {
    let rows: Vec<ChangeFileRow> = p
        .files
        .iter()
        .map(|t| ChangeFileRow {
            change_id: change,
            path: t.path.clone(),
            before_sha: t.before.as_ref().map(|e| e.sha256.clone()),
            after_sha: t.after.as_ref().map(|e| e.sha256.clone()),
            before_mode: t.before.as_ref().map(|e| e.mode),
            after_mode: t.after.as_ref().map(|e| e.mode),
            before_size: t.before.as_ref().map(|e| e.size),
            after_size: t.after.as_ref().map(|e| e.size),
        })
        .collect();
    if rows.is_empty() {
        return Ok(rows);
    }
    let paths: Vec<&str> = rows.iter().map(|r| r.path.as_str()).collect();
    let before_sha: Vec<Option<&str>> = rows.iter().map(|r| r.before_sha.as_deref()).collect();
    let after_sha: Vec<Option<&str>> = rows.iter().map(|r| r.after_sha.as_deref()).collect();
    let before_mode: Vec<Option<i32>> = rows.iter().map(|r| r.before_mode).collect();
    let after_mode: Vec<Option<i32>> = rows.iter().map(|r| r.after_mode).collect();
    let before_size: Vec<Option<i64>> = rows.iter().map(|r| r.before_size).collect();
    let after_size: Vec<Option<i64>> = rows.iter().map(|r| r.after_size).collect();
    sqlx::query(
        "INSERT INTO volume_change_files
           (change_id, path, before_sha, after_sha, before_mode, after_mode, before_size, after_size)
         SELECT $1, * FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int4[], $6::int4[],
                                  $7::int8[], $8::int8[])",
    )
    .bind(change)
    .bind(&paths)
    .bind(&before_sha)
    .bind(&after_sha)
    .bind(&before_mode)
    .bind(&after_mode)
    .bind(&before_size)
    .bind(&after_size)
    .execute(&mut **tx)
    .await?;
    Ok(rows)
}
