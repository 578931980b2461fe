//! The memory routes (`/v1/memory/…`): thin handlers over the substrate's `weft.v1.Memory`.
//! They check the token's scope (`memory:read` for reads and search, `memory:write` for
//! writes) before any body is parsed, shape the request, forward it ([`crate::MemoryCalls`]: with
//! the caller's internal JWT over gRPC, or to the substrate in this process without encoding)
//! and render the answer. The substrate validates, decides whether the caller may use the
//! scope id (another tenant's or user's is a 404) and stores.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use weft_api::memory::MemoryDeleted;
use weft_core::{Error, Principal, Scope};
use weft_proto::v1;

// The bodies are the contract's types; the old names stay for the OpenAPI tests.
pub use weft_api::memory::{
    MemoryIncr as IncrBody, MemoryPut as PutBody, MemorySearch as SearchBody,
};

use crate::AppState;
use crate::error::ApiError;
use crate::extract::{NativeJson, NativePath, NativeQuery, OptionalNativeJson, ValidJson};

type Result<T> = std::result::Result<T, ApiError>;

/// The search route; every other memory route has a scope in its path.
const SEARCH_PATH: &str = "/v1/memory/search";

/// The routes; mounted inside the bearer-authenticated native router.
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route(SEARCH_PATH, post(search_handler))
        .route("/v1/memory/{scope}/{scope_id}", get(list_handler))
        .route(
            "/v1/memory/{scope}/{scope_id}/{key}",
            get(get_handler).put(put_handler).delete(delete_handler),
        )
        .route(
            "/v1/memory/{scope}/{scope_id}/{key}/incr",
            post(incr_handler),
        )
        .route_layer(axum::middleware::from_fn(require_memory_scope))
}

/// `memory:read` for reads and search, `memory:write` for the rest — before any body is parsed.
async fn require_memory_scope(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let scope = if req.method() == Method::GET || req.uri().path() == SEARCH_PATH {
        Scope::MemoryRead
    } else {
        Scope::MemoryWrite
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

/// Appends `v` as JSON. Writing into a `Vec` cannot fail.
fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    if let Err(e) = serde_json::to_writer(&mut *out, v) {
        tracing::error!(error = %e, "memory: a response field could not be written");
        out.extend_from_slice(b"null");
    }
}

/// Appends the JSON object of an entry (with its search `score` when given). The stored value
/// is compact JSON the substrate validated on write, so it is spliced in as it is rather than
/// parsed into a tree and written out again; text that is not JSON becomes `null`.
fn push_entry(out: &mut Vec<u8>, e: &v1::MemoryEntry, score: Option<f64>) {
    out.extend_from_slice(b"{\"scope\":");
    push_json(out, &e.scope);
    out.extend_from_slice(b",\"scope_id\":");
    push_json(out, &e.scope_id);
    out.extend_from_slice(b",\"key\":");
    push_json(out, &e.key);
    out.extend_from_slice(b",\"value\":");
    if serde_json::from_str::<serde::de::IgnoredAny>(&e.value_json).is_ok() {
        out.extend_from_slice(e.value_json.as_bytes());
    } else {
        tracing::error!("substrate sent a memory value that is not JSON");
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(b",\"version\":");
    push_json(out, &e.version);
    out.extend_from_slice(b",\"expires_at\":");
    push_json(out, &e.expires_at);
    out.extend_from_slice(b",\"updated_at\":");
    push_json(out, &e.updated_at);
    out.extend_from_slice(b",\"embedded\":");
    push_json(out, &e.embedded);
    if let Some(score) = score {
        out.extend_from_slice(b",\"score\":");
        push_json(out, &score);
    }
    out.push(b'}');
}

/// A `200` with a JSON body already written.
fn json_response(body: Vec<u8>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The response of one entry.
fn entry_response(e: &v1::MemoryEntry) -> Response {
    let mut out = Vec::with_capacity(192 + e.value_json.len());
    push_entry(&mut out, e, None);
    json_response(out)
}

/// The response of a page of entries: `{"data": [...], <extra>}`.
fn entries_response<'a>(
    entries: impl Iterator<Item = (&'a v1::MemoryEntry, Option<f64>)>,
    extra_key: &str,
    extra: &impl serde::Serialize,
) -> Response {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(b"{\"data\":[");
    for (i, (e, score)) in entries.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_entry(&mut out, e, score);
    }
    out.extend_from_slice(b"],");
    push_json(&mut out, extra_key);
    out.push(b':');
    push_json(&mut out, extra);
    out.push(b'}');
    json_response(out)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    prefix: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    if_version: Option<i64>,
}

/// `GET /v1/memory/{scope}/{scope_id}/{key}`.
#[tracing::instrument(skip_all)]
pub async fn get_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((scope, scope_id, key)): NativePath<(String, String, String)>,
) -> Result<Response> {
    let req = st
        .memory_request(
            &p,
            v1::MemoryGetRequest {
                scope,
                scope_id,
                key,
            },
        )
        .map_err(ApiError::native)?;
    let e = st
        .substrate_call(st.memory.get(req))
        .await
        .map_err(ApiError::native)?;
    Ok(entry_response(&e))
}

/// `PUT /v1/memory/{scope}/{scope_id}/{key}` `{value, ttl_seconds?, if_version?, embed?}`.
#[tracing::instrument(skip_all)]
pub async fn put_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((scope, scope_id, key)): NativePath<(String, String, String)>,
    ValidJson(body): NativeJson<PutBody>,
) -> Result<Response> {
    let value = body.value.ok_or_else(|| {
        ApiError::native(
            Error::invalid("`value` is required: any JSON value up to 64 KiB").with_param("value"),
        )
    })?;
    let req = st
        .memory_request(
            &p,
            v1::MemorySetRequest {
                scope,
                scope_id,
                key,
                value_json: value.to_string(),
                ttl_seconds: body.ttl_seconds,
                if_version: body.if_version,
                embed: body.embed,
                op_key: None,
                agent: None,
            },
        )
        .map_err(ApiError::native)?;
    let e = st
        .substrate_call(st.memory.set(req))
        .await
        .map_err(ApiError::native)?;
    Ok(entry_response(&e))
}

/// `DELETE /v1/memory/{scope}/{scope_id}/{key}?if_version=`.
#[tracing::instrument(skip_all)]
pub async fn delete_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((scope, scope_id, key)): NativePath<(String, String, String)>,
    NativeQuery(q): NativeQuery<DeleteQuery>,
) -> Result<Response> {
    let req = st
        .memory_request(
            &p,
            v1::MemoryDeleteRequest {
                scope,
                scope_id,
                key: key.clone(),
                if_version: q.if_version,
                op_key: None,
                agent: None,
            },
        )
        .map_err(ApiError::native)?;
    let d = st
        .substrate_call(st.memory.delete(req))
        .await
        .map_err(ApiError::native)?;
    Ok(Json(MemoryDeleted {
        key,
        deleted: d.deleted,
        version: d.version,
    })
    .into_response())
}

/// `POST /v1/memory/{scope}/{scope_id}/{key}/incr` `{by?, ttl_seconds?}`.
#[tracing::instrument(skip_all)]
pub async fn incr_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((scope, scope_id, key)): NativePath<(String, String, String)>,
    OptionalNativeJson(body): OptionalNativeJson<IncrBody>,
) -> Result<Response> {
    let req = st
        .memory_request(
            &p,
            v1::MemoryIncrRequest {
                scope,
                scope_id,
                key,
                by: body.by.unwrap_or(1),
                ttl_seconds: body.ttl_seconds,
                op_key: None,
                agent: None,
            },
        )
        .map_err(ApiError::native)?;
    let e = st
        .substrate_call(st.memory.incr(req))
        .await
        .map_err(ApiError::native)?;
    Ok(entry_response(&e))
}

/// `GET /v1/memory/{scope}/{scope_id}?prefix=&cursor=&limit=`.
#[tracing::instrument(skip_all)]
pub async fn list_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    NativePath((scope, scope_id)): NativePath<(String, String)>,
    NativeQuery(q): NativeQuery<ListQuery>,
) -> Result<Response> {
    if q.limit == Some(0) {
        return Err(ApiError::native(
            Error::invalid("`limit` must be between 1 and 1000, got 0").with_param("limit"),
        ));
    }
    let req = st
        .memory_request(
            &p,
            v1::MemoryListRequest {
                scope,
                scope_id,
                prefix: q.prefix.unwrap_or_default(),
                cursor: q.cursor,
                limit: q.limit.unwrap_or(0),
            },
        )
        .map_err(ApiError::native)?;
    let r = st
        .substrate_call(st.memory.list(req))
        .await
        .map_err(ApiError::native)?;
    Ok(entries_response(
        r.entries.iter().map(|e| (e, None)),
        "next_cursor",
        &r.next_cursor,
    ))
}

/// `POST /v1/memory/search` `{scope, scope_id, query, top_k?}`.
#[tracing::instrument(skip_all)]
pub async fn search_handler(
    State(st): State<AppState>,
    Extension(p): Extension<Principal>,
    ValidJson(body): NativeJson<SearchBody>,
) -> Result<Response> {
    if body.top_k == Some(0) {
        return Err(ApiError::native(
            Error::invalid("`top_k` must be between 1 and 100, got 0").with_param("top_k"),
        ));
    }
    let req = st
        .memory_request(
            &p,
            v1::MemorySearchRequest {
                scope: body.scope.0,
                scope_id: body.scope_id.0,
                query: body.query,
                top_k: body.top_k.unwrap_or(0),
            },
        )
        .map_err(ApiError::native)?;
    let r = st
        .substrate_call(st.memory.search(req))
        .await
        .map_err(ApiError::native)?;
    Ok(entries_response(
        r.hits
            .iter()
            .filter_map(|h| h.entry.as_ref().map(|e| (e, Some(h.score)))),
        "mode",
        &r.mode,
    ))
}
