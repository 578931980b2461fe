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

/// The public gRPC API (`weft.public.v1`, served by the gateway on `gateway.grpc_listen`).
#[allow(
    clippy::all,
    clippy::pedantic,
    reason = "generated code: lints here would be about prost's output, not ours"
)]
pub mod public {
    pub mod v1 {
        tonic::include_proto!("weft.public.v1");

        /// The encoded descriptor set of this package, for server reflection.
        pub const FILE_DESCRIPTOR_SET: &[u8] =
            tonic::include_file_descriptor_set!("weft_public_v1_descriptor");
    }
}

mod convert;
pub mod router_api;
pub mod transport;

pub use convert::*;
