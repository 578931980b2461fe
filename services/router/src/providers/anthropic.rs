//! The `anthropic` driver. Not built yet: every call is refused with a clear error.

use weft_config::HttpProviderConfig;
use weft_core::Error;

use super::http::{KeyStyle, Upstream};
use super::{Case, EventStream, ProviderError, Unsupported};
use crate::types::{ChatRequest, EmbedRequest, EmbedResult};

pub const UNSUPPORTED: &[Unsupported] = &[Unsupported {
    case: Case::Text,
    reason: "the driver is not built yet",
}];

pub struct AnthropicProvider {
    up: Upstream,
}

impl AnthropicProvider {
    pub fn new(name: &str, cfg: &HttpProviderConfig) -> Result<Self, String> {
        Ok(Self {
            up: Upstream::new(name, cfg, KeyStyle::Bearer, &[])?,
        })
    }

    pub async fn chat(
        &self,
        _model: &str,
        _req: &ChatRequest,
    ) -> Result<EventStream, ProviderError> {
        Err(ProviderError::fatal(Error::invalid(format!(
            "provider `{}`: the anthropic driver is not built yet",
            self.up.name
        ))))
    }

    pub async fn embed(
        &self,
        _model: &str,
        _req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        Err(ProviderError::fatal(Error::invalid(format!(
            "provider `{}`: the anthropic driver is not built yet",
            self.up.name
        ))))
    }
}
