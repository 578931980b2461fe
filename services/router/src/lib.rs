//! The provider router: resolves a requested model (a name, an alias, `provider/model` or
//! `tier:<name>`) to an ordered list of candidates, calls the first through its driver, falls
//! back to the next on a retryable failure before the first byte, and streams the turn back as
//! [`ChatEvent`]s over gRPC. Every call must carry a valid internal JWT.

pub mod accounting;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
pub mod providers;
pub mod routing;
pub mod spool;
pub mod types;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_auth::{InternalJwt, JwtInterceptor};
use weft_config::Config;

pub use routing::Routing;
pub use types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("router config: {0}")]
    Config(String),
    #[error("router transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Builds the routing table and drivers from config, without Redis or NATS (no quotas, provider
/// caps or usage records): for driver tests.
pub fn build(config: &Config) -> Result<Arc<Routing>, RouterError> {
    Routing::from_config(&config.router).map(Arc::new)
}

/// Builds the routing table and connects what quotas, provider caps and usage records need:
/// Redis (lazily; calls fail closed while it is down) and NATS (at start; the usage stream is
/// created if missing).
pub async fn connect(config: &Config) -> Result<Arc<Routing>, RouterError> {
    let coord = weft_coord::Coord::new(config.redis.url.expose(), &config.redis.prefix)
        .map_err(|e| RouterError::Config(format!("redis.url: {e}")))?;
    let bus = weft_bus::Bus::connect(&config.nats.url, &config.nats.prefix)
        .await
        .map_err(|e| RouterError::Config(format!("nats: {e}")))?;
    bus.ensure_usage_stream()
        .await
        .map_err(|e| RouterError::Config(format!("nats usage stream: {e}")))?;
    let spool = open_spool(config)?;
    Ok(Arc::new(
        Routing::from_config(&config.router)?.with_deps(accounting::Deps::new(coord, bus, spool)),
    ))
}

/// The usage spool in `router.usage_spool_dir`, a subdirectory per NATS prefix (the records of
/// one deployment's stream); `None` when the setting is empty.
fn open_spool(config: &Config) -> Result<Option<spool::Spool>, RouterError> {
    let dir = &config.router.usage_spool_dir;
    if dir.as_os_str().is_empty() {
        tracing::warn!(
            "router.usage_spool_dir is empty: a router that dies while NATS is unreachable loses the usage records it holds"
        );
        return Ok(None);
    }
    let dir = dir.join(&config.nats.prefix);
    spool::Spool::open(&dir).map(Some).map_err(|e| {
        RouterError::Config(format!(
            "router.usage_spool_dir: cannot write usage records under {}: {e}; point it at a writable directory (WEFT_ROUTER__USAGE_SPOOL_DIR), or set it empty to run without a spool",
            dir.display()
        ))
    })
}

/// Serves the router's gRPC API on `listener` until `shutdown` is cancelled, then drains.
pub async fn run(
    listener: TcpListener,
    config: Config,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    let routing = connect(&config).await?;
    let health =
        weft_telemetry::health::Readiness::for_config(&config, DEPENDENCIES, shutdown.clone());
    health.set_started();
    serve(listener, routing, jwt, health, shutdown).await
}

/// What the router needs answering to serve: Redis (quotas, concurrency caps) and NATS (usage
/// records).
pub const DEPENDENCIES: &[weft_telemetry::health::Dependency] = &[
    weft_telemetry::health::Dependency::Redis,
    weft_telemetry::health::Dependency::Nats,
];

/// The gRPC services the router's port serves, as its health service names them.
pub const GRPC_SERVICES: &[&str] = &[weft_proto::v1::router_server::SERVICE_NAME];

/// The router's gRPC service with its JWT check, to mount on a server or to call in-process.
pub fn grpc_service(
    routing: Arc<Routing>,
    jwt: InternalJwt,
) -> tonic::service::interceptor::InterceptedService<
    weft_proto::v1::router_server::RouterServer<grpc::RouterService>,
    JwtInterceptor,
> {
    let server =
        weft_proto::v1::router_server::RouterServer::new(grpc::RouterService::new(routing))
            .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
            .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES);
    tonic::service::interceptor::InterceptedService::new(server, JwtInterceptor::new(jwt))
}

/// The router as its own process (`weft-router`, `weft router`), in the shared boot shape
/// ([`weft_telemetry::boot`]): the internal JWT key from config, gRPC on `router.listen` with
/// the health service, `/metrics`, `/healthz` and `/readyz` on `router.metrics_listen` when set.
pub struct RouterService {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    routing: Arc<Routing>,
    jwt: InternalJwt,
    health: weft_telemetry::health::Readiness,
}

impl weft_telemetry::boot::Service for RouterService {
    type Args = ();
    const DEPENDENCIES: &'static [weft_telemetry::health::Dependency] = DEPENDENCIES;
    const GRPC_SERVICES: &'static [&'static str] = GRPC_SERVICES;

    fn ports(config: &Config, (): &()) -> Vec<(std::net::SocketAddr, weft_telemetry::boot::Face)> {
        let mut ports = vec![(config.router.listen, weft_telemetry::boot::Face::Grpc)];
        ports.extend(
            config
                .router
                .metrics_listen
                .map(|a| (a, weft_telemetry::boot::Face::Http)),
        );
        ports
    }

    async fn connect(
        config: Config,
        (): (),
        boot: &weft_telemetry::boot::Boot,
    ) -> Result<Self, weft_telemetry::boot::BootError> {
        use weft_telemetry::boot::BootError;
        let secret = config
            .required_jwt_secret("gateway")
            .map_err(BootError::config)?;
        let jwt = InternalJwt::from_secret(secret.expose().as_bytes());
        let listener = boot.listen(config.router.listen).await?;
        let metrics = match config.router.metrics_listen {
            Some(addr) => Some(boot.listen(addr).await?),
            None => None,
        };
        let routing = connect(&config).await.map_err(BootError::failed)?;
        Ok(Self {
            listener,
            metrics,
            routing,
            jwt,
            health: boot.health.clone(),
        })
    }

    async fn serve(
        self,
        shutdown: CancellationToken,
    ) -> Result<(), weft_telemetry::boot::BootError> {
        if let Some(l) = self.metrics {
            tokio::spawn(weft_telemetry::health::serve_ops(
                l,
                self.health.clone(),
                shutdown.clone(),
            ));
        }
        serve(self.listener, self.routing, self.jwt, self.health, shutdown)
            .await
            .map_err(weft_telemetry::boot::BootError::failed)
    }
}

/// Like [`run`], with a routing table already built.
pub async fn serve(
    listener: TcpListener,
    routing: Arc<Routing>,
    jwt: InternalJwt,
    health: weft_telemetry::health::Readiness,
    shutdown: CancellationToken,
) -> Result<(), RouterError> {
    let addr = listener.local_addr().ok();
    // Install the metrics recorder before the first call records anything.
    let _ = weft_telemetry::prometheus();
    let svc = grpc_service(routing, jwt);
    tracing::info!(addr = ?addr, "router serving");
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(svc)
        .add_service(health.grpc(GRPC_SERVICES).await)
        // `Server::tcp_nodelay` does not reach sockets accepted from our own listener; the
        // incoming stream has to set it, or streamed replies wait on Nagle + delayed ACK (~40 ms).
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await?;
    Ok(())
}
