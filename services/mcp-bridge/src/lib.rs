//! weft's MCP bridge (ARCHITECTURE.md, `mcp-bridge`): MCP on both sides, on the official Rust
//! SDK `rmcp`.
//!
//! - The **client** side ([`pool`], [`grpc`]): a pool of sessions to the external MCP servers
//!   defined in the substrate (`/v1/mcp-servers`), served to the executor over gRPC
//!   (`weft.v1.McpBridge`: `ListTools`, `CallTool`), so runs can mount their tools as
//!   `mcp__<server>__<tool>`.
//! - The **server** face, weft itself as an MCP server, is not here: it is the mount library
//!   `weft-mcp-face` (shared/mcp-face), mounted by the gateway at `/mcp` and by `weft mcp`.

pub mod grpc;
pub mod pool;

use std::collections::BTreeMap;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_auth::{InternalJwt, JwtInterceptor};
use weft_config::Config;
use weft_proto::transport::GrpcTransport;

/// What can go wrong in the bridge.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The run lacks a credential a header references (the caller's fix).
    #[error("{0}")]
    Credentials(String),
    /// The server's address is not allowed.
    #[error("{0}")]
    Refused(String),
    /// The server could not be reached or started.
    #[error("{0}")]
    Server(String),
    /// A call reached the server and failed or timed out.
    #[error("{0}")]
    Call(String),
    #[error("config: {0}")]
    Config(String),
    #[error("{0}")]
    Internal(String),
    #[error("cannot serve: {0}")]
    Serve(String),
}

impl BridgeError {
    /// The same error with every credential value replaced by a marker.
    pub fn redacted(self, credentials: &BTreeMap<String, String>) -> Self {
        let r = |m: String| grpc::redact(&m, credentials);
        match self {
            Self::Credentials(m) => Self::Credentials(r(m)),
            Self::Refused(m) => Self::Refused(r(m)),
            Self::Server(m) => Self::Server(r(m)),
            Self::Call(m) => Self::Call(r(m)),
            Self::Config(m) => Self::Config(r(m)),
            Self::Internal(m) => Self::Internal(r(m)),
            Self::Serve(m) => Self::Serve(r(m)),
        }
    }
}

/// The bridge's client side, connected: the session pool and the substrate it reads
/// definitions from.
#[derive(Clone)]
pub struct Bridge {
    pub pool: pool::Pool,
    substrate: GrpcTransport,
    cfg: weft_config::McpBridgeConfig,
}

impl Bridge {
    /// A bridge reading definitions through `substrate`.
    pub fn new(config: &Config, substrate: GrpcTransport) -> Result<Self, BridgeError> {
        Ok(Self {
            pool: pool::Pool::new(config.mcp_bridge.clone())?,
            substrate,
            cfg: config.mcp_bridge.clone(),
        })
    }

    /// The gRPC service (with the internal JWT check), for a server or in-process use.
    pub fn grpc_service(
        &self,
        jwt: InternalJwt,
    ) -> tonic::service::interceptor::InterceptedService<
        weft_proto::v1::mcp_bridge_server::McpBridgeServer<grpc::BridgeService>,
        JwtInterceptor,
    > {
        let server = weft_proto::v1::mcp_bridge_server::McpBridgeServer::new(
            grpc::BridgeService::new(self.pool.clone(), self.substrate.clone(), &self.cfg),
        )
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES);
        tonic::service::interceptor::InterceptedService::new(server, JwtInterceptor::new(jwt))
    }

    /// Closes idle sessions every few seconds until `stop`.
    pub async fn reap_until(self, stop: CancellationToken) {
        let every =
            std::time::Duration::from_millis((self.cfg.idle_timeout_ms / 4).clamp(1000, 60_000));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => self.pool.close_idle(),
            }
        }
    }
}

/// The gRPC services the bridge's port serves, as its health service names them.
pub const GRPC_SERVICES: &[&str] = &[weft_proto::v1::mcp_bridge_server::SERVICE_NAME];

/// Serves the bridge's gRPC API on `listener` until `shutdown`, closing idle sessions meanwhile.
pub async fn serve(
    listener: TcpListener,
    bridge: Bridge,
    jwt: InternalJwt,
    health: weft_telemetry::health::Readiness,
    shutdown: CancellationToken,
) -> Result<(), BridgeError> {
    let addr = listener.local_addr().ok();
    let reaper = tokio::spawn(bridge.clone().reap_until(shutdown.child_token()));
    tracing::info!(addr = ?addr, "mcp bridge serving");
    let served = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(bridge.grpc_service(jwt))
        .add_service(health.grpc(GRPC_SERVICES).await)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        )
        .await;
    reaper.abort();
    served.map_err(|e| BridgeError::Serve(e.to_string()))
}
