//! The substrate: versioned, content-addressed, tenant-scoped definitions, served over gRPC
//! (`weft.v1.Substrate`). Today it holds agent definitions: a name points to an active version;
//! a version is the canonical JSON of an [`AgentContent`](weft_core::agent::AgentContent),
//! addressed by `sha256:` of that JSON, with a number and a parent. Every call carries an
//! internal JWT; the tenant comes from it, never from a request field, and another tenant's
//! definition is a `not_found`.
//!
//! Layers: [`grpc`] (authorization, prost conversion) → [`agents`] (the rules) → [`DefStore`]
//! (Postgres). [`boot`] loads the definitions shipped with a deployment at start.
//!
//! It also serves [`channels`] (`weft.v1.Channels`): message streams in Postgres, with
//! wake-ups over NATS.

pub mod agents;
pub mod boot;
pub mod channels;
pub mod grpc;
pub mod store;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use weft_auth::{InternalJwt, JwtInterceptor};
use weft_config::Config;

pub use boot::{BootLoaded, load_boot_definitions};
pub use channels::{ChannelHub, ChannelsService};
pub use grpc::SubstrateService;
pub use store::{AgentSummaryRecord, AgentVersionRecord, DefStore};

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

/// The substrate's gRPC services (`weft.v1.Substrate` and `weft.v1.Channels`), each with its
/// JWT check, to mount on a server or to call in-process (`weft_proto::transport::in_process`).
pub fn grpc_service(store: DefStore, channels: ChannelHub, jwt: InternalJwt) -> Routes {
    Routes::new(
        weft_proto::v1::substrate_server::SubstrateServer::with_interceptor(
            SubstrateService::new(store),
            JwtInterceptor::new(jwt.clone()),
        ),
    )
    .add_service(
        weft_proto::v1::channels_server::ChannelsServer::with_interceptor(
            ChannelsService::new(channels),
            JwtInterceptor::new(jwt),
        ),
    )
}

/// Serves the substrate's gRPC API on `listener` until `shutdown` is cancelled, then drains.
/// Expired channel messages are swept meanwhile.
pub async fn serve(
    listener: TcpListener,
    store: DefStore,
    channels: ChannelHub,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let addr = listener.local_addr().ok();
    let sweeper = tokio::spawn({
        let hub = channels.clone();
        let stop = shutdown.child_token();
        async move { hub.sweep_until(stop).await }
    });
    let svc = grpc_service(store, channels, jwt);
    tracing::info!(addr = ?addr, "substrate serving");
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_routes(svc)
        // `Server::tcp_nodelay` does not reach sockets accepted from our own listener.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await;
    sweeper.abort();
    served?;
    Ok(())
}

/// Connects the database (migrating when `database.migrate_on_start`) and makes the store.
pub async fn connect(config: &Config) -> Result<DefStore, SubstrateError> {
    let pool = weft_store::connect(
        config.database.url.expose(),
        config.database.max_connections,
    )
    .await?;
    if config.database.migrate_on_start {
        weft_store::migrate(&pool).await?;
    }
    Ok(DefStore::new(pool))
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

/// The whole substrate for its own binary: connect, load the boot definitions, serve.
pub async fn run(
    listener: TcpListener,
    config: Config,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let store = connect(&config).await?;
    load_boot_definitions(&store, &config.substrate).await?;
    let channels = connect_channels(&config, &store).await?;
    serve(listener, store, channels, jwt, shutdown).await
}
