//! The volume routes (`/v1/volumes…`, and a run tree's own volume at `/v1/runs/{id}/volume…`):
//! thin handlers over the substrate's `weft.v1.Volumes`. They check the token's scope
//! (`volumes:read` for GET, `volumes:write` for the rest) before any body is read, shape the
//! request, forward it with the caller's internal JWT and render the answer. The substrate
//! validates paths, decides whether the caller may use the volume (another tenant's, or a run
//! the caller cannot see, is a 404) and stores.
//!
//! Files travel as raw bytes (`ETag`/`If-Match`/`If-None-Match` carry a file's sha256), and a
//! whole tree as a tar archive: an import is read here with the archive caps of `[volumes]`
//! (a bomb, a link or a name escaping the root is a 400 naming `body`), its contents are stored
//! with `PutBlobs` in batches, then written as one change by one `Apply`; an export reads the
//! index and the blobs and writes the archive.

use std::collections::HashMap;
use std::future::Future;

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::handler::Handler as _;
use axum::http::header::{
    CONTENT_DISPOSITION, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_MATCH, IF_NONE_MATCH,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use weft_api::common::{Nullable, Timestamp, Uuid};
use weft_api::volumes as api;
use weft_auth::rpc::Peer;
use weft_core::{Error, ErrorCode, Principal, Scope};
use weft_proto::v1;
use weft_proto::v1::volume_ref::Target;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, NativeQuery, OptionalNativeJson, ValidJson};

type Result<T> = std::result::Result<T, VolError>;

/// Blobs per `PutBlobs`/`GetBlobs` call are batched under this many bytes (one larger file goes
/// alone), well under the internal message cap.
const BATCH_BYTES: usize = 8 * 1024 * 1024;
/// ... and at most this many blobs (the substrate takes at most 1000 per call).
const BATCH_BLOBS: usize = 1000;

/// Files per page when the gateway reads a whole tree (an export).
const TREE_PAGE: u32 = 10_000;

/// The routes of named volumes and of run volumes; mounted inside the bearer-authenticated
/// native router. A file's body may be as large as `volumes.max_file_bytes`, an archive as
/// large as a volume may hold plus its tar headers, whatever `gateway.max_body_bytes` says.
pub fn routes(caps: &weft_config::VolumesConfig) -> axum::Router<AppState> {
    let file_limit = usize::try_from(caps.max_file_bytes).unwrap_or(usize::MAX);
    let tar_limit = usize::try_from(tar_body_cap(caps)).unwrap_or(usize::MAX);
    let mut r = axum::Router::new()
        .route(
            "/v1/volumes",
            get(list_volumes_handler).post(create_volume_handler),
        )
        .route(
            "/v1/volumes/{name}",
            get(get_volume_handler).delete(delete_volume_handler),
        )
        .route("/v1/runs/{id}/volume", get(get_volume_handler));
    for base in ["/v1/volumes/{name}", "/v1/runs/{id}/volume"] {
        r = r
            .route(&format!("{base}/tree"), get(tree_handler))
            .route(
                &format!("{base}/files/{{*path}}"),
                get(read_file_handler)
                    .put(write_file_handler.layer(DefaultBodyLimit::max(file_limit)))
                    .delete(delete_file_handler),
            )
            .route(
                &format!("{base}/import"),
                post(import_handler.layer(DefaultBodyLimit::max(tar_limit))),
            )
            .route(&format!("{base}/export"), get(export_handler))
            .route(&format!("{base}/changes"), get(changes_handler))
            .route(&format!("{base}/undo"), post(undo_handler))
            .route(
                &format!("{base}/snapshots"),
                get(list_snapshots_handler).post(create_snapshot_handler),
            )
            .route(
                &format!("{base}/snapshots/{{snapshot_id}}/restore"),
                post(restore_handler),
            )
            .route(&format!("{base}/diff"), get(diff_handler));
    }
    r.route_layer(axum::middleware::from_fn(require_volume_scope))
}

/// The largest import body: the volume's cap, plus a tar header (512 bytes) and the padding of
/// a last block (up to 511) per file, plus the archive's end.
fn tar_body_cap(caps: &weft_config::VolumesConfig) -> u64 {
    caps.max_volume_bytes
        .saturating_add(caps.max_files.saturating_mul(1024))
        .saturating_add(10 * 1024)
}

/// `volumes:read` for GET (and HEAD), `volumes:write` for the rest — before any body is read.
async fn require_volume_scope(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let scope = if matches!(*req.method(), Method::GET | Method::HEAD) {
        Scope::VolumesRead
    } else {
        Scope::VolumesWrite
    };
    match req
        .extensions()
        .get::<Principal>()
        .map(|p| p.require(scope))
    {
        Some(Ok(())) => next.run(req).await,
        Some(Err(e)) => ApiError::native(e).into_response(),
        None => ApiError::native(Error::unauthenticated("missing bearer token")).into_response(),
    }
}

// --- errors ------------------------------------------------------------------------------------

/// An error of a volume route: weft's native error, or a failed `If-Match`/`If-None-Match`
/// (412 `precondition_failed`, which no [`ErrorCode`] maps to).
#[derive(Debug)]
pub enum VolError {
    Api(Error),
    Precondition(Error),
}

impl From<Error> for VolError {
    fn from(e: Error) -> Self {
        VolError::Api(e)
    }
}

impl From<ApiError> for VolError {
    fn from(e: ApiError) -> Self {
        VolError::Api(e.0)
    }
}

impl IntoResponse for VolError {
    fn into_response(self) -> Response {
        match self {
            VolError::Api(e) => ApiError::native(e).into_response(),
            VolError::Precondition(e) => {
                let mut inner = serde_json::Map::new();
                inner.insert("code".into(), "precondition_failed".into());
                inner.insert("message".into(), e.message.into());
                if let Some(p) = e.param {
                    inner.insert("param".into(), p.into());
                }
                let mut body = serde_json::Map::new();
                body.insert("error".into(), inner.into());
                (StatusCode::PRECONDITION_FAILED, Json(body)).into_response()
            }
        }
    }
}

/// What a substrate call is for, to say its errors in the route's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    /// Anything but a file write.
    Plain,
    /// A write of one file (`ops[0]`): its fields are the route's `path` and `body`.
    File,
    /// A file write the caller made conditional (`If-Match`, `If-None-Match`): a file found at
    /// another version is a 412.
    CondFile,
}

/// A substrate error as the caller sees it. The substrate says "not at the version this
/// needs" (an `if_match`, an undo over later edits, `if_tree`, a read-only volume) as
/// FAILED_PRECONDITION with weft's `conflict` code: a 409, except a failed `If-Match` of the
/// HTTP caller, which is a 412. A single file write's fields are named as the route has them.
fn status_error(s: &tonic::Status, ctx: Ctx) -> VolError {
    let mut e = if s.code() == tonic::Code::FailedPrecondition {
        let mut e = Error::from(s);
        e.code = ErrorCode::Conflict;
        e
    } else {
        Peer::SUBSTRATE.error(s)
    };
    if ctx == Ctx::Plain {
        return VolError::Api(e);
    }
    let if_match = e.param.as_deref().is_some_and(|p| p.ends_with("if_match"));
    e.param = e.param.map(|p| match p.strip_prefix("ops[0].") {
        Some("if_match") => "If-Match".to_owned(),
        Some(f) if f == "put" || f.starts_with("put.") => "body".to_owned(),
        Some(f) => f.to_owned(),
        None => p,
    });
    if ctx == Ctx::CondFile && if_match && e.code == ErrorCode::Conflict {
        VolError::Precondition(e)
    } else {
        VolError::Api(e)
    }
}

/// One substrate call, bounded by `gateway.request_timeout_secs`.
async fn rpc<T>(
    st: &AppState,
    ctx: Ctx,
    call: impl Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(st.request_timeout, call).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(s)) => Err(status_error(&s, ctx)),
        Err(_) => Err(VolError::Api(st.timeout_error())),
    }
}

fn invalid(message: impl Into<String>, param: &str) -> VolError {
    VolError::Api(Error::invalid(message).with_param(param))
}

// --- which volume -----------------------------------------------------------------------------

/// The volume a request names, from its path: `{name}` (a named volume) or `{id}` (a run tree's
/// own), with the route's other path parameters (`path`, `snapshot_id`).
pub struct Vol {
    target: Target,
    params: HashMap<String, String>,
}

impl FromRequestParts<AppState> for Vol {
    type Rejection = VolError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self> {
        let NativePath(params) =
            NativePath::<HashMap<String, String>>::from_request_parts(parts, st).await?;
        let target = if let Some(name) = params.get("name") {
            Target::Name(name.clone())
        } else if let Some(id) = params.get("id") {
            let p = parts
                .extensions
                .get::<Principal>()
                .ok_or_else(|| VolError::Api(Error::unauthenticated("missing bearer token")))?;
            visible_run(st, p, id).await?;
            Target::RunId(id.clone())
        } else {
            tracing::error!("a volume route without {{name}} or {{id}}");
            return Err(VolError::Api(Error::internal()));
        };
        Ok(Vol { target, params })
    }
}

/// A run's volume is seen by whoever sees the run (`GET /v1/runs/{id}`): its owner, and the
/// tenant's admins. Any other run id is a 404 like an unknown one.
async fn visible_run(st: &AppState, p: &Principal, id: &str) -> Result<()> {
    let none = || VolError::Api(Error::not_found(format!("no run `{id}`")));
    let rid = id.parse::<weft_core::RunId>().map_err(|_| none())?;
    let run = st
        .runs
        .get(&p.tenant, rid)
        .await
        .map_err(|e| match e {
            weft_store::RunStoreError::Store(s) => VolError::Api(s.to_api()),
            weft_store::RunStoreError::StaleLease(_) => VolError::Api(Error::internal()),
        })?
        .ok_or_else(none)?;
    if p.is_admin() || p.scopes.contains(Scope::TenantAdmin) || run.subject == p.subject {
        Ok(())
    } else {
        Err(none())
    }
}

impl Vol {
    /// The reference; `create` makes a run's volume on first use (ignored for a named one).
    fn at(&self, create: bool) -> v1::VolumeRef {
        v1::VolumeRef {
            create: create && self.is_run(),
            target: Some(self.target.clone()),
        }
    }

    fn is_run(&self) -> bool {
        matches!(self.target, Target::RunId(_))
    }

    /// A path parameter the route has.
    fn param(&self, name: &str) -> String {
        self.params.get(name).cloned().unwrap_or_default()
    }

    /// The name an export is offered as.
    fn file_name(&self) -> String {
        match &self.target {
            Target::Name(n) => n.clone(),
            Target::RunId(id) => format!("run-{id}"),
        }
    }
}

// --- rendering -------------------------------------------------------------------------------

fn mode_of(s: &str) -> weft_api::volumes::VolumeMode {
    weft_api::volumes::VolumeMode::parse(s).unwrap_or_default()
}

fn volume_json(v: v1::Volume) -> api::Volume {
    api::Volume {
        name: v.name,
        kind: api::VolumeKind(v.kind),
        mode: mode_of(&v.mode),
        quota_bytes: v.quota_bytes,
        bytes: v.bytes,
        files: v.files,
        tree_hash: api::TreeHash(v.tree_hash),
        seq: v.seq,
        root_run_id: Nullable(v.root_run_id),
        description: v.description,
        created_at: Timestamp(v.created_at),
        updated_at: Timestamp(v.updated_at),
    }
}

fn entry_json(e: v1::FileEntry) -> api::FileEntry {
    api::FileEntry {
        path: e.path,
        sha256: api::Sha256(e.sha256),
        size: e.size,
        mode: e.mode,
        updated_at: Timestamp(e.updated_at),
    }
}

fn file_change_json(f: v1::FileChange) -> api::FileChange {
    api::FileChange {
        path: f.path,
        before_sha: Nullable(f.before_sha.map(api::Sha256)),
        after_sha: Nullable(f.after_sha.map(api::Sha256)),
        size: f.size,
        diff: (!f.diff.is_empty()).then_some(f.diff),
    }
}

fn change_json(c: v1::Change) -> api::VolumeChange {
    api::VolumeChange {
        id: Uuid(c.id),
        seq: c.seq,
        source: c.source,
        run_id: Nullable(c.run_id),
        tool_use_id: Nullable(c.tool_use_id),
        subject: c.subject,
        files: c.files.into_iter().map(file_change_json).collect(),
        tree_before: api::TreeHash(c.tree_before),
        tree_after: api::TreeHash(c.tree_after),
        undoes: Nullable(c.undoes.map(Uuid)),
        undone_by: Nullable(c.undone_by.map(Uuid)),
        created_at: Timestamp(c.created_at),
    }
}

fn snapshot_json(s: v1::Snapshot) -> api::Snapshot {
    api::Snapshot {
        id: Uuid(s.id),
        label: s.label,
        tree_hash: api::TreeHash(s.tree_hash),
        seq: s.seq,
        files: s.files,
        bytes: s.bytes,
        created_at: Timestamp(s.created_at),
    }
}

/// `"<sha256>"`, the ETag of a file.
fn etag(sha: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("\"{sha}\"")).ok()
}

/// A change as the answer of a write, with the ETag of `path` after it when it still exists.
fn change_response(c: v1::Change, path: Option<&str>) -> Response {
    let tag = path.and_then(|p| {
        c.files
            .iter()
            .find(|f| f.path == p)
            .and_then(|f| f.after_sha.as_deref())
            .and_then(etag)
    });
    let mut resp = Json(change_json(c)).into_response();
    if let Some(t) = tag {
        resp.headers_mut().insert(ETAG, t);
    }
    resp
}

// --- conditional headers ----------------------------------------------------------------------

/// A sha256 named by a header: quoted or not, `W/` allowed (a volume's versions are exact).
fn header_sha(value: &str) -> Option<String> {
    let v = value.trim();
    let v = v.strip_prefix("W/").unwrap_or(v);
    let v = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(v);
    (v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit())).then(|| v.to_ascii_lowercase())
}

fn header_text<'a>(
    headers: &'a HeaderMap,
    name: &axum::http::HeaderName,
) -> Result<Option<&'a str>> {
    match headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| {
            invalid(
                format!("`{name}` must be ASCII: a sha256 of 64 hex digits, quoted or not"),
                name.as_str(),
            )
        }),
    }
}

/// The `if_match` of a write from its `If-Match` and `If-None-Match` headers: a sha256 the file
/// must have, `""` (it must not exist: `If-None-Match: *`), or nothing.
fn write_condition(headers: &HeaderMap) -> Result<Option<String>> {
    let if_match = header_text(headers, &IF_MATCH)?;
    let if_none = header_text(headers, &IF_NONE_MATCH)?;
    match (if_match, if_none) {
        (Some(_), Some(_)) => Err(invalid(
            "send `If-Match` (the sha256 the file must have) or `If-None-Match: *` (it must not exist), not both",
            "If-Match",
        )),
        (Some(m), None) => header_sha(m).map(Some).ok_or_else(|| {
            invalid(
                format!(
                    "`If-Match` must be the file's sha256 (64 hex digits, quoted or not), got {m:?}; `*` is not supported: read the file's ETag first"
                ),
                "If-Match",
            )
        }),
        (None, Some(n)) if n.trim() == "*" => Ok(Some(String::new())),
        (None, Some(n)) => Err(invalid(
            format!("on a write, `If-None-Match` may only be `*` (the file must not exist), got {n:?}"),
            "If-None-Match",
        )),
        (None, None) => Ok(None),
    }
}

/// Whether an `If-None-Match` of a read names `sha` (or is `*`).
fn none_match_hits(value: &str, sha: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim() == "*" || header_sha(t).is_some_and(|s| s == sha))
}

/// A raw body, or the 413 that says which cap it is over.
fn raw_body(body: std::result::Result<Bytes, BytesRejection>, what: &str) -> Result<Bytes> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            VolError::Api(
                Error::new(
                    ErrorCode::PayloadTooLarge,
                    format!("the body is larger than {what}"),
                )
                .with_param("body"),
            )
        } else {
            invalid("the request body could not be read", "body")
        }
    })
}

/// UTF-8 without NUL in its first 8 KiB: served as `text/plain`.
fn is_text(content: &[u8]) -> bool {
    !weft_volumes::text::is_binary(content)
}

// --- named volumes ----------------------------------------------------------------------------

/// `GET /v1/volumes`.
#[tracing::instrument(skip_all)]
pub async fn list_volumes_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
) -> Result<Response> {
    let req = st.internal(&p, v1::ListVolumesRequest {})?;
    let mut client = st.volumes.clone();
    let r = rpc(&st, Ctx::Plain, client.list_volumes(req)).await?;
    Ok(Json(api::VolumeList {
        data: r.volumes.into_iter().map(volume_json).collect(),
    })
    .into_response())
}

/// `POST /v1/volumes` `{name, mode?, quota_bytes?, description?}`: 201 when made, 200 when it
/// existed (and now is as given).
#[tracing::instrument(skip_all)]
pub async fn create_volume_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    ValidJson(body): NativeJson<api::CreateVolume>,
) -> Result<Response> {
    if let Some(q) = body.quota_bytes
        && q < 0
    {
        return Err(invalid(
            format!("`quota_bytes` must be at least 0 (0 = the operator's cap), got {q}"),
            "quota_bytes",
        ));
    }
    let description = body.description.unwrap_or_default();
    if description.len() > 1024 {
        return Err(invalid(
            format!(
                "`description` is {} bytes; at most 1024 are allowed",
                description.len()
            ),
            "description",
        ));
    }
    let name = body.name.0;
    let mut client = st.volumes.clone();
    let req = st.internal(
        &p,
        v1::CreateVolumeRequest {
            name,
            mode: body.mode.map(|m| m.as_str().to_owned()).unwrap_or_default(),
            quota_bytes: body.quota_bytes.unwrap_or(0),
            description,
        },
    )?;
    let v = rpc(&st, Ctx::Plain, client.create_volume(req)).await?;
    // A row made by this call has both times from the one insert; an update moves
    // `updated_at` only.
    let status = if v.created_at == v.updated_at {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(volume_json(v))).into_response())
}

/// `GET /v1/volumes/{name}`, `GET /v1/runs/{id}/volume`.
#[tracing::instrument(skip_all)]
pub async fn get_volume_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
) -> Result<Response> {
    let req = st.internal(&p, vol.at(false))?;
    let mut client = st.volumes.clone();
    match rpc(&st, Ctx::Plain, client.get_volume(req)).await {
        Ok(v) => Ok(Json(volume_json(v)).into_response()),
        // The run is the caller's (checked above): it has no volume yet.
        Err(VolError::Api(e)) if e.code == ErrorCode::NotFound && vol.is_run() => {
            Err(VolError::Api(Error::not_found(format!(
                "run `{}` has no volume: none has been made yet (its first write, through a file tool or PUT …/files/{{path}}, makes one)",
                vol.param("id")
            ))))
        }
        Err(e) => Err(e),
    }
}

/// `DELETE /v1/volumes/{name}`.
#[tracing::instrument(skip_all)]
pub async fn delete_volume_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
) -> Result<Response> {
    let name = vol.param("name");
    let req = st.internal(&p, vol.at(false))?;
    let mut client = st.volumes.clone();
    let d = rpc(&st, Ctx::Plain, client.delete_volume(req)).await?;
    if !d.deleted {
        return Err(VolError::Api(Error::not_found(format!(
            "no volume `{name}` in your tenant"
        ))));
    }
    Ok(Json(api::VolumeDeleted {
        name,
        deleted: true,
    })
    .into_response())
}

// --- files ------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeQuery {
    prefix: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

/// `GET …/tree?prefix=&cursor=&limit=`.
#[tracing::instrument(skip_all)]
pub async fn tree_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    NativeQuery(q): NativeQuery<TreeQuery>,
) -> Result<Response> {
    if let Some(l) = q.limit
        && !(1..=10_000).contains(&l)
    {
        return Err(invalid(
            format!("`limit` must be between 1 and 10000, got {l}"),
            "limit",
        ));
    }
    if let Some(c) = &q.cursor
        && (c.is_empty() || c.len() > 2048)
    {
        return Err(invalid(
            "`cursor` must be the `next_cursor` of the previous page",
            "cursor",
        ));
    }
    let prefix = q.prefix.unwrap_or_default();
    if prefix.len() > 1024 {
        return Err(invalid(
            format!(
                "`prefix` is {} bytes; at most 1024 are allowed",
                prefix.len()
            ),
            "prefix",
        ));
    }
    let req = st.internal(
        &p,
        v1::TreeRequest {
            volume: Some(vol.at(false)),
            prefix,
            cursor: q.cursor,
            limit: q.limit.unwrap_or(0),
        },
    )?;
    let mut client = st.volumes.clone();
    let r = rpc(&st, Ctx::Plain, client.tree(req)).await?;
    Ok(Json(api::VolumeTree {
        data: r.files.into_iter().map(entry_json).collect(),
        next_cursor: Nullable(r.next_cursor),
        tree_hash: api::TreeHash(r.tree_hash),
    })
    .into_response())
}

/// `GET …/files/{path}`: the bytes, with `ETag`; a 304 for a matching `If-None-Match`.
#[tracing::instrument(skip_all)]
pub async fn read_file_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    headers: HeaderMap,
) -> Result<Response> {
    let if_none = header_text(&headers, &IF_NONE_MATCH)?.map(str::to_owned);
    let req = st.internal(
        &p,
        v1::ReadFileRequest {
            volume: Some(vol.at(false)),
            path: vol.param("path"),
        },
    )?;
    let mut client = st.volumes.clone();
    let f = rpc(&st, Ctx::Plain, client.read_file(req)).await?;
    let sha = f.entry.map(|e| e.sha256).unwrap_or_default();
    let tag = etag(&sha);
    if if_none.is_some_and(|v| none_match_hits(&v, &sha)) {
        let mut resp = StatusCode::NOT_MODIFIED.into_response();
        if let Some(t) = tag {
            resp.headers_mut().insert(ETAG, t);
        }
        return Ok(resp);
    }
    let content_type = if is_text(&f.content) {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    // A tenant's file is served from the origin of the UI: never sniffed into HTML, never
    // run as a document with the session's cookie.
    let mut resp = (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
            (
                CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            ),
        ],
        f.content,
    )
        .into_response();
    if let Some(t) = tag {
        resp.headers_mut().insert(ETAG, t);
    }
    Ok(resp)
}

/// `PUT …/files/{path}` with the file's bytes; `If-Match: <sha256>` or `If-None-Match: *`.
#[tracing::instrument(skip_all)]
pub async fn write_file_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let if_match = write_condition(&headers)?;
    let content = raw_body(body, "a file may be (volumes.max_file_bytes)")?;
    let path = vol.param("path");
    let cond = if if_match.is_some() {
        Ctx::CondFile
    } else {
        Ctx::File
    };
    let op = v1::FileOp {
        path: path.clone(),
        if_match,
        op: Some(v1::file_op::Op::Put(v1::PutFile {
            body: Some(v1::put_file::Body::Content(content.to_vec())),
            mode: 0,
        })),
    };
    let c = apply(&st, &p, &vol, vec![op], cond).await?;
    Ok(change_response(c, Some(&path)))
}

/// `DELETE …/files/{path}`; `If-Match: <sha256>`.
#[tracing::instrument(skip_all)]
pub async fn delete_file_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    headers: HeaderMap,
) -> Result<Response> {
    let if_match = match header_text(&headers, &IF_MATCH)? {
        None => None,
        Some(m) => Some(header_sha(m).ok_or_else(|| {
            invalid(
                format!(
                    "`If-Match` must be the file's sha256 (64 hex digits, quoted or not), got {m:?}"
                ),
                "If-Match",
            )
        })?),
    };
    let cond = if if_match.is_some() {
        Ctx::CondFile
    } else {
        Ctx::File
    };
    let op = v1::FileOp {
        path: vol.param("path"),
        if_match,
        op: Some(v1::file_op::Op::Delete(v1::DeleteFile {})),
    };
    let c = apply(&st, &p, &vol, vec![op], cond).await?;
    Ok(change_response(c, None))
}

/// One `Apply` of an HTTP write (source `http`).
async fn apply(
    st: &AppState,
    p: &Principal,
    vol: &Vol,
    ops: Vec<v1::FileOp>,
    cond: Ctx,
) -> Result<v1::Change> {
    let req = st.internal(
        p,
        v1::ApplyRequest {
            volume: Some(vol.at(true)),
            ops,
            op_key: None,
            run_id: None,
            tool_use_id: None,
            source: "http".into(),
            with_diff: false,
            replace: false,
        },
    )?;
    let mut client = st.volumes.clone();
    rpc(st, cond, client.apply(req)).await
}

// --- archives ---------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    replace: Option<bool>,
}

/// `POST …/import?replace=` with a tar archive: every file as one change (source `import`).
#[tracing::instrument(skip_all)]
pub async fn import_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    NativeQuery(q): NativeQuery<ImportQuery>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let replace = q.replace.unwrap_or(false);
    let archive = raw_body(
        body,
        "a volume may hold (volumes.max_volume_bytes, plus headers)",
    )?;
    let mut client = st.volumes.clone();
    // The volume first: a caller that cannot write it learns nothing of the archive, and
    // nothing is stored for it.
    let req = st.internal(&p, vol.at(true))?;
    let info = rpc(&st, Ctx::Plain, client.get_volume(req)).await?;
    // Nothing is stored for an archive the volume cannot take: a read-only volume, or more
    // bytes than its quota leaves (all of its quota when the import replaces the tree).
    if info.mode == "ro" {
        return Err(VolError::Api(
            Error::new(
                weft_core::ErrorCode::Conflict,
                format!("volume `{}` is read-only; nothing was imported", info.name),
            )
            .with_param("body"),
        ));
    }
    let room = if replace {
        info.quota_bytes
    } else {
        info.quota_bytes.saturating_sub(info.bytes)
    };
    let caps = weft_volumes::archive::TarCaps {
        max_files: usize::try_from(st.volume_caps.max_files).unwrap_or(usize::MAX),
        max_file_bytes: st.volume_caps.max_file_bytes,
        max_total_bytes: u64::try_from(room.max(0))
            .unwrap_or(0)
            .min(st.volume_caps.max_volume_bytes),
    };
    let files = weft_volumes::archive::read_tar(&archive, &caps)
        .map_err(|e| invalid(e.to_string(), "body"))?;
    drop(archive);
    let count = i64::try_from(files.len()).unwrap_or(i64::MAX);
    let total: usize = files.iter().map(|f| f.content.len()).sum();
    if files.is_empty() && !replace {
        return Ok(Json(api::VolumeImported {
            files: 0,
            bytes: 0,
            change: Nullable(None),
        })
        .into_response());
    }
    // The contents, by hash, in batches; then one change naming them.
    let mut ops = Vec::with_capacity(files.len());
    let mut batch: Vec<v1::Blob> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut sent = std::collections::HashSet::new();
    for f in files {
        let sha = weft_volumes::sha256_hex(&f.content);
        ops.push(v1::FileOp {
            path: f.path,
            if_match: None,
            op: Some(v1::file_op::Op::Put(v1::PutFile {
                body: Some(v1::put_file::Body::Sha256(sha.clone())),
                mode: f.mode,
            })),
        });
        if !sent.insert(sha.clone()) {
            continue;
        }
        if !batch.is_empty()
            && (batch_bytes + f.content.len() > BATCH_BYTES || batch.len() >= BATCH_BLOBS)
        {
            put_blobs(&st, &p, std::mem::take(&mut batch)).await?;
            batch_bytes = 0;
        }
        batch_bytes += f.content.len();
        batch.push(v1::Blob {
            sha256: sha,
            content: f.content,
        });
    }
    if !batch.is_empty() {
        put_blobs(&st, &p, batch).await?;
    }
    let req = st.internal(
        &p,
        v1::ApplyRequest {
            volume: Some(vol.at(true)),
            ops,
            op_key: None,
            run_id: None,
            tool_use_id: None,
            source: "import".into(),
            with_diff: false,
            replace,
        },
    )?;
    let c = rpc(&st, Ctx::Plain, client.apply(req)).await?;
    Ok(Json(api::VolumeImported {
        files: count,
        bytes: i64::try_from(total).unwrap_or(i64::MAX),
        change: Nullable(Some(change_json(c))),
    })
    .into_response())
}

async fn put_blobs(st: &AppState, p: &Principal, blobs: Vec<v1::Blob>) -> Result<()> {
    let req = st.internal(p, v1::PutBlobsRequest { blobs })?;
    let mut client = st.volumes.clone();
    rpc(st, Ctx::Plain, client.put_blobs(req)).await.map(drop)
}

/// `GET …/export`: the volume as a tar archive, byte for byte.
#[tracing::instrument(skip_all)]
pub async fn export_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
) -> Result<Response> {
    let entries = whole_tree(&st, &p, &vol).await?;
    let mut blobs: HashMap<String, Vec<u8>> = HashMap::new();
    let mut batch: Vec<String> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut client = st.volumes.clone();
    for e in &entries {
        if blobs.contains_key(&e.sha256) || batch.contains(&e.sha256) {
            continue;
        }
        let size = usize::try_from(e.size).unwrap_or(usize::MAX);
        if !batch.is_empty()
            && (batch_bytes.saturating_add(size) > BATCH_BYTES || batch.len() >= BATCH_BLOBS)
        {
            get_blobs(
                &st,
                &p,
                &vol,
                &mut client,
                std::mem::take(&mut batch),
                &mut blobs,
            )
            .await?;
            batch_bytes = 0;
        }
        batch_bytes = batch_bytes.saturating_add(size);
        batch.push(e.sha256.clone());
    }
    if !batch.is_empty() {
        get_blobs(&st, &p, &vol, &mut client, batch, &mut blobs).await?;
    }
    let mut files = Vec::with_capacity(entries.len());
    for e in &entries {
        let Some(content) = blobs.get(&e.sha256) else {
            tracing::error!("the substrate did not return a blob the index names");
            return Err(VolError::Api(Error::internal()));
        };
        files.push((e.path.as_str(), e.mode, content.as_slice()));
    }
    let tar = weft_volumes::archive::write_tar(files.into_iter());
    let disposition =
        HeaderValue::from_str(&format!("attachment; filename=\"{}.tar\"", vol.file_name()))
            .unwrap_or(HeaderValue::from_static("attachment"));
    Ok((
        [
            (CONTENT_TYPE, HeaderValue::from_static("application/x-tar")),
            (CONTENT_DISPOSITION, disposition),
        ],
        tar,
    )
        .into_response())
}

/// Every file of the volume, read page by page at one version (a change between two pages
/// starts the read over; a volume that keeps changing is a 409).
async fn whole_tree(st: &AppState, p: &Principal, vol: &Vol) -> Result<Vec<v1::FileEntry>> {
    let mut client = st.volumes.clone();
    for _ in 0..3 {
        let mut out = Vec::new();
        let mut cursor = None;
        let mut version: Option<String> = None;
        let consistent = loop {
            let req = st.internal(
                p,
                v1::TreeRequest {
                    volume: Some(vol.at(false)),
                    prefix: String::new(),
                    cursor: cursor.take(),
                    limit: TREE_PAGE,
                },
            )?;
            let page = rpc(st, Ctx::Plain, client.tree(req)).await?;
            if version.get_or_insert_with(|| page.tree_hash.clone()) != &page.tree_hash {
                break false;
            }
            out.extend(page.files);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break true,
            }
        };
        if consistent {
            return Ok(out);
        }
    }
    Err(VolError::Api(Error::new(
        ErrorCode::Conflict,
        "the volume kept changing while it was read; export it again",
    )))
}

async fn get_blobs(
    st: &AppState,
    p: &Principal,
    vol: &Vol,
    client: &mut v1::volumes_client::VolumesClient<crate::RouterTransport>,
    sha256: Vec<String>,
    into: &mut HashMap<String, Vec<u8>>,
) -> Result<()> {
    let req = st.internal(
        p,
        v1::GetBlobsRequest {
            volume: Some(vol.at(false)),
            sha256,
        },
    )?;
    let r = rpc(st, Ctx::Plain, client.get_blobs(req)).await?;
    into.extend(r.blobs.into_iter().map(|b| (b.sha256, b.content)));
    Ok(())
}

// --- history ----------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    run_id: Option<String>,
    before_seq: Option<i64>,
    limit: Option<u32>,
    diff: Option<bool>,
}

/// `GET …/changes?run_id=&before_seq=&limit=&diff=`: newest first.
#[tracing::instrument(skip_all)]
pub async fn changes_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    NativeQuery(q): NativeQuery<ChangesQuery>,
) -> Result<Response> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(invalid(
            format!("`limit` must be between 1 and 500, got {limit}"),
            "limit",
        ));
    }
    if let Some(b) = q.before_seq
        && b < 1
    {
        return Err(invalid(
            format!("`before_seq` must be at least 1 (a change's seq), got {b}"),
            "before_seq",
        ));
    }
    if let Some(r) = &q.run_id
        && uuid::Uuid::parse_str(r).is_err()
    {
        return Err(invalid(
            format!("`run_id` must be a run id (a UUID), got {r:?}"),
            "run_id",
        ));
    }
    let req = st.internal(
        &p,
        v1::ListChangesRequest {
            volume: Some(vol.at(false)),
            run_id: q.run_id,
            before_seq: q.before_seq,
            limit,
            with_diff: q.diff.unwrap_or(false),
        },
    )?;
    let mut client = st.volumes.clone();
    let r = rpc(&st, Ctx::Plain, client.list_changes(req)).await?;
    let full = r.changes.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
    let next = r.changes.last().filter(|_| full).map(|c| c.seq);
    Ok(Json(api::ChangeList {
        data: r.changes.into_iter().map(change_json).collect(),
        next_before_seq: Nullable(next.filter(|s| *s > 1)),
    })
    .into_response())
}

/// `POST …/undo` `{change_id}` or `{run_id}`.
#[tracing::instrument(skip_all)]
pub async fn undo_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    ValidJson(body): NativeJson<api::UndoChange>,
) -> Result<Response> {
    let target = match (body.change_id, body.run_id) {
        (Some(c), None) => v1::undo_request::Target::ChangeId(c.0),
        (None, Some(r)) => v1::undo_request::Target::RunId(r.0),
        _ => {
            return Err(invalid(
                "give one of `change_id` (one change) and `run_id` (every change of a run)",
                "change_id",
            ));
        }
    };
    let req = st.internal(
        &p,
        v1::UndoRequest {
            volume: Some(vol.at(false)),
            target: Some(target),
            op_key: None,
        },
    )?;
    let mut client = st.volumes.clone();
    let c = rpc(&st, Ctx::Plain, client.undo(req)).await?;
    Ok(Json(change_json(c)).into_response())
}

/// `POST …/snapshots` `{label?}`.
#[tracing::instrument(skip_all)]
pub async fn create_snapshot_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    OptionalNativeJson(body): OptionalNativeJson<api::CreateSnapshot>,
) -> Result<Response> {
    let label = body.label.unwrap_or_default();
    if label.len() > 256 {
        return Err(invalid(
            format!("`label` is {} bytes; at most 256 are allowed", label.len()),
            "label",
        ));
    }
    let req = st.internal(
        &p,
        v1::CreateSnapshotRequest {
            volume: Some(vol.at(false)),
            label,
        },
    )?;
    let mut client = st.volumes.clone();
    let s = rpc(&st, Ctx::Plain, client.create_snapshot(req)).await?;
    Ok((StatusCode::CREATED, Json(snapshot_json(s))).into_response())
}

/// `GET …/snapshots`.
#[tracing::instrument(skip_all)]
pub async fn list_snapshots_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
) -> Result<Response> {
    let req = st.internal(
        &p,
        v1::ListSnapshotsRequest {
            volume: Some(vol.at(false)),
        },
    )?;
    let mut client = st.volumes.clone();
    let r = rpc(&st, Ctx::Plain, client.list_snapshots(req)).await?;
    Ok(Json(api::SnapshotList {
        data: r.snapshots.into_iter().map(snapshot_json).collect(),
    })
    .into_response())
}

/// `POST …/snapshots/{snapshot_id}/restore` `{if_tree?}`.
#[tracing::instrument(skip_all)]
pub async fn restore_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    OptionalNativeJson(body): OptionalNativeJson<api::RestoreSnapshot>,
) -> Result<Response> {
    let snapshot_id = vol.param("snapshot_id");
    if uuid::Uuid::parse_str(&snapshot_id).is_err() {
        return Err(invalid(
            format!("`snapshot_id` must be a snapshot's id (a UUID), got {snapshot_id:?}"),
            "snapshot_id",
        ));
    }
    let req = st.internal(
        &p,
        v1::RestoreRequest {
            volume: Some(vol.at(false)),
            snapshot_id,
            if_tree: body.if_tree.map(|t| t.0),
            op_key: None,
        },
    )?;
    let mut client = st.volumes.clone();
    let c = rpc(&st, Ctx::Plain, client.restore(req)).await?;
    Ok(Json(change_json(c)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffQuery {
    from: String,
    to: String,
    diff: Option<bool>,
}

/// `GET …/diff?from=&to=&diff=`: a version is a snapshot id or `current`.
#[tracing::instrument(skip_all)]
pub async fn diff_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    vol: Vol,
    NativeQuery(q): NativeQuery<DiffQuery>,
) -> Result<Response> {
    for (name, v) in [("from", &q.from), ("to", &q.to)] {
        if v != "current" && uuid::Uuid::parse_str(v).is_err() {
            return Err(invalid(
                format!("`{name}` must be a snapshot id or `current`, got {v:?}"),
                name,
            ));
        }
    }
    let req = st.internal(
        &p,
        v1::DiffRequest {
            volume: Some(vol.at(false)),
            from: q.from,
            to: q.to,
            with_diff: q.diff.unwrap_or(false),
        },
    )?;
    let mut client = st.volumes.clone();
    let r = rpc(&st, Ctx::Plain, client.diff(req)).await?;
    Ok(Json(api::VolumeDiff {
        from_tree: api::TreeHash(r.from_tree),
        to_tree: api::TreeHash(r.to_tree),
        files: r.files.into_iter().map(file_change_json).collect(),
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_read_a_sha_quoted_or_not() {
        let sha = "ab".repeat(32);
        assert_eq!(header_sha(&format!("\"{sha}\"")), Some(sha.clone()));
        assert_eq!(header_sha(&sha.to_uppercase()), Some(sha.clone()));
        assert_eq!(header_sha(&format!("W/\"{sha}\"")), Some(sha.clone()));
        assert_eq!(header_sha("*"), None);
        assert_eq!(header_sha("\"abc\""), None);
        assert!(none_match_hits(&format!("\"x\", \"{sha}\""), &sha));
        assert!(none_match_hits("*", &sha));
        assert!(!none_match_hits("\"0000\"", &sha));

        let mut h = HeaderMap::new();
        assert!(matches!(write_condition(&h), Ok(None)));
        h.insert(IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert_eq!(write_condition(&h).ok().flatten().as_deref(), Some(""));
        h.insert(IF_MATCH, HeaderValue::from_str(&sha).unwrap());
        assert!(write_condition(&h).is_err(), "both");
        h.remove(IF_NONE_MATCH);
        assert_eq!(write_condition(&h).ok().flatten(), Some(sha));
        h.insert(IF_MATCH, HeaderValue::from_static("*"));
        match write_condition(&h) {
            Err(VolError::Api(e)) => assert_eq!(e.param.as_deref(), Some("If-Match")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failed_if_match_is_412_and_other_failed_preconditions_409() {
        let conflict = |param: &str| {
            tonic::Status::with_metadata(
                tonic::Code::FailedPrecondition,
                "`a.txt` changed",
                tonic::Status::from(Error::new(ErrorCode::Conflict, "x").with_param(param))
                    .metadata()
                    .clone(),
            )
        };
        let stale = conflict("ops[0].if_match");
        match status_error(&stale, Ctx::CondFile) {
            VolError::Precondition(e) => assert_eq!(e.param.as_deref(), Some("If-Match")),
            other => panic!("{other:?}"),
        }
        let resp = status_error(&stale, Ctx::CondFile).into_response();
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
        // A read-only volume, an undo over later edits: 409 whatever the caller sent.
        for (s, ctx) in [
            (conflict("path"), Ctx::CondFile),
            (conflict("ops[0].if_match"), Ctx::File),
            (conflict("path"), Ctx::Plain),
            (tonic::Status::failed_precondition("bare"), Ctx::Plain),
        ] {
            match status_error(&s, ctx) {
                VolError::Api(e) => assert_eq!(e.code, ErrorCode::Conflict, "{ctx:?}"),
                other => panic!("{other:?}"),
            }
        }
        let bad = tonic::Status::from(Error::invalid("bad").with_param("ops[0].path"));
        match status_error(&bad, Ctx::File) {
            VolError::Api(e) => {
                assert_eq!(
                    (e.code, e.param.as_deref()),
                    (ErrorCode::InvalidRequest, Some("path"))
                )
            }
            other => panic!("{other:?}"),
        }
        let nf = tonic::Status::from(Error::not_found("no such volume"));
        match status_error(&nf, Ctx::CondFile) {
            VolError::Api(e) => assert_eq!(e.code, ErrorCode::NotFound),
            other => panic!("{other:?}"),
        }
    }
}
