//! The internal gRPC plumbing every service shares: a request that carries its caller
//! (client side), the caller of a request (server side), and a failed call named after the
//! service that failed.

use tonic::{Request, Status};
use weft_core::error::GRPC_CODE_KEY;
use weft_core::{Error, ErrorCode, Principal};

use crate::InternalJwt;

/// `msg` as a request carrying `p` in an internal JWT and the current trace context.
pub fn request<T>(jwt: &InternalJwt, p: &Principal, msg: T) -> Result<Request<T>, Error> {
    let mut req = Request::new(msg);
    let value = format!("Bearer {}", jwt.sign(p)?)
        .parse()
        .map_err(|_| Error::internal())?;
    req.metadata_mut().insert("authorization", value);
    weft_telemetry::inject_trace_context(req.metadata_mut());
    Ok(req)
}

/// `msg` as a request from `p` to a service called in this process (no JWT, no encoding): the
/// principal goes where the `JwtInterceptor` puts the one it verified, which no peer can set
/// over the wire. The current span stays the call's parent.
pub fn in_process<T>(p: &Principal, msg: T) -> Request<T> {
    let mut req = Request::new(msg);
    req.extensions_mut().insert(p.clone());
    req
}

/// The caller of a request, as the `JwtInterceptor` verified it (or [`in_process`] set it).
pub fn caller<T>(req: &Request<T>) -> Result<Principal, Status> {
    req.extensions()
        .get::<Principal>()
        .cloned()
        .ok_or_else(|| Status::from(Error::unauthenticated("missing internal token")))
}

/// The server side of one RPC: its caller ([`caller`]) and `span` joined to the caller's trace,
/// with the caller's tenant recorded in the span's `tenant` field (declare it
/// `tenant = tracing::field::Empty`). Scope checks stay with each RPC: their messages say which
/// scope that RPC needs.
pub fn accept<T>(
    req: &Request<T>,
    span: tracing::Span,
) -> Result<(Principal, tracing::Span), Status> {
    let p = caller(req)?;
    span.record("tenant", tracing::field::display(&p.tenant));
    weft_telemetry::adopt_trace_context(&span, req.metadata());
    Ok((p, span))
}

/// A service called over internal gRPC, as its callers' errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    name: &'static str,
    fix: &'static str,
}

impl Peer {
    pub const ROUTER: Peer = Peer {
        name: "router",
        fix: "check that weft-router is running",
    };
    pub const SUBSTRATE: Peer = Peer {
        name: "substrate",
        fix: "check that weft-substrate is running (gateway.substrate_url)",
    };

    /// A failed call as weft's error: the peer's own errors (they carry weft's code) pass
    /// through; a transport failure names the peer and how to fix it.
    pub fn error(self, s: &Status) -> Error {
        if s.metadata().get(GRPC_CODE_KEY).is_some() {
            return Error::from(s);
        }
        match s.code() {
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                tracing::warn!(peer = self.name, grpc_code = ?s.code(), "peer unreachable");
                Error::unavailable(format!(
                    "the {} is unavailable; retry shortly, and {}",
                    self.name, self.fix
                ))
            }
            tonic::Code::DeadlineExceeded => Error::new(
                ErrorCode::UpstreamTimeout,
                format!("the {} did not answer in time", self.name),
            ),
            _ => {
                tracing::error!(peer = self.name, grpc_code = ?s.code(), "peer call failed");
                Error::internal()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_name_the_peer_and_its_own_errors_pass_through() {
        let down = Status::unavailable("tcp connect error");
        assert_eq!(
            Peer::SUBSTRATE.error(&down).message,
            "the substrate is unavailable; retry shortly, and check that weft-substrate is \
             running (gateway.substrate_url)"
        );
        assert_eq!(
            Peer::ROUTER.error(&down).message,
            "the router is unavailable; retry shortly, and check that weft-router is running"
        );
        let own = Status::from(Error::invalid("bad name").with_param("name"));
        let e = Peer::ROUTER.error(&own);
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::InvalidRequest, "bad name")
        );
        let slow = Peer::SUBSTRATE.error(&Status::deadline_exceeded("late"));
        assert_eq!(slow.code, ErrorCode::UpstreamTimeout);
    }
}
