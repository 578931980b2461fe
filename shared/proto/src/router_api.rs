//! The router's chat call as a Rust trait, for callers in the same process as the router
//! (`weft up`): the gateway hands it the principal and the chat contract's own types
//! (`weft_core::chat`), with no protobuf encoding, no internal JWT to sign and verify, and no
//! HTTP/2 framing. Separate processes use the gRPC service, which converts at its edge and calls
//! the same code behind its JWT check.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;
use weft_core::chat::{ChatEvent, ChatRequest};
use weft_core::{Error, Principal};

/// A turn's events, as the router streams them.
pub type ChatEvents = Pin<Box<dyn Stream<Item = Result<ChatEvent, Error>> + Send>>;

/// An accepted chat call: its events, and the response headers decided before the first event
/// (`x-ratelimit-*`).
pub struct ChatReply {
    pub events: ChatEvents,
    pub headers: Vec<(&'static str, String)>,
}

/// The router called in-process. The principal is the caller's, already authenticated by the
/// gateway (in-process there is no token to check: the type carries the identity).
pub trait DirectRouter: Send + Sync + 'static {
    fn chat<'a>(
        &'a self,
        p: &'a Principal,
        req: ChatRequest,
    ) -> Pin<Box<dyn Future<Output = Result<ChatReply, Error>> + Send + 'a>>;
}
