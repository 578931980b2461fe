//! The rate-limit response headers of API.md. The router decides them before the first byte and
//! sends them as gRPC response metadata under the same names; the gateway copies them onto the
//! HTTP response.

pub const LIMIT_REQUESTS: &str = "x-ratelimit-limit-requests";
pub const REMAINING_REQUESTS: &str = "x-ratelimit-remaining-requests";
pub const LIMIT_TOKENS: &str = "x-ratelimit-limit-tokens";
pub const REMAINING_TOKENS: &str = "x-ratelimit-remaining-tokens";

/// Every rate-limit header, in a stable order.
pub const HEADERS: &[&str] = &[
    LIMIT_REQUESTS,
    REMAINING_REQUESTS,
    LIMIT_TOKENS,
    REMAINING_TOKENS,
];
