//! `[router.providers.<name>]`: one provider, tagged by `kind`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::check::{Checked, invalid};

/// One provider, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProviderConfig {
    /// The embedded deterministic provider; no key, no network.
    Mock(MockProviderConfig),
    /// Any OpenAI-compatible server (chat completions): OpenAI, vLLM, llama.cpp, LM Studio, Groq…
    Openai(HttpProviderConfig),
    /// Anthropic's Messages API (`{base_url}/v1/messages`).
    Anthropic(HttpProviderConfig),
    /// Google Gemini (`{base_url}/models/{model}:generateContent`).
    Gemini(HttpProviderConfig),
    /// DeepSeek: OpenAI-compatible plus `reasoning_content`.
    Deepseek(HttpProviderConfig),
    /// Ollama's native API (`{base_url}/api/chat`, NDJSON streaming).
    Ollama(HttpProviderConfig),
}

impl ProviderConfig {
    /// The model names this provider serves.
    pub fn models(&self) -> Vec<String> {
        match self {
            Self::Mock(m) => m.models.keys().cloned().collect(),
            _ => self.http().map(|h| h.models.clone()).unwrap_or_default(),
        }
    }

    /// The kind as written in config (`kind = "…"`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Mock(_) => "mock",
            Self::Openai(_) => "openai",
            Self::Anthropic(_) => "anthropic",
            Self::Gemini(_) => "gemini",
            Self::Deepseek(_) => "deepseek",
            Self::Ollama(_) => "ollama",
        }
    }

    /// The HTTP settings of every kind but `mock`.
    pub fn http(&self) -> Option<&HttpProviderConfig> {
        match self {
            Self::Mock(_) => None,
            Self::Openai(h)
            | Self::Anthropic(h)
            | Self::Gemini(h)
            | Self::Deepseek(h)
            | Self::Ollama(h) => Some(h),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockProviderConfig {
    pub models: BTreeMap<String, MockModelConfig>,
}

impl Default for MockProviderConfig {
    fn default() -> Self {
        let mut models = BTreeMap::new();
        models.insert("mock-1".to_owned(), MockModelConfig::default());
        Self { models }
    }
}

/// How one mock model behaves. Deterministic for a given `seed` and call sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockModelConfig {
    /// Delay before the first event, in milliseconds.
    pub latency_ms: u64,
    /// Extra random delay up to this many milliseconds.
    pub jitter_ms: u64,
    /// Delay between streamed tokens, in milliseconds.
    pub token_delay_ms: u64,
    /// Reply with a fixed tool call when tools are offered and the last message is not a result.
    pub tool_calls: bool,
    /// The JSON arguments of that tool call.
    pub tool_arguments: String,
    /// Fraction of calls (0..=1) that fail with 429.
    pub error_rate_429: f64,
    /// Fraction of calls (0..=1) that fail with 500.
    pub error_rate_500: f64,
    pub seed: u64,
    pub embedding_dims: u32,
}

impl Default for MockModelConfig {
    fn default() -> Self {
        Self {
            latency_ms: 0,
            jitter_ms: 0,
            token_delay_ms: 0,
            tool_calls: true,
            tool_arguments: "{}".into(),
            error_rate_429: 0.0,
            error_rate_500: 0.0,
            seed: 1,
            embedding_dims: 16,
        }
    }
}

/// The settings of an HTTP provider. The name is kept for the `openai` kind, the first one.
pub type OpenAiProviderConfig = HttpProviderConfig;

/// One HTTP provider of any kind. `base_url` follows each vendor's SDK: versioned for `openai`
/// and `gemini`, the host for `anthropic`, `deepseek` and `ollama`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProviderConfig {
    /// Where the provider's API lives; see the type's documentation for each kind's convention.
    pub base_url: String,
    /// Name of the environment variable that holds the API key; unset for keyless servers.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Models served; requests name them as `model` or `<provider>/<model>`.
    #[serde(default)]
    pub models: Vec<String>,
    /// Retries on 429/5xx before the first byte, per candidate.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Base of the exponential backoff, in milliseconds.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
    /// Longest `Retry-After` honoured before giving up on this candidate, in seconds.
    #[serde(default = "default_max_retry_after_secs")]
    pub max_retry_after_secs: u64,
    /// Time allowed until response headers arrive, in seconds.
    #[serde(default = "default_first_byte_timeout_secs")]
    pub first_byte_timeout_secs: u64,
    /// Most calls in flight to this provider fleet-wide (Redis); over it, fail over or 429.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// `anthropic` only: `max_tokens` when the caller sets none. Default 4096.
    #[serde(default)]
    pub default_max_tokens: Option<u32>,
    /// `anthropic` only: the `anthropic-version` header. Default `2023-06-01`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `ollama` only: the context window (`options.num_ctx`) sent with every call.
    #[serde(default)]
    pub num_ctx: Option<u32>,
}

impl HttpProviderConfig {
    /// Settings for `base_url` with every other field at its default.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            models: Vec::new(),
            max_retries: default_max_retries(),
            backoff_ms: default_backoff_ms(),
            max_retry_after_secs: default_max_retry_after_secs(),
            first_byte_timeout_secs: default_first_byte_timeout_secs(),
            max_concurrency: None,
            default_max_tokens: None,
            api_version: None,
            num_ctx: None,
        }
    }
}

fn default_max_retries() -> u32 {
    2
}
fn default_backoff_ms() -> u64 {
    200
}
fn default_max_retry_after_secs() -> u64 {
    10
}
fn default_first_byte_timeout_secs() -> u64 {
    60
}

impl ProviderConfig {
    /// Checks `router.providers.<name>`: the name, then the kind's own settings.
    pub fn validate(&self, name: &str) -> Checked {
        if name.is_empty() || name.contains('/') || name.contains(':') {
            return invalid(format!(
                "router.providers.{name}: provider names must be non-empty and contain no '/' or ':'"
            ));
        }
        match self {
            Self::Mock(m) => m.validate(name),
            Self::Openai(h)
            | Self::Anthropic(h)
            | Self::Gemini(h)
            | Self::Deepseek(h)
            | Self::Ollama(h) => h.validate(name, self.kind()),
        }
    }
}

impl MockProviderConfig {
    /// Checks each model's error rates (each and together within 0..=1) and tool arguments.
    pub fn validate(&self, name: &str) -> Checked {
        for (model, mc) in &self.models {
            for (field, rate) in [
                ("error_rate_429", mc.error_rate_429),
                ("error_rate_500", mc.error_rate_500),
            ] {
                if !(0.0..=1.0).contains(&rate) {
                    return invalid(format!(
                        "router.providers.{name}.models.{model}.{field} must be between 0 and 1, got {rate}"
                    ));
                }
            }
            if mc.error_rate_429 + mc.error_rate_500 > 1.0 {
                return invalid(format!(
                    "router.providers.{name}.models.{model}: error_rate_429 + error_rate_500 must be at most 1"
                ));
            }
            if serde_json::from_str::<serde_json::Value>(&mc.tool_arguments).is_err() {
                return invalid(format!(
                    "router.providers.{name}.models.{model}.tool_arguments must be JSON text, got {:?}",
                    mc.tool_arguments
                ));
            }
        }
        Ok(())
    }
}

impl HttpProviderConfig {
    /// Checks the URL scheme, that kind-specific fields are set only on their `kind`, and the
    /// concurrency cap.
    pub fn validate(&self, name: &str, kind: &str) -> Checked {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return invalid(format!(
                "router.providers.{name}.base_url must start with http:// or https://, got {:?}",
                self.base_url
            ));
        }
        for (field, set, owner) in [
            (
                "default_max_tokens",
                self.default_max_tokens.is_some(),
                "anthropic",
            ),
            ("api_version", self.api_version.is_some(), "anthropic"),
            ("num_ctx", self.num_ctx.is_some(), "ollama"),
        ] {
            if set && kind != owner {
                return invalid(format!(
                    "router.providers.{name}.{field} applies to kind = \"{owner}\" only; this provider is kind = \"{kind}\""
                ));
            }
        }
        if self.max_concurrency == Some(0) {
            return invalid(format!(
                "router.providers.{name}.max_concurrency must be at least 1; leave it unset for no cap"
            ));
        }
        Ok(())
    }
}
