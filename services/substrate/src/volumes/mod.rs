//! Volumes: file trees stored as content-addressed blobs plus a per-volume index, with a
//! changelog, undo and snapshots, served as `weft.v1.Volumes`. The tenant always comes from the
//! internal JWT; a volume, run, file, blob, change or snapshot of another tenant is `not_found`,
//! never `permission_denied`, so nothing leaks.
//!
//! Which volume a call names ([`v1::VolumeRef`]):
//! - `name`: the tenant's named volume. A `volume` definition put through the definitions API
//!   (rather than `CreateVolume`) becomes its volume on first use, and a later version of it
//!   sets the volume's mode, quota and description when the volume is next resolved. `run` is
//!   never a named volume.
//!
//! Blobs: `PutBlobs` stores content ahead; an `Apply` may then name it by sha256 within the
//! grace period ([`store::BLOB_GRACE`], 10 minutes after it was last put or named). After
//! that, a put by sha is accepted only for a blob this volume's index, history or snapshots
//! name (another volume's content is not reachable by its hash alone); put it again otherwise.
//! Blobs nothing names are collected by the sweeper once the grace period has passed.
//! - `run_id`: the ephemeral volume of that run's *root* (any run of a tree names the same one),
//!   called `run:<root id>`; the run must be the tenant's. With `create` it is made on first use
//!   (not once the root run has ended: it would only be purged again).
//!
//! Every input is checked here (paths, hashes, sizes, limits, ids) before the store is asked;
//! the rules of a change are in [`plan`], its transaction in [`store`], blob placement in
//! [`blobs`], the gRPC face in [`grpc`].
//!
//! Error codes (gRPC / weft): a precondition that fails — `if_match`, a move onto a file, a
//! read-only volume, `if_tree`, an undo of a file changed since, a blob not uploaded — is
//! FAILED_PRECONDITION / `conflict` (409); a cap — the volume's quota, `volumes.max_files`,
//! `volumes.max_tenant_bytes` — is RESOURCE_EXHAUSTED / `rate_limited` (429); a file over
//! `volumes.max_file_bytes` is INVALID_ARGUMENT naming the op; a missing file, volume, run,
//! change or snapshot is NOT_FOUND.

pub mod blobs;
pub mod grpc;
pub mod plan;
pub mod store;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft_core::def::{DefContent as _, DefKind, validate_def_name};
use weft_core::volume::{RUN_VOLUME, VolumeContent, VolumeMode};
use weft_core::{Error, Principal, TenantId, rfc3339};
use weft_proto::v1;

use crate::store::DefStore;
use plan::{Entry, Index};
pub use store::{
    Caps, ChangeFileRow, ChangeRow, FileRow, InlineBlob, Meta, Mutation, SnapshotRow, UndoTarget,
    VolError, VolumeRow, VolumeStore,
};

/// Longest op key, in bytes.
pub const MAX_OP_KEY_BYTES: usize = 256;
/// Longest tool use id, in bytes.
pub const MAX_TOOL_USE_ID_BYTES: usize = 256;
/// Longest `source` of a change, in bytes.
pub const MAX_SOURCE_BYTES: usize = 64;
/// Longest snapshot label, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;
/// Longest glob or regex, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// Most blobs one `PutBlobs` or `GetBlobs` may name.
pub const MAX_BLOBS_PER_CALL: usize = 1000;
/// Most content bytes one reply carries (under the 16 MiB message limit).
pub const MAX_REPLY_BYTES: usize = 15 * 1024 * 1024;
/// Longest diff of one file in a reply.
pub const DIFF_MAX_BYTES: usize = 64 * 1024;
/// Files larger than this are not diffed.
pub const DIFF_MAX_INPUT_BYTES: i64 = 1024 * 1024;
/// Most diff bytes one reply carries; later files get none.
pub const DIFF_MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// Most blob bytes one reply's diffs read; later files get none.
pub const DIFF_MAX_READ_BYTES: i64 = 32 * 1024 * 1024;
/// Diffs read blobs in batches of about this many bytes.
const DIFF_BATCH_BYTES: i64 = 4 * 1024 * 1024;
/// Grep reads blobs in batches of at most this many files …
const GREP_BATCH_FILES: usize = 256;
/// … and this many bytes.
const GREP_BATCH_BYTES: i64 = 8 * 1024 * 1024;
/// Grep reads at most this many bytes of files per call (then reports `truncated`).
pub const GREP_MAX_SCAN_BYTES: i64 = 64 * 1024 * 1024;
/// Ephemeral volumes purged, and blobs collected, per sweep transaction.
const SWEEP_BATCH: i64 = 100;

// The same field checks as memory's: one rule for a caller's text across the substrate.
use crate::memory::{check_text, invalid};

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_sha(field: &str, s: &str) -> Result<(), Error> {
    if is_sha256(s) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "`{field}` must be a sha256: 64 lowercase hex digits, got `{}`",
                s.escape_debug()
            ),
        ))
    }
}

/// A path relative to the volume root, normalized; refused paths name `field`.
pub fn clean_path(field: &str, path: &str) -> Result<String, Error> {
    weft_volumes::path::clean(field, path)
        .map_err(|e| Error::invalid(e.message).with_param(e.field))
}

fn parse_uuid(field: &str, s: &str, what: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(s).map_err(|_| {
        invalid(
            field,
            format!(
                "`{field}` must be {what} (a UUID), got `{}`",
                s.escape_debug()
            ),
        )
    })
}

/// A page size: 0 = `default`, otherwise 1..=`max`.
fn page_limit(limit: u32, default: u32, max: u32) -> Result<u32, Error> {
    match limit {
        0 => Ok(default),
        n if n > max => Err(invalid(
            "limit",
            format!("`limit` must be between 1 and {max}, got {n}"),
        )),
        n => Ok(n),
    }
}

/// A tree cursor: `p` + the hex of the last path of the page.
fn encode_cursor(path: &str) -> String {
    format!("p{}", hex::encode(path.as_bytes()))
}

fn decode_cursor(c: &str) -> Result<String, Error> {
    let bad = || {
        invalid(
            "cursor",
            "`cursor` is not a cursor this API returned; pass `next_cursor` of the previous page unchanged, or leave it out to start at the beginning".into(),
        )
    };
    let hexed = c.strip_prefix('p').ok_or_else(bad)?;
    if hexed.len() > weft_volumes::path::MAX_PATH_BYTES * 2 {
        return Err(bad());
    }
    let bytes = hex::decode(hexed).map_err(|_| bad())?;
    let path = String::from_utf8(bytes).map_err(|_| bad())?;
    if path.contains('\0') {
        return Err(bad());
    }
    Ok(path)
}

/// Checks a named volume's name: a definition name, and not `run`.
fn check_volume_name(name: &str) -> Result<(), Error> {
    if name == RUN_VOLUME {
        return Err(invalid(
            "name",
            "the volume name `run` is reserved for a run's own volume; name that one by `run_id`, or choose another name".into(),
        ));
    }
    validate_def_name(DefKind::Volume, name)
}

fn parse_mode(s: &str) -> Result<VolumeMode, Error> {
    if s.is_empty() {
        return Ok(VolumeMode::Rw);
    }
    VolumeMode::parse(s).ok_or_else(|| {
        invalid(
            "mode",
            format!("`mode` must be `rw` or `ro`, got `{}`", s.escape_debug()),
        )
    })
}

fn check_op_key(k: Option<String>) -> Result<Option<String>, Error> {
    if let Some(k) = &k {
        check_text("op_key", k, MAX_OP_KEY_BYTES, false)?;
    }
    Ok(k)
}

/// The `source` of an `Apply`: a tool name, `http`, `import`… (`api` when empty); `undo` and
/// `restore` are kept for the changes of those calls.
fn check_source(s: &str) -> Result<String, Error> {
    if s.is_empty() {
        return Ok("api".into());
    }
    let ok = s.len() <= MAX_SOURCE_BYTES
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':' | b'.'));
    if !ok {
        return Err(invalid(
            "source",
            format!(
                "`source` must be 1-{MAX_SOURCE_BYTES} characters of a-z, A-Z, 0-9, '_', '-', ':' and '.', such as a tool name"
            ),
        ));
    }
    if s == "undo" || s == "restore" {
        return Err(invalid(
            "source",
            format!(
                "`source` `{s}` is kept for the changes Undo and Restore make; name the tool or route that writes"
            ),
        ));
    }
    Ok(s.to_owned())
}

fn check_file_mode(i: usize, mode: u32) -> Result<i32, Error> {
    match i32::try_from(mode) {
        Ok(0) => Ok(0),
        Ok(m) if m == plan::MODE_FILE || m == plan::MODE_EXEC => Ok(m),
        _ => Err(invalid(
            &format!("ops[{i}].put.mode"),
            format!(
                "`ops[{i}].put.mode` must be 420 (0644), 493 (0755) or 0 (keep the file's), got {mode}"
            ),
        )),
    }
}

/// The effective quota of a named volume that asks for `asked` bytes (0 = the most).
fn effective_quota(asked: u64, max: u64) -> i64 {
    let q = if asked == 0 { max } else { asked.min(max) };
    i64::try_from(q).unwrap_or(i64::MAX)
}

fn no_volume(name: &str) -> Error {
    Error::not_found(format!("no volume `{name}` in your tenant")).with_param("name")
}

fn no_ref() -> Error {
    invalid(
        "volume",
        "`volume` is required: a `name` (a named volume) or a `run_id` (a run's own volume)".into(),
    )
}

fn is_ended(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "cancelled")
}

fn db(what: &'static str) -> impl Fn(VolError) -> Error {
    move |e| e.into_api(what)
}

fn defs_db(what: &'static str) -> impl Fn(weft_store::StoreError) -> Error {
    move |e| {
        tracing::error!(error = %e, "volumes: {what} failed");
        e.to_api()
    }
}

/// The proto message of a volume.
pub fn volume_to_proto(v: VolumeRow) -> v1::Volume {
    v1::Volume {
        name: v.name,
        kind: v.kind,
        mode: v.mode,
        quota_bytes: v.quota_bytes,
        bytes: v.bytes,
        files: i64::from(v.files),
        tree_hash: v.tree_hash,
        seq: v.seq,
        root_run_id: v.root_run_id.map(|u| u.to_string()),
        created_at: rfc3339(v.created_at),
        updated_at: rfc3339(v.updated_at),
        description: v.description,
    }
}

fn entry_to_proto(f: FileRow) -> v1::FileEntry {
    v1::FileEntry {
        path: f.path,
        sha256: f.sha256,
        size: f.size,
        mode: u32::try_from(f.mode).unwrap_or(0),
        updated_at: rfc3339(f.updated_at),
    }
}

fn snapshot_to_proto(s: SnapshotRow) -> v1::Snapshot {
    v1::Snapshot {
        id: s.id.to_string(),
        label: s.label,
        tree_hash: s.tree_hash,
        seq: s.seq,
        files: i64::from(s.files),
        bytes: s.bytes,
        created_at: rfc3339(s.created_at),
    }
}

/// The proto message of a change and its files (no diffs).
pub fn change_to_proto(c: &ChangeRow, files: &[ChangeFileRow], replayed: bool) -> v1::Change {
    v1::Change {
        id: c.id.to_string(),
        seq: c.seq,
        source: c.source.clone(),
        run_id: c.run_id.map(|u| u.to_string()),
        tool_use_id: c.tool_use_id.clone(),
        subject: c.subject.clone(),
        files: files
            .iter()
            .filter(|f| f.change_id == c.id)
            .map(|f| v1::FileChange {
                path: f.path.clone(),
                before_sha: f.before_sha.clone(),
                after_sha: f.after_sha.clone(),
                size: f.after_size.unwrap_or(0),
                diff: String::new(),
            })
            .collect(),
        tree_before: c.tree_before.clone(),
        tree_after: c.tree_after.clone(),
        undoes: c.undoes.map(|u| u.to_string()),
        undone_by: c.undone_by.map(|u| u.to_string()),
        created_at: rfc3339(c.created_at),
        replayed,
    }
}

/// One side of a file to diff: its blob (`None` = absent) and size.
#[derive(Clone, Debug)]
struct Side {
    sha: Option<String>,
    size: i64,
}

/// One file to diff.
#[derive(Clone, Debug)]
struct Pair {
    path: String,
    before: Side,
    after: Side,
}

impl Pair {
    fn small(&self) -> bool {
        self.before.size <= DIFF_MAX_INPUT_BYTES && self.after.size <= DIFF_MAX_INPUT_BYTES
    }
}

/// Blob bytes already in memory (an `Apply`'s inline content), by sha256.
type Cache = Arc<HashMap<String, Vec<u8>>>;

/// A version of a volume a `Diff` names.
enum Version {
    Current,
    Snapshot(Uuid),
}

fn parse_version(field: &str, s: &str) -> Result<Version, Error> {
    match s {
        "" => Err(invalid(
            field,
            format!("`{field}` is required: a snapshot id, or \"current\""),
        )),
        "current" => Ok(Version::Current),
        s => Ok(Version::Snapshot(parse_uuid(
            field,
            s,
            "a snapshot id or \"current\"",
        )?)),
    }
}

fn index_of(files: Vec<FileRow>) -> Index {
    files
        .into_iter()
        .map(|f| {
            (
                f.path,
                Entry {
                    sha256: f.sha256,
                    size: f.size,
                    mode: f.mode,
                },
            )
        })
        .collect()
}

/// The volumes service's rules over a [`VolumeStore`] and the definitions. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Volumes {
    store: VolumeStore,
    defs: DefStore,
    empty_tree: String,
}

impl Volumes {
    pub fn new(store: VolumeStore, defs: DefStore) -> Self {
        Self {
            store,
            defs,
            empty_tree: plan::tree_hash(&Index::new()),
        }
    }

    pub fn store(&self) -> &VolumeStore {
        &self.store
    }

    fn caps(&self) -> Caps {
        self.store.caps()
    }

    /// The volume a reference names (see the module's notes).
    pub async fn resolve(
        &self,
        p: &Principal,
        r: Option<&v1::VolumeRef>,
    ) -> Result<VolumeRow, Error> {
        use v1::volume_ref::Target;
        let r = r.ok_or_else(no_ref)?;
        match r.target.as_ref().ok_or_else(no_ref)? {
            Target::Name(name) => self.named(&p.tenant, name).await,
            Target::RunId(id) => self.run_volume(&p.tenant, id, r.create).await,
        }
    }

    async fn named(&self, tenant: &TenantId, name: &str) -> Result<VolumeRow, Error> {
        check_volume_name(name)?;
        let found = self
            .store
            .find(tenant, name)
            .await
            .map_err(db("reading a volume"))?;
        match found {
            None => self
                .adopt_definition(tenant, name, None)
                .await?
                .ok_or_else(|| no_volume(name)),
            // A definition put through the definitions API since: the row follows it.
            Some(v) => Ok(self
                .adopt_definition(tenant, name, Some(&v))
                .await?
                .unwrap_or(v)),
        }
    }

    /// Makes the volume of a live `volume` definition that has none yet (`row` `None`), or
    /// brings `row`'s mode, quota and description to its definition's when they differ.
    /// `None` when there is no live definition, or `row` already matches it.
    async fn adopt_definition(
        &self,
        tenant: &TenantId,
        name: &str,
        row: Option<&VolumeRow>,
    ) -> Result<Option<VolumeRow>, Error> {
        let Some(def) = self
            .defs
            .active(DefKind::Volume, tenant, name)
            .await
            .map_err(defs_db("reading a volume definition"))?
            .filter(|d| !d.retired)
        else {
            return Ok(None);
        };
        let content = VolumeContent::from_json_str(&def.content_json)?;
        let quota = effective_quota(content.quota_bytes, self.caps().max_volume_bytes);
        if let Some(v) = row
            && v.mode == content.mode.as_str()
            && v.quota_bytes == quota
            && v.description == content.description
        {
            return Ok(None);
        }
        let row = self
            .store
            .upsert_named(
                tenant,
                name,
                content.mode.as_str(),
                quota,
                &content.description,
                &self.empty_tree,
            )
            .await
            .map_err(db("making a volume"))?;
        Ok(Some(row))
    }

    async fn run_volume(
        &self,
        tenant: &TenantId,
        id: &str,
        create: bool,
    ) -> Result<VolumeRow, Error> {
        let run = parse_uuid("run_id", id, "a run id")?;
        let (root, status) = self
            .store
            .run_root(tenant, run)
            .await
            .map_err(db("reading a run"))?
            .ok_or_else(|| {
                Error::not_found(format!("no run `{run}` in your tenant")).with_param("run_id")
            })?;
        let name = format!("run:{root}");
        if let Some(v) = self
            .store
            .find(tenant, &name)
            .await
            .map_err(db("reading a volume"))?
        {
            return Ok(v);
        }
        if !create {
            return Err(Error::not_found(format!(
                "run `{run}` has no volume yet; its first write makes it"
            ))
            .with_param("run_id"));
        }
        if is_ended(&status) {
            return Err(plan::conflict(format!(
                "run `{root}` has ended ({status}), so its volume is gone; a new run gets a new volume"
            ))
            .with_param("run_id"));
        }
        self.store
            .ensure_ephemeral(tenant, &name, root, &self.empty_tree)
            .await
            .map_err(db("making a run's volume"))
    }

    /// Makes a named volume and its definition, or updates both (declarative).
    pub async fn create_volume(
        &self,
        p: &Principal,
        r: v1::CreateVolumeRequest,
    ) -> Result<v1::Volume, Error> {
        check_volume_name(&r.name)?;
        let mode = parse_mode(&r.mode)?;
        let max = self.caps().max_volume_bytes;
        let asked = u64::try_from(r.quota_bytes).map_err(|_| {
            invalid(
                "quota_bytes",
                format!(
                    "`quota_bytes` must be 0 (the most, {max}) or a positive number of bytes, got {}",
                    r.quota_bytes
                ),
            )
        })?;
        if asked > max {
            return Err(invalid(
                "quota_bytes",
                format!(
                    "`quota_bytes` is {asked}; a volume may hold at most {max} bytes (volumes.max_volume_bytes); ask for less, or 0 for the most"
                ),
            ));
        }
        let content = VolumeContent {
            description: r.description,
            mode,
            quota_bytes: asked,
        };
        crate::defs::put(
            &self.defs,
            &p.tenant,
            &r.name,
            &content,
            Some(p.subject.as_str()),
        )
        .await?;
        let row = self
            .store
            .upsert_named(
                &p.tenant,
                &r.name,
                mode.as_str(),
                effective_quota(asked, max),
                &content.description,
                &self.empty_tree,
            )
            .await
            .map_err(db("making a volume"))?;
        tracing::info!(tenant = %p.tenant, volume = %r.name, mode = mode.as_str(), "volume put");
        Ok(volume_to_proto(row))
    }

    pub async fn get_volume(
        &self,
        p: &Principal,
        r: Option<&v1::VolumeRef>,
    ) -> Result<v1::Volume, Error> {
        Ok(volume_to_proto(self.resolve(p, r).await?))
    }

    /// The tenant's named volumes, by name (ephemeral ones are reached through their run).
    pub async fn list_volumes(&self, p: &Principal) -> Result<v1::ListVolumesResponse, Error> {
        let mut rows = self
            .store
            .list_named(&p.tenant)
            .await
            .map_err(db("listing volumes"))?;
        let have: HashSet<String> = rows.iter().map(|v| v.name.clone()).collect();
        let defs = crate::defs::list(&self.defs, DefKind::Volume, &p.tenant).await?;
        let mut adopted = false;
        for d in defs
            .iter()
            .filter(|d| !d.retired && !have.contains(&d.name) && d.name != RUN_VOLUME)
        {
            if let Some(v) = self.adopt_definition(&p.tenant, &d.name, None).await? {
                rows.push(v);
                adopted = true;
            }
        }
        if adopted {
            rows.sort_by(|a, b| a.name.cmp(&b.name));
        }
        Ok(v1::ListVolumesResponse {
            volumes: rows.into_iter().map(volume_to_proto).collect(),
        })
    }

    /// Deletes a volume (files, history, snapshots) and retires a named one's definition.
    pub async fn delete_volume(
        &self,
        p: &Principal,
        r: Option<&v1::VolumeRef>,
    ) -> Result<bool, Error> {
        use v1::volume_ref::Target;
        let r = r.ok_or_else(no_ref)?;
        match r.target.as_ref().ok_or_else(no_ref)? {
            Target::Name(name) => {
                check_volume_name(name)?;
                // The definition first: once it is retired, a resolve that finds no row does
                // not make the volume again from it.
                let live_def = self
                    .defs
                    .summary(DefKind::Volume, &p.tenant, name)
                    .await
                    .map_err(defs_db("reading a volume definition"))?
                    .is_some_and(|s| !s.retired);
                if live_def {
                    crate::defs::retire(&self.defs, DefKind::Volume, &p.tenant, name).await?;
                }
                let row = self
                    .store
                    .delete(&p.tenant, name)
                    .await
                    .map_err(db("deleting a volume"))?;
                if !row && !live_def {
                    return Err(no_volume(name));
                }
                tracing::info!(tenant = %p.tenant, volume = %name, "volume deleted");
                Ok(true)
            }
            Target::RunId(id) => {
                let v = self.run_volume(&p.tenant, id, false).await?;
                self.store
                    .delete(&p.tenant, &v.name)
                    .await
                    .map_err(db("deleting a volume"))
            }
        }
    }

    /// Deletes the ephemeral volume of the root run `root_run_id`, if any.
    pub async fn purge_run_volume(&self, p: &Principal, root_run_id: &str) -> Result<bool, Error> {
        let root = parse_uuid("root_run_id", root_run_id, "a root run id")?;
        let gone = self
            .store
            .delete(&p.tenant, &format!("run:{root}"))
            .await
            .map_err(db("purging a run's volume"))?;
        if gone {
            tracing::debug!(tenant = %p.tenant, run = %root, "run volume purged");
        }
        Ok(gone)
    }

    /// A page of the index under a directory.
    pub async fn tree(&self, p: &Principal, r: v1::TreeRequest) -> Result<v1::TreeResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let prefix = r.prefix.trim_end_matches('/');
        let dir = if prefix.is_empty() {
            None
        } else {
            Some(clean_path("prefix", prefix)?)
        };
        let after = r.cursor.as_deref().map(decode_cursor).transpose()?;
        let limit = page_limit(r.limit, 1000, 10_000)?;
        let mut rows = self
            .store
            .tree_page(&p.tenant, v.id, dir.as_deref(), after.as_deref(), limit + 1)
            .await
            .map_err(db("listing files"))?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = if more {
            rows.last().map(|f| encode_cursor(&f.path))
        } else {
            None
        };
        Ok(v1::TreeResponse {
            files: rows.into_iter().map(entry_to_proto).collect(),
            next_cursor,
            tree_hash: v.tree_hash,
        })
    }

    /// One file and its bytes.
    pub async fn read_file(
        &self,
        p: &Principal,
        r: v1::ReadFileRequest,
    ) -> Result<v1::FileContent, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let path = clean_path("path", &r.path)?;
        let f = self
            .store
            .file(&p.tenant, v.id, &path)
            .await
            .map_err(db("reading a file"))?
            .ok_or_else(|| {
                Error::not_found(format!("no file `{path}` in volume `{}`", v.name))
                    .with_param("path")
            })?;
        let mut loaded = self
            .store
            .blobs()
            .load(p.tenant.as_str(), std::slice::from_ref(&f.sha256))
            .await?;
        let content = loaded.remove(&f.sha256).unwrap_or_default();
        Ok(v1::FileContent {
            entry: Some(entry_to_proto(f)),
            content,
        })
    }

    /// Stores blobs ahead of an `Apply` that names them (idempotent).
    pub async fn put_blobs(
        &self,
        p: &Principal,
        r: v1::PutBlobsRequest,
    ) -> Result<v1::PutBlobsResponse, Error> {
        if r.blobs.len() > MAX_BLOBS_PER_CALL {
            return Err(invalid(
                "blobs",
                format!(
                    "`blobs` has {} blobs; send at most {MAX_BLOBS_PER_CALL} per call",
                    r.blobs.len()
                ),
            ));
        }
        let max = self.caps().max_file_bytes;
        let mut stored = Vec::with_capacity(r.blobs.len());
        let mut todo: Vec<(String, Vec<u8>)> = Vec::new();
        for (i, b) in r.blobs.into_iter().enumerate() {
            if u64::try_from(b.content.len()).unwrap_or(u64::MAX) > max {
                return Err(invalid(
                    &format!("blobs[{i}].content"),
                    format!(
                        "`blobs[{i}].content` is {} bytes; a file may hold at most {max} (volumes.max_file_bytes)",
                        b.content.len()
                    ),
                ));
            }
            let sha = weft_volumes::hash::sha256_hex(&b.content);
            if !b.sha256.is_empty() {
                let field = format!("blobs[{i}].sha256");
                check_sha(&field, &b.sha256)?;
                if b.sha256 != sha {
                    return Err(invalid(
                        &field,
                        format!(
                            "`{field}` is {}, but the content's sha256 is {sha}; send the content's sha256, or leave it empty",
                            b.sha256
                        ),
                    ));
                }
            }
            if !todo.iter().any(|(s, _)| s == &sha) {
                todo.push((sha.clone(), b.content));
            }
            stored.push(sha);
        }
        // Blobs the tenant has are touched (their grace period starts again, so the `Apply`
        // that follows may name them and the collector leaves them); the rest are stored.
        let shas: Vec<String> = todo.iter().map(|(s, _)| s.clone()).collect();
        let have = self
            .store
            .blobs()
            .touch(p.tenant.as_str(), &shas)
            .await
            .map_err(|e| e.into_api("reading blobs"))?;
        for (sha, bytes) in todo.iter().filter(|(s, _)| !have.contains(s)) {
            self.store
                .blobs()
                .put(p.tenant.as_str(), sha, bytes)
                .await
                .map_err(|e| e.into_api("storing a blob"))?;
        }
        Ok(v1::PutBlobsResponse { stored })
    }

    /// Blobs of a volume by sha256: only hashes its index, history or snapshots name.
    pub async fn get_blobs(
        &self,
        p: &Principal,
        r: v1::GetBlobsRequest,
    ) -> Result<v1::GetBlobsResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        if r.sha256.len() > MAX_BLOBS_PER_CALL {
            return Err(invalid(
                "sha256",
                format!("ask for at most {MAX_BLOBS_PER_CALL} blobs per call"),
            ));
        }
        let mut shas: Vec<String> = Vec::with_capacity(r.sha256.len());
        for (i, s) in r.sha256.into_iter().enumerate() {
            check_sha(&format!("sha256[{i}]"), &s)?;
            if !shas.contains(&s) {
                shas.push(s);
            }
        }
        let known = self
            .store
            .referenced(&p.tenant, v.id, &shas)
            .await
            .map_err(db("reading blobs"))?;
        if let Some(unknown) = shas.iter().find(|s| !known.contains(*s)) {
            return Err(Error::not_found(format!(
                "blob {unknown} is not a file of volume `{}` (nor of its history or snapshots)",
                v.name
            ))
            .with_param("sha256"));
        }
        // Sized from their rows before any is read.
        let sizes = self
            .store
            .blob_sizes(&p.tenant, &shas)
            .await
            .map_err(db("reading blobs"))?;
        let total: i64 = shas.iter().filter_map(|s| sizes.get(s)).sum();
        if total > i64::try_from(MAX_REPLY_BYTES).unwrap_or(i64::MAX) {
            return Err(invalid(
                "sha256",
                format!(
                    "these blobs hold {total} bytes, more than one reply carries ({MAX_REPLY_BYTES}); ask for fewer at a time"
                ),
            ));
        }
        let mut loaded = self.store.blobs().load(p.tenant.as_str(), &shas).await?;
        Ok(v1::GetBlobsResponse {
            blobs: shas
                .into_iter()
                .map(|s| v1::Blob {
                    content: loaded.remove(&s).unwrap_or_default(),
                    sha256: s,
                })
                .collect(),
        })
    }

    /// Applies file operations as one change (see [`store`] for the transaction).
    pub async fn apply(&self, p: &Principal, r: v1::ApplyRequest) -> Result<v1::Change, Error> {
        use v1::file_op::Op as ProtoOp;
        use v1::put_file::Body;
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let op_key = check_op_key(r.op_key)?;
        let run_id = r
            .run_id
            .as_deref()
            .map(|s| parse_uuid("run_id", s, "a run id"))
            .transpose()?;
        if let Some(t) = &r.tool_use_id {
            check_text("tool_use_id", t, MAX_TOOL_USE_ID_BYTES, false)?;
        }
        let source = check_source(&r.source)?;
        if r.ops.is_empty() && !r.replace {
            return Err(invalid(
                "ops",
                "`ops` is empty; give at least one put, delete or move".into(),
            ));
        }
        let max_ops = usize::try_from(self.caps().max_files)
            .unwrap_or(usize::MAX)
            .max(16);
        if r.ops.len() > max_ops {
            return Err(invalid(
                "ops",
                format!(
                    "`ops` has {} operations; one change may have at most {max_ops}",
                    r.ops.len()
                ),
            ));
        }
        let max_file = self.caps().max_file_bytes;
        let mut inline: Vec<InlineBlob> = Vec::new();
        let mut ops = Vec::with_capacity(r.ops.len());
        for (i, op) in r.ops.into_iter().enumerate() {
            let path = clean_path(&format!("ops[{i}].path"), &op.path)?;
            let if_match = match op.if_match {
                Some(s) if !s.is_empty() => {
                    check_sha(&format!("ops[{i}].if_match"), &s)?;
                    Some(s)
                }
                other => other,
            };
            let kind = match op.op {
                None => {
                    return Err(invalid(
                        &format!("ops[{i}]"),
                        format!("`ops[{i}]` needs `put`, `delete` or `move`"),
                    ));
                }
                Some(ProtoOp::Put(put)) => {
                    let mode = check_file_mode(i, put.mode)?;
                    let sha256 = match put.body {
                        None => {
                            return Err(invalid(
                                &format!("ops[{i}].put"),
                                format!("`ops[{i}].put` needs `content` or `sha256`"),
                            ));
                        }
                        Some(Body::Content(bytes)) => {
                            if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_file {
                                return Err(invalid(
                                    &format!("ops[{i}].put"),
                                    format!(
                                        "`{path}` would be {} bytes; a file may hold at most {max_file} (volumes.max_file_bytes)",
                                        bytes.len()
                                    ),
                                ));
                            }
                            let sha = weft_volumes::hash::sha256_hex(&bytes);
                            if !inline.iter().any(|b| b.sha256 == sha) {
                                inline.push(InlineBlob {
                                    sha256: sha.clone(),
                                    bytes,
                                });
                            }
                            sha
                        }
                        Some(Body::Sha256(s)) => {
                            check_sha(&format!("ops[{i}].put.sha256"), &s)?;
                            s
                        }
                    };
                    plan::OpKind::Put { sha256, mode }
                }
                Some(ProtoOp::Delete(_)) => plan::OpKind::Delete,
                Some(ProtoOp::Move(m)) => plan::OpKind::Move {
                    to: clean_path(&format!("ops[{i}].move.to"), &m.to)?,
                    overwrite: m.overwrite,
                },
            };
            if r.replace && !matches!(kind, plan::OpKind::Put { .. }) {
                return Err(invalid(
                    &format!("ops[{i}]"),
                    "with `replace`, every operation must be a put (the files of the new tree)"
                        .into(),
                ));
            }
            ops.push(plan::Op {
                path,
                if_match,
                kind,
            });
        }
        let meta = Meta {
            op_key,
            run_id,
            tool_use_id: r.tool_use_id,
            source,
            subject: p.subject.clone(),
        };
        let m = Mutation::Apply {
            ops,
            replace: r.replace,
            inline,
        };
        let done = self
            .store
            .mutate(&p.tenant, &v, &meta, &m)
            .await
            .map_err(db("applying a change"))?;
        let mut change = change_to_proto(&done.change, &done.files, done.replayed);
        if r.with_diff {
            let cache: HashMap<String, Vec<u8>> = match m {
                Mutation::Apply { inline, .. } => {
                    inline.into_iter().map(|b| (b.sha256, b.bytes)).collect()
                }
                _ => HashMap::new(),
            };
            let diffs = self
                .diffs_of_rows(&p.tenant, &done.files, Arc::new(cache))
                .await?;
            for (f, d) in change.files.iter_mut().zip(diffs) {
                f.diff = d;
            }
        }
        Ok(change)
    }

    async fn diffs_of_rows(
        &self,
        tenant: &TenantId,
        rows: &[ChangeFileRow],
        cache: Cache,
    ) -> Result<Vec<String>, Error> {
        let pairs: Vec<Pair> = rows
            .iter()
            .map(|f| Pair {
                path: f.path.clone(),
                before: Side {
                    sha: f.before_sha.clone(),
                    size: f.before_size.unwrap_or(0),
                },
                after: Side {
                    sha: f.after_sha.clone(),
                    size: f.after_size.unwrap_or(0),
                },
            })
            .collect();
        self.diffs(tenant, pairs, cache).await
    }

    /// Unified diffs of text files, one per pair ("" for a binary or large file, or once the
    /// reply's diff budget or its read budget is spent). Blobs are read a batch at a time;
    /// each batch is diffed on the blocking pool (a diff may take its whole time budget).
    async fn diffs(
        &self,
        tenant: &TenantId,
        pairs: Vec<Pair>,
        cache: Cache,
    ) -> Result<Vec<String>, Error> {
        let pairs = Arc::new(pairs);
        let mut budget = DIFF_MAX_TOTAL_BYTES;
        let mut read_budget = DIFF_MAX_READ_BYTES;
        let mut out = Vec::with_capacity(pairs.len());
        let mut at = 0;
        while at < pairs.len() {
            // The next batch: pairs until DIFF_BATCH_BYTES of blobs not in `cache`.
            let mut end = at;
            let mut need: Vec<String> = Vec::new();
            let mut batch_bytes = 0i64;
            while end < pairs.len() && (end == at || batch_bytes < DIFF_BATCH_BYTES) {
                let p = &pairs[end];
                end += 1;
                if !p.small() || p.before.sha == p.after.sha {
                    continue;
                }
                for side in [&p.before, &p.after] {
                    if let Some(sha) = &side.sha
                        && !cache.contains_key(sha)
                        && !need.contains(sha)
                    {
                        need.push(sha.clone());
                        batch_bytes += side.size;
                    }
                }
            }
            let over = budget == 0 || batch_bytes > read_budget;
            if over {
                out.extend(std::iter::repeat_n(String::new(), end - at));
                at = end;
                continue;
            }
            read_budget -= batch_bytes;
            let loaded = self.store.blobs().load(tenant.as_str(), &need).await?;
            let (ps, c) = (Arc::clone(&pairs), Arc::clone(&cache));
            let (diffs, left) =
                tokio::task::spawn_blocking(move || diff_batch(&ps[at..end], &c, &loaded, budget))
                    .await
                    .map_err(|e| {
                        tracing::error!(error = %e, "volumes: a diff task failed");
                        Error::internal()
                    })?;
            budget = left;
            out.extend(diffs);
            at = end;
        }
        Ok(out)
    }

    /// Paths matching a glob, newest first.
    pub async fn glob(&self, p: &Principal, r: v1::GlobRequest) -> Result<v1::GlobResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        check_text("pattern", &r.pattern, MAX_PATTERN_BYTES, false)?;
        let glob =
            weft_volumes::glob::Glob::new(&r.pattern).map_err(|e| invalid("pattern", e.message))?;
        let limit = page_limit(r.limit, 100, 1000)? as usize;
        let mut hits: Vec<FileRow> = self
            .store
            .files(&p.tenant, v.id)
            .await
            .map_err(db("listing files"))?
            .into_iter()
            .filter(|f| glob.is_match(&f.path))
            .collect();
        hits.sort_by(|a, b| {
            b.updated_at
                .cmp(&a.updated_at)
                .then_with(|| a.path.cmp(&b.path))
        });
        let truncated = hits.len() > limit;
        hits.truncate(limit);
        Ok(v1::GlobResponse {
            files: hits.into_iter().map(entry_to_proto).collect(),
            truncated,
        })
    }

    /// Lines matching a regex across the volume's text files, in path order.
    pub async fn grep(&self, p: &Principal, r: v1::GrepRequest) -> Result<v1::GrepResponse, Error> {
        use weft_volumes::grep::{Grep, GrepMode, GrepOptions};
        let v = self.resolve(p, r.volume.as_ref()).await?;
        check_text("pattern", &r.pattern, MAX_PATTERN_BYTES, false)?;
        let mode = if r.mode.is_empty() {
            GrepMode::Files
        } else {
            GrepMode::parse(&r.mode).ok_or_else(|| {
                invalid(
                    "mode",
                    format!(
                        "`mode` must be `files`, `content` or `count`, got `{}`",
                        r.mode.escape_debug()
                    ),
                )
            })?
        };
        if r.context > 10 {
            return Err(invalid(
                "context",
                format!("`context` must be between 0 and 10, got {}", r.context),
            ));
        }
        let limit = page_limit(r.limit, 200, 2000)? as usize;
        let glob = match r.glob.as_deref().filter(|g| !g.is_empty()) {
            None => None,
            Some(g) => {
                check_text("glob", g, MAX_PATTERN_BYTES, false)?;
                Some(
                    weft_volumes::glob::Glob::new(g)
                        .map_err(|e| invalid("glob", e.message.replace("`pattern`", "`glob`")))?,
                )
            }
        };
        let grep = Grep::new(GrepOptions {
            pattern: r.pattern.clone(),
            case_insensitive: r.case_insensitive,
            context: r.context,
            mode,
        })
        .map_err(|e| invalid("pattern", e.message))?;
        let files: Vec<FileRow> = self
            .store
            .files(&p.tenant, v.id)
            .await
            .map_err(db("listing files"))?
            .into_iter()
            .filter(|f| glob.as_ref().is_none_or(|g| g.is_match(&f.path)))
            .collect();
        let mut out = v1::GrepResponse::default();
        let mut scanned = 0i64;
        let mut at = 0;
        while at < files.len() {
            let mut end = at;
            let mut bytes = 0i64;
            while end < files.len()
                && end - at < GREP_BATCH_FILES
                && (end == at || bytes + files[end].size <= GREP_BATCH_BYTES)
            {
                bytes += files[end].size;
                end += 1;
            }
            if scanned + bytes > GREP_MAX_SCAN_BYTES {
                out.truncated = true;
                break;
            }
            scanned += bytes;
            let batch = &files[at..end];
            at = end;
            let mut shas: Vec<String> = batch.iter().map(|f| f.sha256.clone()).collect();
            shas.sort();
            shas.dedup();
            let loaded = self.store.blobs().load(p.tenant.as_str(), &shas).await?;
            // The regex runs on the blocking pool: up to GREP_BATCH_BYTES of text per batch.
            let (g, names) = (
                grep.clone(),
                batch
                    .iter()
                    .map(|f| (f.path.clone(), f.sha256.clone()))
                    .collect::<Vec<_>>(),
            );
            let (o, stop) = tokio::task::spawn_blocking(move || {
                grep_batch(&g, mode, limit, &names, &loaded, out)
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "volumes: a grep task failed");
                Error::internal()
            })?;
            out = o;
            if stop {
                break;
            }
        }
        Ok(out)
    }

    /// The changelog, newest first.
    pub async fn list_changes(
        &self,
        p: &Principal,
        r: v1::ListChangesRequest,
    ) -> Result<v1::ListChangesResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let run = r
            .run_id
            .as_deref()
            .map(|s| parse_uuid("run_id", s, "a run id"))
            .transpose()?;
        let limit = page_limit(r.limit, 100, 500)?;
        let changes = self
            .store
            .changes(&p.tenant, v.id, run, r.before_seq, limit)
            .await
            .map_err(db("listing changes"))?;
        let ids: Vec<Uuid> = changes.iter().map(|c| c.id).collect();
        let files = self
            .store
            .change_files(&p.tenant, &ids)
            .await
            .map_err(db("listing changes"))?;
        let mut out: Vec<v1::Change> = changes
            .iter()
            .map(|c| change_to_proto(c, &files, false))
            .collect();
        if r.with_diff {
            // In the order the reply lists them, so the budget goes to the newest changes.
            let mut rows: Vec<&ChangeFileRow> = Vec::with_capacity(files.len());
            for c in &changes {
                rows.extend(files.iter().filter(|f| f.change_id == c.id));
            }
            let owned: Vec<ChangeFileRow> = rows.into_iter().cloned().collect();
            let mut diffs = self
                .diffs_of_rows(&p.tenant, &owned, Cache::default())
                .await?
                .into_iter();
            for c in &mut out {
                for f in &mut c.files {
                    f.diff = diffs.next().unwrap_or_default();
                }
            }
        }
        Ok(v1::ListChangesResponse { changes: out })
    }

    /// Reverts one change, or every change of a run not undone yet, as one new change.
    pub async fn undo(&self, p: &Principal, r: v1::UndoRequest) -> Result<v1::Change, Error> {
        use v1::undo_request::Target;
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let target = match r.target {
            None => {
                return Err(invalid(
                    "change_id",
                    "name what to undo: `change_id` (one change) or `run_id` (every change of a run)"
                        .into(),
                ));
            }
            Some(Target::ChangeId(id)) => {
                UndoTarget::Change(parse_uuid("change_id", &id, "a change id")?)
            }
            Some(Target::RunId(id)) => UndoTarget::Run(parse_uuid("run_id", &id, "a run id")?),
        };
        let meta = Meta {
            op_key: check_op_key(r.op_key)?,
            source: "undo".into(),
            subject: p.subject.clone(),
            ..Meta::default()
        };
        let done = self
            .store
            .mutate(&p.tenant, &v, &meta, &Mutation::Undo(target))
            .await
            .map_err(db("undoing a change"))?;
        Ok(change_to_proto(&done.change, &done.files, done.replayed))
    }

    pub async fn create_snapshot(
        &self,
        p: &Principal,
        r: v1::CreateSnapshotRequest,
    ) -> Result<v1::Snapshot, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        check_text("label", &r.label, MAX_LABEL_BYTES, true)?;
        let s = self
            .store
            .create_snapshot(&p.tenant, &v, &r.label)
            .await
            .map_err(db("making a snapshot"))?;
        Ok(snapshot_to_proto(s))
    }

    pub async fn list_snapshots(
        &self,
        p: &Principal,
        r: v1::ListSnapshotsRequest,
    ) -> Result<v1::ListSnapshotsResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let rows = self
            .store
            .snapshots(&p.tenant, v.id)
            .await
            .map_err(db("listing snapshots"))?;
        Ok(v1::ListSnapshotsResponse {
            snapshots: rows.into_iter().map(snapshot_to_proto).collect(),
        })
    }

    async fn version_index(
        &self,
        tenant: &TenantId,
        v: &VolumeRow,
        field: &str,
        version: &Version,
    ) -> Result<(Index, String), Error> {
        match version {
            Version::Current => {
                let index = index_of(
                    self.store
                        .files(tenant, v.id)
                        .await
                        .map_err(db("listing files"))?,
                );
                let tree = plan::tree_hash(&index);
                Ok((index, tree))
            }
            Version::Snapshot(id) => {
                let (row, index) = self
                    .store
                    .snapshot(tenant, v.id, *id)
                    .await
                    .map_err(db("reading a snapshot"))?
                    .ok_or_else(|| {
                        Error::not_found(format!("no snapshot `{id}` of volume `{}`", v.name))
                            .with_param(field)
                    })?;
                Ok((index, row.tree_hash))
            }
        }
    }

    /// What differs between two versions, in path order.
    pub async fn diff(&self, p: &Principal, r: v1::DiffRequest) -> Result<v1::DiffResponse, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let from = parse_version("from", &r.from)?;
        let to = parse_version("to", &r.to)?;
        let (a, from_tree) = self.version_index(&p.tenant, &v, "from", &from).await?;
        let (b, to_tree) = self.version_index(&p.tenant, &v, "to", &to).await?;
        let planned = plan::restore(&a, &b);
        let diffs = if r.with_diff {
            let pairs: Vec<Pair> = planned
                .files
                .iter()
                .map(|t| Pair {
                    path: t.path.clone(),
                    before: Side {
                        sha: t.before.as_ref().map(|e| e.sha256.clone()),
                        size: t.before.as_ref().map_or(0, |e| e.size),
                    },
                    after: Side {
                        sha: t.after.as_ref().map(|e| e.sha256.clone()),
                        size: t.after.as_ref().map_or(0, |e| e.size),
                    },
                })
                .collect();
            self.diffs(&p.tenant, pairs, Cache::default()).await?
        } else {
            vec![String::new(); planned.files.len()]
        };
        let files = planned
            .files
            .iter()
            .zip(diffs)
            .map(|(t, diff)| v1::FileChange {
                path: t.path.clone(),
                before_sha: t.before.as_ref().map(|e| e.sha256.clone()),
                after_sha: t.after.as_ref().map(|e| e.sha256.clone()),
                size: t.after.as_ref().map_or(0, |e| e.size),
                diff,
            })
            .collect();
        Ok(v1::DiffResponse {
            files,
            from_tree,
            to_tree,
        })
    }

    /// Makes the volume's files those of a snapshot, as one change.
    pub async fn restore(&self, p: &Principal, r: v1::RestoreRequest) -> Result<v1::Change, Error> {
        let v = self.resolve(p, r.volume.as_ref()).await?;
        let snapshot = parse_uuid("snapshot_id", &r.snapshot_id, "a snapshot id")?;
        if let Some(t) = &r.if_tree {
            check_text("if_tree", t, 128, false)?;
        }
        let meta = Meta {
            op_key: check_op_key(r.op_key)?,
            source: "restore".into(),
            subject: p.subject.clone(),
            ..Meta::default()
        };
        let m = Mutation::Restore {
            snapshot,
            if_tree: r.if_tree,
        };
        let done = self
            .store
            .mutate(&p.tenant, &v, &meta, &m)
            .await
            .map_err(db("restoring a snapshot"))?;
        Ok(change_to_proto(&done.change, &done.files, done.replayed))
    }
}

/// Diffs one batch of pairs whose blobs are in `cache` or `loaded`, spending `budget` bytes of
/// diff; returns the diffs and what is left of the budget. Blocking: run it on the blocking pool.
fn diff_batch(
    pairs: &[Pair],
    cache: &HashMap<String, Vec<u8>>,
    loaded: &HashMap<String, Vec<u8>>,
    mut budget: usize,
) -> (Vec<String>, usize) {
    let mut out = Vec::with_capacity(pairs.len());
    for p in pairs {
        if budget == 0 || !p.small() || p.before.sha == p.after.sha {
            out.push(String::new());
            continue;
        }
        let bytes_of = |sha: &Option<String>| -> &[u8] {
            match sha {
                None => &[],
                Some(s) => cache
                    .get(s)
                    .or_else(|| loaded.get(s))
                    .map_or(&[][..], Vec::as_slice),
            }
        };
        let (b, a) = (bytes_of(&p.before.sha), bytes_of(&p.after.sha));
        let text = |x: &[u8]| x.is_empty() || !weft_volumes::text::is_binary(x);
        let (true, true, Ok(bs), Ok(as_)) = (
            text(b),
            text(a),
            std::str::from_utf8(b),
            std::str::from_utf8(a),
        ) else {
            out.push(String::new());
            continue;
        };
        let d = weft_volumes::diff::unified_capped(&p.path, bs, as_, DIFF_MAX_BYTES.min(budget));
        budget = budget.saturating_sub(d.len());
        out.push(d);
    }
    (out, budget)
}

/// Searches one batch of files (`(path, sha256)`, their bytes in `loaded`) into `out`; true
/// when the reply is full (`out.truncated` set). Blocking: run it on the blocking pool.
fn grep_batch(
    grep: &weft_volumes::grep::Grep,
    mode: weft_volumes::grep::GrepMode,
    limit: usize,
    files: &[(String, String)],
    loaded: &HashMap<String, Vec<u8>>,
    mut out: v1::GrepResponse,
) -> (v1::GrepResponse, bool) {
    use weft_volumes::grep::GrepMode;
    for (path, sha) in files {
        let data = loaded.get(sha).map(Vec::as_slice).unwrap_or(&[]);
        // Content mode builds at most the lines the reply still has room for (one more, to
        // tell a full reply from a truncated one).
        let room = limit.saturating_sub(out.lines.len()) + 1;
        let Some(hits) = grep.search_capped(data, room) else {
            out.skipped_binary += 1;
            continue;
        };
        if hits.count == 0 {
            continue;
        }
        match mode {
            GrepMode::Files => {
                if out.files.len() == limit {
                    out.truncated = true;
                    return (out, true);
                }
                out.files.push(path.clone());
            }
            GrepMode::Count => {
                if out.counts.len() == limit {
                    out.truncated = true;
                    return (out, true);
                }
                out.counts.push(v1::GrepCount {
                    path: path.clone(),
                    count: hits.count,
                });
            }
            GrepMode::Content => {
                for l in hits.lines {
                    if out.lines.len() == limit {
                        out.truncated = true;
                        return (out, true);
                    }
                    out.lines.push(v1::GrepLine {
                        path: path.clone(),
                        line: l.line,
                        text: l.text,
                        is_match: l.is_match,
                    });
                }
            }
        }
    }
    (out, false)
}

/// Every `every` until `shutdown`: purges the ephemeral volumes of ended runs (the backstop for
/// an executor that crashed before purging a run's volume), then collects the blobs nothing
/// names any more (see [`VolumeStore::collect_blobs`]).
pub async fn sweep_until(store: VolumeStore, every: Duration, shutdown: CancellationToken) {
    let (store, shutdown) = (&store, &shutdown);
    crate::sweep::every_until(every, shutdown, move || async move {
        let n = crate::sweep::in_batches(SWEEP_BATCH, shutdown, move |b| async move {
            store
                .purge_ended(b)
                .await
                .map_err(|e| e.into_api("purging ended runs' volumes"))
        })
        .await;
        if n > 0 {
            tracing::debug!(purged = n, "volumes: ended runs' volumes purged");
        }
        if shutdown.is_cancelled() {
            return;
        }
        match store.collect_blobs(SWEEP_BATCH).await {
            Ok(n) if n > 0 => tracing::debug!(blobs = n, "volumes: unreferenced blobs collected"),
            Ok(_) => {}
            Err(e) => {
                let _ = e.into_api("collecting unreferenced blobs");
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        let c = encode_cursor("a/b ü");
        assert_eq!(decode_cursor(&c).unwrap_or_default(), "a/b ü");
        for bad in ["", "zz", "pzz", "p00"] {
            let e = decode_cursor(bad).err();
            assert_eq!(e.and_then(|e| e.param).as_deref(), Some("cursor"), "{bad}");
        }
    }

    #[test]
    fn sources_and_modes_are_checked() {
        assert_eq!(check_source("").ok().as_deref(), Some("api"));
        assert_eq!(check_source("Write").ok().as_deref(), Some("Write"));
        for bad in ["undo", "restore", "a b", &"x".repeat(65)] {
            assert!(check_source(bad).is_err(), "{bad}");
        }
        assert_eq!(check_file_mode(0, 0).ok(), Some(0));
        assert_eq!(check_file_mode(0, 493).ok(), Some(493));
        assert!(check_file_mode(0, 0o777).is_err());
        assert_eq!(effective_quota(0, 100), 100);
        assert_eq!(effective_quota(10, 100), 10);
        assert!(is_sha256(&"a".repeat(64)));
        assert!(!is_sha256(&"A".repeat(64)));
    }
}
