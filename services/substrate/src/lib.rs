//! The substrate: versioned, content-addressed, tenant-scoped definitions, served over gRPC
//! (`weft.v1.Substrate`). Today it holds agent definitions: a name points to an active version;
//! a version is the canonical JSON of an [`AgentContent`](weft_core::agent::AgentContent),
//! addressed by `sha256:` of that JSON, with a number and a parent. Every call carries an
//! internal JWT; the tenant comes from it, never from a request field, and another tenant's
//! definition is a `not_found`.
//!
//! Skills share the store: every kind of definition (agents, skills, …) goes through one
//! implementation parameterised by its content ([`weft_core::def::DefContent`]).
//!
//! Layers: [`grpc`] (authorization, prost conversion) → [`defs`] (the rules, for every kind;
//! [`agents`] names them for agents) → [`DefStore`] (Postgres). [`boot`] loads the definitions
//! shipped with a deployment at start; [`skills`] reads skill folders.
//!
//! Beside them it serves [`memory`] (`weft.v1.Memory`: JSON values by key per scope, with TTLs,
//! compare-and-set, atomic increments, quotas and semantic search) and [`channels`]
//! (`weft.v1.Channels`: message streams in Postgres, with wake-ups over NATS) and [`volumes`]
//! (`weft.v1.Volumes`: file trees as content-addressed blobs with a changelog, undo and
//! snapshots). [`Parts`] holds them; [`grpc_service`] mounts every service of the substrate on
//! one set of routes.

pub mod agents;
pub mod boot;
pub mod channels;
pub mod defs;
pub mod grpc;
pub mod memory;
pub mod skills;
pub mod store;
mod sweep;
pub mod volumes;

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use weft_auth::{InternalJwt, JwtInterceptor};
use weft_config::Config;

pub use boot::{BootLoaded, load_boot_definitions};
pub use channels::ChannelHub;
pub use channels::grpc::ChannelsService;
pub use grpc::SubstrateService;
pub use memory::Memory;
pub use skills::hash_skill_dir;
pub use store::{AgentSummaryRecord, AgentVersionRecord, DefStore, SummaryRecord, VersionRecord};
pub use volumes::Volumes;

#[derive(Debug, thiserror::Error)]
pub enum SubstrateError {
    #[error("substrate: {0}")]
    Store(#[from] weft_store::StoreError),
    #[error("substrate transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("substrate: {0}")]
    Bus(#[from] weft_bus::BusError),
    /// A boot definition is invalid or could not be stored; the message names the file (or
    /// config key) and the field.
    #[error("substrate boot definitions: {0}")]
    Boot(String),
}

/// What the substrate serves: definitions, memory, channels and volumes, each over the same
/// database.
#[derive(Clone)]
pub struct Parts {
    pub defs: DefStore,
    pub memory: Memory,
    pub channels: ChannelHub,
    pub volumes: Volumes,
    /// How often expired memory entries are swept.
    pub memory_sweep_every: Duration,
    /// How often the ephemeral volumes of ended runs are purged (`volumes.sweep_interval_ms`).
    pub volumes_sweep_every: Duration,
    /// `ingress.secret_env_prefix` (webhook secrets are named in a tenant's namespace under it).
    pub webhook_secret_prefix: String,
    /// `executor.hook_secret_env_prefix` (hook secrets are named in a tenant's namespace under
    /// it).
    pub hook_secret_prefix: String,
}

/// The substrate's gRPC services (`weft.v1.Substrate`, `weft.v1.Memory`, `weft.v1.Channels`,
/// `weft.v1.Volumes`), each behind the JWT check, as one set of routes: to mount on a server or to call in-process
/// (`weft_proto::transport::in_process`).
pub fn grpc_service(parts: &Parts, jwt: InternalJwt) -> Routes {
    let check = JwtInterceptor::new(jwt);
    Routes::new(
        weft_proto::v1::substrate_server::SubstrateServer::with_interceptor(
            SubstrateService::new(parts.defs.clone())
                .announcing(parts.channels.bus().clone())
                .webhook_secret_prefix(parts.webhook_secret_prefix.clone())
                .hook_secret_prefix(parts.hook_secret_prefix.clone()),
            check.clone(),
        ),
    )
    .add_service(
        weft_proto::v1::memory_server::MemoryServer::with_interceptor(
            memory::grpc::MemoryService::new(parts.memory.clone()),
            check.clone(),
        ),
    )
    .add_service(
        weft_proto::v1::channels_server::ChannelsServer::with_interceptor(
            ChannelsService::new(parts.channels.clone()),
            check.clone(),
        ),
    )
    .add_service(
        // File contents ride in these messages: the internal limit, not tonic's 4 MiB.
        tonic::service::interceptor::InterceptedService::new(
            weft_proto::v1::volumes_server::VolumesServer::new(volumes::grpc::VolumesService::new(
                parts.volumes.clone(),
            ))
            .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
            .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES),
            check,
        ),
    )
}

/// Serves the substrate's gRPC API on `listener` until `shutdown` is cancelled, then drains.
/// Expired memory entries and channel messages are swept meanwhile, and the ephemeral volumes
/// of ended runs purged.
pub async fn serve(
    listener: TcpListener,
    parts: Parts,
    jwt: InternalJwt,
    health: weft_telemetry::health::Readiness,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let addr = listener.local_addr().ok();
    let memory_sweep = tokio::spawn(memory::sweep_until(
        parts.memory.store().clone(),
        parts.memory_sweep_every,
        shutdown.clone(),
    ));
    let channel_sweep = tokio::spawn({
        let hub = parts.channels.clone();
        let stop = shutdown.child_token();
        async move { hub.sweep_until(stop).await }
    });
    let volume_sweep = tokio::spawn(volumes::sweep_until(
        parts.volumes.store().clone(),
        parts.volumes_sweep_every,
        shutdown.clone(),
    ));
    let routes = grpc_service(&parts, jwt).add_service(health.grpc(GRPC_SERVICES).await);
    tracing::info!(addr = ?addr, "substrate serving");
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_routes(routes)
        // `Server::tcp_nodelay` does not reach sockets accepted from our own listener.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await;
    memory_sweep.abort();
    channel_sweep.abort();
    volume_sweep.abort();
    served?;
    Ok(())
}

/// The memory over `defs`' database. Embeddings go through `router` as the calling principal
/// (signed with `jwt`); without a router, writes with `embed` and searches are refused.
pub async fn connect_memory(
    config: &Config,
    defs: &DefStore,
    router: Option<weft_proto::transport::GrpcTransport>,
    jwt: InternalJwt,
) -> Result<Memory, SubstrateError> {
    let pool = defs.pool().clone();
    let support = memory::vector_support(&pool)
        .await
        .map_err(weft_store::StoreError::Db)?;
    let mode = memory::search_mode(support);
    tracing::info!(
        mode = mode.as_str(),
        pgvector_installed = support.installed,
        "memory search"
    );
    let sb = &config.substrate;
    let store = memory::MemoryStore::new(
        pool,
        memory::Quotas {
            tenant_bytes: sb.memory_tenant_quota_bytes,
            agent_bytes: sb.memory_agent_quota_bytes,
        },
    );
    let embedder = router.map(|t| memory::Embedder::new(t, jwt, sb.embedding_model.clone()));
    Ok(Memory::new(store, embedder, mode))
}

/// The volumes over `defs`' database, with the blob store `volumes.blobs` names.
pub fn connect_volumes(config: &Config, defs: &DefStore) -> Result<Volumes, SubstrateError> {
    let cfg = &config.volumes;
    let blobs = volumes::blobs::Blobs::from_config(defs.pool().clone(), &cfg.blobs)
        .map_err(SubstrateError::Boot)?;
    let store =
        volumes::VolumeStore::new(defs.pool().clone(), blobs, volumes::Caps::from_config(cfg));
    tracing::info!(blobs = %cfg.blobs.kind, "volumes");
    Ok(Volumes::new(store, defs.clone()))
}

/// Connects the database (migrating when `database.migrate_on_start`) and makes the store.
pub async fn connect(config: &Config) -> Result<DefStore, SubstrateError> {
    Ok(DefStore::new(weft_store::open(&config.database).await?))
}

/// Connects NATS (`nats`) for channel wake-ups and makes the channel hub over the store's
/// database; creates the channels declared in `substrate.channels`.
pub async fn connect_channels(
    config: &Config,
    store: &DefStore,
) -> Result<ChannelHub, SubstrateError> {
    let bus = weft_bus::Bus::connect(&config.nats.url, &config.nats.prefix).await?;
    let hub = ChannelHub::new(
        channels::ChannelStore::new(store.pool().clone()),
        bus,
        config.substrate.max_channel_waiters,
    );
    channels::load_declared(&hub, &config.substrate).await?;
    Ok(hub)
}

/// Connects everything the substrate serves over `defs`' database: the memory (embedding
/// through `router` when given), the channels (NATS), with the declared channels created, and
/// the volumes.
pub async fn connect_parts(
    config: &Config,
    defs: DefStore,
    router: Option<weft_proto::transport::GrpcTransport>,
    jwt: InternalJwt,
) -> Result<Parts, SubstrateError> {
    let memory = connect_memory(config, &defs, router, jwt).await?;
    let channels = connect_channels(config, &defs).await?;
    let volumes = connect_volumes(config, &defs)?;
    Ok(Parts {
        defs,
        memory,
        channels,
        volumes,
        memory_sweep_every: Duration::from_millis(config.substrate.memory_sweep_interval_ms),
        volumes_sweep_every: Duration::from_millis(config.volumes.sweep_interval_ms),
        webhook_secret_prefix: config.ingress.secret_env_prefix.clone(),
        hook_secret_prefix: config.executor.hook_secret_env_prefix.clone(),
    })
}

/// The gRPC services the substrate's port serves, as its health service names them.
pub const GRPC_SERVICES: &[&str] = &[
    weft_proto::v1::substrate_server::SERVICE_NAME,
    weft_proto::v1::memory_server::SERVICE_NAME,
    weft_proto::v1::channels_server::SERVICE_NAME,
    weft_proto::v1::volumes_server::SERVICE_NAME,
];

/// Everything the substrate's own binary connects before serving: the store (migrated when
/// configured), the boot definitions loaded, the parts with the router for embeddings.
pub async fn connect_all(config: &Config, jwt: InternalJwt) -> Result<Parts, SubstrateError> {
    let store = connect(config).await?;
    load_boot_definitions(&store, &config.substrate).await?;
    let router = weft_proto::transport::channel(&config.substrate.router_url).map_err(|e| {
        SubstrateError::Boot(format!(
            "substrate.router_url: {e}; give the router's gRPC URL"
        ))
    })?;
    connect_parts(config, store, Some(router), jwt).await
}

/// The whole substrate for its own binary: connect, load the boot definitions, serve.
pub async fn run(
    listener: TcpListener,
    config: Config,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let parts = connect_all(&config, jwt.clone()).await?;
    let health = weft_telemetry::health::Readiness::for_config(
        &config,
        &[
            weft_telemetry::health::Dependency::Postgres,
            weft_telemetry::health::Dependency::Nats,
        ],
        shutdown.clone(),
    );
    health.set_started();
    serve(listener, parts, jwt, health, shutdown).await
}
