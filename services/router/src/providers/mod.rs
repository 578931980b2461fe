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

/// Golden files for what each driver sends: the request body of representative calls, the typed
/// body a call builds serialized as `Upstream::post` does, pinned under `golden/` and compared
/// as JSON values
/// (`serde_json::Value` equality, so field order and whitespace do not count). A change to what
/// a driver sends shows up as a diff of these files; after reviewing it, regenerate them with
/// `UPDATE_GOLDEN=1 cargo test -p weft-router golden`.
#[cfg(test)]
mod golden_tests {
    use std::path::PathBuf;

    use serde_json::{Map, Value, json};
    use weft_core::message::{ContentBlock, Message, Role, ToolSpec};

    use super::testing::{msg, tool_result, tool_use};
    use super::{anthropic, deepseek, gemini, http, ollama, openai};
    use crate::types::{ChatRequest, EmbedRequest, Sampling};

    fn dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
    }

    /// Compares the body `sent` with the golden file `name` as JSON values (or writes the file, with
    /// `UPDATE_GOLDEN=1`); returns the mismatch, if any.
    fn check(name: &str, sent: &[u8]) -> Option<String> {
        let path = dir().join(name);
        let actual: Value = match serde_json::from_slice(sent) {
            Ok(v) => v,
            Err(e) => {
                return Some(format!(
                    "{name}: the driver sent a body that is not JSON: {e}"
                ));
            }
        };
        let pretty = serde_json::to_string_pretty(&actual).unwrap() + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, pretty).unwrap();
            return None;
        }
        let want = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                return Some(format!(
                    "{name}: {e} (create it with UPDATE_GOLDEN=1 cargo test -p weft-router golden)"
                ));
            }
        };
        match serde_json::from_str::<Value>(&want) {
            Ok(want) if want == actual => None,
            Ok(_) => Some(format!(
                "{name} differs (review, then UPDATE_GOLDEN=1 cargo test -p weft-router golden):\n--- golden\n{want}--- now\n{pretty}"
            )),
            Err(e) => Some(format!("{name}: the golden file is not JSON: {e}")),
        }
    }

    fn text(role: Role, t: &str) -> Message {
        msg(role, vec![ContentBlock::text(t)])
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                description: "Current weather in a city.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "The city's name."}},
                    "required": ["city"],
                }),
            },
            ToolSpec {
                name: "get_time".into(),
                description: String::new(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    /// A streamed turn after a tool loop: system and developer instructions, a user question, an
    /// assistant message with signed reasoning, text and a tool call (with an id most providers
    /// reject, so it must go out normalised), the tool's result and a follow-up question; two tools,
    /// `tool_choice: auto`, sampling and a user id.
    fn tools_stream() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![
                text(Role::System, "Be brief."),
                text(Role::Developer, "Answer in English."),
                text(Role::User, "What's the weather in Paris?"),
                msg(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "The user wants the weather; call the tool.".into(),
                            signature: Some("sig-1".into()),
                        },
                        ContentBlock::text("Let me check."),
                        tool_use("call.1/x", "get_weather", r#"{"city": "Paris"}"#),
                    ],
                ),
                msg(Role::Tool, vec![tool_result("call.1/x", "18°C and sunny")]),
                text(Role::User, "Thanks! And the time there?"),
            ],
            tools: tools(),
            tool_choice: Some(json!("auto")),
            sampling: Sampling {
                temperature: Some(0.5),
                top_p: Some(0.9),
                max_tokens: Some(256),
                stop: vec!["END".into()],
                ..Sampling::default()
            },
            user: Some("u-1".into()),
            stream: true,
            ..ChatRequest::default()
        }
    }

    /// A non-streamed turn with an inline image and what else the provider takes: `extra`
    /// pass-through fields, a response format, a named tool or a mode, the parameters it honours.
    fn options(kind: &str) -> ChatRequest {
        let image = |url: &str| ContentBlock::Image {
            url: url.into(),
            detail: Some("low".into()),
        };
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let mut user = msg(
            Role::User,
            vec![ContentBlock::text("What is in this image?"), image(png)],
        );
        user.name = Some("ada".into());
        let mut extra = Map::new();
        let mut req = ChatRequest {
            model: "m".into(),
            messages: vec![text(Role::System, "Describe images."), user],
            tools: tools(),
            sampling: Sampling {
                max_tokens: Some(100),
                temperature: Some(0.2),
                ..Sampling::default()
            },
            user: Some("u-2".into()),
            ..ChatRequest::default()
        };
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        match kind {
            "openai" => {
                extra.insert("logit_bias".into(), json!({"50256": -100}));
                extra.insert("parallel_tool_calls".into(), json!(false));
                extra.insert("stream_options".into(), json!({"include_usage": false}));
                req.tool_choice = Some(named);
                req.response_format = Some(json!({"type": "json_object"}));
                req.sampling.seed = Some(7);
                req.sampling.presence_penalty = Some(0.1);
                req.sampling.frequency_penalty = Some(-0.1);
            }
            "anthropic" => {
                req.messages[1]
                    .content
                    .push(image("https://example.com/cat.jpg"));
                extra.insert("parallel_tool_calls".into(), json!(false));
                extra.insert(
                    "thinking".into(),
                    json!({"type": "enabled", "budget_tokens": 1024}),
                );
                extra.insert("metadata".into(), json!({"trace": "t-1"}));
                extra.insert("stream".into(), json!(true));
                req.tool_choice = Some(named);
            }
            "gemini" => {
                req.messages[1]
                    .content
                    .push(image("https://example.com/cat.png?size=large"));
                extra.insert("top_k".into(), json!(40));
                extra.insert("thinking_config".into(), json!({"thinking_budget": 0}));
                req.tool_choice = Some(json!("required"));
                req.response_format = Some(json!({"type": "json_schema", "json_schema": {
                    "name": "description",
                    "schema": {
                        "type": "object",
                        "properties": {
                            "subject": {"type": ["string", "null"], "format": "email"},
                            "colours": {"type": "array", "items": {"enum": ["red", "green", 3]}},
                        },
                        "required": ["subject", "missing"],
                        "additionalProperties": false,
                    },
                }}));
                req.sampling.seed = Some(7);
                req.sampling.stop = vec!["END".into()];
            }
            "deepseek" => {
                req.messages[1].content.truncate(1);
                extra.insert("thinking".into(), json!({"type": "disabled"}));
                req.tool_choice = Some(json!("none"));
                req.response_format = Some(json!({"type": "json_object"}));
                req.sampling.presence_penalty = Some(0.5);
            }
            "ollama" => {
                extra.insert("think".into(), json!("low"));
                extra.insert("keep_alive".into(), json!("5m"));
                extra.insert("top_k".into(), json!(40));
                extra.insert("min_p".into(), json!(null));
                req.tool_choice = Some(json!("none"));
                req.response_format = Some(json!({"type": "json_schema", "json_schema": {
                    "schema": {"type": "object", "properties": {"subject": {"type": "string"}}},
                }}));
                req.sampling.seed = Some(7);
                req.sampling.stop = vec!["END".into()];
            }
            _ => unreachable!("{kind}"),
        }
        req.extra = extra;
        req
    }

    /// What each driver sends for `req`, as bytes.
    fn chat_bytes(kind: &str, req: &ChatRequest) -> bytes::Bytes {
        let send_reasoning = deepseek::reasoning_to_send(&req.messages);
        match kind {
            "openai" => http::encode(&openai::chat_request_as(
                openai::Flavor::OpenAi,
                "gpt-4o-mini",
                req,
            )),
            "anthropic" => {
                http::encode(&anthropic::messages_request("claude-sonnet", req, 4096).unwrap())
            }
            "gemini" => http::encode(&gemini::request(req).unwrap()),
            "deepseek" => http::encode(
                &deepseek::chat_request("deepseek-chat", req, &send_reasoning).unwrap(),
            ),
            "ollama" => http::encode(&ollama::chat_request("llama3", req, Some(8192)).unwrap()),
            _ => unreachable!("{kind}"),
        }
        .unwrap()
    }

    const KINDS: [&str; 5] = ["openai", "anthropic", "gemini", "deepseek", "ollama"];

    #[test]
    fn golden_chat_request_bodies() {
        let mut bad = Vec::new();
        for kind in KINDS {
            bad.extend(check(
                &format!("{kind}-chat-tools-stream.json"),
                &chat_bytes(kind, &tools_stream()),
            ));
            bad.extend(check(
                &format!("{kind}-chat-options.json"),
                &chat_bytes(kind, &options(kind)),
            ));
        }
        assert!(bad.is_empty(), "{}", bad.join("\n\n"));
    }

    #[test]
    fn golden_embedding_request_bodies() {
        let req = EmbedRequest {
            model: "e".into(),
            input: vec!["first text".into(), "second \"quoted\" text".into()],
            dimensions: Some(256),
            user: Some("u-3".into()),
            ..EmbedRequest::default()
        };
        let bodies = [
            (
                "openai",
                http::encode(&openai::embed_request("text-embedding-3-small", &req)),
            ),
            (
                "gemini",
                http::encode(&gemini::embed_request("models/text-embedding-004", &req)),
            ),
            (
                "ollama",
                http::encode(&ollama::embed_request("nomic-embed-text", &req)),
            ),
        ];
        let mut bad = Vec::new();
        for (kind, bytes) in bodies {
            bad.extend(check(&format!("{kind}-embed.json"), &bytes.unwrap()));
        }
        assert!(bad.is_empty(), "{}", bad.join("\n\n"));
    }
}
