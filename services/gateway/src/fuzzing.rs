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

/// `POST /v1/llm/chat` (a native route: its extractor also refuses a NUL anywhere in the body).
pub fn llm_chat(body: &[u8]) -> Result<ChatRequest, Error> {
    let r =
        extract::parse_native::<crate::llm::LlmChatRequest>(body).map_err(crate::llm::strict)?;
    crate::llm::to_chat(r, &HeaderMap::new())
}
