//! Entry points for the cargo-fuzz targets in `fuzz/`: each chat front door's decoding of a body,
//! from its bytes to the chat contract's request, as its handler does it (no network, no state; the
//! routing headers are absent). Not part of the gateway's API.

use axum::http::HeaderMap;
use weft_core::Error;
use weft_core::chat::ChatRequest;

use crate::extract;

/// `POST /v1/chat/completions`.
pub fn openai_chat(body: &[u8]) -> Result<ChatRequest, Error> {
    let r = extract::parse::<crate::openai::ChatCompletionRequest>(body)?;
    crate::openai::to_chat(r, &HeaderMap::new()).map(|(req, _, _)| req)
}

/// `POST /v1/messages`.
pub fn anthropic_messages(body: &[u8]) -> Result<ChatRequest, Error> {
    let r = extract::parse::<crate::messages::MessagesRequest>(body)?;
    crate::messages::to_chat(r, &HeaderMap::new())
}

/// `POST /v1/responses` (what it sends the router; a stored chain is not read).
pub fn openai_responses(body: &[u8]) -> Result<ChatRequest, Error> {
    let r = extract::parse::<crate::responses::ResponsesRequest>(body)?;
    crate::responses::to_turn(r, &HeaderMap::new()).map(|t| t.chat)
}

/// `POST /a2a/rpc`: the JSON-RPC body decoded as the handler does before any call (envelope,
/// id, method, params, a message's parts): the method and the run input (or the task id), or
/// the JSON-RPC error answer.
pub fn a2a_rpc(body: &[u8]) -> Result<(String, Option<String>), serde_json::Value> {
    crate::a2a::fuzz_decode(body)
}

/// `POST /v1/llm/chat` (a native route: its extractor also refuses a NUL anywhere in the body).
pub fn llm_chat(body: &[u8]) -> Result<ChatRequest, Error> {
    let r =
        extract::parse_native::<crate::llm::LlmChatRequest>(body).map_err(crate::llm::strict)?;
    crate::llm::to_chat(r, &HeaderMap::new())
}

/// `/mcp` as [`crate::mcp::routes`] mounts it, without the bearer check (which needs the token
/// store) and the session store: the gateway's own checks and error shapes
/// ([`crate::mcp::weft_errors`]: NUL, `Mcp-Session-Id`, `MCP-Protocol-Version`, the JSON-RPC
/// envelope) around the MCP bridge's face served by rmcp. Put the
/// [`weft_mcp_face::Caller`] in each request's extensions, as the bearer check does.
pub fn mcp_door(
    face: weft_mcp_face::Face,
    cfg: &weft_config::McpServerFaceConfig,
    max_body: usize,
    shutdown: tokio_util::sync::CancellationToken,
) -> axum::Router {
    let svc = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            max_body,
            crate::mcp::weft_errors,
        ))
        .service(weft_mcp_face::streamable(face, cfg, None, shutdown));
    axum::Router::new().route(
        "/mcp",
        axum::routing::post_service(svc.clone())
            .get_service(svc.clone())
            .delete_service(svc),
    )
}
