//! How one service reaches another's gRPC server: a channel over the network, or — inside
//! `weft up` — the other service's generated server called in-process (same codec, same
//! interceptor and JWT check, no socket). Both are one boxed type so clients are built the same
//! way either way.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// A gRPC transport: a network channel or an in-process service.
pub type GrpcTransport = tower::util::BoxCloneSyncService<
    http::Request<tonic::body::Body>,
    http::Response<tonic::body::Body>,
    TransportError,
>;

/// A transport failure. A concrete type (not `BoxError` itself) so that the generated client's
/// `Into<StdError>` bound holds for every lifetime inside axum handlers.
#[derive(Debug)]
pub struct TransportError(pub tower::BoxError);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// `url` is not a valid gRPC endpoint URL.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a valid URL")]
pub struct BadUrl(pub String);

/// A lazily connecting channel to `url`, so a caller starts (and reports not-ready) while the
/// server is down. TCP_NODELAY is set, as on every socket weft opens.
pub fn channel(url: &str) -> Result<GrpcTransport, BadUrl> {
    use tower::ServiceExt as _;
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|_| BadUrl(url.to_owned()))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    let channel: Channel = endpoint.connect_lazy();
    Ok(tower::util::BoxCloneSyncService::new(
        channel.map_err(|e| TransportError(Box::new(e))),
    ))
}

/// A router client over `t` that sends and accepts messages up to weft's internal limit
/// (`weft_core::limits::INTERNAL_MESSAGE_BYTES`) rather than tonic's 4 MiB default.
pub fn router_client(t: GrpcTransport) -> crate::v1::router_client::RouterClient<GrpcTransport> {
    crate::v1::router_client::RouterClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// A substrate client over `t`, with the same message limit as [`router_client`].
pub fn substrate_client(
    t: GrpcTransport,
) -> crate::v1::substrate_client::SubstrateClient<GrpcTransport> {
    crate::v1::substrate_client::SubstrateClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// A memory client over `t` (the substrate's `weft.v1.Memory`), with the same message limit as
/// [`router_client`].
pub fn memory_client(t: GrpcTransport) -> crate::v1::memory_client::MemoryClient<GrpcTransport> {
    crate::v1::memory_client::MemoryClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// A channels client over `t` (the substrate serves `weft.v1.Channels`), with the same message
/// limit as [`router_client`].
pub fn channels_client(
    t: GrpcTransport,
) -> crate::v1::channels_client::ChannelsClient<GrpcTransport> {
    crate::v1::channels_client::ChannelsClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// A volumes client over `t` (the substrate serves `weft.v1.Volumes`), with the same message
/// limit as [`router_client`].
pub fn volumes_client(t: GrpcTransport) -> crate::v1::volumes_client::VolumesClient<GrpcTransport> {
    crate::v1::volumes_client::VolumesClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// An MCP bridge client over `t`, with the same message limit as [`router_client`].
pub fn mcp_bridge_client(
    t: GrpcTransport,
) -> crate::v1::mcp_bridge_client::McpBridgeClient<GrpcTransport> {
    crate::v1::mcp_bridge_client::McpBridgeClient::new(t)
        .max_decoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
        .max_encoding_message_size(weft_core::limits::INTERNAL_MESSAGE_BYTES)
}

/// A generated tonic server (with its interceptor) called in-process.
pub fn in_process<S, B>(svc: S) -> GrpcTransport
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<B>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<tower::BoxError>,
{
    use tower::ServiceExt as _;
    let svc = svc
        .map_err(|e: std::convert::Infallible| -> TransportError { match e {} })
        .map_response(|r| r.map(tonic::body::Body::new));
    tower::util::BoxCloneSyncService::new(svc)
}
