//! The records of each section (one JSONL line each) and how they are read from Postgres for
//! one tenant. Import reads the target tenant's rows with the same functions, so "unchanged"
//! means equal records. No record carries the tenant: an archive is imported under any name.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

/// A definition name of one kind, with every version it ever had (lineage in `parent_version`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct DefinitionRecord {
    pub kind: String,
    pub name: String,
    /// The hash of the active version.
    pub active_version: String,
    pub retired: bool,
    pub version_count: i32,
    pub description: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// By number, from 1.
    #[sqlx(skip)]
    pub versions: Vec<DefinitionVersionRecord>,
}

/// One version of a definition: its canonical content, exactly the bytes hashed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct DefinitionVersionRecord {
    #[serde(skip)]
    #[sqlx(default)]
    pub kind: String,
    #[serde(skip)]
    #[sqlx(default)]
    pub name: String,
    pub number: i32,
    pub hash: String,
    pub content_json: String,
    pub parent_version: Option<String>,
    pub created_by: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// One memory entry, with its TTL (as the absolute `expires_at`) and its embedding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct MemoryRecord {
    pub scope: String,
    /// The scope's id; empty for scope `tenant` (whose id is the tenant's name, so the entry
    /// follows the tenant through `--as`).
    pub scope_id: String,
    pub key: String,
    pub value_json: String,
    pub bytes: i32,
    pub version: i64,
    pub agent: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub expires_at: Option<OffsetDateTime>,
    pub embedding: Option<Vec<f32>>,
    pub embedding_model: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// A channel with its partitions (next seqs) and its consumers' cursors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ChannelRecord {
    pub name: String,
    pub scope: String,
    pub ttl_seconds: i64,
    pub max_messages: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    #[sqlx(skip)]
    pub partitions: Vec<ChannelPartitionRecord>,
    #[sqlx(skip)]
    pub cursors: Vec<ChannelCursorRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ChannelPartitionRecord {
    #[serde(skip)]
    #[sqlx(default)]
    pub channel: String,
    pub partition: String,
    /// The seq the next message gets.
    pub next_seq: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ChannelCursorRecord {
    #[serde(skip)]
    #[sqlx(default)]
    pub channel: String,
    pub partition: String,
    pub consumer: String,
    /// The last acked seq.
    pub seq: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// A retained channel message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ChannelMessageRecord {
    pub channel: String,
    pub partition: String,
    pub seq: i64,
    pub payload: String,
    pub published_by: String,
    #[serde(with = "time::serde::rfc3339")]
    pub published_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// A volume blob; its bytes are the tar entry `blobs/<sha256>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct BlobRecord {
    pub sha256: String,
    pub size: i64,
}

/// A named volume with its index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct VolumeRecord {
    pub id: Uuid,
    pub name: String,
    pub mode: String,
    pub quota_bytes: i64,
    pub bytes: i64,
    pub files: i32,
    pub tree_hash: String,
    pub seq: i64,
    pub description: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
    /// By path.
    #[sqlx(skip)]
    pub index: Vec<VolumeFileRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct VolumeFileRecord {
    #[serde(skip)]
    #[sqlx(default)]
    pub volume_id: Uuid,
    pub path: String,
    pub sha256: String,
    pub size: i64,
    pub mode: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// One change of a volume's changelog, with the files it touched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct VolumeChangeRecord {
    pub id: Uuid,
    /// The volume's name.
    pub volume: String,
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
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[sqlx(skip)]
    pub files: Vec<VolumeChangeFileRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct VolumeChangeFileRecord {
    #[serde(skip)]
    #[sqlx(default)]
    pub change_id: Uuid,
    pub path: String,
    pub before_sha: Option<String>,
    pub after_sha: Option<String>,
    pub before_mode: Option<i32>,
    pub after_mode: Option<i32>,
    pub before_size: Option<i64>,
    pub after_size: Option<i64>,
}

/// A volume snapshot: a tree hash and the index it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct VolumeSnapshotRecord {
    pub id: Uuid,
    /// The volume's name.
    pub volume: String,
    pub label: String,
    pub tree_hash: String,
    pub seq: i64,
    pub files: i32,
    pub bytes: i64,
    /// `[[path, sha256, size, mode], …]`.
    pub entries: Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A run row, without its lease (an imported run holds none).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RunArchiveRecord {
    pub id: Uuid,
    pub subject: String,
    pub agent_name: String,
    pub agent_hash: String,
    pub parent_run_id: Option<Uuid>,
    pub root_run_id: Uuid,
    pub depth: i32,
    pub status: String,
    pub stop_reason: Option<String>,
    pub interactive: bool,
    pub spec: Value,
    pub idempotency_key: Option<String>,
    /// The fence the events and ledger rows were written under.
    pub lease_epoch: i64,
    pub pending_interrupt: Option<Value>,
    pub usage: Value,
    pub iterations: i32,
    pub error: Option<Value>,
    pub sweeps: i32,
    pub lapses: i32,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub started_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// One transcript event of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct RunEventRecord {
    pub run_id: Uuid,
    pub seq: i64,
    pub kind: String,
    pub data: Value,
    pub epoch: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// One tool call of a run's ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct ToolLedgerRecord {
    pub run_id: Uuid,
    pub tool_use_id: String,
    pub tool: String,
    pub input: Value,
    pub idempotent: bool,
    pub status: String,
    pub result: Option<String>,
    pub is_error: Option<bool>,
    pub state: Option<Value>,
    pub hooks: Option<Value>,
    pub epoch: i64,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
}

/// One evaluation (a verdict or a submitted evaluation) of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct EvaluationRecord {
    pub id: Uuid,
    pub run_id: Uuid,
    pub task_id: String,
    pub attempt: i32,
    pub agent_name: String,
    pub agent_hash: String,
    pub emitter_role: String,
    pub verdict: String,
    pub score: f64,
    pub dimensions: Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// Every definition of `tenant` with its versions, by (kind, name).
pub(crate) async fn load_definitions(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<DefinitionRecord>, sqlx::Error> {
    let mut defs: Vec<DefinitionRecord> = sqlx::query_as(
        "SELECT kind, name, active_version, retired, version_count, description, created_at, updated_at
         FROM defs WHERE tenant_id = $1 ORDER BY kind, name",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let versions: Vec<DefinitionVersionRecord> = sqlx::query_as(
        "SELECT kind, name, number, hash, content_json, parent_version, created_by, created_at
         FROM def_versions WHERE tenant_id = $1 ORDER BY kind, name, number",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let mut by: BTreeMap<(String, String), Vec<DefinitionVersionRecord>> = BTreeMap::new();
    for mut v in versions {
        // The key fields are the parent's; a record carries them empty, as an archive has it.
        let key = (std::mem::take(&mut v.kind), std::mem::take(&mut v.name));
        by.entry(key).or_default().push(v);
    }
    for d in &mut defs {
        d.versions = by
            .remove(&(d.kind.clone(), d.name.clone()))
            .unwrap_or_default();
    }
    Ok(defs)
}

/// The live (unexpired) memory entries of `tenant`.
pub(crate) async fn load_memory(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<MemoryRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT scope, CASE WHEN scope = 'tenant' THEN '' ELSE scope_id END AS scope_id, key,
                value_json, bytes, version, agent, expires_at, embedding,
                embedding_model, created_at, updated_at
         FROM memory_entries
         WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > now())
         ORDER BY scope, scope_id, key",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}

/// The channels of `tenant` with partitions and cursors.
pub(crate) async fn load_channels(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<ChannelRecord>, sqlx::Error> {
    let mut chans: Vec<ChannelRecord> = sqlx::query_as(
        "SELECT name, scope, ttl_seconds, max_messages, created_at, updated_at
         FROM channels WHERE tenant_id = $1 ORDER BY name",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let parts: Vec<ChannelPartitionRecord> = sqlx::query_as(
        "SELECT c.name AS channel, p.partition, p.next_seq
         FROM channel_partitions p JOIN channels c ON c.id = p.channel_id
         WHERE c.tenant_id = $1 ORDER BY c.name, p.partition COLLATE \"C\"",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let cursors: Vec<ChannelCursorRecord> = sqlx::query_as(
        "SELECT c.name AS channel, k.partition, k.consumer, k.seq, k.updated_at
         FROM channel_cursors k JOIN channels c ON c.id = k.channel_id
         WHERE c.tenant_id = $1
         ORDER BY c.name, k.partition COLLATE \"C\", k.consumer COLLATE \"C\"",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let mut p_by: BTreeMap<String, Vec<ChannelPartitionRecord>> = BTreeMap::new();
    for mut p in parts {
        p_by.entry(std::mem::take(&mut p.channel))
            .or_default()
            .push(p);
    }
    let mut c_by: BTreeMap<String, Vec<ChannelCursorRecord>> = BTreeMap::new();
    for mut k in cursors {
        c_by.entry(std::mem::take(&mut k.channel))
            .or_default()
            .push(k);
    }
    for ch in &mut chans {
        ch.partitions = p_by.remove(&ch.name).unwrap_or_default();
        ch.cursors = c_by.remove(&ch.name).unwrap_or_default();
    }
    Ok(chans)
}

/// The unexpired messages of `tenant`'s channels.
pub(crate) async fn load_channel_messages(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<ChannelMessageRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT c.name AS channel, m.partition, m.seq, m.payload, m.published_by, m.published_at,
                m.expires_at
         FROM channel_messages m JOIN channels c ON c.id = m.channel_id
         WHERE c.tenant_id = $1 AND m.expires_at > now()
         ORDER BY c.name, m.partition COLLATE \"C\", m.seq",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}

/// The named volumes of `tenant` with their indexes.
pub(crate) async fn load_volumes(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<VolumeRecord>, sqlx::Error> {
    let mut vols: Vec<VolumeRecord> = sqlx::query_as(
        "SELECT id, name, mode, quota_bytes, bytes, files, tree_hash, seq, description,
                created_at, updated_at
         FROM volumes WHERE tenant_id = $1 AND kind = 'named' ORDER BY name",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let files: Vec<VolumeFileRecord> = sqlx::query_as(
        "SELECT f.volume_id, f.path, f.sha256, f.size, f.mode, f.updated_at
         FROM volume_files f JOIN volumes v ON v.id = f.volume_id
         WHERE v.tenant_id = $1 AND v.kind = 'named' ORDER BY f.volume_id, f.path",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let mut by: BTreeMap<Uuid, Vec<VolumeFileRecord>> = BTreeMap::new();
    for mut f in files {
        by.entry(std::mem::take(&mut f.volume_id))
            .or_default()
            .push(f);
    }
    for v in &mut vols {
        v.index = by.remove(&v.id).unwrap_or_default();
    }
    Ok(vols)
}

/// The changelog of `tenant`'s named volumes, by volume and seq.
pub(crate) async fn load_volume_changes(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<VolumeChangeRecord>, sqlx::Error> {
    let mut changes: Vec<VolumeChangeRecord> = sqlx::query_as(
        "SELECT ch.id, v.name AS volume, ch.seq, ch.op_key, ch.run_id, ch.tool_use_id, ch.source,
                ch.subject, ch.undoes, ch.undone_by, ch.tree_before, ch.tree_after, ch.created_at
         FROM volume_changes ch JOIN volumes v ON v.id = ch.volume_id
         WHERE v.tenant_id = $1 AND v.kind = 'named' ORDER BY v.name, ch.seq",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let files: Vec<VolumeChangeFileRecord> = sqlx::query_as(
        "SELECT f.change_id, f.path, f.before_sha, f.after_sha, f.before_mode, f.after_mode,
                f.before_size, f.after_size
         FROM volume_change_files f
         JOIN volume_changes ch ON ch.id = f.change_id
         JOIN volumes v ON v.id = ch.volume_id
         WHERE v.tenant_id = $1 AND v.kind = 'named' ORDER BY f.change_id, f.path",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await?;
    let mut by: BTreeMap<Uuid, Vec<VolumeChangeFileRecord>> = BTreeMap::new();
    for mut f in files {
        by.entry(std::mem::take(&mut f.change_id))
            .or_default()
            .push(f);
    }
    for ch in &mut changes {
        ch.files = by.remove(&ch.id).unwrap_or_default();
    }
    Ok(changes)
}

/// The snapshots of `tenant`'s named volumes.
pub(crate) async fn load_volume_snapshots(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<VolumeSnapshotRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.id, v.name AS volume, s.label, s.tree_hash, s.seq, s.files, s.bytes, s.entries,
                s.created_at
         FROM volume_snapshots s JOIN volumes v ON v.id = s.volume_id
         WHERE v.tenant_id = $1 AND v.kind = 'named' ORDER BY v.name, s.created_at, s.id",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}

/// Every blob sha the volumes, changes and snapshots name.
pub(crate) fn named_blobs(
    volumes: &[VolumeRecord],
    changes: &[VolumeChangeRecord],
    snapshots: &[VolumeSnapshotRecord],
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for v in volumes {
        out.extend(v.index.iter().map(|f| f.sha256.clone()));
    }
    for ch in changes {
        for f in &ch.files {
            out.extend(f.before_sha.iter().cloned());
            out.extend(f.after_sha.iter().cloned());
        }
    }
    for s in snapshots {
        if let Some(entries) = s.entries.as_array() {
            for e in entries {
                if let Some(sha) = e.get(1).and_then(Value::as_str) {
                    out.insert(sha.to_owned());
                }
            }
        }
    }
    out
}

/// The blob rows of `tenant` among `shas`, with where each is stored.
pub(crate) async fn load_blob_rows(
    c: &mut PgConnection,
    tenant: &str,
    shas: &[String],
) -> Result<Vec<(String, i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT sha256, size, store FROM volume_blobs
         WHERE tenant_id = $1 AND sha256 = ANY($2) ORDER BY sha256",
    )
    .bind(tenant)
    .bind(shas)
    .fetch_all(&mut *c)
    .await
}

/// The columns of a [`RunArchiveRecord`] (a macro, so queries stay `&'static str`).
macro_rules! run_columns {
    () => {
        "id, subject, agent_name, agent_hash, parent_run_id, root_run_id, depth, status,
         stop_reason, interactive, spec, idempotency_key, lease_epoch, pending_interrupt, usage,
         iterations, error, sweeps, lapses, created_at, started_at, finished_at, updated_at"
    };
}

/// The runs of `tenant` (all of them, or those `ids` name and their ancestors), by id (a
/// parent before its children: ids are time-ordered).
pub(crate) async fn load_runs(
    c: &mut PgConnection,
    tenant: &str,
    ids: Option<&[Uuid]>,
) -> Result<Vec<RunArchiveRecord>, sqlx::Error> {
    match ids {
        None => {
            sqlx::query_as(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE tenant_id = $1 ORDER BY id"
            ))
            .bind(tenant)
            .fetch_all(&mut *c)
            .await
        }
        Some(ids) => {
            sqlx::query_as(concat!(
                "WITH RECURSIVE chain(id) AS (
                     SELECT id FROM runs WHERE tenant_id = $1 AND id = ANY($2)
                     UNION
                     SELECT r.parent_run_id FROM runs r JOIN chain ON r.id = chain.id
                     WHERE r.tenant_id = $1 AND r.parent_run_id IS NOT NULL)
                 SELECT ",
                run_columns!(),
                " FROM runs WHERE tenant_id = $1 AND id IN (SELECT id FROM chain) ORDER BY id"
            ))
            .bind(tenant)
            .bind(ids)
            .fetch_all(&mut *c)
            .await
        }
    }
}

/// The events of `tenant`'s runs.
pub(crate) async fn load_run_events(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<RunEventRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT run_id, seq, kind, data, epoch, created_at FROM run_events
         WHERE tenant_id = $1 ORDER BY run_id, seq",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}

/// The tool ledger of `tenant`'s runs.
pub(crate) async fn load_tool_ledger(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<ToolLedgerRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT run_id, tool_use_id, tool, input, idempotent, status, result, is_error, state,
                hooks, epoch, started_at, finished_at
         FROM tool_ledger WHERE tenant_id = $1 ORDER BY run_id, tool_use_id COLLATE \"C\"",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}

/// The evaluations of `tenant`.
pub(crate) async fn load_evaluations(
    c: &mut PgConnection,
    tenant: &str,
) -> Result<Vec<EvaluationRecord>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, run_id, task_id, attempt, agent_name, agent_hash, emitter_role, verdict, score,
                dimensions, created_at
         FROM evaluations WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant)
    .fetch_all(&mut *c)
    .await
}
