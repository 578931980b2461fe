//! Tenant export and import for operators (docs/operations.md "Tenant export and import"):
//! `GET /v1/tenants/{tenant}/export` and `POST /v1/tenants/{tenant}/import`, the HTTP faces of
//! `weft tenant export|import` over the same `weft_store::tenant_archive`.

use axum::extract::{DefaultBodyLimit, State};
use axum::handler::Handler as _;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde::Deserialize;
use tokio::io::AsyncReadExt as _;
use weft_core::{Error, Principal, Scope, TenantId};
use weft_store::tenant_archive::{self, Archive, ExportOptions};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativePath, NativeQuery};

type Result<T> = std::result::Result<T, ApiError>;

/// The largest archive `POST …/import` takes (it is held in memory while imported); larger
/// ones go through `weft tenant import`.
const MAX_IMPORT_BYTES: usize = 256 * 1024 * 1024;

/// Bytes of an export in flight between the writer and the answer (the pipe's bound).
const STREAM_BUFFER: usize = 256 * 1024;

/// The routes (the bearer layer is added by the caller); `admin` is checked before a body is
/// read.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/tenants/{tenant}/export", get(export_handler))
        .route(
            "/v1/tenants/{tenant}/import",
            post(import_handler.layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES))),
        )
        .route_layer(axum::middleware::from_fn(require_operator))
}

/// `admin` (an operator), before the handler reads anything.
async fn require_operator(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match req
        .extensions()
        .get::<Principal>()
        .map(|p| p.require(Scope::Admin))
    {
        Some(Ok(())) => next.run(req).await,
        Some(Err(e)) => ApiError::native(e).into_response(),
        None => ApiError::native(Error::unauthenticated("missing bearer token")).into_response(),
    }
}

fn tenant(name: &str) -> Result<TenantId> {
    TenantId::parse(name).map_err(|e| ApiError::native(e.with_param("tenant")))
}

fn archive_err(e: &tenant_archive::ArchiveError) -> ApiError {
    if let tenant_archive::ArchiveError::Db(db) = e {
        tracing::warn!(error = %db, "tenant archive: database error");
    }
    ApiError::native(e.to_api())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    #[serde(default)]
    runs: bool,
}

/// `GET /v1/tenants/{tenant}/export[?runs=true]`: the tenant's archive, streamed. Every section
/// is read before the answer starts (an error there is an error status); the blobs are read while
/// it is sent (an error there ends the stream early, and the truncated archive is refused by
/// import, which finds blobs missing).
#[tracing::instrument(skip_all)]
pub async fn export_handler(
    State(st): State<AppState>,
    NativePath(name): NativePath<String>,
    NativeQuery(q): NativeQuery<ExportQuery>,
) -> Result<Response> {
    let t = tenant(&name)?;
    let opts = ExportOptions { runs: q.runs };
    let prepared = tenant_archive::prepare_export(&st.pool, &t, opts)
        .await
        .map_err(|e| archive_err(&e))?;
    let (tx, rx) = tokio::io::duplex(STREAM_BUFFER);
    // Owned by the answer: it ends when the archive is written, when the client goes away (the
    // pipe's reader is dropped) or at shutdown.
    let stop = st.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = prepared.write_to(None, tx) => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "tenant export ended early");
                }
            }
            () = stop.cancelled() => {}
        }
    });
    let disposition = format!("attachment; filename=\"{}.tar\"", t.as_str());
    Ok((
        [
            (CONTENT_TYPE, "application/x-tar".to_owned()),
            (CONTENT_DISPOSITION, disposition),
        ],
        axum::body::Body::from_stream(chunks(rx)),
    )
        .into_response())
}

/// The bytes of `rx` as they come, until its writer is done or gone.
fn chunks(
    rx: tokio::io::DuplexStream,
) -> impl futures::Stream<Item = std::io::Result<axum::body::Bytes>> {
    futures::stream::unfold(rx, |mut rx| async move {
        let mut buf = vec![0u8; 64 * 1024];
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(axum::body::Bytes::from(buf)), rx))
            }
        }
    })
}

/// `POST /v1/tenants/{tenant}/import`: imports the body's archive as `{tenant}`; 409 with the
/// report when an item conflicts (nothing written).
#[tracing::instrument(skip_all)]
pub async fn import_handler(
    State(st): State<AppState>,
    Extension(_p): Extension<Principal>,
    NativePath(name): NativePath<String>,
    body: axum::body::Bytes,
) -> Result<Response> {
    let t = tenant(&name)?;
    // Checking the archive hashes every byte of it: off the async workers.
    let archive = tokio::task::spawn_blocking(move || Archive::read(&body[..]))
        .await
        .map_err(|_| ApiError::native(Error::internal()))?
        .map_err(|e| ApiError::native(e.to_api().with_param("body")))?;
    let report = tenant_archive::import_tenant(&st.pool, &archive, &t)
        .await
        .map_err(|e| archive_err(&e))?;
    let status = if report.applied {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    Ok((status, Json(report)).into_response())
}
