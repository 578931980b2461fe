//! weft's gRPC contracts, generated from `proto/weft/v1`, and the conversions between the
//! generated types and the domain types of `weft-core`. Domain code never sees prost types.

#[allow(
    clippy::all,
    clippy::pedantic,
    reason = "generated code: lints here would be about prost's output, not ours"
)]
pub mod v1 {
    tonic::include_proto!("weft.v1");
}

mod convert;
pub mod router_api;
pub mod transport;

pub use convert::*;
