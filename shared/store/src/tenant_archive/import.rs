//! Import: the archive is read and checked whole (manifest, section versions, checksums, every
//! record parsed, every blob's bytes against its name) before the database is touched; then every
//! section is applied in one transaction. Each item is compared with the target tenant's item of
//! the same key (read with the export's own queries): absent → added, equal → unchanged,
//! different → a conflict. Any conflict rolls the whole import back (nothing is written) and the
//! report lists every conflict, so a second import of the same archive adds nothing, and an
//! existing item that differs is never overwritten.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use serde::de::DeserializeOwned;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;
use weft_core::TenantId;
use weft_core::def::DefContent as _;

pub use weft_api::tenant_archive::{
    ImportConflict as Conflict, ImportSectionCounts as SectionReport,
    TenantImportReport as ImportReport,
};

use super::format::{
    ArchiveError, BLOB_DIR, FORMAT, FORMAT_VERSION, MANIFEST, Manifest, Section, sha256_hex,
};
use super::records::{
    self, BlobRecord, ChannelMessageRecord, ChannelRecord, DefinitionRecord, EvaluationRecord,
    MemoryRecord, RunArchiveRecord, RunEventRecord, ToolLedgerRecord, VolumeChangeRecord,
    VolumeRecord, VolumeSnapshotRecord,
};

/// An archive read and checked: its manifest, each section's bytes, and the blobs.
#[derive(Debug)]
pub struct Archive {
    pub manifest: Manifest,
    sections: BTreeMap<Section, Vec<u8>>,
    blobs: BTreeMap<String, Vec<u8>>,
}

impl Archive {
    /// Reads a whole archive from `r` and checks it: the manifest's format, every section's
    /// version (not newer than this build's), file and sha256, and every blob's bytes.
    pub fn read<R: Read>(r: R) -> Result<Archive, ArchiveError> {
        let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let not_tar = |e: std::io::Error| {
            ArchiveError::Format(format!(
                "the archive is not a readable tar ({e}); give a file `weft tenant export` wrote"
            ))
        };
        let mut ar = tar::Archive::new(r);
        for entry in ar.entries().map_err(not_tar)? {
            let mut e = entry.map_err(not_tar)?;
            if !e.header().entry_type().is_file() {
                continue;
            }
            let name = e.path().map_err(not_tar)?.to_string_lossy().into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).map_err(not_tar)?;
            if let Some(sha) = name.strip_prefix(BLOB_DIR) {
                if sha256_hex(&data) != sha {
                    return Err(ArchiveError::section(
                        Section::Blobs.name(),
                        format!("blob `{sha}` does not match its sha256: the archive is corrupted"),
                    ));
                }
                blobs.insert(sha.to_owned(), data);
            } else {
                files.insert(name, data);
            }
        }
        let manifest = files.remove(MANIFEST).ok_or_else(|| {
            ArchiveError::Format(
                "the archive has no manifest.json; give a file `weft tenant export` wrote"
                    .to_owned(),
            )
        })?;
        let manifest: Manifest = serde_json::from_slice(&manifest)
            .map_err(|e| ArchiveError::Format(format!("manifest.json does not parse: {e}")))?;
        if manifest.format != FORMAT {
            return Err(ArchiveError::Format(format!(
                "manifest.json names format `{}`, not `{FORMAT}`; give a file `weft tenant export` wrote",
                manifest.format
            )));
        }
        if manifest.format_version > FORMAT_VERSION {
            return Err(ArchiveError::Format(format!(
                "the archive's format version {} is newer than this weft reads ({FORMAT_VERSION}); import with a newer weft",
                manifest.format_version
            )));
        }
        let mut sections = BTreeMap::new();
        for (name, entry) in &manifest.sections {
            let Some(section) = Section::from_name(name) else {
                return Err(ArchiveError::section(
                    name,
                    "this weft does not know the section; import with a newer weft",
                ));
            };
            if entry.version > section.version() {
                return Err(ArchiveError::section(
                    name,
                    format!(
                        "version {} is newer than this weft reads ({}); import with a newer weft",
                        entry.version,
                        section.version()
                    ),
                ));
            }
            let bytes = files.remove(&entry.file).ok_or_else(|| {
                ArchiveError::section(
                    name,
                    format!("its file `{}` is missing from the archive", entry.file),
                )
            })?;
            if sha256_hex(&bytes) != entry.sha256 {
                return Err(ArchiveError::section(
                    name,
                    "its sha256 does not match the manifest: the archive is corrupted",
                ));
            }
            let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64;
            if lines != entry.count {
                return Err(ArchiveError::section(
                    name,
                    format!(
                        "it holds {lines} records, the manifest says {}: the archive is corrupted",
                        entry.count
                    ),
                ));
            }
            sections.insert(section, bytes);
        }
        if let Some(extra) = files.keys().next() {
            return Err(ArchiveError::Format(format!(
                "the archive's entry `{extra}` is not in its manifest: the archive is corrupted"
            )));
        }
        let archive = Archive {
            manifest,
            sections,
            blobs,
        };
        for b in archive.records::<BlobRecord>(Section::Blobs)? {
            match archive.blobs.get(&b.sha256) {
                Some(d) if d.len() as i64 == b.size => {}
                Some(_) => {
                    return Err(ArchiveError::section(
                        Section::Blobs.name(),
                        format!("blob `{}` is not {} bytes long", b.sha256, b.size),
                    ));
                }
                None => {
                    return Err(ArchiveError::section(
                        Section::Blobs.name(),
                        format!("blob `{}` is missing from the archive", b.sha256),
                    ));
                }
            }
        }
        Ok(archive)
    }

    /// The blobs by sha256.
    pub fn blobs(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.blobs
    }

    /// The records of section `s` (none when the archive has no such section).
    pub fn records<T: DeserializeOwned>(&self, s: Section) -> Result<Vec<T>, ArchiveError> {
        let Some(bytes) = self.sections.get(&s) else {
            return Ok(Vec::new());
        };
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_slice(l)
                    .map_err(|e| ArchiveError::section(s.name(), format!("record {}: {e}", i + 1)))
            })
            .collect()
    }
}

/// The state of one import: the transaction, the report, and whether it still writes (it stops
/// at the first conflict and only compares from then on, so a later insert cannot trip over a
/// row it would have needed).
struct Importer {
    tx: Transaction<'static, Postgres>,
    tenant: String,
    report: ImportReport,
}

/// Where an archived item stands against the target.
enum Found {
    Absent,
    Same,
    Differs,
}

fn found<T: PartialEq>(existing: Option<&T>, rec: &T) -> Found {
    match existing {
        None => Found::Absent,
        Some(e) if e == rec => Found::Same,
        Some(_) => Found::Differs,
    }
}

impl Importer {
    fn writing(&self) -> bool {
        self.report.conflicts.is_empty()
    }

    fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    fn count(&mut self, s: Section) -> &mut SectionReport {
        self.report.sections.entry(s.name().to_owned()).or_default()
    }

    fn conflict(&mut self, s: Section, item: String, reason: &str) {
        self.report.conflicts.push(Conflict {
            section: s.name().to_owned(),
            item,
            reason: reason.to_owned(),
        });
    }

    /// Counts an item where it stands; true when it is to be inserted now (absent, and no
    /// conflict so far).
    fn sort(&mut self, s: Section, f: Found, item: impl FnOnce() -> String) -> bool {
        match f {
            Found::Same => {
                self.count(s).unchanged += 1;
                false
            }
            Found::Differs => {
                self.conflict(
                    s,
                    item(),
                    "an item with this key exists with other content; it is left as it is",
                );
                false
            }
            Found::Absent => {
                self.count(s).added += 1;
                self.writing()
            }
        }
    }

    /// Ids of `table` among `ids` held by another tenant (ids of these tables are global).
    async fn foreign_ids(
        &mut self,
        table: IdTable,
        ids: &[Uuid],
    ) -> Result<BTreeSet<Uuid>, ArchiveError> {
        if ids.is_empty() {
            return Ok(BTreeSet::new());
        }
        let sql = match table {
            IdTable::Volumes => "SELECT id FROM volumes WHERE id = ANY($1) AND tenant_id <> $2",
            IdTable::Changes => {
                "SELECT id FROM volume_changes WHERE id = ANY($1) AND tenant_id <> $2"
            }
            IdTable::Snapshots => {
                "SELECT id FROM volume_snapshots WHERE id = ANY($1) AND tenant_id <> $2"
            }
            IdTable::Runs => "SELECT id FROM runs WHERE id = ANY($1) AND tenant_id <> $2",
            IdTable::Evaluations => {
                "SELECT id FROM evaluations WHERE id = ANY($1) AND tenant_id <> $2"
            }
        };
        let tenant = self.tenant.clone();
        let rows: Vec<(Uuid,)> = sqlx::query_as(sql)
            .bind(ids)
            .bind(tenant)
            .fetch_all(self.conn())
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

#[derive(Clone, Copy)]
enum IdTable {
    Volumes,
    Changes,
    Snapshots,
    Runs,
    Evaluations,
}

const FOREIGN: &str =
    "its id belongs to another tenant of this database; import into another database";

/// Imports `archive` as `tenant`, in one transaction: committed only without conflicts.
pub async fn import_tenant(
    pool: &sqlx::PgPool,
    archive: &Archive,
    tenant: &TenantId,
) -> Result<ImportReport, ArchiveError> {
    // Every record parses before anything is written.
    let defs: Vec<DefinitionRecord> = archive.records(Section::Definitions)?;
    let memory: Vec<MemoryRecord> = archive.records(Section::Memory)?;
    let channels: Vec<ChannelRecord> = archive.records(Section::Channels)?;
    let messages: Vec<ChannelMessageRecord> = archive.records(Section::ChannelMessages)?;
    let blobs: Vec<BlobRecord> = archive.records(Section::Blobs)?;
    let volumes: Vec<VolumeRecord> = archive.records(Section::Volumes)?;
    let changes: Vec<VolumeChangeRecord> = archive.records(Section::VolumeChanges)?;
    let snapshots: Vec<VolumeSnapshotRecord> = archive.records(Section::VolumeSnapshots)?;
    let runs: Vec<RunArchiveRecord> = archive.records(Section::Runs)?;
    let events: Vec<RunEventRecord> = archive.records(Section::RunEvents)?;
    let ledger: Vec<ToolLedgerRecord> = archive.records(Section::ToolLedger)?;
    let evaluations: Vec<EvaluationRecord> = archive.records(Section::Evaluations)?;

    let mut imp = Importer {
        tx: crate::begin(pool).await?,
        tenant: tenant.as_str().to_owned(),
        report: ImportReport {
            tenant: tenant.as_str().to_owned(),
            source_tenant: archive.manifest.tenant.clone(),
            ..ImportReport::default()
        },
    };
    for s in Section::ALL {
        imp.count(s);
    }
    // One import of a tenant at a time: two concurrent ones would both find an item absent.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('weft tenant import ' || $1, 0))")
        .bind(&imp.tenant)
        .execute(imp.conn())
        .await?;

    import_definitions(&mut imp, &defs).await?;
    import_memory(&mut imp, &memory).await?;
    import_channels(&mut imp, &channels, &messages).await?;
    import_blobs(&mut imp, archive, &blobs).await?;
    import_volumes(&mut imp, &volumes, &changes, &snapshots).await?;
    import_runs(&mut imp, &runs, &events, &ledger).await?;
    import_evaluations(&mut imp, &evaluations).await?;

    let mut report = imp.report;
    if report.conflicts.is_empty() {
        imp.tx.commit().await?;
        report.applied = true;
    } else {
        imp.tx.rollback().await?;
        report.applied = false;
    }
    Ok(report)
}

async fn import_definitions(
    imp: &mut Importer,
    defs: &[DefinitionRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Definitions;
    let t = imp.tenant.clone();
    let existing: BTreeMap<(String, String), DefinitionRecord> =
        records::load_definitions(imp.conn(), &t)
            .await?
            .into_iter()
            .map(|d| ((d.kind.clone(), d.name.clone()), d))
            .collect();
    for d in defs {
        let f = found(existing.get(&(d.kind.clone(), d.name.clone())), d);
        if !imp.sort(s, f, || format!("{}/{}", d.kind, d.name)) {
            continue;
        }
        if !d.versions.iter().any(|v| v.hash == d.active_version) {
            return Err(ArchiveError::section(
                s.name(),
                format!(
                    "{}/{}: the active version {} is none of its versions",
                    d.kind, d.name, d.active_version
                ),
            ));
        }
        sqlx::query(
            "INSERT INTO defs (tenant_id, kind, name, active_version, retired, version_count,
                               description, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&t)
        .bind(&d.kind)
        .bind(&d.name)
        .bind(&d.active_version)
        .bind(d.retired)
        .bind(d.version_count)
        .bind(&d.description)
        .bind(d.created_at)
        .bind(d.updated_at)
        .execute(imp.conn())
        .await?;
        for v in &d.versions {
            sqlx::query(
                "INSERT INTO def_versions (tenant_id, kind, name, number, hash, content_json,
                                           parent_version, created_by, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(&t)
            .bind(&d.kind)
            .bind(&d.name)
            .bind(v.number)
            .bind(&v.hash)
            .bind(&v.content_json)
            .bind(&v.parent_version)
            .bind(&v.created_by)
            .bind(v.created_at)
            .execute(imp.conn())
            .await?;
        }
        if d.kind == "schedule" && !d.retired {
            schedule_row(imp, d).await?;
        }
    }
    Ok(())
}

/// The live row of an imported schedule (what `sync_schedule` writes after a put): it fires
/// from its next slot after now.
async fn schedule_row(imp: &mut Importer, d: &DefinitionRecord) -> Result<(), ArchiveError> {
    let Some(v) = d.versions.iter().find(|v| v.hash == d.active_version) else {
        return Ok(());
    };
    let bad = |e: weft_core::Error| {
        ArchiveError::section(
            Section::Definitions.name(),
            format!("schedule/{}: {}", d.name, e.message),
        )
    };
    let content =
        weft_core::schedule::ScheduleContent::from_json_str(&v.content_json).map_err(bad)?;
    let next = content
        .compile()
        .map_err(bad)?
        .next_after(time::OffsetDateTime::now_utc());
    let t = imp.tenant.clone();
    sqlx::query(
        "INSERT INTO schedules (id, tenant_id, name, def_hash, content, enabled, next_fire_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant_id, name) DO NOTHING",
    )
    .bind(Uuid::now_v7())
    .bind(&t)
    .bind(&d.name)
    .bind(&v.hash)
    .bind(&v.content_json)
    .bind(content.enabled)
    .bind(next)
    .execute(imp.conn())
    .await?;
    Ok(())
}

async fn import_memory(imp: &mut Importer, memory: &[MemoryRecord]) -> Result<(), ArchiveError> {
    let s = Section::Memory;
    let t = imp.tenant.clone();
    let existing: BTreeMap<(String, String, String), MemoryRecord> =
        records::load_memory(imp.conn(), &t)
            .await?
            .into_iter()
            .map(|m| ((m.scope.clone(), m.scope_id.clone(), m.key.clone()), m))
            .collect();
    let now = time::OffsetDateTime::now_utc();
    for m in memory {
        if m.expires_at.is_some_and(|e| e <= now) {
            imp.count(s).skipped += 1;
            continue;
        }
        let key = (m.scope.clone(), m.scope_id.clone(), m.key.clone());
        let item = || {
            if m.scope_id.is_empty() {
                format!("{}/{}", m.scope, m.key)
            } else {
                format!("{}/{}/{}", m.scope, m.scope_id, m.key)
            }
        };
        if !imp.sort(s, found(existing.get(&key), m), item) {
            continue;
        }
        let done = sqlx::query(
            "INSERT INTO memory_entries (tenant_id, scope, scope_id, key, value_json, bytes, version,
                                         agent, expires_at, embedding, embedding_model,
                                         created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             ON CONFLICT DO NOTHING",
        )
        .bind(&t)
        .bind(&m.scope)
        .bind(if m.scope == "tenant" { &t } else { &m.scope_id })
        .bind(&m.key)
        .bind(&m.value_json)
        .bind(m.bytes)
        .bind(m.version)
        .bind(&m.agent)
        .bind(m.expires_at)
        .bind(&m.embedding)
        .bind(&m.embedding_model)
        .bind(m.created_at)
        .bind(m.updated_at)
        .execute(imp.conn())
        .await?;
        if done.rows_affected() == 0 {
            imp.count(s).added -= 1;
            imp.conflict(
                s,
                item(),
                "an expired entry not yet swept holds the key; import again in a minute",
            );
            continue;
        }
        // The quotas count the entry, like a write through the API (the tenant's total first).
        let mut agents = vec![String::new()];
        if !m.agent.is_empty() {
            agents.push(m.agent.clone());
        }
        for a in agents {
            sqlx::query(
                "INSERT INTO memory_usage AS u (tenant_id, agent, bytes) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant_id, agent) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes",
            )
            .bind(&t)
            .bind(a)
            .bind(i64::from(m.bytes))
            .execute(imp.conn())
            .await?;
        }
    }
    Ok(())
}

async fn channel_ids(imp: &mut Importer) -> Result<BTreeMap<String, i64>, ArchiveError> {
    let t = imp.tenant.clone();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT name, id FROM channels WHERE tenant_id = $1")
            .bind(t)
            .fetch_all(imp.conn())
            .await?;
    Ok(rows.into_iter().collect())
}

async fn import_channels(
    imp: &mut Importer,
    channels: &[ChannelRecord],
    messages: &[ChannelMessageRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Channels;
    let t = imp.tenant.clone();
    let existing: BTreeMap<String, ChannelRecord> = records::load_channels(imp.conn(), &t)
        .await?
        .into_iter()
        .map(|c| (c.name.clone(), c))
        .collect();
    for c in channels {
        if !imp.sort(s, found(existing.get(&c.name), c), || c.name.clone()) {
            continue;
        }
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO channels (tenant_id, name, scope, ttl_seconds, max_messages, created_at,
                                   updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(&t)
        .bind(&c.name)
        .bind(&c.scope)
        .bind(c.ttl_seconds)
        .bind(c.max_messages)
        .bind(c.created_at)
        .bind(c.updated_at)
        .fetch_one(imp.conn())
        .await?;
        for p in &c.partitions {
            sqlx::query(
                "INSERT INTO channel_partitions (tenant_id, channel_id, partition, next_seq)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&t)
            .bind(id)
            .bind(&p.partition)
            .bind(p.next_seq)
            .execute(imp.conn())
            .await?;
        }
        for k in &c.cursors {
            sqlx::query(
                "INSERT INTO channel_cursors (tenant_id, channel_id, partition, consumer, seq,
                                              updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&t)
            .bind(id)
            .bind(&k.partition)
            .bind(&k.consumer)
            .bind(k.seq)
            .bind(k.updated_at)
            .execute(imp.conn())
            .await?;
        }
    }

    let s = Section::ChannelMessages;
    let existing: BTreeMap<(String, String, i64), ChannelMessageRecord> =
        records::load_channel_messages(imp.conn(), &t)
            .await?
            .into_iter()
            .map(|m| ((m.channel.clone(), m.partition.clone(), m.seq), m))
            .collect();
    let ids = channel_ids(imp).await?;
    let now = time::OffsetDateTime::now_utc();
    for m in messages {
        if m.expires_at <= now {
            imp.count(s).skipped += 1;
            continue;
        }
        let key = (m.channel.clone(), m.partition.clone(), m.seq);
        let item = || {
            format!(
                "channel {}, partition '{}', seq {}",
                m.channel, m.partition, m.seq
            )
        };
        if !imp.sort(s, found(existing.get(&key), m), item) {
            continue;
        }
        let Some(id) = ids.get(&m.channel) else {
            return Err(ArchiveError::section(
                s.name(),
                format!("{}: the channel is not in the channels section", item()),
            ));
        };
        let done = sqlx::query(
            "INSERT INTO channel_messages (tenant_id, channel_id, partition, seq, payload,
                                           published_by, published_at, expires_at)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8
             WHERE EXISTS (SELECT 1 FROM channel_partitions WHERE channel_id = $2 AND partition = $3)
             ON CONFLICT DO NOTHING",
        )
        .bind(&t)
        .bind(id)
        .bind(&m.partition)
        .bind(m.seq)
        .bind(&m.payload)
        .bind(&m.published_by)
        .bind(m.published_at)
        .bind(m.expires_at)
        .execute(imp.conn())
        .await?;
        if done.rows_affected() == 0 {
            imp.count(s).added -= 1;
            imp.conflict(
                s,
                item(),
                "the partition is missing or an expired message not yet swept holds the seq",
            );
        }
    }
    Ok(())
}

async fn import_blobs(
    imp: &mut Importer,
    archive: &Archive,
    blobs: &[BlobRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Blobs;
    let t = imp.tenant.clone();
    let shas: Vec<String> = blobs.iter().map(|b| b.sha256.clone()).collect();
    let existing: BTreeSet<String> = records::load_blob_rows(imp.conn(), &t, &shas)
        .await?
        .into_iter()
        .map(|(sha, _, _)| sha)
        .collect();
    for b in blobs {
        // Content-addressed: a blob of the same sha is the same blob.
        let f = if existing.contains(&b.sha256) {
            Found::Same
        } else {
            Found::Absent
        };
        if !imp.sort(s, f, || b.sha256.clone()) {
            continue;
        }
        let data = archive.blobs.get(&b.sha256).ok_or_else(|| {
            ArchiveError::section(s.name(), format!("blob `{}` is missing", b.sha256))
        })?;
        sqlx::query(
            "INSERT INTO volume_blobs (tenant_id, sha256, size, store, data)
             VALUES ($1, $2, $3, 'pg', $4)",
        )
        .bind(&t)
        .bind(&b.sha256)
        .bind(b.size)
        .bind(data)
        .execute(imp.conn())
        .await?;
    }
    Ok(())
}

async fn import_volumes(
    imp: &mut Importer,
    volumes: &[VolumeRecord],
    changes: &[VolumeChangeRecord],
    snapshots: &[VolumeSnapshotRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Volumes;
    let t = imp.tenant.clone();
    let existing: BTreeMap<String, VolumeRecord> = records::load_volumes(imp.conn(), &t)
        .await?
        .into_iter()
        .map(|v| (v.name.clone(), v))
        .collect();
    let ids: Vec<Uuid> = volumes.iter().map(|v| v.id).collect();
    let foreign = imp.foreign_ids(IdTable::Volumes, &ids).await?;
    for v in volumes {
        if foreign.contains(&v.id) {
            imp.conflict(s, v.name.clone(), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&v.name), v), || v.name.clone()) {
            continue;
        }
        sqlx::query(
            "INSERT INTO volumes (id, tenant_id, name, kind, mode, quota_bytes, bytes, files,
                                  tree_hash, seq, description, created_at, updated_at)
             VALUES ($1, $2, $3, 'named', $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(v.id)
        .bind(&t)
        .bind(&v.name)
        .bind(&v.mode)
        .bind(v.quota_bytes)
        .bind(v.bytes)
        .bind(v.files)
        .bind(&v.tree_hash)
        .bind(v.seq)
        .bind(&v.description)
        .bind(v.created_at)
        .bind(v.updated_at)
        .execute(imp.conn())
        .await?;
        for f in &v.index {
            sqlx::query(
                "INSERT INTO volume_files (volume_id, path, sha256, size, mode, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(v.id)
            .bind(&f.path)
            .bind(&f.sha256)
            .bind(f.size)
            .bind(f.mode)
            .bind(f.updated_at)
            .execute(imp.conn())
            .await?;
        }
        sqlx::query(
            "INSERT INTO volume_usage AS u (tenant_id, bytes) VALUES ($1, $2)
             ON CONFLICT (tenant_id) DO UPDATE SET bytes = u.bytes + EXCLUDED.bytes",
        )
        .bind(&t)
        .bind(v.bytes)
        .execute(imp.conn())
        .await?;
    }
    let vol_ids: BTreeMap<String, Uuid> = sqlx::query_as::<_, (String, Uuid)>(
        "SELECT name, id FROM volumes WHERE tenant_id = $1 AND kind = 'named'",
    )
    .bind(&t)
    .fetch_all(imp.conn())
    .await?
    .into_iter()
    .collect();
    let volume_of = |section: Section, name: &str| {
        vol_ids.get(name).copied().ok_or_else(|| {
            ArchiveError::section(
                section.name(),
                format!("volume `{name}` is not in the volumes section"),
            )
        })
    };

    let s = Section::VolumeChanges;
    let existing: BTreeMap<Uuid, VolumeChangeRecord> = records::load_volume_changes(imp.conn(), &t)
        .await?
        .into_iter()
        .map(|c| (c.id, c))
        .collect();
    let ids: Vec<Uuid> = changes.iter().map(|c| c.id).collect();
    let foreign = imp.foreign_ids(IdTable::Changes, &ids).await?;
    for c in changes {
        let item = || format!("volume {}, change {} (seq {})", c.volume, c.id, c.seq);
        if foreign.contains(&c.id) {
            imp.conflict(s, item(), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&c.id), c), item) {
            continue;
        }
        let vid = volume_of(s, &c.volume)?;
        sqlx::query(
            "INSERT INTO volume_changes (id, tenant_id, volume_id, seq, op_key, run_id, tool_use_id,
                                         source, subject, undoes, undone_by, tree_before,
                                         tree_after, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(c.id)
        .bind(&t)
        .bind(vid)
        .bind(c.seq)
        .bind(&c.op_key)
        .bind(c.run_id)
        .bind(&c.tool_use_id)
        .bind(&c.source)
        .bind(&c.subject)
        .bind(c.undoes)
        .bind(c.undone_by)
        .bind(&c.tree_before)
        .bind(&c.tree_after)
        .bind(c.created_at)
        .execute(imp.conn())
        .await?;
        for f in &c.files {
            sqlx::query(
                "INSERT INTO volume_change_files (change_id, path, before_sha, after_sha,
                                                  before_mode, after_mode, before_size, after_size)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(c.id)
            .bind(&f.path)
            .bind(&f.before_sha)
            .bind(&f.after_sha)
            .bind(f.before_mode)
            .bind(f.after_mode)
            .bind(f.before_size)
            .bind(f.after_size)
            .execute(imp.conn())
            .await?;
        }
    }

    let s = Section::VolumeSnapshots;
    let existing: BTreeMap<Uuid, VolumeSnapshotRecord> =
        records::load_volume_snapshots(imp.conn(), &t)
            .await?
            .into_iter()
            .map(|v| (v.id, v))
            .collect();
    let ids: Vec<Uuid> = snapshots.iter().map(|c| c.id).collect();
    let foreign = imp.foreign_ids(IdTable::Snapshots, &ids).await?;
    for sn in snapshots {
        let item = || format!("volume {}, snapshot {}", sn.volume, sn.id);
        if foreign.contains(&sn.id) {
            imp.conflict(s, item(), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&sn.id), sn), item) {
            continue;
        }
        let vid = volume_of(s, &sn.volume)?;
        sqlx::query(
            "INSERT INTO volume_snapshots (id, tenant_id, volume_id, label, tree_hash, seq, files,
                                           bytes, entries, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(sn.id)
        .bind(&t)
        .bind(vid)
        .bind(&sn.label)
        .bind(&sn.tree_hash)
        .bind(sn.seq)
        .bind(sn.files)
        .bind(sn.bytes)
        .bind(&sn.entries)
        .bind(sn.created_at)
        .execute(imp.conn())
        .await?;
    }
    Ok(())
}

async fn import_runs(
    imp: &mut Importer,
    runs: &[RunArchiveRecord],
    events: &[RunEventRecord],
    ledger: &[ToolLedgerRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Runs;
    let t = imp.tenant.clone();
    let existing: BTreeMap<Uuid, RunArchiveRecord> = records::load_runs(imp.conn(), &t, None)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    let ids: Vec<Uuid> = runs.iter().map(|r| r.id).collect();
    let foreign = imp.foreign_ids(IdTable::Runs, &ids).await?;
    for r in runs {
        if foreign.contains(&r.id) {
            imp.conflict(s, format!("run {}", r.id), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&r.id), r), || format!("run {}", r.id)) {
            continue;
        }
        sqlx::query(
            "INSERT INTO runs (id, tenant_id, subject, agent_name, agent_hash, parent_run_id,
                               root_run_id, depth, status, stop_reason, interactive, spec,
                               idempotency_key, lease_epoch, pending_interrupt, usage, iterations,
                               error, sweeps, lapses, created_at, started_at, finished_at,
                               updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                     $18, $19, $20, $21, $22, $23, $24)",
        )
        .bind(r.id)
        .bind(&t)
        .bind(&r.subject)
        .bind(&r.agent_name)
        .bind(&r.agent_hash)
        .bind(r.parent_run_id)
        .bind(r.root_run_id)
        .bind(r.depth)
        .bind(&r.status)
        .bind(&r.stop_reason)
        .bind(r.interactive)
        .bind(&r.spec)
        .bind(&r.idempotency_key)
        .bind(r.lease_epoch)
        .bind(&r.pending_interrupt)
        .bind(&r.usage)
        .bind(r.iterations)
        .bind(&r.error)
        .bind(r.sweeps)
        .bind(r.lapses)
        .bind(r.created_at)
        .bind(r.started_at)
        .bind(r.finished_at)
        .bind(r.updated_at)
        .execute(imp.conn())
        .await?;
    }

    let s = Section::RunEvents;
    let existing: BTreeMap<(Uuid, i64), RunEventRecord> = records::load_run_events(imp.conn(), &t)
        .await?
        .into_iter()
        .map(|e| ((e.run_id, e.seq), e))
        .collect();
    for e in events {
        let item = || format!("run {}, seq {}", e.run_id, e.seq);
        if foreign.contains(&e.run_id) {
            imp.conflict(s, item(), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&(e.run_id, e.seq)), e), item) {
            continue;
        }
        sqlx::query(
            "INSERT INTO run_events (run_id, seq, tenant_id, kind, data, epoch, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(e.run_id)
        .bind(e.seq)
        .bind(&t)
        .bind(&e.kind)
        .bind(&e.data)
        .bind(e.epoch)
        .bind(e.created_at)
        .execute(imp.conn())
        .await?;
    }

    let s = Section::ToolLedger;
    let existing: BTreeMap<(Uuid, String), ToolLedgerRecord> =
        records::load_tool_ledger(imp.conn(), &t)
            .await?
            .into_iter()
            .map(|l| ((l.run_id, l.tool_use_id.clone()), l))
            .collect();
    for l in ledger {
        let item = || format!("run {}, tool use {}", l.run_id, l.tool_use_id);
        if foreign.contains(&l.run_id) {
            imp.conflict(s, item(), FOREIGN);
            continue;
        }
        let f = found(existing.get(&(l.run_id, l.tool_use_id.clone())), l);
        if !imp.sort(s, f, item) {
            continue;
        }
        sqlx::query(
            "INSERT INTO tool_ledger (run_id, tool_use_id, tenant_id, tool, input, idempotent,
                                      status, result, is_error, state, hooks, epoch, started_at,
                                      finished_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .bind(l.run_id)
        .bind(&l.tool_use_id)
        .bind(&t)
        .bind(&l.tool)
        .bind(&l.input)
        .bind(l.idempotent)
        .bind(&l.status)
        .bind(&l.result)
        .bind(l.is_error)
        .bind(&l.state)
        .bind(&l.hooks)
        .bind(l.epoch)
        .bind(l.started_at)
        .bind(l.finished_at)
        .execute(imp.conn())
        .await?;
    }
    Ok(())
}

async fn import_evaluations(
    imp: &mut Importer,
    evaluations: &[EvaluationRecord],
) -> Result<(), ArchiveError> {
    let s = Section::Evaluations;
    let t = imp.tenant.clone();
    let existing: BTreeMap<Uuid, EvaluationRecord> = records::load_evaluations(imp.conn(), &t)
        .await?
        .into_iter()
        .map(|e| (e.id, e))
        .collect();
    let ids: Vec<Uuid> = evaluations.iter().map(|e| e.id).collect();
    let foreign = imp.foreign_ids(IdTable::Evaluations, &ids).await?;
    for e in evaluations {
        let item = || format!("evaluation {} of run {}", e.id, e.run_id);
        if foreign.contains(&e.id) {
            imp.conflict(s, item(), FOREIGN);
            continue;
        }
        if !imp.sort(s, found(existing.get(&e.id), e), item) {
            continue;
        }
        sqlx::query(
            "INSERT INTO evaluations (id, tenant_id, run_id, task_id, attempt, agent_name,
                                      agent_hash, emitter_role, verdict, score, dimensions,
                                      created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(e.id)
        .bind(&t)
        .bind(e.run_id)
        .bind(&e.task_id)
        .bind(e.attempt)
        .bind(&e.agent_name)
        .bind(&e.agent_hash)
        .bind(&e.emitter_role)
        .bind(&e.verdict)
        .bind(e.score)
        .bind(&e.dimensions)
        .bind(e.created_at)
        .execute(imp.conn())
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::tenant_archive::format::SectionEntry;

    /// A tar of `entries`, in order.
    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, name, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn manifest(sections: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let m = Manifest {
            format: FORMAT.to_owned(),
            format_version: FORMAT_VERSION,
            tenant: "acme".to_owned(),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            weft_version: "0".to_owned(),
            runs_included: false,
            sections: sections
                .iter()
                .map(|(name, version, data)| {
                    let entry = SectionEntry {
                        file: format!("{name}.jsonl"),
                        version: *version,
                        count: data.iter().filter(|b| **b == b'\n').count() as u64,
                        sha256: sha256_hex(data),
                    };
                    ((*name).to_owned(), entry)
                })
                .collect::<BTreeMap<_, _>>(),
        };
        serde_json::to_vec(&m).unwrap()
    }

    fn refused(tar: &[u8]) -> String {
        Archive::read(tar).unwrap_err().to_string()
    }

    const MEMORY: &[u8] = b"{}\n";

    #[test]
    fn a_well_formed_archive_reads() {
        let m = manifest(&[("memory", 1, MEMORY)]);
        let a = Archive::read(&tar_of(&[(MANIFEST, &m), ("memory.jsonl", MEMORY)])[..]).unwrap();
        assert_eq!(a.manifest.tenant, "acme");
    }

    #[test]
    fn a_newer_or_unknown_section_is_refused_by_name() {
        let m = manifest(&[("memory", 2, MEMORY)]);
        let e = refused(&tar_of(&[(MANIFEST, &m), ("memory.jsonl", MEMORY)]));
        assert!(e.starts_with("section `memory`: version 2 is newer"), "{e}");
        let m = manifest(&[("gadgets", 1, MEMORY)]);
        let e = refused(&tar_of(&[(MANIFEST, &m), ("gadgets.jsonl", MEMORY)]));
        assert!(
            e.starts_with("section `gadgets`: this weft does not know"),
            "{e}"
        );
    }

    #[test]
    fn a_corrupted_archive_is_refused_naming_what() {
        let m = manifest(&[("memory", 1, MEMORY)]);
        let e = refused(&tar_of(&[(MANIFEST, &m), ("memory.jsonl", b"[]\n")]));
        assert!(e.starts_with("section `memory`: its sha256"), "{e}");
        let e = refused(&tar_of(&[(MANIFEST, &m)]));
        assert!(e.starts_with("section `memory`: its file"), "{e}");
        let e = refused(&tar_of(&[
            (MANIFEST, &m),
            ("memory.jsonl", MEMORY),
            ("extra.jsonl", MEMORY),
        ]));
        assert!(e.contains("`extra.jsonl` is not in its manifest"), "{e}");
        let bad_blob = format!("{BLOB_DIR}{}", sha256_hex(b"other"));
        let e = refused(&tar_of(&[
            (MANIFEST, &m),
            ("memory.jsonl", MEMORY),
            (&bad_blob, b"bytes"),
        ]));
        assert!(e.starts_with("section `blobs`: blob"), "{e}");
        let e = refused(&tar_of(&[("memory.jsonl", MEMORY)]));
        assert!(e.contains("no manifest.json"), "{e}");
    }
}
