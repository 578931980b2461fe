//! The router's domain types are the chat contract's (`weft_core::chat`), shared with the front
//! doors and the executor.

pub use weft_core::chat::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult, Fallback, Sampling};
