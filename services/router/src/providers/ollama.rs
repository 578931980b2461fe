//! The `ollama` driver: Ollama's native API, `POST {base}/api/chat` (NDJSON stream, or one JSON
//! object with `"stream": false`) and `POST {base}/api/embed`. No key by default; with
//! `api_key_env` set the key goes as a bearer token, for Ollama behind an authenticating proxy.
//!
//! What differs from the OpenAI shape, and how weft maps it:
//! - Sampling parameters live in `options` (`max_tokens` is `num_predict`); the configured
//!   `num_ctx` goes with every call, since Ollama's default context window is small.
//! - Images are base64 in `images` (no `data:` prefix); Ollama cannot fetch URLs, so an http(s)
//!   image is refused.
//! - Tool-call arguments are JSON objects, not text. Calls arrive whole, in one line each.
//! - Older Ollama sends no tool-call ids and answers tool results by `tool_name`; newer versions
//!   send `id` and accept `tool_call_id`. weft sends both names and ids, uses an id the upstream
//!   sends, and otherwise names call `k` of a turn `call_<n>_<k>`, `n` the number of assistant
//!   messages before it, so ids stay unique and stable when a history is resumed.
//! - `tool_choice` does not exist: `auto` is the default, `none` is honoured by offering no tools,
//!   anything else is refused. `user` changes nothing and is not sent.
//! - Usage is `prompt_eval_count` / `eval_count` on the last (`done: true`) line.

use std::collections::VecDeque;

use std::borrow::Cow;

use serde_json::{Map, Value};
use weft_config::HttpProviderConfig;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, Usage};
use weft_core::{Error, ErrorCode};
use weft_wire::lenient;
use weft_wire::ollama as wire;

#[cfg(test)]
use serde_json::json;

use super::http::{Fault, Fold, KeyStyle, Upstream};
use super::openai::{reasoning_of, text_of, tools};
use super::{EventStream, ProviderError, Unsupported};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

/// Every conformance case passes.
pub const UNSUPPORTED: &[Unsupported] = &[];

const KIND: &str = "ollama";

pub struct OllamaProvider {
    up: Upstream,
    chat_url: reqwest::Url,
    embed_url: reqwest::Url,
}

impl OllamaProvider {
    /// Builds the driver and its connection pool. Fails when `api_key_env` names an unset
    /// variable.
    pub fn new(name: &str, cfg: &HttpProviderConfig) -> Result<Self, String> {
        let up = Upstream::new(name, cfg, KeyStyle::Bearer, &[])?;
        Ok(Self {
            chat_url: up.endpoint("/api/chat")?,
            embed_url: up.endpoint("/api/embed")?,
            up,
        })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let body = chat_request(model, req, self.up.cfg.num_ctx)?;
        let resp = self.up.post(&self.chat_url, &body).await?;
        let mut fold = ChatFold::new(&req.messages);
        if req.stream {
            return Ok(self.up.ndjson(resp, fold));
        }
        let bytes = self.up.body(resp).await?;
        let v: wire::ChatResponse<'_> = lenient::from_slice(&bytes)
            .ok()
            .flatten()
            .ok_or_else(|| ProviderError::retryable(self.up.malformed_error()))?;
        let mut events = VecDeque::new();
        fold.apply(&v, &mut events)
            .and_then(|()| fold.at_end(&mut events))
            .map_err(|f| match f {
                Fault::Upstream(m) => ProviderError::retryable(Error::new(
                    ErrorCode::UpstreamError,
                    format!("provider `{}` reported an error: {m}", self.up.name),
                )),
                Fault::Malformed | Fault::EndedEarly => {
                    ProviderError::retryable(self.up.malformed_error())
                }
            })?;
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let body = embed_request(model, req);
        let resp = self.up.post(&self.embed_url, &body).await?;
        let v: wire::EmbedResponse = self.up.read(resp).await?;
        let malformed = || ProviderError::retryable(self.up.malformed_error());
        let vectors = v
            .embeddings
            .ok_or_else(malformed)?
            .into_iter()
            .map(|e| e.0.ok_or_else(malformed))
            .collect::<Result<Vec<_>, _>>()?;
        if vectors.len() != req.input.len() {
            return Err(malformed());
        }
        Ok(EmbedResult {
            provider: self.up.name.clone(),
            model: model.to_owned(),
            vectors,
            usage: Usage::new(v.prompt_eval_count.unwrap_or(0), 0),
        })
    }
}

/// The `/api/embed` body. `user` is dropped here too: it does not change the vectors.
pub(crate) fn embed_request<'a>(model: &'a str, req: &'a EmbedRequest) -> wire::EmbedRequest<'a> {
    wire::EmbedRequest {
        model,
        input: &req.input,
        dimensions: req.dimensions,
    }
}

/// The `/api/chat` body for one turn as JSON, or the refusal of a parameter Ollama cannot
/// honour (for tests and the fuzz targets; a call sends [`chat_request`]'s typed body).
pub(crate) fn chat_body(
    model: &str,
    req: &ChatRequest,
    num_ctx: Option<u32>,
) -> Result<Value, ProviderError> {
    Ok(serde_json::to_value(chat_request(model, req, num_ctx)?).unwrap_or(Value::Null))
}

/// The `/api/chat` body for one turn, or the refusal of a parameter Ollama cannot honour.
pub(crate) fn chat_request<'a>(
    model: &'a str,
    req: &'a ChatRequest,
    num_ctx: Option<u32>,
) -> Result<wire::ChatRequest<'a>, ProviderError> {
    let messages = messages(&req.messages)?;
    let offer_tools = match &req.tool_choice {
        None => true,
        Some(Value::String(s)) if s == "auto" => true,
        Some(Value::String(s)) if s == "none" => false,
        Some(_) => {
            return Err(ProviderError::unsupported(
                KIND,
                "tool_choice",
                "ollama has no tool_choice; use \"auto\" or \"none\", or leave it unset",
            ));
        }
    };
    let s = &req.sampling;
    let mut body = wire::ChatRequest {
        model,
        messages,
        tools: if offer_tools {
            tools(&req.tools)
        } else {
            Vec::new()
        },
        // Ollama streams unless told otherwise.
        stream: req.stream,
        options: wire::Options {
            num_ctx,
            num_predict: s.max_tokens,
            temperature: s.temperature,
            top_p: s.top_p,
            seed: s.seed,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            stop: &s.stop,
            ..wire::Options::default()
        },
        format: None,
        think: None,
        keep_alive: None,
    };
    for (k, v) in &req.extra {
        match k.as_str() {
            "think" if v.is_boolean() || v.as_str().is_some_and(is_think_level) => {
                body.think = Some(v);
            }
            "think" => {
                return Err(ProviderError::unsupported(
                    KIND,
                    "think",
                    "ollama takes `think` as true, false, \"low\", \"medium\", \"high\" or \"max\"",
                ));
            }
            "keep_alive" => body.keep_alive = Some(v),
            "top_k" => body.options.top_k = Some(v),
            "min_p" => body.options.min_p = Some(v),
            "repeat_penalty" => body.options.repeat_penalty = Some(v),
            other => {
                return Err(ProviderError::unsupported(
                    KIND,
                    other,
                    "ollama's /api/chat takes these extra fields only: think, keep_alive, top_k, min_p, repeat_penalty",
                ));
            }
        }
    }
    body.format = format(req.response_format.as_ref())?;
    Ok(body)
}

fn is_think_level(s: &str) -> bool {
    matches!(s, "low" | "medium" | "high" | "max")
}

/// Ollama's `format` for an OpenAI-style `response_format`: `"json"`, or the JSON schema itself.
fn format(response_format: Option<&Value>) -> Result<Option<wire::Format<'_>>, ProviderError> {
    let Some(rf) = response_format else {
        return Ok(None);
    };
    let refuse = || {
        ProviderError::unsupported(
            KIND,
            "response_format",
            "use {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}",
        )
    };
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(wire::Format::Json)),
        Some("json_schema") => {
            let schema = rf.get("json_schema").and_then(|j| j.get("schema"));
            match schema {
                Some(schema @ Value::Object(_)) => Ok(Some(wire::Format::Schema(schema))),
                _ => Err(refuse()),
            }
        }
        _ => Err(refuse()),
    }
}

/// The messages in Ollama's shape.
fn messages(messages: &[Message]) -> Result<Vec<wire::Message<'_>>, ProviderError> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::System | Role::Developer => {
                out.push(wire::Message::text("system", text_of(&m.content)));
            }
            Role::User => {
                let mut v = wire::Message::text("user", text_of(&m.content));
                v.images = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Image { url, .. } => Some(inline_image(url)),
                        _ => None,
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(v);
            }
            Role::Assistant => out.push(assistant(m)?),
            Role::Tool => {
                for b in &m.content {
                    if let ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        ..
                    } = b
                    {
                        let mut v = wire::Message::text("tool", text_of(content));
                        v.tool_call_id = Some(super::tool_call_id(tool_use_id));
                        v.tool_name = tool_name(&messages[..i], tool_use_id);
                        out.push(v);
                    }
                }
            }
        }
    }
    Ok(out)
}

fn assistant(m: &Message) -> Result<wire::Message<'_>, ProviderError> {
    let mut v = wire::Message::text("assistant", text_of(&m.content));
    let thinking = reasoning_of(&m.content);
    if !thinking.is_empty() {
        // Thinking models' templates decide whether earlier thinking is shown to the model.
        v.thinking = Some(Cow::Owned(thinking));
    }
    for b in &m.content {
        if let ContentBlock::ToolUse {
            id,
            name,
            input_json,
        } = b
        {
            let arguments = if input_json.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str::<Value>(input_json)
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| {
                        ProviderError::fatal(
                            Error::invalid(format!(
                                "the arguments of tool call `{name}` in the history are not a JSON object, which ollama requires"
                            ))
                            .with_param("messages"),
                        )
                    })?
            };
            v.tool_calls.push(wire::ToolCall {
                id: super::tool_call_id(id),
                function: wire::FunctionCall { name, arguments },
            });
        }
    }
    Ok(v)
}

/// The name of the tool call `id` answers, from the assistant messages before it.
fn tool_name<'a>(before: &'a [Message], id: &str) -> Option<&'a str> {
    before
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolUse { id: i, name, .. } if i == id => Some(name.as_str()),
            _ => None,
        })
}

/// The base64 payload of a `data:` URL; Ollama takes nothing else.
fn inline_image(url: &str) -> Result<&str, ProviderError> {
    url.strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
        .map(|(_, data)| data)
        .ok_or_else(|| {
            ProviderError::unsupported(
                KIND,
                "image_url",
                "ollama takes inline images only; send the image as a base64 data: URL",
            )
        })
}

/// Folds Ollama's answer, one JSON object per line, into weft events.
pub(crate) struct ChatFold {
    /// Assistant messages in the request: the `n` of the ids given to this turn's calls.
    turn: usize,
    /// Tool calls seen so far.
    calls: u32,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl ChatFold {
    pub(crate) fn new(messages: &[Message]) -> Self {
        Self {
            turn: messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count(),
            calls: 0,
            usage: None,
            finish: None,
        }
    }

    /// Applies one answer object (a stream line, or the whole non-streamed answer).
    pub(crate) fn apply(
        &mut self,
        v: &wire::ChatResponse<'_>,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), Fault> {
        if let Some(e) = &v.error {
            return Err(Fault::Upstream(
                e.as_str().map_or_else(|| e.to_string(), str::to_owned),
            ));
        }
        let done = v.done.ok_or(Fault::Malformed)?;
        let msg = v.message.as_ref();
        if let Some(t) = msg
            .and_then(|m| m.thinking.as_deref())
            .filter(|s| !s.is_empty())
        {
            out.push_back(ChatEvent::ReasoningDelta(t.to_owned()));
        }
        if let Some(t) = msg
            .and_then(|m| m.content.as_deref())
            .filter(|s| !s.is_empty())
        {
            out.push_back(ChatEvent::TextDelta(t.to_owned()));
        }
        let calls = msg.and_then(|m| m.tool_calls.as_deref());
        for call in calls.unwrap_or_default().iter().map(|c| c.0.as_ref()) {
            let f = call.and_then(|c| c.function.as_ref());
            let name = f.and_then(|f| f.name.as_deref()).ok_or(Fault::Malformed)?;
            let arguments = match f.and_then(|f| f.arguments.as_ref()) {
                None => "{}".to_owned(),
                // Some Ollama-compatible servers send the arguments as text already.
                Some(Value::String(s)) => s.clone(),
                Some(args) => args.to_string(),
            };
            let index = self.calls;
            let id = call
                .and_then(|c| c.id.as_deref())
                .filter(|s| !s.is_empty())
                .map_or_else(
                    || format!("call_{}_{index}", self.turn),
                    |id| super::tool_call_id(id).into_owned(),
                );
            out.push_back(ChatEvent::ToolCallStart {
                index,
                id,
                name: name.to_owned(),
            });
            out.push_back(ChatEvent::ToolCallDelta { index, arguments });
            self.calls += 1;
        }
        if done {
            self.usage = Some(Usage::new(
                v.prompt_eval_count.unwrap_or(0),
                v.eval_count.unwrap_or(0),
            ));
            self.finish = Some(if self.calls > 0 {
                FinishReason::ToolCalls
            } else if v.done_reason.as_deref() == Some("length") {
                FinishReason::Length
            } else {
                FinishReason::Stop
            });
        }
        Ok(())
    }
}

impl Fold for ChatFold {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), Fault> {
        // Parsed once, borrowing from `data`.
        let v: wire::ChatResponse<'_> = lenient::from_str(data)
            .map_err(|_| Fault::Malformed)?
            .unwrap_or_default();
        self.apply(&v, out)
    }

    fn is_done(&self) -> bool {
        self.finish.is_some()
    }

    fn at_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), Fault> {
        let finish = self.finish.ok_or(Fault::EndedEarly)?;
        out.push_back(ChatEvent::Usage(self.usage.take().unwrap_or_default()));
        out.push_back(ChatEvent::Finish(finish));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use weft_core::message::ToolSpec;

    use super::*;
    use crate::providers::testing::msg;
    use crate::types::Sampling;

    fn refusal(req: &ChatRequest) -> Error {
        chat_body("m", req, None).expect_err("refused").error
    }

    fn fold_lines(fold: &mut ChatFold, lines: &[&str]) -> Result<Vec<ChatEvent>, Fault> {
        let mut out = VecDeque::new();
        for l in lines {
            fold.on_event("", l, &mut out)?;
        }
        fold.at_end(&mut out)?;
        Ok(out.into_iter().collect())
    }

    #[test]
    fn requests_put_sampling_in_options_and_always_say_whether_to_stream() {
        let mut extra = Map::new();
        extra.insert("think".into(), json!(true));
        extra.insert("keep_alive".into(), json!("10m"));
        extra.insert("top_k".into(), json!(40));
        let req = ChatRequest {
            messages: vec![
                msg(Role::Developer, vec![ContentBlock::text("be brief")]),
                msg(Role::User, vec![ContentBlock::text("hi")]),
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: Some(json!("auto")),
            sampling: Sampling {
                max_tokens: Some(64),
                temperature: Some(0.0),
                seed: Some(7),
                stop: vec!["x".into()],
                ..Default::default()
            },
            user: Some("u".into()),
            extra,
            ..Default::default()
        };
        let b = chat_body("llama3.2", &req, Some(8192)).expect("body");
        assert_eq!(b["stream"], false, "ollama streams by default");
        assert_eq!(
            b["options"],
            json!({"num_ctx": 8192, "num_predict": 64, "temperature": 0.0, "seed": 7, "stop": ["x"], "top_k": 40})
        );
        assert_eq!(b["think"], true);
        assert_eq!(b["keep_alive"], "10m");
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(b["tools"][0]["function"]["name"], "f");
        assert!(b.get("user").is_none() && b.get("tool_choice").is_none());
    }

    #[test]
    fn tool_histories_carry_object_arguments_names_and_normalised_ids() {
        let req = ChatRequest {
            messages: vec![
                msg(Role::User, vec![ContentBlock::text("weather?")]),
                msg(
                    Role::Assistant,
                    vec![
                        ContentBlock::Reasoning {
                            text: "need a tool".into(),
                            signature: None,
                        },
                        ContentBlock::ToolUse {
                            id: "call.1/x".into(),
                            name: "get_weather".into(),
                            input_json: r#"{"city":"Paris"}"#.into(),
                        },
                    ],
                ),
                msg(
                    Role::Tool,
                    vec![ContentBlock::ToolResult {
                        tool_use_id: "call.1/x".into(),
                        content: vec![ContentBlock::text("18C sunny")],
                        is_error: false,
                    }],
                ),
            ],
            stream: true,
            ..Default::default()
        };
        let b = chat_body("m", &req, None).expect("body");
        let id = super::super::tool_call_id("call.1/x");
        assert_eq!(
            b["messages"][1],
            json!({"role": "assistant", "content": "", "thinking": "need a tool",
                   "tool_calls": [{"id": id, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})
        );
        assert_eq!(
            b["messages"][2],
            json!({"role": "tool", "content": "18C sunny", "tool_name": "get_weather", "tool_call_id": id})
        );
        assert_eq!(b["stream"], true);
        assert!(!b.to_string().contains("call.1/x"));
    }

    #[test]
    fn inline_images_lose_their_data_prefix_and_urls_are_refused() {
        let with = |url: &str| ChatRequest {
            messages: vec![msg(
                Role::User,
                vec![
                    ContentBlock::text("what is this?"),
                    ContentBlock::Image {
                        url: url.into(),
                        detail: None,
                    },
                ],
            )],
            ..Default::default()
        };
        let b = chat_body("m", &with("data:image/png;base64,iVBORw0K"), None).expect("body");
        assert_eq!(b["messages"][0]["images"], json!(["iVBORw0K"]));
        assert_eq!(b["messages"][0]["content"], "what is this?");
        let e = refusal(&with("https://example.com/cat.png"));
        assert_eq!(e.param.as_deref(), Some("image_url"));
    }

    #[test]
    fn what_ollama_cannot_honour_is_refused() {
        let choice = |c: Value| ChatRequest {
            tool_choice: Some(c),
            tools: vec![ToolSpec {
                name: "f".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            ..Default::default()
        };
        assert!(
            refusal(&choice(json!("required")))
                .message
                .contains("tool_choice")
        );
        assert!(
            refusal(&choice(
                json!({"type": "function", "function": {"name": "f"}})
            ))
            .message
            .contains("tool_choice")
        );
        let none = chat_body("m", &choice(json!("none")), None).expect("body");
        assert!(
            none.get("tools").is_none(),
            "none is honoured by offering no tools"
        );

        let mut extra = Map::new();
        extra.insert("logit_bias".into(), json!({}));
        let e = refusal(&ChatRequest {
            extra,
            ..Default::default()
        });
        assert_eq!(e.param.as_deref(), Some("logit_bias"));
        let mut extra = Map::new();
        extra.insert("think".into(), json!("very"));
        assert!(
            refusal(&ChatRequest {
                extra,
                ..Default::default()
            })
            .message
            .contains("think")
        );
    }

    #[test]
    fn response_formats_map_to_format() {
        let rf = |v: Value| ChatRequest {
            response_format: Some(v),
            ..Default::default()
        };
        let b = chat_body("m", &rf(json!({"type": "json_object"})), None).expect("body");
        assert_eq!(b["format"], "json");
        let schema = json!({"type": "object", "properties": {"age": {"type": "integer"}}});
        let b = chat_body(
            "m",
            &rf(json!({"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})),
            None,
        )
        .expect("body");
        assert_eq!(b["format"], schema);
        assert!(
            chat_body("m", &rf(json!({"type": "text"})), None)
                .expect("body")
                .get("format")
                .is_none()
        );
        assert!(
            refusal(&rf(json!({"type": "grammar"})))
                .message
                .contains("response_format")
        );
    }

    #[test]
    fn stream_lines_fold_into_text_reasoning_usage_and_finish() {
        let mut f = ChatFold::new(&[]);
        let ev = fold_lines(
            &mut f,
            &[
                r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"","thinking":"hmm"},"done":false}"#,
                r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"Hi"},"done":false}"#,
                r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":""},"done":true,"done_reason":"length","prompt_eval_count":9,"eval_count":3}"#,
            ],
        )
        .expect("folds");
        assert_eq!(
            ev,
            vec![
                ChatEvent::ReasoningDelta("hmm".into()),
                ChatEvent::TextDelta("Hi".into()),
                ChatEvent::Usage(Usage::new(9, 3)),
                ChatEvent::Finish(FinishReason::Length),
            ]
        );
    }

    #[test]
    fn whole_tool_calls_get_stable_ids_unless_ollama_sends_one() {
        let history = [
            msg(Role::User, vec![]),
            msg(Role::Assistant, vec![]),
            msg(Role::Tool, vec![]),
        ];
        let mut f = ChatFold::new(&history);
        let ev = fold_lines(
            &mut f,
            &[
                r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},"done":false}"#,
                r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"id":"call_ab12cd34","function":{"index":1,"name":"get_time","arguments":{"tz":"Europe/Paris"}}}]},"done":false}"#,
                r#"{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":20,"eval_count":8}"#,
            ],
        )
        .expect("folds");
        assert_eq!(
            ev,
            vec![
                ChatEvent::ToolCallStart {
                    index: 0,
                    id: "call_1_0".into(),
                    name: "get_weather".into()
                },
                ChatEvent::ToolCallDelta {
                    index: 0,
                    arguments: r#"{"city":"Paris"}"#.into()
                },
                ChatEvent::ToolCallStart {
                    index: 1,
                    id: "call_ab12cd34".into(),
                    name: "get_time".into()
                },
                ChatEvent::ToolCallDelta {
                    index: 1,
                    arguments: r#"{"tz":"Europe/Paris"}"#.into()
                },
                ChatEvent::Usage(Usage::new(20, 8)),
                ChatEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[tokio::test]
    async fn embeddings_come_back_in_order_with_prompt_tokens() {
        use weft_testkit::{FixtureServer, Kind};
        let dir = FixtureServer::fixture_dir(env!("CARGO_MANIFEST_DIR"), Kind::Ollama);
        let server = FixtureServer::start(Kind::Ollama, dir).await;
        let p = OllamaProvider::new("local", &HttpProviderConfig::new(server.base_url()))
            .expect("driver");
        let req = EmbedRequest {
            input: vec!["a".into(), "bb".into()],
            dimensions: Some(4),
            user: Some("u".into()),
            ..Default::default()
        };
        let r = p.embed("all-minilm", &req).await.expect("embeddings");
        assert_eq!(r.vectors.len(), 2);
        assert!(r.vectors.iter().all(|v| v.len() == 4));
        assert_ne!(r.vectors[0], r.vectors[1]);
        assert!(r.usage.prompt_tokens > 0 && r.usage.completion_tokens == 0);
        let sent = server.requests();
        assert_eq!(sent[0].path, "/api/embed");
        assert_eq!(
            sent[0].body,
            json!({"model": "all-minilm", "input": ["a", "bb"], "dimensions": 4})
        );
    }

    #[test]
    fn errors_truncation_and_garbage_fail_the_fold() {
        let mut f = ChatFold::new(&[]);
        assert!(matches!(
            fold_lines(&mut f, &[r#"{"error":"model 'x' not found"}"#]),
            Err(Fault::Upstream(m)) if m.contains("not found")
        ));
        let mut f = ChatFold::new(&[]);
        assert!(matches!(
            fold_lines(
                &mut f,
                &[r#"{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}"#]
            ),
            Err(Fault::EndedEarly)
        ));
        let mut f = ChatFold::new(&[]);
        assert!(matches!(
            fold_lines(&mut f, &[r#"{"model":"m","mess"#]),
            Err(Fault::Malformed)
        ));
        let mut f = ChatFold::new(&[]);
        assert!(matches!(
            fold_lines(&mut f, &[r#"{"data":1}"#]),
            Err(Fault::Malformed)
        ));
    }
}
