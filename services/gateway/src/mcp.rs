//! `/mcp`: weft's MCP server face (the MCP bridge's [`weft_mcp_bridge::face`]) mounted on the
//! gateway. The bearer token is checked here, as on every native route (401 with
//! `WWW-Authenticate: Bearer` when missing or bad); each MCP tool then calls the gateway's own
//! API in-process with that token, so scopes, tenancy and validation are the API's.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use futures::future::BoxFuture;
use serde_json::Value;
use tower::ServiceExt as _;
use weft_core::Error;
use weft_mcp_bridge::face::{Caller, UpResponse, Upstream};

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
        let router = self.0.clone();
        Box::pin(async move {
            let mut req = http::Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::AUTHORIZATION, format!("Bearer {bearer}"));
            let body = match body {
                Some(v) => {
                    req = req.header(http::header::CONTENT_TYPE, "application/json");
                    Body::from(v.to_string())
                }
                None => Body::empty(),
            };
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

/// Checks the bearer token and hands the face its [`Caller`].
pub async fn authenticate(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(token) = weft_auth::bearer_token(req.headers()).map(str::to_owned) else {
        return unauthorized(Error::unauthenticated(
            "missing bearer token; send `Authorization: Bearer wft_…` (a weft token)",
        ));
    };
    match st.resolver.resolve(&token).await {
        Ok(p) => {
            let delete = req.method() == http::Method::DELETE;
            req.extensions_mut().insert(Caller {
                principal: Some(p),
                bearer: token,
            });
            let mut resp = next.run(req).await;
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

/// `/mcp` over `api` (the rest of the gateway).
pub fn routes(st: &AppState, api: axum::Router) -> axum::Router {
    let upstream: Arc<dyn Upstream> = Arc::new(RouterUpstream(api));
    let store = weft_mcp_bridge::sessions::PgSessionStore::new(
        st.pool.clone(),
        std::time::Duration::from_secs(st.mcp.session_ttl_secs),
    );
    let face = weft_mcp_bridge::face::http_service(upstream, &st.mcp, store, st.shutdown.clone());
    axum::Router::new()
        .route_service("/mcp", face)
        .layer(axum::middleware::from_fn_with_state(
            st.clone(),
            authenticate,
        ))
}
