//! Where file contents are kept: content-addressed blobs per tenant, behind [`BlobStore`].
//!
//! Every blob has a `volume_blobs` row. Small blobs (below `volumes.blobs.external_min_bytes`)
//! and every blob when `volumes.blobs.kind = "postgres"` live in that row's `data` ([`PgBlobs`]);
//! larger ones live in a directory ([`DirBlobs`]) or an S3-compatible object store
//! ([`S3Blobs`]) under the key `<tenant>/<sha256>`, and their row names the store (`dir` or
//! `s3`) with no data. An object is written *before* the transaction that inserts its row
//! commits: a crash in between leaves an object without a row, which is harmless (the next
//! write of the same content rewrites the same key).
//!
//! Blobs are collected (see [`super::store::VolumeStore::collect_blobs`]): a row is deleted,
//! then its object. So that a writer never ends up with a row whose object the collector
//! deleted, both sides hold a per-blob advisory lock ([`lock_blobs`]): the collector deletes an
//! object only while no row exists, under the lock; a writer that *inserts* a row for an
//! external blob makes sure, under the lock and before it commits, that the object exists.
//! A row therefore always has its object.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::ObjectStoreExt as _;
use sqlx::PgPool;
use weft_config::BlobStoreConfig;
use weft_core::Error;

/// How many external objects are fetched at once.
const FETCH_CONCURRENCY: usize = 8;

/// A store failure: the database, or the object store's own error (logged, never shown).
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("postgres: {0}")]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Store(String),
}

impl BlobError {
    /// The caller-facing error: the database's mapping, or "unavailable" for an object store.
    pub fn into_api(self, what: &str) -> Error {
        match self {
            Self::Db(e) => {
                tracing::error!(error = %e, "volumes: {what} failed");
                weft_store::StoreError::Db(e).to_api()
            }
            Self::Store(e) => {
                tracing::error!(error = %e, "volumes: {what} failed");
                Error::unavailable(
                    "the volume blob store is unreachable; try again shortly (the operator's logs name the cause)",
                )
            }
        }
    }
}

/// Blobs by `(tenant, sha256)`. Implementations are content addressed: putting the same key
/// twice stores the same bytes.
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync + fmt::Debug {
    /// The `volume_blobs.store` value of the blobs it holds: `pg`, `dir` or `s3`.
    fn name(&self) -> &'static str;
    /// Stores `bytes` (whose sha256 is `sha256`).
    async fn put(&self, tenant: &str, sha256: &str, bytes: &[u8]) -> Result<(), BlobError>;
    /// The bytes of a blob, `None` when the store does not have it.
    async fn get(&self, tenant: &str, sha256: &str) -> Result<Option<Vec<u8>>, BlobError>;
    /// Whether the store has the blob.
    async fn exists(&self, tenant: &str, sha256: &str) -> Result<bool, BlobError>;
    /// Removes the blob (nothing when it is not there).
    async fn delete(&self, tenant: &str, sha256: &str) -> Result<(), BlobError>;
}

/// Blobs in the `data` column of `volume_blobs`.
#[derive(Clone, Debug)]
pub struct PgBlobs {
    pool: PgPool,
}

impl PgBlobs {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn size_of(bytes: &[u8]) -> i64 {
    i64::try_from(bytes.len()).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl BlobStore for PgBlobs {
    fn name(&self) -> &'static str {
        "pg"
    }

    async fn put(&self, tenant: &str, sha256: &str, bytes: &[u8]) -> Result<(), BlobError> {
        sqlx::query(
            "INSERT INTO volume_blobs (tenant_id, sha256, size, store, data)
             VALUES ($1, $2, $3, 'pg', $4) ON CONFLICT (tenant_id, sha256) DO NOTHING",
        )
        .bind(tenant)
        .bind(sha256)
        .bind(size_of(bytes))
        .bind(bytes)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn get(&self, tenant: &str, sha256: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let data: Option<Option<Vec<u8>>> = sqlx::query_scalar(
            "SELECT data FROM volume_blobs WHERE tenant_id = $1 AND sha256 = $2",
        )
        .bind(tenant)
        .bind(sha256)
        .fetch_optional(&self.pool)
        .await?;
        Ok(data.flatten())
    }

    async fn exists(&self, tenant: &str, sha256: &str) -> Result<bool, BlobError> {
        Ok(self.get(tenant, sha256).await?.is_some())
    }

    async fn delete(&self, tenant: &str, sha256: &str) -> Result<(), BlobError> {
        sqlx::query("DELETE FROM volume_blobs WHERE tenant_id = $1 AND sha256 = $2")
            .bind(tenant)
            .bind(sha256)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Blobs as files `<dir>/<tenant>/<sha256>`, written to a temporary name and renamed into place.
#[derive(Clone, Debug)]
pub struct DirBlobs {
    root: PathBuf,
}

impl DirBlobs {
    /// A store under `root` (made when missing, 0700).
    pub fn new(root: PathBuf) -> Result<Self, String> {
        private_dir(&root).map_err(|e| {
            format!(
                "volumes.blobs.dir {} cannot be created: {e}; give a writable directory",
                root.display()
            )
        })?;
        Ok(Self { root })
    }

    fn path(&self, tenant: &str, sha256: &str) -> PathBuf {
        self.root.join(tenant).join(sha256)
    }
}

/// Makes `dir` and its missing parents readable by this user only (0700).
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `bytes` to a new file `path` readable by this user only (0600).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> BlobError {
    BlobError::Store(format!("{what} {}: {e}", path.display()))
}

#[async_trait::async_trait]
impl BlobStore for DirBlobs {
    fn name(&self) -> &'static str {
        "dir"
    }

    async fn put(&self, tenant: &str, sha256: &str, bytes: &[u8]) -> Result<(), BlobError> {
        let dir = self.root.join(tenant);
        let tmp = dir.join(format!(".{sha256}.{}", uuid::Uuid::now_v7().simple()));
        let owned = bytes.to_vec();
        let (d, t) = (dir.clone(), tmp.clone());
        tokio::task::spawn_blocking(move || -> Result<(), BlobError> {
            private_dir(&d).map_err(|e| io("creating", &d, &e))?;
            write_private(&t, &owned).map_err(|e| io("writing", &t, &e))
        })
        .await
        .map_err(|e| BlobError::Store(format!("writing {}: {e}", tmp.display())))??;
        let to = self.path(tenant, sha256);
        if let Err(e) = tokio::fs::rename(&tmp, &to).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(io("renaming into", &to, &e));
        }
        Ok(())
    }

    async fn get(&self, tenant: &str, sha256: &str) -> Result<Option<Vec<u8>>, BlobError> {
        let path = self.path(tenant, sha256);
        match tokio::fs::read(&path).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("reading", &path, &e)),
        }
    }

    async fn exists(&self, tenant: &str, sha256: &str) -> Result<bool, BlobError> {
        let path = self.path(tenant, sha256);
        tokio::fs::try_exists(&path)
            .await
            .map_err(|e| io("looking at", &path, &e))
    }

    async fn delete(&self, tenant: &str, sha256: &str) -> Result<(), BlobError> {
        let path = self.path(tenant, sha256);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("removing", &path, &e)),
        }
    }
}

/// Blobs as objects `<tenant>/<sha256>` of an S3 bucket (any S3-compatible server).
#[derive(Debug)]
pub struct S3Blobs {
    store: object_store::aws::AmazonS3,
}

impl S3Blobs {
    /// A store over the `s3_*` settings of `cfg`.
    pub fn new(cfg: &BlobStoreConfig) -> Result<Self, String> {
        let mut b = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(cfg.s3_bucket.trim())
            .with_region(cfg.s3_region.trim())
            .with_allow_http(cfg.s3_allow_http);
        if !cfg.s3_endpoint.trim().is_empty() {
            b = b.with_endpoint(cfg.s3_endpoint.trim());
        }
        if !cfg.s3_access_key_id.is_empty() {
            b = b.with_access_key_id(&cfg.s3_access_key_id);
        }
        if let Some(secret) = &cfg.s3_secret_access_key {
            b = b.with_secret_access_key(secret.expose());
        }
        let store = b.build().map_err(|e| {
            format!("volumes.blobs (s3): {e}; check s3_bucket, s3_region and s3_endpoint")
        })?;
        Ok(Self { store })
    }

    fn key(tenant: &str, sha256: &str) -> object_store::path::Path {
        object_store::path::Path::from(format!("{tenant}/{sha256}"))
    }
}

#[async_trait::async_trait]
impl BlobStore for S3Blobs {
    fn name(&self) -> &'static str {
        "s3"
    }

    async fn put(&self, tenant: &str, sha256: &str, bytes: &[u8]) -> Result<(), BlobError> {
        self.store
            .put(&Self::key(tenant, sha256), bytes.to_vec().into())
            .await
            .map_err(|e| BlobError::Store(format!("s3 put {tenant}/{sha256}: {e}")))?;
        Ok(())
    }

    async fn get(&self, tenant: &str, sha256: &str) -> Result<Option<Vec<u8>>, BlobError> {
        match self.store.get(&Self::key(tenant, sha256)).await {
            Ok(r) => {
                let b = r
                    .bytes()
                    .await
                    .map_err(|e| BlobError::Store(format!("s3 get {tenant}/{sha256}: {e}")))?;
                Ok(Some(b.to_vec()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(BlobError::Store(format!("s3 get {tenant}/{sha256}: {e}"))),
        }
    }

    async fn exists(&self, tenant: &str, sha256: &str) -> Result<bool, BlobError> {
        match self.store.head(&Self::key(tenant, sha256)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(BlobError::Store(format!("s3 head {tenant}/{sha256}: {e}"))),
        }
    }

    async fn delete(&self, tenant: &str, sha256: &str) -> Result<(), BlobError> {
        match self.store.delete(&Self::key(tenant, sha256)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(BlobError::Store(format!(
                "s3 delete {tenant}/{sha256}: {e}"
            ))),
        }
    }
}

/// Takes the transaction-scoped advisory locks of the blobs `shas` of `tenant`, in one order
/// everywhere (so two holders never deadlock). See the module's notes.
pub async fn lock_blobs(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    shas: &[&str],
) -> Result<(), sqlx::Error> {
    if shas.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "SELECT pg_advisory_xact_lock(k) FROM (
             SELECT DISTINCT hashtextextended('volume_blob:' || $1 || '/' || s, 0) AS k
             FROM unnest($2::text[]) AS s ORDER BY k OFFSET 0) t",
    )
    .bind(tenant)
    .bind(shas)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// A blob's row.
#[derive(sqlx::FromRow)]
struct BlobRow {
    sha256: String,
    store: String,
    data: Option<Vec<u8>>,
}

/// The blob stores of a substrate: Postgres, and the configured external store for large blobs.
#[derive(Clone, Debug)]
pub struct Blobs {
    pg: PgBlobs,
    external: Option<Arc<dyn BlobStore>>,
    external_min_bytes: u64,
}

impl Blobs {
    /// Every blob in Postgres.
    pub fn postgres(pool: PgPool) -> Self {
        Self {
            pg: PgBlobs::new(pool),
            external: None,
            external_min_bytes: u64::MAX,
        }
    }

    /// Blobs of at least `min_bytes` in `store`, the rest in Postgres.
    pub fn with_external(pool: PgPool, store: Arc<dyn BlobStore>, min_bytes: u64) -> Self {
        Self {
            pg: PgBlobs::new(pool),
            external: Some(store),
            external_min_bytes: min_bytes,
        }
    }

    /// The stores `cfg` (`volumes.blobs`) names. The message of an error names the setting.
    pub fn from_config(pool: PgPool, cfg: &BlobStoreConfig) -> Result<Self, String> {
        let store: Arc<dyn BlobStore> = match cfg.kind.as_str() {
            "postgres" => return Ok(Self::postgres(pool)),
            "dir" => {
                let dir = cfg.dir.clone().ok_or_else(|| {
                    "volumes.blobs.kind = \"dir\" needs volumes.blobs.dir".to_owned()
                })?;
                Arc::new(DirBlobs::new(dir)?)
            }
            "s3" => Arc::new(S3Blobs::new(cfg)?),
            other => {
                return Err(format!(
                    "volumes.blobs.kind must be postgres, dir or s3, got `{other}`"
                ));
            }
        };
        Ok(Self::with_external(pool, store, cfg.external_min_bytes))
    }

    /// The external store a blob of `size` bytes goes to (`None`: its row's `data`).
    pub fn external_for(&self, size: usize) -> Option<&Arc<dyn BlobStore>> {
        self.external
            .as_ref()
            .filter(|_| u64::try_from(size).unwrap_or(u64::MAX) >= self.external_min_bytes)
    }

    /// Stores a blob outside a change (`PutBlobs`), or marks it touched when the tenant has
    /// it: its row, and for a new row of an external blob its object, under the blob's lock.
    pub async fn put(&self, tenant: &str, sha256: &str, bytes: &[u8]) -> Result<(), BlobError> {
        let ext = self.external_for(bytes.len());
        let mut tx = Box::pin(self.pg.pool.begin()).await?;
        if ext.is_some() {
            lock_blobs(&mut tx, tenant, &[sha256]).await?;
        }
        let inserted: bool = sqlx::query_scalar(
            "INSERT INTO volume_blobs (tenant_id, sha256, size, store, data)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, sha256) DO UPDATE SET touched_at = now()
             RETURNING (xmax = 0)",
        )
        .bind(tenant)
        .bind(sha256)
        .bind(size_of(bytes))
        .bind(ext.map_or("pg", |e| e.name()))
        .bind(ext.is_none().then_some(bytes))
        .fetch_one(&mut *tx)
        .await?;
        if inserted && let Some(ext) = ext {
            ext.put(tenant, sha256, bytes).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Marks the blobs of `shas` the tenant has as just written (`touched_at`); returns those
    /// it has.
    pub async fn touch(&self, tenant: &str, shas: &[String]) -> Result<Vec<String>, BlobError> {
        if shas.is_empty() {
            return Ok(Vec::new());
        }
        Ok(sqlx::query_scalar(
            "UPDATE volume_blobs SET touched_at = now()
             WHERE tenant_id = $1 AND sha256 = ANY($2) RETURNING sha256",
        )
        .bind(tenant)
        .bind(shas)
        .fetch_all(&self.pg.pool)
        .await?)
    }

    /// The external store called `name` (`dir`, `s3`), when this substrate has it.
    pub fn external_named(&self, name: &str) -> Option<&Arc<dyn BlobStore>> {
        self.external.as_ref().filter(|e| e.name() == name)
    }

    /// The bytes of every blob of `shas` (each at most once); a sha the tenant has no row for,
    /// or whose object is gone, is an error (the index names only stored blobs).
    pub async fn load(
        &self,
        tenant: &str,
        shas: &[String],
    ) -> Result<HashMap<String, Vec<u8>>, Error> {
        if shas.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<BlobRow> = sqlx::query_as(
            "SELECT sha256, store, data FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)",
        )
        .bind(tenant)
        .bind(shas)
        .fetch_all(&self.pg.pool)
        .await
        .map_err(|e| BlobError::Db(e).into_api("reading blobs"))?;
        let mut out = HashMap::with_capacity(rows.len());
        let mut elsewhere = Vec::new();
        for r in rows {
            match r.data {
                Some(d) => {
                    out.insert(r.sha256, d);
                }
                None => elsewhere.push((r.sha256, r.store)),
            }
        }
        let fetched: Vec<(String, Vec<u8>)> = futures::stream::iter(elsewhere)
            .map(|(sha, store)| async move {
                let ext = self
                    .external
                    .as_ref()
                    .filter(|e| e.name() == store)
                    .ok_or_else(|| {
                        tracing::error!(
                            sha256 = %sha,
                            store = %store,
                            "volumes: a blob is in a store this substrate is not configured for"
                        );
                        Error::unavailable(format!(
                            "a file's content is kept in the `{store}` blob store, which this substrate is not configured for; the operator must set volumes.blobs back to it"
                        ))
                    })?;
                match ext
                    .get(tenant, &sha)
                    .await
                    .map_err(|e| e.into_api("reading a blob"))?
                {
                    Some(b) => Ok((sha, b)),
                    None => Err(missing(&sha)),
                }
            })
            .buffer_unordered(FETCH_CONCURRENCY)
            .try_collect()
            .await?;
        out.extend(fetched);
        if let Some(gone) = shas.iter().find(|s| !out.contains_key(*s)) {
            return Err(missing(gone));
        }
        Ok(out)
    }
}

fn missing(sha: &str) -> Error {
    tracing::error!(sha256 = %sha, "volumes: a referenced blob is missing");
    Error::internal()
}
