//! The `Exec` tool: a shell command over a checkout of one of the run's volumes, in a
//! bubblewrap sandbox ([`sandbox`]), its changes synced back as one change ([`checkout`]).
//!
//! Off unless the operator sets `volumes.exec.enabled` (and, like every tool, only for agents
//! that list `Exec`). A call:
//! 1. resolves the volume as the file tools do (`volume`, else the run's default binding); a
//!    `ro` binding or a `ro` volume is mounted read-only and nothing is synced back;
//! 2. materializes it: the whole index (`Tree`, every page) and the blobs (`GetBlobs`, in
//!    batches) written into a fresh scratch directory under `volumes.exec.scratch_dir` (or the
//!    system's temporary directory), owned by the sandbox's user;
//! 3. runs `sh -c <command>` with the checkout at `/work` ([`sandbox::Sandbox`]);
//! 4. walks the checkout ([`checkout::scan`]): regular files only, each compared by sha256 with
//!    the index; new and changed files become puts and missing ones deletes, each with
//!    `if_match` = the sha256 the checkout was made from, so a file changed in the volume while
//!    the command ran is a conflict (reported; nothing synced) and never clobbered;
//! 5. applies them as ONE change (`Apply`, source `Exec`, keyed `<run_id>:<tool_use_id>`), whose
//!    diff goes to the answer and to the transcript (`file_changed`);
//! 6. removes the scratch directory, whatever happened.
//!
//! A command may have run before a crash, and running it again could do its work twice (it is
//! any command), so the call is `Effectful`: a call that never finished is "outcome unknown"
//! on resume. The sync itself happens at most once per call (the `op_key`).

pub mod checkout;
pub mod sandbox;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use weft_api::tools::{ExecInput, input_schema};
use weft_config::VolumesConfig;
use weft_core::message::ToolSpec;
use weft_core::volume::VolumeMode;
use weft_proto::v1;

use self::checkout::{Indexed, Op, Scan, ScanCaps, Scratch};
use self::sandbox::{Limits, Outcome, Sandbox, SandboxUser};
use super::files::{self, Fail, Target};
use super::{Abort, Field, Problem, Reading, SideEffect, Tool, ToolCtx, ToolOutcome, ToolOutput};

/// The timeout of a call that names none, seconds (at most `volumes.exec.max_timeout_s`).
pub const DEFAULT_TIMEOUT_S: u64 = 60;

/// The longest command accepted, bytes (the kernel takes one argument of at most 128 KiB).
pub const MAX_COMMAND_BYTES: usize = 100_000;

/// Blobs fetched or stored per request: at most this many bytes (one larger blob goes alone).
const BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Blobs per request at most.
const BATCH_BLOBS: usize = 256;

/// Files smaller than this go inline in the `Apply`, while the inline total stays under
/// [`INLINE_TOTAL_BYTES`]; the others are stored first with `PutBlobs`.
const INLINE_FILE_BYTES: usize = 256 * 1024;
const INLINE_TOTAL_BYTES: usize = 4 * 1024 * 1024;

/// What the model is told when the operator has not turned `Exec` on.
pub const DISABLED: &str = "Exec is turned off on this deployment (the operator has not set \
    volumes.exec.enabled = true), so no command can run; work on the files with the file tools \
    (Read, Write, Edit, Glob, Grep, Move, Delete, List) instead";

/// `Exec`.
pub struct Exec {
    cfg: VolumesConfig,
}

impl Exec {
    /// The tool under the operator's `[volumes]` section (`exec` for the sandbox, the caps for
    /// the sync).
    pub fn new(cfg: &VolumesConfig) -> Self {
        Self { cfg: cfg.clone() }
    }

    /// Where scratch checkouts go.
    fn scratch_base(&self) -> PathBuf {
        self.cfg
            .exec
            .scratch_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir)
    }
}

impl Tool for Exec {
    fn name(&self) -> &str {
        "Exec"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Runs a shell command (sh -c) in a sandbox whose working directory (/work) is a \
                 checkout of a volume: the command may read and change its files, and the \
                 files it creates, changes or deletes go back to the volume as one change when \
                 it ends (symlinks and special files are not synced). No network; the rest of \
                 the file system is read-only, /tmp is private and empty. Limits: timeout_s \
                 (default {DEFAULT_TIMEOUT_S}, at most {}), CPU, memory, processes, file size, \
                 output. Answers exit_code, stdout, stderr and the changed files with diffs.",
                self.cfg.exec.max_timeout_s
            ),
            parameters: input_schema::<ExecInput>(),
        }
    }

    fn side_effect(&self, _input: &Value) -> SideEffect {
        // A command that may have run cannot be run again safely.
        SideEffect::Effectful
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolCtx<'a>,
        input: &'a Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, Abort>> {
        Box::pin(async move { files::finish(self.exec(ctx, input).await).map(ToolOutcome::Done) })
    }
}

/// `Exec`'s messages.
fn words(field: &str, problem: &Problem<'_>) -> Option<String> {
    Some(match (field, problem) {
        ("command", Problem::Missing | Problem::Invalid { .. }) => {
            "`command` (a shell command, as a string) is required".into()
        }
        ("timeout_s", Problem::Invalid { .. }) => {
            "`timeout_s` must be a whole number of seconds from 1 up".into()
        }
        _ => return None,
    })
}

/// Reads a call's input and checks it against the operator's `max_timeout_s`; the timeout
/// chosen.
pub(crate) fn read(input: &Value, max_timeout_s: u64) -> Result<(ExecInput, u64), String> {
    use Field::{Need, Opt};
    let input: ExecInput =
        Reading::new(&[Need("command"), Opt("timeout_s"), Opt("volume")], words).read(input)?;
    if input.command.trim().is_empty() {
        return Err("`command` is empty; give the shell command to run".into());
    }
    if input.command.len() > MAX_COMMAND_BYTES {
        return Err(format!(
            "`command` is {} bytes; at most {MAX_COMMAND_BYTES} — write a script with Write and run it",
            input.command.len()
        ));
    }
    if input.command.contains('\0') {
        return Err("`command` must not contain NUL".into());
    }
    let timeout_s = match input.timeout_s {
        None => DEFAULT_TIMEOUT_S.min(max_timeout_s),
        Some(0) => return Err("`timeout_s` must be a whole number of seconds from 1 up".into()),
        Some(t) if t > max_timeout_s => {
            return Err(format!(
                "`timeout_s` must be at most {max_timeout_s} (this deployment's volumes.exec.max_timeout_s)"
            ));
        }
        Some(t) => t,
    };
    Ok((input, timeout_s))
}

/// One file of the change as the model sees it.
#[derive(Debug, Serialize)]
struct ChangedOut {
    path: String,
    /// `None` when the command deleted it.
    sha256: Option<String>,
    diff: String,
}

/// What a call answers.
#[derive(Debug, Serialize)]
struct Answer {
    /// The binding the command ran over.
    volume: String,
    /// The checkout was mounted read-only (a `ro` binding or volume): nothing was synced.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    read_only: bool,
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    timed_out: bool,
    /// The limit the command ran into, when it shows.
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<String>,
    stdout: String,
    stderr: String,
    stdout_truncated_bytes: u64,
    stderr_truncated_bytes: u64,
    changed: Vec<ChangedOut>,
    refused: Vec<String>,
    /// The change the files went back as.
    #[serde(skip_serializing_if = "Option::is_none")]
    change_id: Option<String>,
    /// Why nothing was synced (a conflict, a cap).
    #[serde(skip_serializing_if = "Option::is_none")]
    sync_error: Option<String>,
    /// This call had synced before (a resumed run): the change is the one made then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}

impl Exec {
    async fn exec(&self, ctx: &ToolCtx<'_>, input: &Value) -> Result<ToolOutput, Fail> {
        let exec = &self.cfg.exec;
        if !exec.enabled {
            return Err(Fail::from(DISABLED.to_owned()));
        }
        let (input, timeout_s) = read(input, exec.max_timeout_s)?;
        let target = files::target(ctx, input.volume.as_deref(), false)?;
        let read_only = target.mode == VolumeMode::Ro || volume_is_ro(ctx, &target).await?;
        let features = sandbox::probe(&exec.bwrap)
            .await
            .map_err(|e| Fail::from(e.to_string()))?;
        let user = SandboxUser::for_this_process();
        let owner = user.uid();
        let base = self.scratch_base();
        let stale_after = Duration::from_secs(exec.max_timeout_s.saturating_mul(2) + 600);
        let scratch = blocking(move || {
            checkout::sweep_stale(&base, stale_after);
            Scratch::create(&base, owner).map_err(|e| e.to_string())
        })
        .await
        .and_then(|r| r)
        .map_err(|e| {
            Fail::from(format!(
                "cannot make a scratch directory for the command: {e}; the operator must make \
                 volumes.exec.scratch_dir writable"
            ))
        })?;
        // From here on `scratch` is removed on every path out (its drop; the last one on the
        // blocking pool).
        let result = self
            .checked_out(
                ctx,
                &target,
                read_only,
                features,
                &user,
                &scratch,
                &input.command,
                timeout_s,
            )
            .await;
        let _ = tokio::task::spawn_blocking(move || drop(scratch)).await;
        drop(user);
        result
    }

    #[allow(clippy::too_many_arguments, reason = "one call's state, passed once")]
    async fn checked_out(
        &self,
        ctx: &ToolCtx<'_>,
        target: &Target,
        read_only: bool,
        features: sandbox::Features,
        user: &SandboxUser,
        scratch: &Scratch,
        command: &str,
        timeout_s: u64,
    ) -> Result<ToolOutput, Fail> {
        let index = materialize(ctx, target, scratch, user.uid()).await?;
        let base = self.scratch_base();
        let sandbox = Sandbox {
            bwrap: self.cfg.exec.bwrap.clone(),
            features,
            checkout: scratch.path().to_owned(),
            read_only,
            hide: [Some(base), self.cfg.blobs.dir.clone()]
                .into_iter()
                .flatten()
                .collect(),
            uid: user.uid(),
            limits: Limits::new(&self.cfg.exec, timeout_s),
        };
        let outcome = sandbox
            .run(command)
            .await
            .map_err(|e| Fail::from(e.to_string()))?;
        let mut answer = answer(&target.name, read_only, &outcome, &self.cfg);
        if read_only {
            return Ok(ToolOutput::json(&answer));
        }
        let caps = ScanCaps {
            max_file_bytes: self.cfg.max_file_bytes,
            max_files: self.cfg.max_files,
            max_total_bytes: self.cfg.max_volume_bytes,
        };
        let root = scratch.path().to_owned();
        let scan = blocking(move || checkout::scan(&root, &index, &caps)).await;
        let scan = match scan {
            Ok(Ok(scan)) => scan,
            Ok(Err(e)) => {
                answer.sync_error = Some(e.to_string());
                return Ok(error_json(&answer));
            }
            Err(e) => return Err(Fail::from(format!("cannot read the checkout: {e}"))),
        };
        let Scan {
            ops,
            mut refused,
            refused_more,
        } = scan;
        if refused_more > 0 {
            refused.push(format!("… and {refused_more} more refused"));
        }
        answer.refused = refused;
        if ops.is_empty() {
            return Ok(ToolOutput::json(&answer));
        }
        match sync(ctx, target, ops).await {
            Ok(change) => {
                answer.change_id = Some(change.id.clone());
                answer.replayed = change.replayed;
                answer.changed = change
                    .files
                    .iter()
                    .map(|f| ChangedOut {
                        path: f.path.clone(),
                        sha256: f.after_sha.clone(),
                        diff: files::capped(&f.diff),
                    })
                    .collect();
                Ok(ToolOutput::json(&answer))
            }
            Err(status) => {
                let said = match super::substrate_error(&status) {
                    Ok(out) => out.text,
                    Err(abort) => return Err(Fail::Abort(abort)),
                };
                answer.sync_error = Some(if status.code() == tonic::Code::FailedPrecondition {
                    format!(
                        "{said} — the volume changed while the command ran; nothing of the \
                         command's work was synced (the volume keeps the other change); read \
                         the files again and rerun the command"
                    )
                } else {
                    format!("{said}; nothing of the command's work was synced")
                });
                Ok(error_json(&answer))
            }
        }
    }
}

/// The answer as an error result (the command ran, its work did not come back).
fn error_json(answer: &Answer) -> ToolOutput {
    let mut out = ToolOutput::json(answer);
    out.is_error = true;
    out
}

/// The answer's command part.
fn answer(volume: &str, read_only: bool, o: &Outcome, cfg: &VolumesConfig) -> Answer {
    let e = &cfg.exec;
    let limit = o.limit_hit().map(|l| match l {
        "timeout_s" => format!("killed after {} s (timeout_s)", o.elapsed.as_secs()),
        "cpu_seconds" => format!("CPU time limit of {} s reached (SIGXCPU)", e.cpu_seconds),
        "max_file_bytes" => format!(
            "a file may not grow past {} bytes (SIGXFSZ)",
            e.max_file_bytes
        ),
        "max_processes" => format!(
            "the sandbox may run at most {} processes; a fork was refused",
            e.max_processes
        ),
        "memory_bytes" => format!(
            "a process may map at most {} bytes; an allocation was refused",
            e.memory_bytes
        ),
        other => other.to_owned(),
    });
    Answer {
        volume: volume.to_owned(),
        read_only,
        exit_code: o.exit_code,
        signal: o.signal,
        timed_out: o.timed_out,
        limit,
        stdout: o.stdout.text(),
        stderr: o.stderr.text(),
        stdout_truncated_bytes: o.stdout.dropped,
        stderr_truncated_bytes: o.stderr.dropped,
        changed: vec![],
        refused: vec![],
        change_id: None,
        sync_error: None,
        replayed: false,
    }
}

/// Runs `f` on the blocking pool (an error: the task panicked or was cancelled).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())
}

/// Whether the volume itself is `ro` (a named volume's definition says so). A run's volume not
/// made yet is writable (the sync makes it).
async fn volume_is_ro(ctx: &ToolCtx<'_>, target: &Target) -> Result<bool, Fail> {
    let msg = target.volume.clone();
    match files::rpc(ctx, msg, |mut c, r| async move { c.get_volume(r).await }).await {
        Ok(v) => Ok(v.mode == "ro"),
        Err(s) if s.code() == tonic::Code::NotFound && target.volume.create => Ok(false),
        Err(s) => Err(Fail::from(s)),
    }
}

/// Writes the target's files into `scratch`; the index they came from.
async fn materialize(
    ctx: &ToolCtx<'_>,
    target: &Target,
    scratch: &Scratch,
    owner: Option<u32>,
) -> Result<BTreeMap<String, Indexed>, Fail> {
    let entries = tree(ctx, target).await?;
    let mut index = BTreeMap::new();
    // Paths by content, so that a blob shared by several files is fetched once.
    let mut by_sha: BTreeMap<String, (u64, Vec<(String, u32)>)> = BTreeMap::new();
    for e in entries {
        let mode = if e.mode & 0o111 != 0 { 0o755 } else { 0o644 };
        index.insert(
            e.path.clone(),
            Indexed {
                sha256: e.sha256.clone(),
                mode,
            },
        );
        let size = u64::try_from(e.size).unwrap_or(0);
        by_sha
            .entry(e.sha256)
            .or_insert_with(|| (size, Vec::new()))
            .1
            .push((e.path, mode));
    }
    let shas: Vec<(String, u64)> = by_sha.iter().map(|(s, (n, _))| (s.clone(), *n)).collect();
    for batch in batches(&shas, BATCH_BYTES) {
        let msg = v1::GetBlobsRequest {
            volume: Some(target.volume.clone()),
            sha256: batch.clone(),
        };
        let got = files::rpc(ctx, msg, |mut c, r| async move { c.get_blobs(r).await }).await?;
        let mut writes = Vec::new();
        for blob in got.blobs {
            if weft_volumes::sha256_hex(&blob.content) != blob.sha256 {
                return Err(Fail::from(format!(
                    "the substrate sent blob {} with other content; try again",
                    blob.sha256
                )));
            }
            if let Some((_, paths)) = by_sha.remove(&blob.sha256) {
                writes.push((paths, blob.content));
            }
        }
        if let Some(missing) = batch.iter().find(|s| by_sha.contains_key(*s)) {
            return Err(Fail::from(format!(
                "the substrate did not send blob {missing} of the volume; try again"
            )));
        }
        let root = scratch.path().to_owned();
        blocking(move || {
            for (paths, content) in writes {
                for (path, mode) in paths {
                    checkout::write_file(&root, &path, &content, mode, owner)?;
                }
            }
            Ok::<(), std::io::Error>(())
        })
        .await
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(|e| Fail::from(format!("cannot write the checkout: {e}")))?;
    }
    Ok(index)
}

/// The whole index of the target, every page.
async fn tree(ctx: &ToolCtx<'_>, target: &Target) -> Result<Vec<v1::FileEntry>, Fail> {
    let mut files = Vec::new();
    let mut cursor = None;
    loop {
        let msg = v1::TreeRequest {
            volume: Some(target.volume.clone()),
            prefix: String::new(),
            cursor: cursor.take(),
            limit: 10_000,
        };
        let page = match files::rpc(ctx, msg, |mut c, r| async move { c.tree(r).await }).await {
            Ok(p) => p,
            // A run's volume not made yet: empty.
            Err(s) if s.code() == tonic::Code::NotFound && target.volume.create => {
                return Ok(files);
            }
            Err(s) => return Err(Fail::from(s)),
        };
        files.extend(page.files);
        match page.next_cursor {
            Some(c) if !c.is_empty() => cursor = Some(c),
            _ => return Ok(files),
        }
    }
}

/// Groups `items` (sha, size) into requests of at most [`BATCH_BLOBS`] blobs and `max_bytes`
/// (a larger blob alone).
fn batches(items: &[(String, u64)], max_bytes: u64) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut cur: Vec<String> = Vec::new();
    let mut bytes = 0u64;
    for (sha, size) in items {
        if !cur.is_empty() && (bytes + size > max_bytes || cur.len() >= BATCH_BLOBS) {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        cur.push(sha.clone());
        bytes += size;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Stores the large contents of `ops` as blobs, then applies them all as one change.
async fn sync(
    ctx: &ToolCtx<'_>,
    target: &Target,
    ops: Vec<Op>,
) -> Result<v1::Change, tonic::Status> {
    let mut inline_total = 0usize;
    let mut blobs: Vec<v1::Blob> = Vec::new();
    let mut file_ops = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            Op::Put {
                path,
                content,
                sha256,
                mode,
                if_match,
            } => {
                let inline = content.len() < INLINE_FILE_BYTES
                    && inline_total + content.len() <= INLINE_TOTAL_BYTES;
                let body = if inline {
                    inline_total += content.len();
                    v1::put_file::Body::Content(content)
                } else {
                    if !blobs.iter().any(|b| b.sha256 == sha256) {
                        blobs.push(v1::Blob {
                            sha256: sha256.clone(),
                            content,
                        });
                    }
                    v1::put_file::Body::Sha256(sha256)
                };
                file_ops.push(v1::FileOp {
                    path,
                    if_match: Some(if_match),
                    op: Some(v1::file_op::Op::Put(v1::PutFile {
                        body: Some(body),
                        mode,
                    })),
                });
            }
            Op::Delete { path, if_match } => file_ops.push(v1::FileOp {
                path,
                if_match: Some(if_match),
                op: Some(v1::file_op::Op::Delete(v1::DeleteFile {})),
            }),
        }
    }
    while !blobs.is_empty() {
        let mut bytes = 0usize;
        let take = blobs
            .iter()
            .take_while(|b| {
                bytes += b.content.len();
                bytes <= usize::try_from(BATCH_BYTES).unwrap_or(usize::MAX)
            })
            .count()
            .clamp(1, BATCH_BLOBS);
        let batch: Vec<v1::Blob> = blobs.drain(..take.min(blobs.len())).collect();
        let msg = v1::PutBlobsRequest { blobs: batch };
        files::rpc(ctx, msg, |mut c, r| async move { c.put_blobs(r).await }).await?;
    }
    files::apply_status(ctx, "Exec", target, file_ops).await
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "unit tests: a panic is how a test fails"
    )]

    use serde_json::json;

    use super::*;

    #[test]
    fn input_is_read_and_checked() {
        let (i, t) = read(&json!({"command": "ls"}), 300).unwrap();
        assert_eq!((i.command.as_str(), t, i.volume), ("ls", 60, None));
        let (_, t) = read(&json!({"command": "ls"}), 10).unwrap();
        assert_eq!(t, 10);
        let (i, t) = read(
            &json!({"command": "ls", "timeout_s": 5, "volume": "docs"}),
            300,
        )
        .unwrap();
        assert_eq!((t, i.volume.as_deref()), (5, Some("docs")));
        let err = |v: Value| read(&v, 300).unwrap_err();
        assert_eq!(
            err(json!({})),
            "`command` (a shell command, as a string) is required"
        );
        assert_eq!(
            err(json!({"command": 5})),
            "`command` (a shell command, as a string) is required"
        );
        assert_eq!(
            err(json!({"command": "  "})),
            "`command` is empty; give the shell command to run"
        );
        assert_eq!(
            err(json!({"command": "ls", "timeout_s": -1})),
            "`timeout_s` must be a whole number of seconds from 1 up"
        );
        assert_eq!(
            err(json!({"command": "ls", "timeout_s": 0})),
            "`timeout_s` must be a whole number of seconds from 1 up"
        );
        assert_eq!(
            err(json!({"command": "ls", "timeout_s": 301})),
            "`timeout_s` must be at most 300 (this deployment's volumes.exec.max_timeout_s)"
        );
        assert!(err(json!({"command": "x".repeat(MAX_COMMAND_BYTES + 1)})).contains("at most"));
    }

    #[test]
    fn blobs_are_fetched_in_bounded_batches() {
        let items: Vec<(String, u64)> = (0..5).map(|i| (format!("s{i}"), 4)).collect();
        assert_eq!(
            batches(&items, 8),
            vec![vec!["s0", "s1"], vec!["s2", "s3"], vec!["s4"]]
        );
        let big = vec![("a".to_owned(), 100), ("b".to_owned(), 1)];
        assert_eq!(batches(&big, 8), vec![vec!["a"], vec!["b"]]);
        let many: Vec<(String, u64)> = (0..300).map(|i| (format!("s{i}"), 0)).collect();
        let b = batches(&many, 8);
        assert_eq!((b.len(), b[0].len()), (2, BATCH_BLOBS));
    }

    #[test]
    fn the_tool_is_effectful_and_its_schema_is_the_inputs() {
        let t = Exec::new(&VolumesConfig::default());
        assert_eq!(
            t.side_effect(&json!({"command": "ls"})),
            SideEffect::Effectful
        );
        assert_eq!(t.spec().parameters, input_schema::<ExecInput>());
        assert_eq!(t.name(), "Exec");
    }
}
