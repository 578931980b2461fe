//! The router's domain types: one chat turn request and the events it streams back.

use serde_json::{Map, Value};
use weft_core::message::{FinishReason, Message, ToolSpec, Usage};

/// Sampling parameters; `None` leaves the provider's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
}

/// One model turn.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: Option<Value>,
    pub sampling: Sampling,
    pub response_format: Option<Value>,
    pub user: Option<String>,
    /// Request fields weft does not model, forwarded to providers that have them.
    pub extra: Map<String, Value>,
    pub provider_hint: Option<String>,
    pub tier_hint: Option<String>,
    /// Whether to stream from the upstream (events stream either way).
    pub stream: bool,
}

/// What a turn streams back. A well-formed turn is: deltas and tool calls in any order, at most
/// one `Usage`, then exactly one `Finish`.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatEvent {
    /// Added by the router before the driver's events.
    ProviderChosen {
        provider: String,
        model: String,
        fallbacks: u32,
    },
    /// Added by the router when a candidate failed before its first byte and the next is tried.
    Fallback {
        provider: String,
        model: String,
        code: String,
        message: String,
    },
    TextDelta(String),
    ReasoningDelta(String),
    /// The signature closing the reasoning streamed so far (Anthropic extended thinking).
    ReasoningSignature(String),
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    ToolCallDelta {
        index: u32,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbedRequest {
    pub model: String,
    pub input: Vec<String>,
    pub dimensions: Option<u32>,
    pub user: Option<String>,
    pub provider_hint: Option<String>,
    pub tier_hint: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct EmbedResult {
    pub provider: String,
    pub model: String,
    pub vectors: Vec<Vec<f32>>,
    pub usage: Usage,
}
