//! weft's ingress (ARCHITECTURE.md, "ingress"): the scheduler, which fires cron schedules exactly
//! once across replicas without a leader, and the receiver of signed inbound webhooks
//! (verify-before-parse, dedupe by delivery id, fleet-wide rate limit). `docs/ingress.md` has
//! the design and what it promises.
//!
//! Every ingress replica ticks ([`scheduler`]); the webhook receiver ([`webhooks`]) is served by
//! the gateway (`POST /v1/_webhooks/{tenant}/{name}`) and by the `weft-ingress` binary.

pub mod scheduler;
pub mod verify;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use weft_config::IngressConfig;
use weft_coord::Coord;
use weft_core::{Error, Principal, Scope, Scopes, TenantId};
use weft_launch::Launcher;
use weft_proto::transport::GrpcTransport;
use weft_proto::v1;
use weft_store::{DeliveryStore, ScheduleStore};

/// What the scheduler and the receiver need. Cheap to clone.
#[derive(Clone)]
pub struct Ingress {
    pub launcher: Launcher,
    pub schedules: ScheduleStore,
    pub deliveries: DeliveryStore,
    pub coord: Coord,
    pub memory: v1::memory_client::MemoryClient<GrpcTransport>,
    pub channels: v1::channels_client::ChannelsClient<GrpcTransport>,
    pub cfg: Arc<IngressConfig>,
    /// Who claims fires (`<host>:<pid>:<n>`), recorded on each claim.
    pub replica: Arc<str>,
    pub(crate) defs: Arc<webhooks::DefCache>,
}

impl Ingress {
    /// Builds the ingress around a launcher and the substrate transport.
    pub fn new(
        launcher: Launcher,
        substrate: GrpcTransport,
        cfg: IngressConfig,
        replica: impl Into<Arc<str>>,
    ) -> Self {
        let pool = launcher.runs.pool().clone();
        Self {
            schedules: ScheduleStore::new(pool.clone()),
            deliveries: DeliveryStore::new(pool),
            coord: launcher.coord.clone(),
            memory: weft_proto::transport::memory_client(substrate.clone()),
            channels: weft_proto::transport::channels_client(substrate),
            launcher,
            cfg: Arc::new(cfg),
            replica: replica.into(),
            defs: Arc::new(webhooks::DefCache::new(Duration::from_secs(1))),
        }
    }
}

/// A replica name: host, process id and a random suffix.
pub fn replica_name(role: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
    format!(
        "{role}:{host}:{}:{}",
        std::process::id(),
        &uuid::Uuid::now_v7().simple().to_string()[24..]
    )
}

/// The principal work started by a schedule or webhook acts as: the definition's tenant and a
/// subject naming the door (`schedule:<name>`, `webhook:<name>`).
pub fn door_principal(tenant: &TenantId, subject: String) -> Principal {
    Principal {
        tenant: tenant.clone(),
        subject,
        scopes: Scopes::new([
            Scope::RunsCreate,
            Scope::RunsRead,
            Scope::MemoryRead,
            Scope::MemoryWrite,
            Scope::ChannelsPublish,
            Scope::ChannelsRead,
        ]),
        token_id: None,
        agent: None,
    }
}

/// An error's message for a record (never a secret: errors never carry one).
pub(crate) fn brief(e: &Error) -> String {
    let mut m = format!("{}: {}", e.code.as_str(), e.message);
    if m.len() > 500 {
        let mut cut = 500;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
    }
    m
}

#[derive(Debug, thiserror::Error)]
pub enum IngressError {
    #[error("ingress: {0}")]
    Store(#[from] weft_store::StoreError),
    #[error("ingress: {0}")]
    Bus(#[from] weft_bus::BusError),
    #[error("ingress: {0}")]
    Coord(#[from] weft_coord::CoordError),
    #[error("ingress: serving failed: {0}")]
    Serve(#[from] std::io::Error),
}

/// Connects an ingress replica from `config` (Postgres, NATS, Redis), reaching the substrate
/// over `substrate`.
pub async fn connect(
    config: &weft_config::Config,
    jwt: weft_auth::InternalJwt,
    substrate: GrpcTransport,
) -> Result<Ingress, IngressError> {
    let pool = weft_store::open(&config.database).await?;
    let bus = weft_bus::Bus::connect(&config.nats.url, &config.nats.prefix).await?;
    bus.ensure_dispatch_stream().await?;
    let coord = Coord::new(config.redis.url.expose(), &config.redis.prefix)?;
    Ok(Ingress::new(
        launcher(config, pool, bus, coord, jwt, substrate.clone()),
        substrate,
        config.ingress.clone(),
        replica_name("ingress"),
    ))
}

/// A launcher with the gateway's admission settings (`gateway.tenant_max_concurrent_runs`,
/// `gateway.admission_lease_secs`): every door admits runs alike.
pub fn launcher(
    config: &weft_config::Config,
    pool: sqlx::PgPool,
    bus: weft_bus::Bus,
    coord: Coord,
    jwt: weft_auth::InternalJwt,
    substrate: GrpcTransport,
) -> Launcher {
    door_launcher(Launcher {
        runs: weft_store::RunStore::new(pool),
        bus,
        coord,
        jwt,
        substrate: weft_proto::transport::substrate_client(substrate),
        tenant_max_runs: config.gateway.tenant_max_concurrent_runs,
        admission_lease: Duration::from_secs(config.gateway.admission_lease_secs),
        request_timeout: Duration::from_secs(config.ingress.request_timeout_secs.max(1)),
        agents: None,
        local: None,
        refused: Default::default(),
    })
}

/// How long the ingress doors keep an agent's active version: a fire or delivery within this
/// long of `PUT /v1/agents/{name}` may still start the previous version.
pub const AGENT_CACHE_TTL: Duration = Duration::from_secs(1);

/// `launcher` with the short agent cache the ingress doors use (many runs of one agent).
pub fn door_launcher(mut launcher: Launcher) -> Launcher {
    launcher.agents = Some(Arc::new(weft_launch::AgentCache::new(AGENT_CACHE_TTL)));
    launcher
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SyncQuery {
    #[serde(default)]
    sync: Option<String>,
}

/// `?sync=`: `true`/`1` waits, `false`/`0` or absent does not; anything else is a 400.
fn wants_sync(q: Option<&str>) -> Result<bool, Error> {
    match q.map(str::to_ascii_lowercase).as_deref() {
        None | Some("false" | "0") => Ok(false),
        Some("true" | "1") => Ok(true),
        Some(_) => Err(Error::invalid("`sync` must be `true` or `false`").with_param("sync")),
    }
}

async fn receive_handler(
    axum::extract::State(ing): axum::extract::State<Ingress>,
    axum::extract::Path((tenant, name)): axum::extract::Path<(String, String)>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> axum::response::Response {
    // The sender's `traceparent`, if any, is the parent: the run the delivery starts joins it.
    let span = tracing::info_span!("webhook", tenant = %tenant, webhook = %name);
    weft_telemetry::adopt_http_trace_context(&span, &headers);
    match sync_param(q.as_deref()) {
        Ok(sync) => {
            let received = webhooks::receive(&ing, &tenant, &name, sync, &headers, body);
            tracing::Instrument::instrument(received, span).await
        }
        Err(e) => webhooks::closing(webhooks::error_response(&e)),
    }
}

/// `?sync=` of a receiver URL; a malformed query is a 400.
pub fn sync_param(raw_query: Option<&str>) -> Result<bool, Error> {
    let Some(q) = raw_query.filter(|q| !q.is_empty()) else {
        return Ok(false);
    };
    let parsed: SyncQuery = serde_urlencoded::from_str(q).map_err(|_| {
        Error::invalid("the query may only hold `sync=true` or `sync=false`").with_param("sync")
    })?;
    wants_sync(parsed.sync.as_deref())
}

/// The routes `weft-ingress` serves besides health: the webhook receiver and `/metrics`.
pub fn router(ing: Ingress) -> axum::Router {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/v1/_webhooks/{tenant}/{name}", post(receive_handler))
        .route(
            "/metrics",
            get(|| async { weft_telemetry::prometheus().render() }),
        )
        .with_state(ing)
}

/// Runs the scheduler and serves the receiver, `/healthz` and `/readyz` (of `health`) on
/// `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ing: Ingress,
    health: weft_telemetry::health::Readiness,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), IngressError> {
    let ticker = tokio::spawn(scheduler::run(ing.clone(), shutdown.child_token()));
    let stop = shutdown.clone();
    axum::serve(listener, router(ing).merge(health.routes()))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await?;
    shutdown.cancel();
    let _ = ticker.await;
    Ok(())
}

/// An ingress replica in the services' boot shape: the scheduler, and the webhook receiver on
/// `ingress.listen` (`weft-ingress`, `weft ingress`).
pub struct IngressService {
    listener: tokio::net::TcpListener,
    ingress: Ingress,
    health: weft_telemetry::health::Readiness,
}

impl weft_telemetry::boot::Service for IngressService {
    type Args = ();
    const DEPENDENCIES: &'static [weft_telemetry::health::Dependency] = &[
        weft_telemetry::health::Dependency::Postgres,
        weft_telemetry::health::Dependency::Redis,
        weft_telemetry::health::Dependency::Nats,
    ];

    fn ports(
        config: &weft_config::Config,
        (): &(),
    ) -> Vec<(std::net::SocketAddr, weft_telemetry::boot::Face)> {
        vec![(config.ingress.listen, weft_telemetry::boot::Face::Http)]
    }

    async fn connect(
        config: weft_config::Config,
        (): (),
        boot: &weft_telemetry::boot::Boot,
    ) -> Result<Self, weft_telemetry::boot::BootError> {
        use weft_telemetry::boot::BootError;
        let secret = config
            .required_jwt_secret("substrate")
            .map_err(BootError::config)?;
        let jwt = weft_auth::InternalJwt::from_secret(secret.expose().as_bytes());
        let substrate = weft_proto::transport::channel(&config.ingress.substrate_url)
            .map_err(|e| BootError::config(format!("ingress.substrate_url: {e}")))?;
        let listener = boot.listen(config.ingress.listen).await?;
        let ingress = connect(&config, jwt, substrate)
            .await
            .map_err(BootError::failed)?;
        Ok(Self {
            listener,
            ingress,
            health: boot.health.clone(),
        })
    }

    async fn serve(
        self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), weft_telemetry::boot::BootError> {
        if let Ok(a) = self.listener.local_addr() {
            tracing::info!(addr = %a, replica = %self.ingress.replica, "ingress serving");
        }
        serve(self.listener, self.ingress, self.health, shutdown)
            .await
            .map_err(weft_telemetry::boot::BootError::failed)
    }
}
