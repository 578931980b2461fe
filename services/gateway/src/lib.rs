//! The gateway: weft's public HTTP edge. It authenticates bearer tokens, checks scopes,
//! validates requests, and forwards model calls to the router over gRPC with a short-lived
//! internal JWT carrying the caller's principal. It serves the OpenAI-compatible routes, the
//! token routes, health, readiness, metrics and the OpenAPI document.

mod a2a;
mod agents;
mod channels;
mod dialect;
pub mod error;
pub mod extract;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod golden_tests;
mod grpc;
mod health;
mod ingress;
mod llm;
mod mcp;
mod memory;
mod messages;
mod openai;
mod openapi;
mod operations;
mod plans;
mod responses;
pub mod runs;
mod sse_read;
mod tenant_archive;
pub mod tokens;
pub mod ui;
pub mod usage;
mod volumes;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_auth::{BearerAuth, InternalJwt, TokenResolver};
use weft_bus::Bus;
use weft_config::Config;
use weft_coord::Coord;
use weft_core::{Error, Principal};
use weft_proto::router_api::{ChatEvents, DirectRouter};
use weft_proto::v1;
use weft_proto::v1::router_client::RouterClient;
use weft_proto::v1::substrate_client::SubstrateClient;
use weft_store::{RunStore, TokenStore};

use crate::error::{ApiError, Shape, render};
use weft_auth::rpc::Peer;

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway: {0}")]
    Store(#[from] weft_store::StoreError),
    #[error("gateway: gateway.router_url {0:?} is not a valid URL")]
    RouterUrl(String),
    #[error("gateway: {0}")]
    Bus(#[from] weft_bus::BusError),
    #[error("gateway: {0}")]
    Coord(#[from] weft_coord::CoordError),
    #[error("gateway: serving failed: {0}")]
    Serve(#[from] std::io::Error),
    #[error("gateway: {0}")]
    Oidc(String),
    #[error("gateway: cannot listen for the public gRPC API on gateway.grpc_listen {0}: {1}")]
    GrpcListen(std::net::SocketAddr, std::io::Error),
}

/// Everything a handler needs. Cheap to clone (one reference count): axum clones the state for
/// every request and every middleware that takes it.
#[derive(Clone)]
pub struct AppState(Arc<State>);

impl std::ops::Deref for AppState {
    type Target = State;

    fn deref(&self) -> &State {
        &self.0
    }
}

/// The substrate's memory service: its gRPC client, or (`weft up`) its implementation in this
/// process, called with a request from [`AppState::memory_request`].
#[derive(Clone)]
pub enum MemoryCalls {
    Grpc(v1::memory_client::MemoryClient<RouterTransport>),
    Direct(Arc<dyn v1::memory_server::Memory>),
}

/// Each of the memory service's calls, on either face.
macro_rules! memory_calls {
    ($($rpc:ident($req:ident) -> $resp:ident;)*) => {
        impl MemoryCalls {
            $(
                pub async fn $rpc(
                    &self,
                    req: tonic::Request<v1::$req>,
                ) -> Result<tonic::Response<v1::$resp>, tonic::Status> {
                    match self {
                        Self::Grpc(c) => c.clone().$rpc(req).await,
                        Self::Direct(s) => s.$rpc(req).await,
                    }
                }
            )*
        }
    };
}

memory_calls! {
    get(MemoryGetRequest) -> MemoryEntry;
    set(MemorySetRequest) -> MemoryEntry;
    delete(MemoryDeleteRequest) -> MemoryDeleteResponse;
    incr(MemoryIncrRequest) -> MemoryEntry;
    list(MemoryListRequest) -> MemoryListResponse;
    search(MemorySearchRequest) -> MemorySearchResponse;
}

/// What [`AppState`] shares.
pub struct State {
    pub pool: PgPool,
    pub tokens: TokenStore,
    pub resolver: TokenResolver,
    pub jwt: InternalJwt,
    router: RouterClient<RouterTransport>,
    /// The router in this process (`weft up`), for chat calls without gRPC; `None` when it runs
    /// elsewhere.
    direct_router: Option<Arc<dyn DirectRouter>>,
    /// The substrate (definitions), over gRPC.
    pub substrate: SubstrateClient<RouterTransport>,
    /// The substrate's memory service, over the same transport or in this process.
    pub memory: MemoryCalls,
    /// The substrate's channels, over gRPC (the same transport).
    pub channels: v1::channels_client::ChannelsClient<RouterTransport>,
    /// The substrate's volumes, over gRPC (the same transport).
    pub volumes: v1::volumes_client::VolumesClient<RouterTransport>,
    /// The caps of `[volumes]`: a file's body, an import's archive.
    pub volume_caps: weft_config::VolumesConfig,
    pub runs: RunStore,
    pub bus: Bus,
    pub coord: Coord,
    /// Starts runs (`POST /v1/runs`, and the schedule and webhook routes).
    pub launcher: weft_launch::Launcher,
    /// Schedules and the webhook receiver (`/v1/_webhooks/...`).
    pub ingress: weft_ingress::Ingress,
    /// Runs one tenant may have admitted at once.
    pub tenant_max_runs: u32,
    /// How long an admission slot lasts unless renewed.
    pub admission_lease: Duration,
    /// Run streams open on this replica, per principal.
    pub streams: Arc<runs::StreamSlots>,
    /// Live events of the runs an executor of this process works on (`weft up`): streams of
    /// those runs read them here instead of subscribing on NATS.
    pub hub: weft_bus::LiveHub,
    request_timeout: Duration,
    /// How long a web UI session lasts.
    pub ui_session_ttl: Duration,
    /// Always mark the session cookie `Secure`.
    pub ui_cookie_secure: bool,
    /// The MCP server face's settings (`/mcp`).
    pub mcp: weft_config::McpServerFaceConfig,
    /// The Responses API's stored responses.
    pub responses: weft_store::ResponseStore,
    /// How long a stored response lives.
    pub responses_ttl: Duration,
    /// Cancelled when the gateway stops (ends open MCP sessions).
    pub shutdown: CancellationToken,
    /// Where the public gRPC API listens, when it is on.
    pub grpc_listen: Option<std::net::SocketAddr>,
    /// The gateway's URL as clients reach it, for the A2A agent card (`gateway.public_url`).
    pub public_url: Option<String>,
}

/// How the gateway reaches the router (and the other services it calls).
pub use weft_proto::transport::{GrpcTransport as RouterTransport, TransportError};

/// A lazily connecting channel to the router at `url`, so the gateway starts (and reports
/// not-ready) while the router is down.
pub fn router_channel(url: &str) -> Result<RouterTransport, GatewayError> {
    weft_proto::transport::channel(url).map_err(|e| GatewayError::RouterUrl(e.0))
}

impl AppState {
    /// Builds the state around a transport to the router.
    pub fn new(
        pool: PgPool,
        config: &Config,
        jwt: InternalJwt,
        router: RouterTransport,
        substrate: RouterTransport,
        bus: Bus,
        coord: Coord,
    ) -> Self {
        let tokens = TokenStore::new(pool.clone());
        let runs = RunStore::new(pool.clone());
        // Install the metrics recorder before the first request records anything.
        let _ = weft_telemetry::prometheus();
        let launcher = weft_launch::Launcher {
            runs: runs.clone(),
            bus: bus.clone(),
            coord: coord.clone(),
            jwt: jwt.clone(),
            substrate: weft_proto::transport::substrate_client(substrate.clone()),
            tenant_max_runs: config.gateway.tenant_max_concurrent_runs,
            admission_lease: Duration::from_secs(config.gateway.admission_lease_secs),
            request_timeout: Duration::from_secs(config.gateway.request_timeout_secs),
            agents: None,
            local: None,
            refused: Default::default(),
        };
        Self(Arc::new(State {
            resolver: TokenResolver::new(
                tokens.clone(),
                Duration::from_millis(config.gateway.token_cache_ttl_ms),
            ),
            tokens,
            jwt: jwt.clone(),
            router: weft_proto::transport::router_client(router),
            direct_router: None,
            memory: MemoryCalls::Grpc(weft_proto::transport::memory_client(substrate.clone())),
            channels: weft_proto::transport::channels_client(substrate.clone()),
            volumes: weft_proto::transport::volumes_client(substrate.clone()),
            volume_caps: config.volumes.clone(),
            launcher: launcher.clone(),
            ingress: weft_ingress::Ingress::new(
                weft_ingress::door_launcher(launcher),
                substrate.clone(),
                config.ingress.clone(),
                weft_ingress::replica_name("gateway"),
            ),
            substrate: weft_proto::transport::substrate_client(substrate),
            runs,
            bus,
            coord,
            tenant_max_runs: config.gateway.tenant_max_concurrent_runs,
            admission_lease: Duration::from_secs(config.gateway.admission_lease_secs),
            streams: Arc::new(runs::StreamSlots::new(
                config.gateway.max_streams_per_principal,
            )),
            hub: weft_bus::LiveHub::new(),
            request_timeout: Duration::from_secs(config.gateway.request_timeout_secs),
            ui_session_ttl: Duration::from_secs(config.gateway.ui_session_ttl_secs),
            ui_cookie_secure: config.gateway.ui_cookie_secure,
            mcp: config.mcp.clone(),
            pool: pool.clone(),
            responses: weft_store::ResponseStore::new(pool.clone()),
            responses_ttl: Duration::from_secs(config.gateway.responses_ttl_secs),
            shutdown: CancellationToken::new(),
            grpc_listen: config.gateway.grpc_listen,
            public_url: config.gateway.public_url.clone(),
        }))
    }

    /// Chat calls go to this router in the same process, without gRPC (the other router calls
    /// still use the transport given to [`AppState::new`]).
    #[must_use]
    ///
    /// # Panics
    /// When the state was already cloned (call it while building the state).
    pub fn with_direct_router(mut self, router: Arc<dyn DirectRouter>) -> Self {
        #[expect(clippy::expect_used, reason = "a wiring mistake, caught by every test")]
        let state = Arc::get_mut(&mut self.0).expect("with_direct_router before any clone");
        state.direct_router = Some(router);
        self
    }

    /// Memory calls go to this substrate's memory service in the same process, with no
    /// encoding and no internal JWT: the principal rides in the request's extensions, where the
    /// substrate's JWT check puts the one it verified (`weft_auth::rpc::in_process`).
    ///
    /// # Panics
    /// When the state was already cloned (call it while building the state).
    #[must_use]
    pub fn with_direct_memory(mut self, memory: Arc<dyn v1::memory_server::Memory>) -> Self {
        #[expect(clippy::expect_used, reason = "a wiring mistake, caught by every test")]
        let state = Arc::get_mut(&mut self.0).expect("with_direct_memory before any clone");
        state.memory = MemoryCalls::Direct(memory);
        self
    }

    /// A memory request from `p`: carrying its internal JWT and the trace context over gRPC;
    /// in-process, the principal itself (the current span is the call's parent).
    pub fn memory_request<T>(&self, p: &Principal, msg: T) -> Result<tonic::Request<T>, Error> {
        match &self.memory {
            MemoryCalls::Grpc(_) => self.internal(p, msg),
            MemoryCalls::Direct(_) => Ok(weft_auth::rpc::in_process(p, msg)),
        }
    }

    /// The executor of this process takes the runs `POST /v1/runs` creates while it has room
    /// (the in-process fast path, docs/runs.md), and streams read the live events of the runs
    /// it works on from `hub` (the one the executor publishes to).
    ///
    /// # Panics
    /// When the state was already cloned (call it while building the state).
    #[must_use]
    pub fn with_local_executor(
        mut self,
        local: Arc<dyn weft_launch::LocalExecutor>,
        hub: weft_bus::LiveHub,
    ) -> Self {
        #[expect(clippy::expect_used, reason = "a wiring mistake, caught by every test")]
        let state = Arc::get_mut(&mut self.0).expect("with_local_executor before any clone");
        state.launcher.local = Some(local);
        state.hub = hub;
        self
    }

    /// A router request carrying the principal's internal JWT and the trace context.
    pub fn internal<T>(&self, p: &Principal, msg: T) -> Result<tonic::Request<T>, Error> {
        weft_auth::rpc::request(&self.jwt, p, msg)
    }

    /// Bounds a router call by `gateway.request_timeout_secs`.
    pub async fn deadline<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Error> {
        self.deadline_on(Peer::ROUTER, call).await
    }

    /// Bounds a substrate call by `gateway.request_timeout_secs`.
    pub async fn substrate_call<T>(
        &self,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Error> {
        self.deadline_on(Peer::SUBSTRATE, call).await
    }

    async fn deadline_on<T>(
        &self,
        peer: Peer,
        call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.request_timeout, call).await {
            Ok(r) => r
                .map(tonic::Response::into_inner)
                .map_err(|s| peer.error(&s)),
            Err(_) => Err(self.timeout_error()),
        }
    }

    fn timeout_error(&self) -> Error {
        Error::new(
            weft_core::ErrorCode::UpstreamTimeout,
            format!(
                "no answer within {} s (gateway.request_timeout_secs)",
                self.request_timeout.as_secs()
            ),
        )
    }

    /// Opens a chat stream; the deadline covers the wait for the first event (the router and
    /// its drivers bound the stream itself with their idle timeouts).
    pub async fn router_chat(
        &self,
        p: &Principal,
        msg: weft_core::chat::ChatRequest,
    ) -> Result<RouterChat, Error> {
        if let Some(direct) = &self.direct_router {
            return match tokio::time::timeout(self.request_timeout, direct.chat(p, msg)).await {
                Ok(Ok(reply)) => {
                    let mut headers = axum::http::HeaderMap::new();
                    for (name, value) in reply.headers {
                        if let Ok(v) = axum::http::HeaderValue::try_from(value) {
                            headers.insert(name, v);
                        }
                    }
                    Ok(RouterChat {
                        events: reply.events,
                        headers,
                    })
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Err(self.timeout_error()),
            };
        }
        let req = self.internal(p, weft_proto::chat_request_to_proto(msg))?;
        let mut client = self.router.clone();
        match tokio::time::timeout(self.request_timeout, client.chat(req)).await {
            Ok(Ok(resp)) => {
                let headers = rate_limit_headers(resp.metadata());
                // Empty events (none are sent) carry nothing and are skipped.
                let events = futures::StreamExt::filter_map(resp.into_inner(), |r| {
                    std::future::ready(match r {
                        Ok(ev) => weft_proto::event_from_proto(ev).map(Ok),
                        Err(s) => Some(Err(Peer::ROUTER.error(&s))),
                    })
                });
                Ok(RouterChat {
                    events: Box::pin(events),
                    headers,
                })
            }
            Ok(Err(s)) => Err(Peer::ROUTER.error(&s)),
            Err(_) => Err(self.timeout_error()),
        }
    }

    /// Embeds; also returns the router's rate-limit headers for the HTTP response.
    pub async fn router_embed(
        &self,
        p: &Principal,
        msg: v1::EmbedRequest,
    ) -> Result<(v1::EmbedResponse, axum::http::HeaderMap), Error> {
        let req = self.internal(p, msg)?;
        let mut client = self.router.clone();
        match tokio::time::timeout(self.request_timeout, client.embed(req)).await {
            Ok(Ok(resp)) => {
                let headers = rate_limit_headers(resp.metadata());
                Ok((resp.into_inner(), headers))
            }
            Ok(Err(s)) => Err(Peer::ROUTER.error(&s)),
            Err(_) => Err(self.timeout_error()),
        }
    }

    pub async fn router_models(&self, p: &Principal) -> Result<Vec<v1::ModelInfo>, Error> {
        let req = self.internal(p, v1::ListModelsRequest::default())?;
        let mut client = self.router.clone();
        self.deadline(client.list_models(req))
            .await
            .map(|r| r.models)
    }

    /// Whether the router answers an authenticated call.
    pub async fn router_ping(&self) -> Result<(), Error> {
        let probe = Principal {
            tenant: weft_core::TenantId::parse("weft-system")?,
            subject: "readyz".into(),
            scopes: weft_core::Scopes::default(),
            token_id: None,
            agent: None,
        };
        self.router_models(&probe).await.map(|_| ())
    }
}

/// An accepted chat call: the router's event stream, and the response headers it decided before
/// the first byte (`x-ratelimit-*`), to copy onto the HTTP response.
pub struct RouterChat {
    pub events: ChatEvents,
    pub headers: axum::http::HeaderMap,
}

/// The router's rate-limit verdict travels as gRPC response metadata named like the HTTP
/// headers (`x-ratelimit-limit-requests`, …); these become HTTP response headers.
pub fn rate_limit_headers(md: &tonic::metadata::MetadataMap) -> axum::http::HeaderMap {
    let mut out = axum::http::HeaderMap::new();
    for name in weft_core::ratelimit::HEADERS {
        if let Some(v) = md.get(*name)
            && let Ok(v) = axum::http::HeaderValue::from_bytes(v.as_bytes())
        {
            out.insert(*name, v);
        }
    }
    out
}

fn auth(state: &AppState, shape: Shape) -> BearerAuth {
    BearerAuth {
        resolver: state.resolver.clone(),
        render: Arc::new(move |e: Error| render(&e, shape)),
        // The web UI calls the native routes with its session cookie; the OpenAI and Anthropic
        // doors take tokens only.
        sessions: matches!(shape, Shape::Native).then(|| state.tokens.clone()),
    }
}

/// The HTTP routes: the API, the A2A server (`/a2a/…` and the agent card) and weft's MCP
/// server face at `/mcp`, both of which call the API in-process. `max_body_bytes` caps every
/// request body.
pub fn router(state: AppState, max_body_bytes: usize) -> axum::Router {
    let api = api_router(state.clone(), max_body_bytes);
    let a2a = a2a::routes(&state, api.clone(), max_body_bytes);
    if !state.mcp.enabled {
        return api.merge(a2a);
    }
    let face = mcp::routes(&state, api.clone(), max_body_bytes);
    api.merge(a2a).merge(face)
}

/// The API routes (everything but `/mcp`).
fn api_router(state: AppState, max_body_bytes: usize) -> axum::Router {
    let openai = axum::Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/models", get(openai::models))
        .merge(responses::routes())
        .route_layer(middleware::from_fn(openai::require_llm_call))
        .route_layer(middleware::from_fn_with_state(
            auth(&state, Shape::OpenAi),
            BearerAuth::middleware,
        ));
    let native = axum::Router::new()
        .route("/v1/me", get(tokens::me_handler))
        .route(
            "/v1/tokens",
            post(tokens::create_token_handler).get(tokens::list_tokens_handler),
        )
        .route("/v1/tokens/{id}", delete(tokens::revoke_token_handler))
        .merge(runs::routes())
        .merge(plans::routes())
        .merge(agents::routes())
        .merge(llm::routes())
        .merge(usage::routes())
        .merge(memory::routes())
        .merge(channels::routes())
        .merge(volumes::routes(&state.volume_caps))
        .merge(ingress::routes())
        .merge(operations::routes())
        .merge(tenant_archive::routes())
        .route_layer(middleware::from_fn_with_state(
            auth(&state, Shape::Native),
            BearerAuth::middleware,
        ));
    let anthropic = axum::Router::new()
        .route("/v1/messages", post(messages::messages_handler))
        .route(
            "/v1/messages/count_tokens",
            post(messages::count_tokens_handler),
        )
        .route_layer(middleware::from_fn(messages::require_llm_call))
        .route_layer(middleware::from_fn_with_state(
            auth(&state, Shape::Anthropic),
            BearerAuth::middleware,
        ));
    axum::Router::new()
        .merge(openai)
        .merge(anthropic)
        .merge(native)
        .merge(ingress::receiver())
        .merge(ui::routes())
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(openapi::openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(axum::extract::DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn(settle_body))
        .layer(middleware::from_fn(observe))
}

/// The largest request body [`settle_body`] reads ahead of the route.
pub const SETTLE_BODY_BYTES: u64 = 64 * 1024;

/// Keeps every answer honest about its connection. A route refusing a request before reading
/// its body (a bad path parameter, a missing token, an unknown route) leaves the body unread;
/// when it has not all arrived, hyper closes the connection after the answer without saying so
/// (`connection: close` is decided too late), and a client reusing the connection at once
/// (urllib3 writes headers and body apart) has its next request reset. So:
/// - a small body (a `content-length` of at most [`SETTLE_BODY_BYTES`], no `expect:
///   100-continue`) is read before the route sees the request, as nginx discards an unread
///   body: the connection stays usable whatever the answer;
/// - any other body is watched, and an answer given before it was read to its end says
///   `connection: close`.
pub async fn settle_body(req: Request, next: Next) -> Response {
    use http_body::Body as _;
    let headers = req.headers();
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let small = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n <= SETTLE_BODY_BYTES);
    let (parts, body) = req.into_parts();
    match small {
        Some(len) if !parts.headers.contains_key(axum::http::header::EXPECT) => {
            let limit = usize::try_from(len).unwrap_or(usize::MAX);
            match axum::body::to_bytes(body, limit).await {
                Ok(bytes) => {
                    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                        .await
                }
                Err(e) => render(
                    &Error::invalid(format!("the request body could not be read: {e}")),
                    shape_for(parts.uri.path()),
                ),
            }
        }
        _ => {
            let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let body = axum::body::Body::new(Watched {
                inner: body,
                ended: ended.clone(),
            });
            let resp = next.run(Request::from_parts(parts, body)).await;
            if ended.load(std::sync::atomic::Ordering::Acquire) {
                resp
            } else {
                weft_ingress::webhooks::closing(resp)
            }
        }
    }
}

/// A request body that records whether it was read to its end.
struct Watched {
    inner: axum::body::Body,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for Watched {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, std::sync::atomic::Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

async fn not_found(req: Request) -> ApiError {
    let shape = shape_for(req.uri().path());
    ApiError(
        Error::not_found(format!(
            "no route for {} {}; /v1/openapi.json lists the routes",
            req.method(),
            req.uri().path()
        )),
        shape,
    )
}

/// The routes that answer in OpenAI's error shape.
const OPENAI_PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/embeddings", "/v1/models"];

fn shape_for(path: &str) -> Shape {
    if OPENAI_PATHS.contains(&path) {
        Shape::OpenAi
    } else {
        Shape::Native
    }
}

async fn method_not_allowed(req: Request) -> Response {
    let mut r = render(
        &Error::invalid(format!(
            "{} is not allowed on {}",
            req.method(),
            req.uri().path()
        )),
        shape_for(req.uri().path()),
    );
    *r.status_mut() = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    r
}

const X_REQUEST_ID: axum::http::HeaderName = axum::http::HeaderName::from_static("x-request-id");

/// What every request gets, in one layer (one future, not four): its `x-request-id` (the
/// caller's, or a new UUID) on the request and on the response; one span with the id, method,
/// route and status — never a body or a header value — and a warning for a 5xx; and the
/// per-route request metrics.
async fn observe(mut req: Request, next: Next) -> Response {
    static ROUTES: std::sync::LazyLock<weft_telemetry::handles::RouteMetrics> =
        std::sync::LazyLock::new(|| {
            weft_telemetry::handles::RouteMetrics::new(
                "weft_gateway_request_seconds",
                "weft_gateway_requests_total",
            )
        });
    let start = Instant::now();
    let rid = match req.headers().get(X_REQUEST_ID) {
        Some(v) => v.clone(),
        None => {
            let mut buf = uuid::Uuid::encode_buffer();
            let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
            // A UUID is always a valid header value.
            let v = axum::http::HeaderValue::from_str(id)
                .unwrap_or(axum::http::HeaderValue::from_static("-"));
            req.headers_mut().insert(X_REQUEST_ID, v.clone());
            v
        }
    };
    let route = req.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        target: weft_telemetry::REQUEST_SPANS,
        "http",
        request_id = rid.to_str().unwrap_or_default(),
        method = %req.method(),
        route,
        status = tracing::field::Empty
    );
    // A caller's W3C `traceparent` makes this request a hop of the caller's trace.
    weft_telemetry::adopt_http_trace_context(&span, req.headers());
    let mut resp = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    let status = resp.status();
    ROUTES.record(route, status.as_u16(), start.elapsed().as_secs_f64());
    span.record("status", status.as_u16());
    if status.is_server_error() {
        // The line names its request itself: at `info` the log layer does not see spans.
        span.in_scope(|| {
            tracing::warn!(
                request_id = rid.to_str().unwrap_or_default(),
                route,
                status = status.as_u16(),
                "request failed"
            );
        });
    }
    resp.headers_mut().entry(X_REQUEST_ID).or_insert(rid);
    resp
}

/// Connects the database (migrating when configured) and builds the state.
pub async fn connect(
    config: &Config,
    jwt: InternalJwt,
    router: RouterTransport,
    substrate: RouterTransport,
) -> Result<AppState, GatewayError> {
    let pool = weft_store::open(&config.database).await?;
    connect_on(config, pool, jwt, router, substrate).await
}

/// Builds the state on a pool the caller opened (`weft up` shares one among its services).
pub async fn connect_on(
    config: &Config,
    pool: sqlx::PgPool,
    jwt: InternalJwt,
    router: RouterTransport,
    substrate: RouterTransport,
) -> Result<AppState, GatewayError> {
    let bus = Bus::connect(&config.nats.url, &config.nats.prefix).await?;
    bus.ensure_dispatch_stream().await?;
    bus.ensure_usage_stream().await?;
    let coord = Coord::new(config.redis.url.expose(), &config.redis.prefix)?;
    let mut state = AppState::new(pool, config, jwt, router, substrate, bus.clone(), coord);
    // `POST /v1/runs` keeps active agent versions until the substrate announces a change.
    let agents =
        weft_launch::AgentCache::following(AGENT_CACHE_TTL, bus, state.shutdown.clone()).await?;
    #[expect(clippy::expect_used, reason = "the state was made just above")]
    let inner = Arc::get_mut(&mut state.0).expect("a new state");
    inner.launcher.agents = Some(agents);
    // JWTs of the identity providers an operator trusts resolve beside weft tokens, on every door.
    let oidc = weft_auth::OidcVerifier::from_config(&config.auth).map_err(GatewayError::Oidc)?;
    inner.resolver = inner.resolver.clone().with_oidc(oidc);
    Ok(state)
}

/// The longest `POST /v1/runs` keeps an agent's active version: a backstop only, since every
/// change made through the substrate's API is announced and drops it at once (and a NATS
/// disconnection drops every entry). It bounds how long a change the substrate could not
/// announce (NATS down at that moment) goes unseen.
pub const AGENT_CACHE_TTL: Duration = Duration::from_secs(30);

/// How often a replica deletes expired stored responses (reads never see them anyway).
const RESPONSES_SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Serves HTTP on `listener` until `shutdown`, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    max_body_bytes: usize,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // Every replica runs a usage writer; it stops with the server, after writing what it pulled.
    let writer_stop = shutdown.child_token();
    let writer = tokio::spawn(usage::run_usage_writer(
        state.bus.clone(),
        weft_store::UsageStore::new(state.pool.clone()),
        writer_stop.clone(),
    ));
    // And sweeps expired stored responses.
    tokio::spawn(responses::sweep_until(
        state.responses.clone(),
        RESPONSES_SWEEP_EVERY,
        writer_stop.clone(),
    ));
    // And keeps admission's pause keys equal to the drains in force.
    tokio::spawn(operations::mirror_pauses(
        state.clone(),
        writer_stop.clone(),
    ));
    tracing::info!("gateway serving");
    let face_stop = state.shutdown.clone();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        face_stop.cancel();
    });
    let grpc_listen = state.grpc_listen;
    let app = router(state, max_body_bytes);
    // The public gRPC API, when an operator turned it on: calls on the same router.
    let grpc = match grpc_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .map_err(|e| GatewayError::GrpcListen(addr, e))?;
            let stop = shutdown.clone();
            let api = app.clone();
            Some(tokio::spawn(async move {
                if let Err(e) = grpc::serve(l, api, stop).await {
                    tracing::error!(error = %e, "public gRPC API stopped");
                }
            }))
        }
        None => None,
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await;
    writer_stop.cancel();
    let _ = writer.await;
    // Open gRPC streams get a moment to end with the HTTP ones; a long run stream is cut.
    if let Some(mut g) = grpc
        && tokio::time::timeout(Duration::from_secs(5), &mut g)
            .await
            .is_err()
    {
        g.abort();
    }
    served?;
    Ok(())
}

/// Connects and serves: the whole gateway for its own binary.
pub async fn run(
    listener: TcpListener,
    config: Config,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    let router = router_channel(&config.gateway.router_url)?;
    let substrate = router_channel(&config.gateway.substrate_url)?;
    let state = connect(&config, jwt, router, substrate).await?;
    serve(listener, state, config.gateway.max_body_bytes, shutdown).await
}
