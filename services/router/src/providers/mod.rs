//! Provider drivers. Each translates weft's message model to one provider's wire format and back.
//! A driver's `chat` returns only once the upstream has accepted the call (status and headers
//! received); failing before that is a [`ProviderError`], which the router may answer with a
//! fallback. Failures after that travel inside the event stream.

pub mod anthropic;
pub mod deepseek;
pub mod gemini;
pub mod http;
pub mod mock;
pub mod ollama;
pub mod openai;

use std::borrow::Cow;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde_json::Value;
use weft_config::ProviderConfig;
use weft_core::{Error, ErrorCode};

use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

/// A turn's events after the upstream accepted the call.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, Error>> + Send>>;

/// A failure before the first byte of the answer.
#[derive(Clone, Debug)]
pub struct ProviderError {
    pub error: Error,
    /// Whether another candidate (or a later retry) might succeed.
    pub retryable: bool,
}

impl ProviderError {
    pub fn fatal(error: Error) -> Self {
        Self {
            error,
            retryable: false,
        }
    }

    pub fn retryable(error: Error) -> Self {
        Self {
            error,
            retryable: true,
        }
    }

    pub fn rate_limited(provider: &str, retry_after: Option<Duration>) -> Self {
        let mut e = Error::new(
            ErrorCode::RateLimited,
            format!("provider `{provider}` is rate limiting; retry later"),
        );
        e.retry_after = retry_after;
        Self::retryable(e)
    }

    /// A request parameter this provider cannot honour: a 400 naming it, never a silent drop.
    pub fn unsupported(provider_kind: &str, param: &str, hint: &str) -> Self {
        Self::fatal(
            Error::invalid(format!(
                "`{param}` is not supported by {provider_kind} providers; {hint}"
            ))
            .with_param(param),
        )
    }
}

/// The cases of the driver conformance suite (`tests/conformance.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Text,
    StreamText,
    ToolCall,
    ToolRoundTrip,
    ParallelToolCalls,
    Usage,
    RateLimited,
    ServerError,
    BrokenStream,
    Malformed,
}

/// A conformance case a driver declares it cannot pass, and why.
#[derive(Clone, Copy, Debug)]
pub struct Unsupported {
    pub case: Case,
    pub reason: &'static str,
}

/// The configured drivers. An enum rather than a trait object: the set is closed and known at
/// build time, and static dispatch keeps the hot path free of boxing.
pub enum Driver {
    Mock(mock::MockProvider),
    OpenAi(openai::OpenAiProvider),
    Anthropic(anthropic::AnthropicProvider),
    Gemini(gemini::GeminiProvider),
    DeepSeek(deepseek::DeepSeekProvider),
    Ollama(ollama::OllamaProvider),
}

impl Driver {
    /// The driver for one configured provider.
    pub fn new(name: &str, cfg: &ProviderConfig) -> Result<Self, String> {
        Ok(match cfg {
            ProviderConfig::Mock(m) => Self::Mock(mock::MockProvider::new(name, m)),
            ProviderConfig::Openai(h) => Self::OpenAi(openai::OpenAiProvider::new(name, h)?),
            ProviderConfig::Anthropic(h) => {
                Self::Anthropic(anthropic::AnthropicProvider::new(name, h)?)
            }
            ProviderConfig::Gemini(h) => Self::Gemini(gemini::GeminiProvider::new(name, h)?),
            ProviderConfig::Deepseek(h) => {
                Self::DeepSeek(deepseek::DeepSeekProvider::new(name, h)?)
            }
            ProviderConfig::Ollama(h) => Self::Ollama(ollama::OllamaProvider::new(name, h)?),
        })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        match self {
            Self::Mock(p) => p.chat(model, req).await,
            Self::OpenAi(p) => p.chat(model, req).await,
            Self::Anthropic(p) => p.chat(model, req).await,
            Self::Gemini(p) => p.chat(model, req).await,
            Self::DeepSeek(p) => p.chat(model, req).await,
            Self::Ollama(p) => p.chat(model, req).await,
        }
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        match self {
            Self::Mock(p) => p.embed(model, req).await,
            Self::OpenAi(p) => p.embed(model, req).await,
            Self::Gemini(p) => p.embed(model, req).await,
            Self::Ollama(p) => p.embed(model, req).await,
            Self::Anthropic(_) | Self::DeepSeek(_) => Err(ProviderError::fatal(
                Error::invalid(
                    "this provider has no embeddings API; route embeddings to an openai, gemini or ollama provider",
                )
                .with_param("model"),
            )),
        }
    }

    /// Whether this driver serves `model` when addressed as `provider/model`.
    pub fn serves(&self, model: &str) -> bool {
        match self {
            Self::Mock(p) => p.has_model(model),
            // An HTTP provider's model list is not ours to know in full.
            _ => true,
        }
    }

    /// The provider kind, as written in config.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Mock(_) => "mock",
            Self::OpenAi(_) => "openai",
            Self::Anthropic(_) => "anthropic",
            Self::Gemini(_) => "gemini",
            Self::DeepSeek(_) => "deepseek",
            Self::Ollama(_) => "ollama",
        }
    }

    /// Conformance cases this driver cannot pass, with the reason.
    pub fn unsupported(&self) -> &'static [Unsupported] {
        match self {
            Self::Mock(_) => mock::UNSUPPORTED,
            Self::OpenAi(_) => openai::UNSUPPORTED,
            Self::Anthropic(_) => anthropic::UNSUPPORTED,
            Self::Gemini(_) => gemini::UNSUPPORTED,
            Self::DeepSeek(_) => deepseek::UNSUPPORTED,
            Self::Ollama(_) => ollama::UNSUPPORTED,
        }
    }
}

/// A tool-call id every provider accepts: `^[a-zA-Z0-9_-]{1,40}$`. Valid ids are kept as they
/// are; any other id maps to `call_` and a stable hash of it, so a `tool_use` and the
/// `tool_result` that answers it map to the same id, and a history produced by one provider
/// stays valid for another.
pub fn tool_call_id(id: &str) -> Cow<'_, str> {
    const MAX: usize = 40;
    let valid = !id.is_empty()
        && id.len() <= MAX
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        return Cow::Borrowed(id);
    }
    // FNV-1a, twice with different offsets: 128 stable bits, no dependency.
    let fnv = |seed: u64| {
        id.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    Cow::Owned(format!(
        "call_{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    ))
}

/// A JSON array of numbers as an `f32` vector; `None` when it is not one.
pub fn f32_vector(v: &Value) -> Option<Vec<f32>> {
    v.as_array()?
        .iter()
        .map(|x| {
            #[expect(
                clippy::cast_possible_truncation,
                reason = "embeddings are f32 by design"
            )]
            x.as_f64().map(|f| f as f32)
        })
        .collect()
}

/// Builders the drivers' unit tests share.
#[cfg(test)]
pub(crate) mod testing {
    use weft_core::message::{ContentBlock, Message, Role};

    pub fn msg(role: Role, content: Vec<ContentBlock>) -> Message {
        Message {
            role,
            content,
            name: None,
        }
    }

    pub fn tool_use(id: &str, name: &str, input_json: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input_json: input_json.into(),
        }
    }

    pub fn tool_result(id: &str, text: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_ids_are_kept_when_valid_and_mapped_stably_otherwise() {
        assert_eq!(tool_call_id("call_abc-1"), "call_abc-1");
        assert_eq!(
            tool_call_id("toolu_01A09q90qw90lq917835lq9"),
            "toolu_01A09q90qw90lq917835lq9"
        );
        let long = "x".repeat(41);
        for bad in ["call.1", "a b", "", long.as_str(), "función"] {
            let mapped = tool_call_id(bad);
            assert!(
                mapped.len() <= 40 && mapped.starts_with("call_"),
                "{bad:?} → {mapped}"
            );
            assert!(
                mapped
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            );
            assert_eq!(mapped, tool_call_id(bad), "stable");
        }
        assert_ne!(tool_call_id("a.b"), tool_call_id("a.c"));
    }
}

#[cfg(test)]
mod golden_tests;
