//! The fuzz targets' bodies, one module each: `fuzz/fuzz_targets/<name>.rs` hands libFuzzer's
//! input to `<name>::run`, and `tests/replay.rs` runs every committed seed and corpus input through
//! the same function in the ordinary test build.

pub mod a2a_rpc;
pub mod auth_jwt;
pub mod auth_token;
pub mod chat_anthropic;
pub mod chat_llm;
pub mod chat_openai;
pub mod chat_responses;
pub mod def_agent;
pub mod def_mcp_server;
pub mod def_schedule;
pub mod def_skill;
pub mod def_webhook;
pub mod mcp_face;
pub mod provider_body;
pub mod provider_stream;
pub mod webhook_mapping;
pub mod webhook_signature;

/// A target's body: one input, and a panic for a broken property.
pub type Body = fn(&[u8]);

/// Every target by its cargo-fuzz name.
pub const ALL: &[(&str, Body)] = &[
    ("a2a_rpc", a2a_rpc::run),
    ("auth_jwt", auth_jwt::run),
    ("auth_token", auth_token::run),
    ("chat_anthropic", chat_anthropic::run),
    ("chat_llm", chat_llm::run),
    ("chat_openai", chat_openai::run),
    ("chat_responses", chat_responses::run),
    ("def_agent", def_agent::run),
    ("def_mcp_server", def_mcp_server::run),
    ("def_schedule", def_schedule::run),
    ("def_skill", def_skill::run),
    ("def_webhook", def_webhook::run),
    ("mcp_face", mcp_face::run),
    ("provider_body", provider_body::run),
    ("provider_stream", provider_stream::run),
    ("webhook_mapping", webhook_mapping::run),
    ("webhook_signature", webhook_signature::run),
];
