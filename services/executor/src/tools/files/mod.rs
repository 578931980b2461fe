//! The file tools (`Read`, `Write`, `Edit`, `Glob`, `Grep`, `Move`, `Delete`, `List`): a run's
//! volumes, served by the substrate's `weft.v1.Volumes`, from inside the run. One file per tool;
//! this module holds what they share: which volume a call means ([`resolve`]), paths checked
//! before any call ([`clean`]), the calls themselves ([`rpc`], [`apply`]) and the answer of a
//! mutation ([`Changed`]).
//!
//! A call reaches only the volumes the run's spec binds (`RunSpec.volumes`: the agent's
//! bindings narrowed by the caller and, for a sub-run, by its parent — `ro` wins). A call names
//! one by its binding name (`volume`), or gets the run's default. The binding `run` is the run
//! tree's ephemeral volume: the substrate resolves a run id to its root's volume and makes it on
//! first use. A `ro` binding refuses every mutation here, before the substrate is asked (the
//! substrate refuses writes to a `ro` volume on its own).
//!
//! Every mutation is one `Apply` carrying the call's exactly-once key `<run_id>:<tool_use_id>`:
//! the substrate records it with the change, in the change's transaction, and a repeat of the
//! call — a run resumed after a crash, on any executor — gets the recorded change back
//! (`replayed`) and writes nothing. So mutations are `Idempotent` and reads `ReadOnly`. The
//! change's diff goes to the model in the result and to the transcript as a `file_changed` event.
//!
//! The volumes client is built per call on the executor's substrate transport (as the `Memory`
//! tool builds its client): a clone of the channel, no connection of its own.

pub mod delete;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod list;
pub mod move_file;
pub mod read;
pub mod write;

use serde::Serialize;
use serde_json::Value;
use weft_core::run::{ChangedFile, FileChanged, RunEvent};
use weft_core::volume::{RUN_VOLUME, VolumeBinding, VolumeMode, default_of};
use weft_core::{Principal, RunId};
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;
use weft_proto::v1::volumes_client::VolumesClient;

use super::{
    Abort, Field, Reading, ToolCtx, ToolOutput, common_words, substrate_error, with_retry,
};

/// The most of a diff a result or a `file_changed` event carries, per file.
pub(crate) const MAX_DIFF_BYTES: usize = 32 * 1024;

/// How a file tool's call went wrong: something the model is told, or the run abandoned here.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The call's error result.
    Say(ToolOutput),
    Abort(Abort),
}

impl From<String> for Fail {
    fn from(message: String) -> Self {
        Self::Say(ToolOutput::error(message))
    }
}

impl From<tonic::Status> for Fail {
    fn from(s: tonic::Status) -> Self {
        match substrate_error(&s) {
            Ok(out) => Self::Say(out),
            Err(abort) => Self::Abort(abort),
        }
    }
}

/// The outcome of a file tool's work as the call's result.
pub(crate) fn finish(r: Result<ToolOutput, Fail>) -> Result<ToolOutput, Abort> {
    match r {
        Ok(out) | Err(Fail::Say(out)) => Ok(out),
        Err(Fail::Abort(a)) => Err(a),
    }
}

/// Reads a call's input (`fields` in the order their problems are reported).
pub(crate) fn read_input<T: serde::de::DeserializeOwned>(
    input: &Value,
    fields: &[Field],
) -> Result<T, Fail> {
    Reading::new(fields, common_words)
        .read(input)
        .map_err(Fail::from)
}

/// The volume a call works on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    /// The binding's name (`run` for the run tree's volume).
    pub name: String,
    pub mode: VolumeMode,
    /// How the substrate is told which volume.
    pub volume: v1::VolumeRef,
}

impl Target {
    /// Refuses a mutation of a volume bound read-only.
    pub(crate) fn writable(&self) -> Result<(), String> {
        match self.mode {
            VolumeMode::Rw => Ok(()),
            VolumeMode::Ro => Err(format!(
                "volume `{}` is bound read-only to this run",
                self.name
            )),
        }
    }
}

/// What a call may name for the run's default binding (besides naming none).
const DEFAULT_NAME: &str = "default";

/// The volume `named` (or, when `None` or `default`, the default one) among the run's
/// `bindings`.
pub(crate) fn resolve(
    bindings: &[VolumeBinding],
    run: RunId,
    named: Option<&str>,
) -> Result<Target, String> {
    let binding = match named {
        _ if bindings.is_empty() => {
            return Err(
                "no volume is bound to this run; the agent definition's `volumes` must \
                bind one (e.g. {\"name\": \"run\"})"
                    .into(),
            );
        }
        // `default` names the default binding unless a volume of that name is bound: models
        // fill in optional fields, and this is the word they reach for.
        Some(DEFAULT_NAME) if !bindings.iter().any(|b| b.name == DEFAULT_NAME) => {
            default_of(bindings).ok_or("no volume is bound to this run")?
        }
        Some(name) => bindings.iter().find(|b| b.name == name).ok_or_else(|| {
            let bound: Vec<&str> = bindings.iter().map(|b| b.name.as_str()).collect();
            format!("volume `{name}` is not bound; bound: {}", bound.join(", "))
        })?,
        None => default_of(bindings).ok_or("no volume is bound to this run")?,
    };
    let volume = if binding.name == RUN_VOLUME {
        v1::VolumeRef {
            target: Some(v1::volume_ref::Target::RunId(run.to_string())),
            create: true,
        }
    } else {
        v1::VolumeRef {
            target: Some(v1::volume_ref::Target::Name(binding.name.clone())),
            create: false,
        }
    };
    Ok(Target {
        name: binding.name.clone(),
        mode: binding.mode,
        volume,
    })
}

/// The volume of a call's `volume` field, for a mutation when `write`.
pub(crate) fn target(ctx: &ToolCtx<'_>, named: Option<&str>, write: bool) -> Result<Target, Fail> {
    let t = resolve(&ctx.spec().volumes, ctx.run_id(), named)?;
    if write {
        t.writable()?;
    }
    Ok(t)
}

/// A path of the call's input (`field`), checked and normalized before any call.
pub(crate) fn clean(field: &str, path: &str) -> Result<String, Fail> {
    weft_volumes::path::clean(field, path).map_err(|e| Fail::from(e.to_string()))
}

/// A volumes client on the substrate transport.
pub(crate) fn client(t: GrpcTransport) -> VolumesClient<GrpcTransport> {
    weft_proto::transport::volumes_client(t)
}

/// One `Volumes` call as the run's principal, retried while the substrate is unavailable.
pub(crate) async fn rpc<M, R, F, Fut>(
    ctx: &ToolCtx<'_>,
    msg: M,
    call: F,
) -> Result<R, tonic::Status>
where
    M: Clone,
    F: Fn(VolumesClient<GrpcTransport>, tonic::Request<M>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
{
    let client = client(ctx.substrate_transport());
    with_retry(|| {
        let req = ctx
            .internal(msg.clone())
            .map_err(|e| tonic::Status::internal(e.message));
        let client = client.clone();
        let call = &call;
        async move { call(client, req?).await }
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Applies `ops` to the target as this call's one change (exactly once: keyed by the call),
/// and records it in the transcript as a `file_changed` event.
pub(crate) async fn apply(
    ctx: &ToolCtx<'_>,
    tool: &str,
    target: &Target,
    ops: Vec<v1::FileOp>,
) -> Result<v1::Change, Fail> {
    Ok(apply_status(ctx, tool, target, ops).await?)
}

/// [`apply`], a refusal as the substrate's status.
pub(crate) async fn apply_status(
    ctx: &ToolCtx<'_>,
    tool: &str,
    target: &Target,
    ops: Vec<v1::FileOp>,
) -> Result<v1::Change, tonic::Status> {
    let msg = v1::ApplyRequest {
        volume: Some(target.volume.clone()),
        ops,
        op_key: Some(ctx.exactly_once_key()),
        run_id: Some(ctx.run_id().to_string()),
        tool_use_id: Some(ctx.tool_use_id().to_owned()),
        source: tool.to_owned(),
        with_diff: true,
        replace: false,
    };
    let change = rpc(ctx, msg, |mut c, r| async move { c.apply(r).await }).await?;
    // Committed, not yet recorded in the run: a crash here makes the resumed call a repeat.
    weft_launch::fault_point("file_change_applied");
    ctx.emit(file_changed(target, ctx.tool_use_id(), &change));
    Ok(change)
}

/// The `file_changed` event of `change`.
pub(crate) fn file_changed(target: &Target, tool_use_id: &str, change: &v1::Change) -> RunEvent {
    RunEvent::FileChanged(FileChanged {
        volume: target.name.clone(),
        tool_use_id: tool_use_id.to_owned(),
        change_id: change.id.clone(),
        files: change
            .files
            .iter()
            .map(|f| ChangedFile {
                path: f.path.clone(),
                before_sha: f.before_sha.clone(),
                after_sha: f.after_sha.clone(),
                diff: capped(&f.diff),
            })
            .collect(),
    })
}

/// `text` cut to [`MAX_DIFF_BYTES`] at a character boundary, saying so.
pub(crate) fn capped(text: &str) -> String {
    cut(text, MAX_DIFF_BYTES, "\n… (diff cut short)\n")
}

/// `text` cut to at most `max` bytes at a character boundary, `note` added when cut.
pub(crate) fn cut(text: &str, max: usize, note: &str) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let mut out = text[..at].to_owned();
    out.push_str(note);
    out
}

/// What a mutation answers the model: the file after it and the diff.
#[derive(Debug, Serialize)]
pub(crate) struct Changed {
    pub path: String,
    /// The file's sha256 after the change (`None` when it no longer exists).
    pub sha256: Option<String>,
    pub size: i64,
    pub diff: String,
    /// A whitespace-tolerant match was used (`Edit`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fuzzy: bool,
    /// The call had been made before (a resumed run): this is the change it made then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

impl Changed {
    /// The answer for the file at `path` in `change` (its first file when none is at `path`).
    pub(crate) fn of(change: &v1::Change, path: &str) -> Self {
        let file = change
            .files
            .iter()
            .find(|f| f.path == path)
            .or_else(|| change.files.first());
        Self {
            path: path.to_owned(),
            sha256: file.and_then(|f| f.after_sha.clone()),
            size: file.map_or(0, |f| f.size),
            diff: file.map(|f| capped(&f.diff)).unwrap_or_default(),
            fuzzy: false,
            replayed: change.replayed,
        }
    }
}

/// One put of `content` at `path`.
/// A model's `if_match` as the substrate reads it: an ETag-style quoted value (`"<sha>"`, or
/// `""` for "must not exist") is taken without its quotes, as the HTTP routes take `If-Match`.
pub(crate) fn unquoted(if_match: Option<String>) -> Option<String> {
    if_match.map(|m| {
        let t = m.trim();
        match t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(inner) => inner.to_owned(),
            None => t.to_owned(),
        }
    })
}

pub(crate) fn put(path: String, content: Vec<u8>, if_match: Option<String>) -> v1::FileOp {
    v1::FileOp {
        path,
        if_match,
        op: Some(v1::file_op::Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Content(content)),
            mode: 0,
        })),
    }
}

/// Deletes the ephemeral volume of root run `run` when it ends (best effort: a failure is
/// logged, and the substrate's sweeper purges what is left).
pub(crate) async fn purge_run_volume(
    jwt: &weft_auth::InternalJwt,
    principal: &Principal,
    transport: GrpcTransport,
    run: RunId,
) {
    let msg = v1::PurgeRunVolumeRequest {
        root_run_id: run.to_string(),
    };
    let req = match weft_auth::rpc::request(jwt, principal, msg) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e.message, "cannot purge the run's volume; the sweeper will");
            return;
        }
    };
    if let Err(s) = client(transport).purge_run_volume(req).await {
        tracing::warn!(code = ?s.code(), error = %s.message(), "cannot purge the run's volume; the sweeper will");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str, mode: VolumeMode, default: bool) -> VolumeBinding {
        VolumeBinding {
            name: name.into(),
            mode,
            default,
        }
    }

    fn run() -> RunId {
        RunId::new()
    }

    #[test]
    fn no_binding_is_a_message_the_model_can_act_on() {
        let e = resolve(&[], run(), None).unwrap_err();
        assert_eq!(
            e,
            "no volume is bound to this run; the agent definition's `volumes` must bind one (e.g. {\"name\": \"run\"})"
        );
        let e = resolve(&[], run(), Some("docs")).unwrap_err();
        assert!(e.starts_with("no volume is bound"), "{e}");
    }

    #[test]
    fn a_quoted_if_match_is_read_without_its_quotes() {
        assert_eq!(unquoted(Some("\"\"".into())), Some(String::new()));
        assert_eq!(unquoted(Some(" \"ab\" ".into())), Some("ab".into()));
        assert_eq!(unquoted(Some("ab".into())), Some("ab".into()));
        assert_eq!(unquoted(None), None);
    }

    #[test]
    fn default_names_the_default_binding_unless_a_volume_is_called_so() {
        let bound = [
            b("docs", VolumeMode::Ro, false),
            b("run", VolumeMode::Rw, true),
        ];
        assert_eq!(resolve(&bound, run(), Some("default")).unwrap().name, "run");
        let named = [
            b("default", VolumeMode::Ro, false),
            b("run", VolumeMode::Rw, true),
        ];
        assert_eq!(
            resolve(&named, run(), Some("default")).unwrap().name,
            "default"
        );
    }

    #[test]
    fn a_name_not_bound_names_the_bound_ones() {
        let bound = [
            b("run", VolumeMode::Rw, true),
            b("docs", VolumeMode::Ro, false),
        ];
        let e = resolve(&bound, run(), Some("secret")).unwrap_err();
        assert_eq!(e, "volume `secret` is not bound; bound: run, docs");
    }

    #[test]
    fn run_is_the_run_trees_volume_and_others_are_named() {
        let id = run();
        let bound = [
            b("docs", VolumeMode::Ro, false),
            b("run", VolumeMode::Rw, true),
        ];
        let t = resolve(&bound, id, None).unwrap();
        assert_eq!(t.name, "run");
        assert_eq!(
            t.volume,
            v1::VolumeRef {
                target: Some(v1::volume_ref::Target::RunId(id.to_string())),
                create: true,
            }
        );
        assert!(t.writable().is_ok());
        let t = resolve(&bound, id, Some("docs")).unwrap();
        assert_eq!(
            t.volume,
            v1::VolumeRef {
                target: Some(v1::volume_ref::Target::Name("docs".into())),
                create: false,
            }
        );
        assert_eq!(
            t.writable().unwrap_err(),
            "volume `docs` is bound read-only to this run"
        );
        // No default marked: the first.
        let t = resolve(&[b("docs", VolumeMode::Ro, false)], id, None).unwrap();
        assert_eq!(t.name, "docs");
    }

    /// The message for a bad input, read as tool `T`'s input with `fields`.
    fn problem<T: serde::de::DeserializeOwned>(fields: &[Field], input: Value) -> String {
        match read_input::<T>(&input, fields) {
            Err(Fail::Say(out)) => out.text,
            Err(Fail::Abort(_)) => panic!("an abort for {input}"),
            Ok(_) => panic!("{input} was read"),
        }
    }

    #[test]
    fn bad_inputs_name_the_field() {
        use serde_json::json;
        use weft_api::tools::{EditInput, GrepInput, ListInput, MoveInput, ReadInput, WriteInput};
        assert_eq!(
            problem::<WriteInput>(write::FIELDS, json!({"content": "x"})),
            "`path` is required"
        );
        assert_eq!(
            problem::<WriteInput>(write::FIELDS, json!({"path": "a", "content": null})),
            "`content` is required"
        );
        assert_eq!(
            problem::<ReadInput>(read::FIELDS, json!({"path": "a", "offset": "2"})),
            "`offset` must be an integer from 0 up, got a string"
        );
        assert_eq!(
            problem::<EditInput>(edit::FIELDS, json!({"path": "a", "edits": "x"})),
            "`edits` must be an array, got a string"
        );
        assert_eq!(
            problem::<EditInput>(edit::FIELDS, json!({"path": "a", "edits": [{"new": "b"}]})),
            "`edits[0].old` is required"
        );
        assert_eq!(
            problem::<GrepInput>(grep::FIELDS, json!({"pattern": "a", "mode": "lines"})),
            "`mode` must be one of files, content, count, got \"lines\""
        );
        assert_eq!(
            problem::<MoveInput>(move_file::FIELDS, json!({"from": "a"})),
            "`to` is required"
        );
        assert_eq!(
            problem::<ListInput>(list::FIELDS, json!({"volume": 5})),
            "`volume` must be a string, got a number"
        );
        // Unknown fields are ignored, and every optional one may be left out.
        let w: WriteInput = read_input(
            &json!({"path": "a", "content": "", "mode": 7}),
            write::FIELDS,
        )
        .unwrap();
        assert_eq!((w.path.as_str(), w.if_match, w.volume), ("a", None, None));
        let l: ListInput = read_input(&json!({}), list::FIELDS).unwrap();
        assert_eq!(l.path, None);
    }

    #[test]
    fn paths_are_checked_before_any_call() {
        for bad in ["../x", "/etc/passwd", "a/../../b", "a\0b", ""] {
            match clean("path", bad) {
                Err(Fail::Say(out)) => {
                    assert!(out.text.contains("`path`"), "{bad:?}: {}", out.text)
                }
                _ => panic!("{bad:?} was accepted"),
            }
        }
        assert!(matches!(clean("path", "docs/a.md"), Ok(p) if p == "docs/a.md"));
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("abc", 3, "!"), "abc");
        assert_eq!(cut("abcd", 3, "!"), "abc!");
        assert_eq!(cut("aé", 2, "!"), "a!");
    }
}
