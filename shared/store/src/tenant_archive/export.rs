//! Export: one consistent read (a repeatable-read, read-only transaction) of every section of a
//! tenant, streamed as a tar to any `AsyncWrite`. [`prepare_export`] reads every section (an
//! error there comes before the first byte); [`PreparedExport::write_to`] writes them and then
//! the blobs, read in batches and written one entry each, so a tenant's blobs are never all in
//! memory at once.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use sqlx::{Postgres, Transaction};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};

use serde::Serialize;
use uuid::Uuid;
use weft_core::TenantId;

use super::format::{
    ArchiveError, BLOB_DIR, FORMAT, FORMAT_VERSION, MANIFEST, Manifest, Section, SectionEntry,
    sha256_hex,
};
use super::records::{self, BlobRecord};

/// Blobs read per query.
const BLOB_BATCH: usize = 64;

/// What to export besides the always-exported sections.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// Every run with its events and tool ledger. Without it, `runs` holds only the runs that
    /// evaluations name (and their ancestors), without events.
    pub runs: bool,
}

/// Where blobs kept outside Postgres (`volume_blobs.store` = `dir` or `s3`) are read from.
pub trait ExternalBlobs: Send + Sync {
    /// The bytes of `sha256` of `tenant` in the store called `store`.
    fn get<'a>(
        &'a self,
        store: &'a str,
        tenant: &'a str,
        sha256: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send + 'a>>;
}

/// What an export wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ExportSummary {
    pub tenant: String,
    /// Items per section.
    pub sections: BTreeMap<String, u64>,
}

/// Every section of a tenant, read and encoded, with the snapshot the blobs are read in.
pub struct PreparedExport {
    tx: Transaction<'static, Postgres>,
    tenant: String,
    manifest: Manifest,
    files: Vec<(Section, Vec<u8>)>,
    /// (sha256, size, store) of every blob to write.
    blob_rows: Vec<(String, i64, String)>,
}

/// Writes the archive of `tenant` to `out`: [`prepare_export`], then
/// [`PreparedExport::write_to`].
pub async fn export_tenant<W: AsyncWrite + Unpin + Send>(
    pool: &sqlx::PgPool,
    tenant: &TenantId,
    opts: ExportOptions,
    external: Option<&dyn ExternalBlobs>,
    out: W,
) -> Result<ExportSummary, ArchiveError> {
    prepare_export(pool, tenant, opts)
        .await?
        .write_to(external, out)
        .await
}

/// Reads every section of `tenant` in one snapshot, kept open for the blobs.
pub async fn prepare_export(
    pool: &sqlx::PgPool,
    tenant: &TenantId,
    opts: ExportOptions,
) -> Result<PreparedExport, ArchiveError> {
    let t = tenant.as_str();
    let mut tx = crate::begin(pool).await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    let defs = records::load_definitions(&mut tx, t).await?;
    let memory = records::load_memory(&mut tx, t).await?;
    let channels = records::load_channels(&mut tx, t).await?;
    let messages = records::load_channel_messages(&mut tx, t).await?;
    let volumes = records::load_volumes(&mut tx, t).await?;
    let changes = records::load_volume_changes(&mut tx, t).await?;
    let snapshots = records::load_volume_snapshots(&mut tx, t).await?;
    let evaluations = records::load_evaluations(&mut tx, t).await?;
    let shas: Vec<String> = records::named_blobs(&volumes, &changes, &snapshots)
        .into_iter()
        .collect();
    let blob_rows = records::load_blob_rows(&mut tx, t, &shas).await?;
    let (runs, events, ledger) = if opts.runs {
        (
            records::load_runs(&mut tx, t, None).await?,
            records::load_run_events(&mut tx, t).await?,
            records::load_tool_ledger(&mut tx, t).await?,
        )
    } else {
        let ids: Vec<Uuid> = evaluations.iter().map(|e| e.run_id).collect();
        (
            records::load_runs(&mut tx, t, Some(&ids)).await?,
            Vec::new(),
            Vec::new(),
        )
    };
    let blobs: Vec<BlobRecord> = blob_rows
        .iter()
        .map(|(sha256, size, _)| BlobRecord {
            sha256: sha256.clone(),
            size: *size,
        })
        .collect();

    let mut files: Vec<(Section, Vec<u8>, u64)> = Vec::with_capacity(Section::ALL.len());
    for s in Section::ALL {
        let (bytes, count) = match s {
            Section::Definitions => jsonl(s, &defs)?,
            Section::Memory => jsonl(s, &memory)?,
            Section::Channels => jsonl(s, &channels)?,
            Section::ChannelMessages => jsonl(s, &messages)?,
            Section::Blobs => jsonl(s, &blobs)?,
            Section::Volumes => jsonl(s, &volumes)?,
            Section::VolumeChanges => jsonl(s, &changes)?,
            Section::VolumeSnapshots => jsonl(s, &snapshots)?,
            Section::Runs => jsonl(s, &runs)?,
            Section::RunEvents => jsonl(s, &events)?,
            Section::ToolLedger => jsonl(s, &ledger)?,
            Section::Evaluations => jsonl(s, &evaluations)?,
        };
        files.push((s, bytes, count));
    }
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        format_version: FORMAT_VERSION,
        tenant: t.to_owned(),
        created_at: time::OffsetDateTime::now_utc(),
        weft_version: env!("CARGO_PKG_VERSION").to_owned(),
        runs_included: opts.runs,
        sections: files
            .iter()
            .map(|(s, bytes, count)| {
                (
                    s.name().to_owned(),
                    SectionEntry {
                        file: s.file(),
                        version: s.version(),
                        count: *count,
                        sha256: sha256_hex(bytes),
                    },
                )
            })
            .collect(),
    };
    Ok(PreparedExport {
        tx,
        tenant: t.to_owned(),
        manifest,
        files: files.into_iter().map(|(s, b, _)| (s, b)).collect(),
        blob_rows,
    })
}

impl PreparedExport {
    /// The manifest the archive starts with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Writes the archive to `out`: the manifest, the sections, then the blobs (from Postgres,
    /// or through `external` for those kept in a `dir` or `s3` store).
    pub async fn write_to<W: AsyncWrite + Unpin + Send>(
        self,
        external: Option<&dyn ExternalBlobs>,
        mut out: W,
    ) -> Result<ExportSummary, ArchiveError> {
        let PreparedExport {
            mut tx,
            tenant,
            manifest,
            files,
            blob_rows,
        } = self;
        let t = tenant.as_str();
        let manifest_bytes = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| ArchiveError::Format(format!("manifest: {e}")))?;
        append(&mut out, MANIFEST, &manifest_bytes).await?;
        for (s, bytes) in &files {
            append(&mut out, &s.file(), bytes).await?;
        }
        for batch in blob_rows.chunks(BLOB_BATCH) {
            let want: Vec<String> = batch.iter().map(|(sha, _, _)| sha.clone()).collect();
            let in_pg: Vec<(String, Option<Vec<u8>>)> = sqlx::query_as(
                "SELECT sha256, data FROM volume_blobs WHERE tenant_id = $1 AND sha256 = ANY($2)",
            )
            .bind(t)
            .bind(&want)
            .fetch_all(&mut *tx)
            .await?;
            let mut in_pg: BTreeMap<String, Option<Vec<u8>>> = in_pg.into_iter().collect();
            for (sha, _, store) in batch {
                let data = match in_pg.remove(sha).flatten() {
                    Some(d) => d,
                    None => {
                        match external {
                            Some(ext) => ext.get(store, t, sha).await.map_err(|message| {
                                ArchiveError::Blob {
                                    sha256: sha.clone(),
                                    message,
                                }
                            })?,
                            None => {
                                return Err(ArchiveError::Blob {
                                    sha256: sha.clone(),
                                    message: format!(
                                        "it is kept in the `{store}` blob store, which this exporter cannot read; export with `weft tenant export` and the substrate's volumes.blobs config"
                                    ),
                                });
                            }
                        }
                    }
                };
                if sha256_hex(&data) != *sha {
                    return Err(ArchiveError::Blob {
                        sha256: sha.clone(),
                        message: "its stored bytes do not match its sha256".to_owned(),
                    });
                }
                append(&mut out, &format!("{BLOB_DIR}{sha}"), &data).await?;
            }
        }
        // The end of a tar: two zero blocks.
        out.write_all(&[0u8; 1024]).await?;
        out.flush().await?;
        tx.rollback().await?;
        Ok(ExportSummary {
            tenant,
            sections: manifest
                .sections
                .iter()
                .map(|(k, v)| (k.clone(), v.count))
                .collect(),
        })
    }
}

/// One JSON line per record.
fn jsonl<T: Serialize>(s: Section, items: &[T]) -> Result<(Vec<u8>, u64), ArchiveError> {
    let mut out = Vec::new();
    for it in items {
        serde_json::to_writer(&mut out, it)
            .map_err(|e| ArchiveError::section(s.name(), format!("writing a record: {e}")))?;
        out.push(b'\n');
    }
    Ok((out, items.len() as u64))
}

/// One regular file entry (its header, a GNU long name when needed, its bytes and their
/// padding): mode 0644, mtime 0, so the same content makes the same bytes.
async fn append<W: AsyncWrite + Unpin>(
    out: &mut W,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(bytes.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    // The builder encodes the header (with a GNU long name before it when needed) and its
    // checksum; the body is written here, so only the header bytes are taken from it, before it
    // could write the archive's end.
    let mut b = tar::Builder::new(Vec::with_capacity(1024));
    b.append_data(&mut h, name, std::io::empty())?;
    let header = std::mem::take(b.get_mut());
    drop(b);
    out.write_all(&header).await?;
    out.write_all(bytes).await?;
    let pad = (512 - bytes.len() % 512) % 512;
    out.write_all(&[0u8; 512][..pad]).await
}
