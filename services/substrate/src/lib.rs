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

pub mod agents;
pub mod boot;
pub mod defs;
pub mod grpc;
pub mod skills;
pub mod store;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_auth::{InternalJwt, JwtInterceptor};
use weft_config::Config;

pub use boot::{BootLoaded, load_boot_definitions};
pub use grpc::SubstrateService;
pub use skills::hash_skill_dir;
pub use store::{AgentSummaryRecord, AgentVersionRecord, DefStore, SummaryRecord, VersionRecord};

#[derive(Debug, thiserror::Error)]
pub enum SubstrateError {
    #[error("substrate: {0}")]
    Store(#[from] weft_store::StoreError),
    #[error("substrate transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A boot definition is invalid or could not be stored; the message names the file (or
    /// config key) and the field.
    #[error("substrate boot definitions: {0}")]
    Boot(String),
}

/// The substrate's gRPC service with its JWT check, to mount on a server or to call in-process
/// (`weft_proto::transport::in_process`).
pub fn grpc_service(
    store: DefStore,
    jwt: InternalJwt,
) -> tonic::service::interceptor::InterceptedService<
    weft_proto::v1::substrate_server::SubstrateServer<SubstrateService>,
    JwtInterceptor,
> {
    weft_proto::v1::substrate_server::SubstrateServer::with_interceptor(
        SubstrateService::new(store),
        JwtInterceptor::new(jwt),
    )
}

/// Serves the substrate's gRPC API on `listener` until `shutdown` is cancelled, then drains.
pub async fn serve(
    listener: TcpListener,
    store: DefStore,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let addr = listener.local_addr().ok();
    let svc = grpc_service(store, jwt);
    tracing::info!(addr = ?addr, "substrate serving");
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(svc)
        // `Server::tcp_nodelay` does not reach sockets accepted from our own listener.
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await?;
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

/// The whole substrate for its own binary: connect, load the boot definitions, serve.
pub async fn run(
    listener: TcpListener,
    config: Config,
    jwt: InternalJwt,
    shutdown: CancellationToken,
) -> Result<(), SubstrateError> {
    let store = connect(&config).await?;
    load_boot_definitions(&store, &config.substrate).await?;
    serve(listener, store, jwt, shutdown).await
}
