//! Provider drivers. Each translates weft's message model to one provider's wire format and back.
//! A driver's `chat` returns only once the upstream has accepted the call (status and headers
//! received); failing before that is a [`ProviderError`], which the router may answer with a
//! fallback. Failures after that travel inside the event stream.

pub mod mock;
pub mod openai;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
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
}

/// The configured drivers. An enum rather than a trait object: the set is closed and known at
/// build time, and static dispatch keeps the hot path free of boxing.
pub enum Driver {
    Mock(mock::MockProvider),
    OpenAi(openai::OpenAiProvider),
}

impl Driver {
    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        match self {
            Self::Mock(p) => p.chat(model, req).await,
            Self::OpenAi(p) => p.chat(model, req).await,
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
        }
    }

    /// Whether this driver serves `model` when addressed as `provider/model`.
    pub fn serves(&self, model: &str) -> bool {
        match self {
            Self::Mock(p) => p.has_model(model),
            // An OpenAI-compatible server's model list is not ours to know in full.
            Self::OpenAi(_) => true,
        }
    }
}
