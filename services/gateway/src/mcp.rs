//! `/mcp`: weft's MCP server face (the MCP bridge's [`weft_mcp_face`]) mounted on the
//! gateway. The bearer token is checked here, as on every native route (401 with
//! `WWW-Authenticate: Bearer` when missing or bad); each MCP tool then calls the gateway's own
//! API in-process with that token, so scopes, tenancy and validation are the API's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::Value;
use tower::ServiceExt as _;
use weft_core::Error;
use weft_mcp_face::{Caller, UpResponse, Upstream};

use crate::AppState;
use crate::error::{ApiError, Shape};

/// The gateway's API router, called in-process.
#[derive(Clone)]
pub struct RouterUpstream(pub axum::Router);

impl Upstream for RouterUpstream {
    fn call(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        body: Option<Value>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        let mut headers = http::HeaderMap::new();
        let body = body.map(|v| {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            bytes::Bytes::from(v.to_string())
        });
        self.call_raw(method, path, bearer, headers, body)
    }

    fn call_raw(
        &self,
        method: http::Method,
        path: String,
        bearer: String,
        headers: http::HeaderMap,
        body: Option<bytes::Bytes>,
    ) -> BoxFuture<'static, Result<UpResponse, String>> {
        let router = self.0.clone();
        Box::pin(async move {
            let mut req = http::Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::AUTHORIZATION, format!("Bearer {bearer}"));
            if let Some(h) = req.headers_mut() {
                h.extend(headers);
            }
            let body = body.map_or_else(Body::empty, Body::from);
            let req = req.body(body).map_err(|e| e.to_string())?;
            let Ok(resp) = router.oneshot(req).await;
            let (parts, body) = resp.into_parts();
            let stream = body
                .into_data_stream()
                .map(|r| r.map_err(|e| e.to_string()));
            Ok(UpResponse {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body: stream.boxed(),
            })
        })
    }
}

/// The live `/mcp` sessions of this replica, by id and owner, so that one principal, one tenant
/// and the replica as a whole hold a bounded number. rmcp tells it of every session it opens,
/// restores and ends ([`weft_mcp_face::SessionLedger`]): a session ends when its client
/// deletes it or after `mcp.session_idle_secs` unused, and its place is free again then.
pub struct SessionCaps {
    per_principal: usize,
    per_tenant: usize,
    total: usize,
    idle: Duration,
    state: std::sync::Mutex<Live>,
}

#[derive(Default)]
struct Live {
    /// Session id → owner (`<tenant>/<subject>`; empty when rmcp opened it outside a request).
    sessions: HashMap<String, String>,
    /// `initialize`s admitted and not answered yet, by owner.
    opening: HashMap<String, usize>,
}

/// An admitted `initialize`: its place is given back on drop (by then the session, if one was
/// opened, is counted as such).
struct Opening<'a> {
    caps: &'a SessionCaps,
    owner: String,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Ok(mut st) = self.caps.state.lock()
            && let Some(n) = st.opening.get_mut(&self.owner)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.opening.remove(&self.owner);
            }
        }
    }
}

/// The tenant part of an owner (`<tenant>/<subject>`).
fn tenant_of(owner: &str) -> &str {
    owner.split_once('/').map_or(owner, |(t, _)| t)
}

impl SessionCaps {
    pub fn new(cfg: &weft_config::McpServerFaceConfig) -> Self {
        Self {
            per_principal: cfg.max_sessions_per_principal,
            per_tenant: (cfg.max_sessions / 2).max(1),
            total: cfg.max_sessions,
            idle: Duration::from_secs(cfg.session_idle_secs),
            state: std::sync::Mutex::default(),
        }
    }

    /// Whether `owner` may hold one more session: a 429 saying what to do otherwise.
    fn room(&self, st: &Live, owner: &str) -> Result<(), Error> {
        let tenant = tenant_of(owner);
        let (mut mine, mut tenants, all) = (0, 0, st.sessions.len());
        for o in st.sessions.values() {
            mine += usize::from(o == owner);
            tenants += usize::from(tenant_of(o) == tenant);
        }
        for (o, n) in &st.opening {
            if o == owner {
                mine += n;
            }
            if tenant_of(o) == tenant {
                tenants += n;
            }
        }
        let all = all + st.opening.values().sum::<usize>();
        // A session frees its place at the latest once it has been idle this long.
        let retry = self.idle.min(Duration::from_secs(60));
        let full = |message: String| {
            Err(Error::new(weft_core::ErrorCode::RateLimited, message).with_retry_after(retry))
        };
        if mine >= self.per_principal {
            return full(format!(
                "you hold {mine} MCP sessions on this gateway, the most one caller may (mcp.max_sessions_per_principal); end one with DELETE /mcp (its Mcp-Session-Id), reuse one, or wait for one to idle out"
            ));
        }
        if tenants >= self.per_tenant {
            return full(format!(
                "your tenant holds {tenants} MCP sessions on this gateway, its share (half of mcp.max_sessions); end some with DELETE /mcp, or wait for them to idle out"
            ));
        }
        if all >= self.total {
            return full(format!(
                "this gateway holds {all} MCP sessions, its most (mcp.max_sessions); retry later"
            ));
        }
        Ok(())
    }

    /// Admits one `initialize` of `owner`.
    fn admit(&self, owner: &str) -> Result<Opening<'_>, Error> {
        let mut st = self.state.lock().map_err(|_| Error::internal())?;
        self.room(&st, owner)?;
        *st.opening.entry(owner.to_owned()).or_default() += 1;
        Ok(Opening {
            caps: self,
            owner: owner.to_owned(),
        })
    }

    /// A request on session `id`: one this replica does not hold in memory (opened elsewhere,
    /// or ended here on idle) is restored only while its owner has room.
    fn touch(&self, id: &str, owner: &str) -> Result<(), Error> {
        let st = self.state.lock().map_err(|_| Error::internal())?;
        if st.sessions.contains_key(id) {
            return Ok(());
        }
        self.room(&st, owner)
    }
}

impl weft_mcp_face::SessionLedger for SessionCaps {
    fn opened(&self, id: &str, owner: Option<&str>) {
        if let Ok(mut st) = self.state.lock() {
            st.sessions
                .insert(id.to_owned(), owner.unwrap_or_default().to_owned());
        }
    }

    fn closed(&self, id: &str) {
        if let Ok(mut st) = self.state.lock() {
            st.sessions.remove(id);
        }
    }
}

/// `Origin` as MCP's transport asks: a browser page of another origin (or an opaque `null`
/// one) may not drive `/mcp` with a token the browser holds. Without `mcp.allowed_origins`,
/// only the gateway's own origin (the `Host` the request was sent to) is accepted; with it,
/// rmcp matches the list. A request without `Origin` is not from a browser page: accepted.
fn check_origin(cfg: &weft_config::McpServerFaceConfig, req: &Request) -> Result<(), Error> {
    if !cfg.allowed_origins.is_empty() {
        return Ok(());
    }
    let Some(origin) = req.headers().get(http::header::ORIGIN) else {
        return Ok(());
    };
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(http::uri::Authority::as_str));
    let same = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .is_some_and(|(scheme, rest)| {
            matches!(scheme, "http" | "https") && host.is_some_and(|h| rest.eq_ignore_ascii_case(h))
        });
    if same {
        return Ok(());
    }
    Err(Error::forbidden(
        "this `Origin` may not use /mcp: only the gateway's own origin is accepted; an operator lists others in mcp.allowed_origins",
    ))
}

/// Checks `Origin` and the bearer token, holds the caller to its session cap, and hands the
/// face its [`Caller`].
pub async fn authenticate(
    State((st, caps)): State<(AppState, Arc<SessionCaps>)>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Err(e) = check_origin(&st.mcp, &req) {
        return ApiError(e, Shape::Native).into_response();
    }
    let Some(token) = weft_auth::bearer_token(req.headers()).map(str::to_owned) else {
        return unauthorized(Error::unauthenticated(
            "missing bearer token; send `Authorization: Bearer wft_…` (a weft token)",
        ));
    };
    match st.resolver.resolve(&token).await {
        Ok(p) => {
            let delete = req.method() == http::Method::DELETE;
            let owner = format!("{}/{}", p.tenant, p.subject);
            let store = session_store(&st);
            let session = req
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // A session is honoured only for the principal that opened it: for anyone else (or
            // when its owner is not on record) it does not exist.
            if let Some(id) = &session {
                match store.owner(id).await {
                    Ok(Some(o)) if o == owner => {
                        if !delete && let Err(e) = caps.touch(id, &owner) {
                            return ApiError(e, Shape::Native).into_response();
                        }
                    }
                    Ok(_) => {
                        return ApiError(
                            Error::not_found("no such MCP session; start one with `initialize`"),
                            Shape::Native,
                        )
                        .into_response();
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "mcp session owner lookup failed");
                        return ApiError(
                            Error::unavailable("the session store is unavailable; try again"),
                            Shape::Native,
                        )
                        .into_response();
                    }
                }
            }
            // A request without a session may open one (`initialize`): it needs room under the
            // caps first.
            let opening = if session.is_none() && req.method() == http::Method::POST {
                match caps.admit(&owner) {
                    Ok(o) => Some(o),
                    Err(e) => return ApiError(e, Shape::Native).into_response(),
                }
            } else {
                None
            };
            req.extensions_mut().insert(Caller {
                principal: Some(p),
                bearer: token,
            });
            // rmcp opens (or restores) the session inside this future: it learns whose it is here.
            let mut resp = weft_mcp_face::SESSION_OWNER
                .scope(owner.clone(), next.run(req))
                .await;
            drop(opening);
            // A new session: record its owner before the client can use its id.
            if session.is_none()
                && let Some(id) = resp
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                && let Err(e) = store.set_owner(id, &owner).await
            {
                tracing::error!(error = %e, "mcp session owner could not be recorded");
                return ApiError(
                    Error::unavailable("the session store is unavailable; try again"),
                    Shape::Native,
                )
                .into_response();
            }
            // rmcp answers a session's DELETE with 202; clients (the Python SDK) expect 200 or
            // 204 for a session that was closed.
            if delete && resp.status() == http::StatusCode::ACCEPTED {
                *resp.status_mut() = http::StatusCode::NO_CONTENT;
            }
            resp
        }
        Err(e) => unauthorized(e),
    }
}

fn unauthorized(e: Error) -> Response {
    let mut r = ApiError(e, Shape::Native).into_response();
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer realm=\"weft\""),
    );
    r
}

/// How much of a non-JSON error body from rmcp is kept as the message.
const MAX_ERROR_TEXT: usize = 1024;

/// Speaks weft's error shape on `/mcp` too: a JSON body is checked for NUL like every native
/// body (400 naming the field), and rmcp's plain-text HTTP errors (406 without the right
/// `Accept`, 400 without a session id, …) become `{"error": {"code", "message"}}` with the same
/// status. A body that is not a JSON-RPC message is a 400 (rmcp says 415).
pub async fn weft_errors(State(max_body): State<usize>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max_body).await else {
        return ApiError(
            Error::new(
                weft_core::ErrorCode::PayloadTooLarge,
                format!("the body is larger than gateway.max_body_bytes ({max_body})"),
            ),
            Shape::Native,
        )
        .into_response();
    };
    if let Err(e) = crate::extract::refuse_nul(&bytes) {
        return ApiError(e, Shape::Native).into_response();
    }
    if let Err(e) = check_headers(&parts.headers) {
        return ApiError(e, Shape::Native).into_response();
    }
    let mut parts = parts;
    if parts.method == http::Method::POST
        && let Err(e) = check_message(&bytes)
    {
        return ApiError(e, Shape::Native).into_response();
    }
    // A client that accepts anything (no `Accept`, or `*/*`) accepts what MCP answers with:
    // rmcp insists on seeing the types named.
    let accepts_any = parts
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.trim() == "*/*");
    if accepts_any {
        let named = if parts.method == http::Method::GET {
            "text/event-stream"
        } else {
            "application/json, text/event-stream"
        };
        parts
            .headers
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(named));
    }
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b[..b.len().min(MAX_ERROR_TEXT)]).into_owned())
        .unwrap_or_default();
    let (status, code) = match status.as_u16() {
        415 if text.contains("JSON-RPC") => (
            http::StatusCode::BAD_REQUEST,
            weft_core::ErrorCode::InvalidRequest,
        ),
        404 => (status, weft_core::ErrorCode::NotFound),
        413 => (status, weft_core::ErrorCode::PayloadTooLarge),
        415 => (status, weft_core::ErrorCode::UnsupportedMediaType),
        s if s >= 500 => (status, weft_core::ErrorCode::Internal),
        _ => (status, weft_core::ErrorCode::InvalidRequest),
    };
    let body = weft_api::Error {
        error: weft_api::ErrorBody {
            code: code.as_str().to_owned(),
            message: text.trim().to_owned(),
            kind: None,
            param: None,
        },
    };
    let mut out = (status, axum::Json(body)).into_response();
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// The protocol revisions a client may name in `MCP-Protocol-Version`.
const REVISIONS: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// `Mcp-Session-Id` (1-200 visible ASCII characters, as the protocol makes them) and
/// `MCP-Protocol-Version` (a known revision), checked so that a malformed one is a 400 naming
/// the header rather than a session lookup.
fn check_headers(headers: &http::HeaderMap) -> Result<(), Error> {
    if let Some(v) = headers.get("mcp-session-id") {
        let b = v.as_bytes();
        if b.is_empty() || b.len() > 200 || !b.iter().all(|c| (0x21..=0x7e).contains(c)) {
            return Err(Error::invalid(
                "`Mcp-Session-Id` must be 1 to 200 visible ASCII characters: the id the initialize answer gave",
            )
            .with_param("Mcp-Session-Id"));
        }
    }
    if let Some(v) = headers.get("mcp-protocol-version") {
        let known = v.to_str().is_ok_and(|v| REVISIONS.contains(&v));
        if !known {
            return Err(Error::invalid(format!(
                "`MCP-Protocol-Version` must be one of {}",
                REVISIONS.join(", ")
            ))
            .with_param("MCP-Protocol-Version"));
        }
    }
    Ok(())
}

/// Longest `method` and string `id` accepted.
const MAX_NAME: usize = 256;

/// The envelope of one JSON-RPC message, checked before rmcp sees it so that a malformed one is
/// a 400 naming the field: an object with `"jsonrpc": "2.0"`, a string `method` (a request or a
/// notification) or a `result`/`error` (an answer to the server), a string or integer `id`, and
/// object `params`. Batches (arrays) were removed from MCP in 2025-06-18.
pub(crate) fn check_message(bytes: &[u8]) -> Result<(), Error> {
    let bad = |param: &str, msg: String| Err(Error::invalid(msg).with_param(param));
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(format!(
            "the body is not JSON ({e}); send one JSON-RPC message, e.g. {{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"initialize\", \"params\": {{…}}}}"
        ))
    })?;
    let Some(m) = v.as_object() else {
        return Err(Error::invalid(
            "the body must be one JSON-RPC message (a JSON object); batches are not part of MCP",
        ));
    };
    if m.get("jsonrpc").and_then(serde_json::Value::as_str) != Some("2.0") {
        return bad("jsonrpc", "`jsonrpc` must be the string \"2.0\"".into());
    }
    match m.get("method") {
        None if m.contains_key("result") || m.contains_key("error") => {}
        None => {
            return bad(
                "method",
                "`method` is required (or `result`/`error` in an answer to the server)".into(),
            );
        }
        Some(serde_json::Value::String(s)) if !s.is_empty() && s.len() <= MAX_NAME => {}
        Some(_) => {
            return bad(
                "method",
                format!("`method` must be a string of 1 to {MAX_NAME} characters"),
            );
        }
    }
    match m.get("id") {
        None => {}
        Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => {}
        Some(serde_json::Value::String(s)) if s.len() <= MAX_NAME => {}
        Some(_) => {
            return bad(
                "id",
                format!("`id` must be an integer or a string of at most {MAX_NAME} characters"),
            );
        }
    }
    for field in ["params", "result", "error"] {
        if m.get(field).is_some_and(|p| !p.is_object()) {
            return bad(field, format!("`{field}` must be an object"));
        }
    }
    Ok(())
}

fn session_store(st: &AppState) -> weft_mcp_face::sessions::PgSessionStore {
    weft_mcp_face::sessions::PgSessionStore::new(
        st.pool.clone(),
        std::time::Duration::from_secs(st.mcp.session_ttl_secs),
    )
}

/// `/mcp` over `api` (the rest of the gateway): POST (JSON-RPC messages), GET (a session's
/// server-to-client stream) and DELETE (end a session).
pub fn routes(st: &AppState, api: axum::Router, max_body: usize) -> axum::Router {
    let upstream: Arc<dyn Upstream> = Arc::new(RouterUpstream(api));
    let store = session_store(st);
    tokio::spawn(
        store
            .clone()
            .sweep_until(std::time::Duration::from_secs(600), st.shutdown.clone()),
    );
    let caps = Arc::new(SessionCaps::new(&st.mcp));
    let face =
        weft_mcp_face::http_service(upstream, &st.mcp, store, caps.clone(), st.shutdown.clone());
    // The layers wrap the MCP service itself, not the method router: an unknown method is a
    // 405 before any token is looked at, as on every other route.
    let svc = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn(crate::settle_body))
        .layer(axum::middleware::from_fn_with_state(
            (st.clone(), caps),
            authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(max_body, weft_errors))
        .service(face);
    axum::Router::new().route(
        "/mcp",
        axum::routing::post_service(svc.clone())
            .get_service(svc.clone())
            .delete_service(svc),
    )
}
