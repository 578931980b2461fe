//! weft's core vocabulary, shared by every service: typed ids, the principal a token resolves
//! to, the content-block message model, and the closed set of error codes with their mapping to
//! HTTP, gRPC and the OpenAI error shape.

pub mod a2a_peer;
pub mod acl;
pub mod agent;
pub mod chat;
pub mod def;
pub mod error;
pub mod hook;
pub mod ids;
pub mod limits;
pub mod mcp;
pub mod message;
pub mod names;
pub mod plan;
pub mod principal;
pub mod process;
pub mod ratelimit;
pub mod run;
pub mod schedule;
pub mod skill;
pub mod storable;
pub mod usage;
pub mod volume;
pub mod webhook;

pub use error::{Error, ErrorCode};
pub use ids::{RunId, TenantId, TokenId};
pub use principal::{Principal, Scope, Scopes};
pub use usage::UsageRecord;
/// Request structs that accept only a JSON object: the contract crate's, re-exported for the
/// domain types that use it.
pub use weft_api::objects_only;

/// RFC 3339 in UTC, as API and RPC fields carry times (empty for a time it cannot show).
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.to_offset(time::UtcOffset::UTC)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
