//! Volumes: file trees an agent works on (`/v1/volumes…`, `/v1/runs/{id}/volume…`), and the
//! bindings by which agents and runs use them.
//!
//! A volume is a tree of files stored as content-addressed blobs plus an index, owned by the
//! substrate; it has a changelog (one row per mutation), undo, and snapshots (a tree hash).

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::common::{Nullable, Timestamp, Uuid};
use crate::op::{In, Op};

pub use crate::binding::{VolumeBinding, VolumeMode};

// --- the HTTP routes ------------------------------------------------------------------------------

/// A named volume's name: 1-64 characters of a-z, 0-9, `_` and `-`, starting with a letter or
/// digit (`run` is the run tree's own volume, never a named one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct VolumeName(#[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$"))] pub String);

/// A file's path in a volume: relative to its root, `/`-separated, without `.` or `..`
/// segments, at most 1024 bytes. In a URL, its segments are percent-encoded one by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct FilePath(#[schemars(length(min = 1, max = 1024))] pub String);

/// A file's content hash: 64 lowercase hex digits (its sha256).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Sha256(#[schemars(regex(pattern = r"^[0-9a-f]{64}$"))] pub String);

/// A version of a volume's whole tree: `sha256:` and 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TreeHash(#[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))] pub String);

/// A volume's kind: `named` (made with `POST /v1/volumes`) or `ephemeral` (a run tree's own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline, extend("enum" = ["named", "ephemeral"]))]
pub struct VolumeKind(pub String);

/// Raw bytes: a file's content, or a tar archive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl JsonSchema for Bytes {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Bytes".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "binary"})
    }
}

/// The body of `POST /v1/volumes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"name": "notes", "mode": "rw", "quota_bytes": 10_485_760, "description": "the team's shared notes"}))]
pub struct CreateVolume {
    pub name: VolumeName,
    /// `ro` refuses every write, whatever a binding says (default `rw`)
    #[serde(default)]
    pub mode: Option<VolumeMode>,
    /// bytes the volume may hold; absent or 0 = the operator's `volumes.max_volume_bytes`, and
    /// never more than it
    #[schemars(range(min = 0))]
    pub quota_bytes: Option<i64>,
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
}

/// The body of `POST …/undo`: one change, or every change of a run not yet undone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"change_id": "01939f3a-5b2c-7d4e-8f00-3c2b1a000001"}))]
pub struct UndoChange {
    /// the change to revert (one of `change_id` and `run_id`)
    pub change_id: Option<Uuid>,
    /// revert every change this run made that is not undone yet, newest first
    pub run_id: Option<Uuid>,
}

/// The body of `POST …/snapshots`; may be empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {"label": "before the refactor"}))]
pub struct CreateSnapshot {
    #[schemars(length(max = 256))]
    pub label: Option<String>,
}

/// The body of `POST …/snapshots/{snapshot_id}/restore`; may be empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(remote = "Self", deny_unknown_fields)]
#[schemars(extend("example" = {}))]
pub struct RestoreSnapshot {
    /// restore only when the volume's current tree hash is this (409 otherwise), so that no
    /// change made since it was read is lost unseen
    pub if_tree: Option<TreeHash>,
}

crate::objects_only!(CreateVolume, UndoChange, CreateSnapshot, RestoreSnapshot);

/// A volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Volume {
    /// the name (`run:<root run id>` for a run tree's volume)
    pub name: String,
    pub kind: VolumeKind,
    pub mode: VolumeMode,
    pub quota_bytes: i64,
    /// bytes its files hold now
    pub bytes: i64,
    pub files: i64,
    pub tree_hash: TreeHash,
    /// changes so far
    pub seq: i64,
    /// the root run of an ephemeral volume
    pub root_run_id: Nullable<String>,
    pub description: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The answer of `GET /v1/volumes`: the tenant's named volumes, by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeList {
    pub data: Vec<Volume>,
}

/// The answer of `DELETE /v1/volumes/{name}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeDeleted {
    pub name: String,
    pub deleted: bool,
}

/// One file of a volume's index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileEntry {
    pub path: String,
    pub sha256: Sha256,
    pub size: i64,
    /// 420 (0644) or 493 (0755, executable)
    pub mode: u32,
    pub updated_at: Timestamp,
}

/// The answer of `GET …/tree`: a page of files in path order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeTree {
    pub data: Vec<FileEntry>,
    /// pass it back as `cursor` for the next page; null on the last page
    pub next_cursor: Nullable<String>,
    /// the version of the whole tree
    pub tree_hash: TreeHash,
}

/// What one change (or a diff) did to one file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileChange {
    pub path: String,
    /// null where the file did not exist before
    pub before_sha: Nullable<Sha256>,
    /// null where the file does not exist after
    pub after_sha: Nullable<Sha256>,
    /// the size after (0 when deleted)
    pub size: i64,
    /// a unified diff, with `diff=true`, when both sides are text
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One entry of a volume's changelog: a write, a delete, an import, an undo, a restore, or a
/// file tool call of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeChange {
    pub id: Uuid,
    /// the volume's change count after it
    pub seq: i64,
    /// what made it: a tool name (`Write`, `Edit`, `Move`, `Delete`, `Exec`), `http`, `import`,
    /// `undo` or `restore`
    pub source: String,
    pub run_id: Nullable<String>,
    pub tool_use_id: Nullable<String>,
    /// who made it
    pub subject: String,
    pub files: Vec<FileChange>,
    pub tree_before: TreeHash,
    pub tree_after: TreeHash,
    /// the change this one undid
    pub undoes: Nullable<Uuid>,
    /// the undo that reverted this change
    pub undone_by: Nullable<Uuid>,
    pub created_at: Timestamp,
}

/// The answer of `GET …/changes`: the changelog, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChangeList {
    pub data: Vec<VolumeChange>,
    /// pass it as `before_seq` for the next page; null on the last page
    pub next_before_seq: Nullable<i64>,
}

/// The answer of `POST …/import`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeImported {
    /// files in the archive
    pub files: i64,
    /// bytes of their contents
    pub bytes: i64,
    /// the change the import made; null when it changed nothing
    pub change: Nullable<VolumeChange>,
}

/// A snapshot: a version of the volume's tree, kept until the volume is deleted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    pub id: Uuid,
    pub label: String,
    pub tree_hash: TreeHash,
    /// the volume's change count when it was taken
    pub seq: i64,
    pub files: i64,
    pub bytes: i64,
    pub created_at: Timestamp,
}

/// The answer of `GET …/snapshots`: newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotList {
    pub data: Vec<Snapshot>,
}

/// The answer of `GET …/diff`: the files that differ between two versions, in path order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VolumeDiff {
    pub from_tree: TreeHash,
    pub to_tree: TreeHash,
    pub files: Vec<FileChange>,
}

/// `limit` of a tree page.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TreeLimit(#[schemars(range(min = 1, max = 10_000), extend("default" = 1000))] pub u32);

/// `limit` of a changelog page.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct ChangesLimit(#[schemars(range(min = 1, max = 500), extend("default" = 100))] pub u32);

/// A change's `seq` to page before.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct BeforeSeq(#[schemars(range(min = 1, max = i64::MAX))] pub i64);

/// A version to diff: a snapshot id, or `current`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Version(#[schemars(length(min = 1, max = 64))] pub String);

/// A directory to list under (`src/` or `src`; empty = the whole tree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TreePrefix(#[schemars(length(max = 1024))] pub String);

/// Where a tree page starts: the `next_cursor` of the previous page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct TreeCursor(#[schemars(length(min = 1, max = 2048))] pub String);

const ERRORS: [(u16, &str); 2] = [
    (401, "missing, invalid, expired or revoked token"),
    (
        403,
        "the token lacks the scope this route needs (volumes:read to read, volumes:write to change)",
    ),
];
const NO_VOLUME: &str = "no such volume in your tenant, no such file or snapshot in it, or a run you cannot see (another user's, unless you are a tenant admin) or whose volume has not been made yet";
const BAD: (u16, &str) = (
    400,
    "invalid request: the message and `param` name the field, the parameter or the header",
);
const CONFLICT: (u16, &str) = (
    409,
    "a file is not at the version this needs (an undo or a restore over later edits, `if_tree`; later edits are never clobbered), the volume is read-only, or the run has ended",
);
const CAP: (u16, &str) = (
    429,
    "over a cap: the volume's quota, volumes.max_files or the tenant's volumes.max_tenant_bytes",
);
const PRECONDITION: (u16, &str) = (
    412,
    "`If-Match` names another sha256 than the file's (code `precondition_failed`); read the file again",
);
const DOWN: (u16, &str) = (503, "the substrate or the database is unreachable");

/// Which volume a route acts on: a named one, or a run tree's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Named,
    Run,
}

/// A volume route: its tag, its target's path parameter, and its errors.
fn volume(mut op: Op, target: Target, more: &[(u16, &'static str)]) -> Op {
    op = op.tag("volumes");
    // The volume's parameter comes first, before the file's or the snapshot's.
    let named = Op::get("", "");
    let mut named = match target {
        Target::Named => named.param::<VolumeName>(
            In::Path,
            "name",
            true,
            Some("the volume's name"),
            Some("notes".into()),
        ),
        Target::Run => named.param::<crate::runs::RunId>(
            In::Path,
            "id",
            true,
            Some("any run of the tree (the root run's volume is every sub-run's)"),
            None,
        ),
    };
    op.params.splice(0..0, named.params.drain(..));
    for (status, description) in ERRORS {
        op = op.error(status, description);
    }
    op = op.error(404, NO_VOLUME);
    for &(status, description) in more {
        op = op.error(status, description);
    }
    if op.body.is_some() {
        op = op.error(415, "the body is not of the route's media type");
    }
    op.error(DOWN.0, DOWN.1)
}

/// A route on one file (`{path}` after the volume).
fn file(op: Op) -> Op {
    op.param::<FilePath>(
        In::Path,
        "path",
        true,
        Some("the file's path; `/` between directories may be sent as is"),
        Some("notes/todo.md".into()),
    )
}

/// The routes of one volume, under `/v1/volumes/{name}` or `/v1/runs/{id}/volume`.
#[expect(clippy::too_many_lines, reason = "one table of routes")]
fn volume_ops(target: Target) -> Vec<Op> {
    let paths = match target {
        Target::Named => [
            "/v1/volumes/{name}/tree",
            "/v1/volumes/{name}/files/{path}",
            "/v1/volumes/{name}/import",
            "/v1/volumes/{name}/export",
            "/v1/volumes/{name}/changes",
            "/v1/volumes/{name}/undo",
            "/v1/volumes/{name}/snapshots",
            "/v1/volumes/{name}/snapshots/{snapshot_id}/restore",
            "/v1/volumes/{name}/diff",
        ],
        Target::Run => [
            "/v1/runs/{id}/volume/tree",
            "/v1/runs/{id}/volume/files/{path}",
            "/v1/runs/{id}/volume/import",
            "/v1/runs/{id}/volume/export",
            "/v1/runs/{id}/volume/changes",
            "/v1/runs/{id}/volume/undo",
            "/v1/runs/{id}/volume/snapshots",
            "/v1/runs/{id}/volume/snapshots/{snapshot_id}/restore",
            "/v1/runs/{id}/volume/diff",
        ],
    };
    let [
        tree,
        files,
        import,
        export,
        changes,
        undo,
        snapshots,
        restore,
        diff,
    ] = paths;
    let t = target;
    vec![
        volume(
            Op::get(tree, "List a volume's files in path order, a page at a time")
                .describe("Scope: volumes:read. Pass `next_cursor` back as `cursor` for the next page; it is null on the last page. `tree_hash` is the version of the whole tree.")
                .query::<TreePrefix>("prefix", Some("only files under this directory"), Some("notes/".into()))
                .query::<TreeCursor>("cursor", Some("`next_cursor` of the previous page"), None)
                .query::<TreeLimit>("limit", None, Some(1000.into()))
                .ok::<VolumeTree>("a page of files"),
            t,
            &[BAD],
        ),
        volume(
            file(Op::get(files, "Read a file's bytes"))
                .describe("Scope: volumes:read. The answer is the file's bytes, `text/plain; charset=utf-8` when they are text (UTF-8 without NUL), `application/octet-stream` otherwise, with `ETag: \"<sha256>\"`. With `If-None-Match` naming that sha256 (or `*`), a 304 without a body.")
                .param::<String>(In::Header, "If-None-Match", false, Some("the sha256 you hold, quoted or not"), None)
                .answer_in::<Bytes>(200, "application/octet-stream", "the file's bytes")
                .or_in::<String>("text/plain; charset=utf-8")
                .header::<String>("ETag", "the file's sha256, quoted")
                .empty(304, "the file is the one `If-None-Match` names")
                .header::<String>("ETag", "the file's sha256, quoted"),
            t,
            &[BAD],
        ),
        volume(
            file(Op::put(files, "Write a file (its bytes are the body)"))
                .describe("Scope: volumes:write. Creates or replaces the file as one change (source `http`), keeping its mode (0644 for a new file). With `If-Match: <sha256>` the write happens only when the file is at that sha256 (412 otherwise); `If-Match: \"\"` is not accepted, use `If-None-Match: *` to require that the file does not exist yet. A file is at most `volumes.max_file_bytes` (413 above).")
                .param::<String>(In::Header, "If-Match", false, Some("the sha256 the file must have now, quoted or not"), None)
                .param::<String>(In::Header, "If-None-Match", false, Some("`*`: the file must not exist yet (412 otherwise)"), None)
                .body_in::<Bytes>("application/octet-stream")
                .ok::<VolumeChange>("the change; `files[0].after_sha` is the file's new sha256")
                .header::<String>("ETag", "the file's new sha256, quoted"),
            t,
            &[BAD, CONFLICT, PRECONDITION, (413, "the file is larger than volumes.max_file_bytes"), CAP],
        ),
        volume(
            file(Op::delete(files, "Delete a file"))
                .describe("Scope: volumes:write. One change (source `http`). With `If-Match`, only when the file is at that sha256 (412 otherwise).")
                .param::<String>(In::Header, "If-Match", false, Some("the sha256 the file must have now, quoted or not"), None)
                .ok::<VolumeChange>("the change"),
            t,
            &[BAD, CONFLICT, PRECONDITION],
        ),
        volume(
            Op::post(import, "Import a tar archive into the volume")
                .describe("Scope: volumes:write, and volumes:read (the volume is looked up before the archive is read). The body is a tar archive (`application/x-tar`) of regular files and directories; its files are written as one change (source `import`), with their executable bit. With `replace=true`, files of the volume not in the archive are deleted too. Refused as a whole (400 naming `body` and the entry) when an entry is a link or a special file, its name is absolute or has `..`, or the archive has more than `volumes.max_files` files, a file over `volumes.max_file_bytes` or more than `volumes.max_volume_bytes` in all; the body itself may be as large as `volumes.max_volume_bytes` plus the archive's headers.")
                .query::<bool>("replace", Some("delete the volume's files that are not in the archive (default false)"), None)
                .body_in::<Bytes>("application/x-tar")
                .ok::<VolumeImported>("what was imported"),
            t,
            &[BAD, CONFLICT, (413, "the archive is larger than the volume may hold"), CAP],
        ),
        volume(
            Op::get(export, "Export the volume as a tar archive")
                .describe("Scope: volumes:read. Every file, in path order, byte for byte, with mode 0644 or 0755.")
                .answer_in::<Bytes>(200, "application/x-tar", "the archive"),
            t,
            &[BAD, (409, "the volume kept changing while it was read; export it again")],
        ),
        volume(
            Op::get(changes, "The volume's changelog, newest first")
                .describe("Scope: volumes:read. Pass `next_before_seq` back as `before_seq` for the next page. `diff=true` adds a unified diff to each text file of each change.")
                .query::<Uuid>("run_id", Some("only the changes of this run"), None)
                .query::<BeforeSeq>("before_seq", Some("only changes before this seq"), None)
                .query::<ChangesLimit>("limit", None, Some(100.into()))
                .query::<bool>("diff", Some("include unified diffs"), None)
                .ok::<ChangeList>("a page of changes"),
            t,
            &[BAD],
        ),
        volume(
            Op::post(undo, "Undo one change, or every change of a run")
                .describe("Scope: volumes:write. The revert is a new change (source `undo`). Refused with a 409 naming the path when a file the change touched has changed since: a later edit is never clobbered.")
                .body::<UndoChange>()
                .ok::<VolumeChange>("the undo"),
            t,
            &[BAD, CONFLICT, (413, "body over the size cap"), CAP],
        ),
        volume(
            crate::runs::optional_body(
                Op::post(snapshots, "Take a snapshot of the volume")
                    .describe("Scope: volumes:write. A snapshot names the current tree (no file is copied). The body may be empty.")
                    .body::<CreateSnapshot>(),
            )
            .answer::<Snapshot>(201, "the snapshot"),
            t,
            &[BAD, (413, "body over the size cap")],
        ),
        volume(
            Op::get(snapshots, "The volume's snapshots, newest first")
                .describe("Scope: volumes:read.")
                .ok::<SnapshotList>("the snapshots"),
            t,
            &[BAD],
        ),
        volume(
            crate::runs::optional_body(
                Op::post(restore, "Restore a snapshot")
                    .describe("Scope: volumes:write. Makes the volume's files those of the snapshot, as one change (source `restore`). With `if_tree`, refused (409) when the volume's tree is no longer that version. The body may be empty.")
                    .path::<Uuid>("snapshot_id", Some("01939f3a-5b2c-7d4e-8f00-3c2b1a000002".into()))
                    .body::<RestoreSnapshot>(),
            )
            .ok::<VolumeChange>("the restore"),
            t,
            &[BAD, CONFLICT, (413, "body over the size cap"), CAP],
        ),
        volume(
            Op::get(diff, "What differs between two versions of the volume")
                .describe("Scope: volumes:read. A version is a snapshot id or `current`. `diff=true` adds a unified diff to each text file.")
                .param::<Version>(In::Query, "from", true, Some("a snapshot id, or `current`"), Some("current".into()))
                .param::<Version>(In::Query, "to", true, Some("a snapshot id, or `current`"), Some("current".into()))
                .query::<bool>("diff", Some("include unified diffs"), None)
                .ok::<VolumeDiff>("the files that differ"),
            t,
            &[BAD],
        ),
    ]
}

pub fn ops() -> Vec<Op> {
    let mut out = vec![
        volume_list(
            Op::get("/v1/volumes", "The tenant's named volumes")
                .describe("Scope: volumes:read.")
                .ok::<VolumeList>("the volumes, by name"),
        ),
        volume_list(
            Op::post("/v1/volumes", "Make a named volume, or change its mode, quota and description")
                .describe("Scope: volumes:write. Declarative: an existing volume of that name keeps its files and takes the given mode, quota and description. A quota below the bytes the volume holds now is a 409. The name `run` is the run tree's own volume, never a named one.")
                .body::<CreateVolume>()
                .ok::<Volume>("the volume existed; it is as given")
                .answer::<Volume>(201, "the volume was made"),
        ),
        volume(
            Op::get("/v1/volumes/{name}", "A named volume")
                .describe("Scope: volumes:read.")
                .ok::<Volume>("the volume"),
            Target::Named,
            &[BAD],
        ),
        volume(
            Op::delete("/v1/volumes/{name}", "Delete a named volume with its files, history and snapshots")
                .describe("Scope: volumes:write.")
                .ok::<VolumeDeleted>("deleted"),
            Target::Named,
            &[BAD],
        ),
    ];
    out.extend(volume_ops(Target::Named));
    out.push(volume(
        Op::get("/v1/runs/{id}/volume", "A run tree's own volume")
            .describe("Scope: volumes:read. The volume of the tree's root run: one volume shared by every run of the tree. A 404 says so when none has been made yet (it is made by the first write).")
            .ok::<Volume>("the volume"),
        Target::Run,
        &[BAD],
    ));
    out.extend(volume_ops(Target::Run));
    out
}

/// `/v1/volumes` (no volume in the path).
fn volume_list(mut op: Op) -> Op {
    op = op.tag("volumes");
    for (status, description) in ERRORS {
        op = op.error(status, description);
    }
    if op.body.is_some() {
        op = op
            .error(BAD.0, BAD.1)
            .error(
                409,
                "the quota is below what the volume holds, or the tenant's volumes are at a cap",
            )
            .error(413, "body over the size cap")
            .error(415, "body is not JSON");
    }
    op.error(DOWN.0, DOWN.1)
}
