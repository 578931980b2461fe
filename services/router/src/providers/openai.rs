//! The `openai` driver: any server that speaks OpenAI's chat-completions wire format, over plain
//! HTTP (reqwest). Non-stream and SSE streaming, tool calls, usage, errors mapped to
//! [`ErrorCode`], and retries with backoff on 429/5xx before the first byte, honouring
//! `Retry-After`. The OpenAI-compatible `deepseek` driver reuses the translation and the stream
//! fold here through a [`Flavor`]. The wire shapes are [`weft_wire::openai`]'s.

use std::borrow::Cow;
use std::collections::VecDeque;

use weft_config::OpenAiProviderConfig;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};
use weft_wire::Extra;
use weft_wire::lenient;
use weft_wire::openai::{self as wire, read};

use super::http::{Fault, Fold, KeyStyle, Upstream};
use super::{EventStream, ProviderError, Unsupported};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

#[cfg(test)]
use serde_json::{Map, Value, json};

/// Every conformance case passes.
pub const UNSUPPORTED: &[Unsupported] = &[];

pub struct OpenAiProvider {
    up: Upstream,
    chat_url: reqwest::Url,
    embed_url: reqwest::Url,
}

impl OpenAiProvider {
    /// Builds the driver and its connection pool. Fails when `api_key_env` names an unset
    /// variable, so a misconfiguration shows at start, not on the first request.
    pub fn new(name: &str, cfg: &OpenAiProviderConfig) -> Result<Self, String> {
        let up = Upstream::new(name, cfg, KeyStyle::Bearer, &[])?;
        Ok(Self {
            chat_url: up.endpoint("/chat/completions")?,
            embed_url: up.endpoint("/embeddings")?,
            up,
        })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let body = chat_request_as(Flavor::OpenAi, model, req);
        send_chat(&self.up, &self.chat_url, &body, req.stream).await
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let resp = self
            .up
            .post(&self.embed_url, &embed_request(model, req))
            .await?;
        let v: read::Embeddings = self.up.read(resp).await?;
        let malformed = || ProviderError::retryable(self.up.malformed_error());
        let mut data: Vec<(u64, Vec<f32>)> = Vec::new();
        for d in v.data.ok_or_else(malformed)? {
            let d = d.0.unwrap_or_default();
            let vec = d.embedding.ok_or_else(malformed)?;
            data.push((d.index.unwrap_or(data.len() as u64), vec));
        }
        data.sort_by_key(|(i, _)| *i);
        Ok(EmbedResult {
            provider: self.up.name.clone(),
            model: model.to_owned(),
            vectors: data.into_iter().map(|(_, v)| v).collect(),
            usage: v.usage.as_ref().and_then(usage).unwrap_or_default(),
        })
    }
}

/// The embeddings request body.
pub(crate) fn embed_request<'a>(
    model: &'a str,
    req: &'a EmbedRequest,
) -> wire::EmbeddingsRequest<'a> {
    wire::EmbeddingsRequest {
        model,
        input: &req.input,
        encoding_format: "float",
        dimensions: req.dimensions,
        user: req.user.as_deref(),
    }
}

/// Posts one chat-completions call; its events come from the SSE stream or the whole completion.
pub(crate) async fn send_chat(
    up: &Upstream,
    url: &reqwest::Url,
    body: &wire::ChatRequest<'_>,
    stream: bool,
) -> Result<EventStream, ProviderError> {
    let resp = up.post(url, body).await?;
    if stream {
        Ok(up.sse(resp, StreamState::default()))
    } else {
        let bytes = up.body(resp).await?;
        let events = completion_events(&bytes)
            .ok_or_else(|| ProviderError::retryable(up.malformed_error()))?;
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

/// How a server's dialect of chat completions departs from OpenAI's own.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Flavor<'a> {
    OpenAi,
    /// DeepSeek: no `developer` role (sent as `system`), `content` always a string on assistant
    /// messages (it rejects null), the reasoning of the messages whose index is `true` in
    /// `send_reasoning` sent back as `reasoning_content`, and no `user`.
    DeepSeek {
        send_reasoning: &'a [bool],
    },
}

/// The OpenAI request body for one turn, as JSON (for tests and the fuzz targets; a call sends
/// [`chat_request_as`]'s typed body).
pub fn chat_body(model: &str, req: &ChatRequest) -> serde_json::Value {
    serde_json::to_value(chat_request_as(Flavor::OpenAi, model, req))
        .unwrap_or(serde_json::Value::Null)
}

/// The request body for one turn in `flavor`'s dialect.
pub(crate) fn chat_request_as<'a>(
    flavor: Flavor<'a>,
    model: &'a str,
    req: &'a ChatRequest,
) -> wire::ChatRequest<'a> {
    let s = &req.sampling;
    let user = match flavor {
        Flavor::OpenAi => req.user.as_deref(),
        // An end-user id for abuse monitoring on OpenAI; DeepSeek documents no such field and
        // the answer does not depend on it.
        Flavor::DeepSeek { .. } => None,
    };
    let mut body = wire::ChatRequest {
        model,
        messages: req
            .messages
            .iter()
            .enumerate()
            .flat_map(|(i, m)| to_openai_messages(m, i, flavor))
            .collect(),
        tools: tools(&req.tools),
        tool_choice: req.tool_choice.as_ref(),
        temperature: s.temperature,
        top_p: s.top_p,
        max_tokens: s.max_tokens,
        seed: s.seed,
        presence_penalty: s.presence_penalty,
        frequency_penalty: s.frequency_penalty,
        stop: &s.stop,
        response_format: req.response_format.as_ref(),
        user,
        stream: req.stream,
        // Always ask for usage: weft accounts every call, whether or not the caller asked.
        stream_options: req.stream.then_some(wire::StreamOptions {
            include_usage: true,
        }),
        extra: Extra::default(),
    };
    let deepseek = matches!(flavor, Flavor::DeepSeek { .. });
    // Unmodelled fields pass through; the fields weft sets win.
    body.extra = Extra::except(&req.extra, |k| body.owns(k) || (deepseek && k == "user"));
    body
}

/// `m` (at index `i` of the request) as chat-completions messages. Tool-call ids go out
/// normalised ([`super::tool_call_id`]), so any history's ids are valid here.
fn to_openai_messages<'a>(m: &'a Message, i: usize, flavor: Flavor<'_>) -> Vec<wire::Message<'a>> {
    let texts = || text_of(&m.content);
    let with_name = |mut v: wire::Message<'a>| {
        v.name = m.name.as_deref();
        v
    };
    match m.role {
        Role::System => vec![with_name(wire::Message::text("system", texts()))],
        Role::Developer => {
            let role = match flavor {
                Flavor::OpenAi => "developer",
                Flavor::DeepSeek { .. } => "system",
            };
            vec![with_name(wire::Message::text(role, texts()))]
        }
        Role::User => {
            let only_text = m
                .content
                .iter()
                .all(|b| matches!(b, ContentBlock::Text { .. }));
            let content = if only_text {
                wire::Content::Text(texts())
            } else {
                wire::Content::Parts(
                    m.content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text { text } => Some(wire::ContentPart::Text { text }),
                            ContentBlock::Image { url, detail } => {
                                Some(wire::ContentPart::ImageUrl {
                                    image_url: wire::ImageUrl {
                                        url,
                                        detail: detail.as_deref(),
                                    },
                                })
                            }
                            _ => None,
                        })
                        .collect(),
                )
            };
            let mut v = wire::Message::text("user", Cow::Borrowed(""));
            v.content = Some(content);
            vec![with_name(v)]
        }
        Role::Assistant => {
            let calls: Vec<wire::ToolCall<'a>> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse {
                        id,
                        name,
                        input_json,
                    } => Some(wire::ToolCall {
                        index: None,
                        id: Some(super::tool_call_id(id)),
                        kind: Some(Cow::Borrowed("function")),
                        function: wire::FunctionCall {
                            name: Some(Cow::Borrowed(name)),
                            arguments: Some(Cow::Borrowed(input_json)),
                        },
                    }),
                    _ => None,
                })
                .collect();
            let text = texts();
            let null_content =
                matches!(flavor, Flavor::OpenAi) && text.is_empty() && !calls.is_empty();
            let mut v = wire::Message::text("assistant", text);
            if null_content {
                v.content = None;
            }
            if let Flavor::DeepSeek { send_reasoning } = flavor
                && send_reasoning.get(i) == Some(&true)
            {
                let reasoning = reasoning_of(&m.content);
                if !reasoning.is_empty() {
                    v.reasoning_content = Some(Cow::Owned(reasoning));
                }
            }
            v.tool_calls = calls;
            vec![with_name(v)]
        }
        Role::Tool => m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => {
                    let mut v = wire::Message::text("tool", text_of(content));
                    v.tool_call_id = Some(super::tool_call_id(tool_use_id));
                    Some(v)
                }
                _ => None,
            })
            .collect(),
    }
}

/// Tool specs as `[{"type": "function", "function": {name, description, parameters}}]`, the
/// shape OpenAI, DeepSeek and Ollama share.
pub(crate) fn tools(tools: &[ToolSpec]) -> Vec<wire::Tool<'_>> {
    tools
        .iter()
        .map(|t| wire::Tool::function(&t.name, &t.description, &t.parameters))
        .collect()
}

/// The `Text` blocks of `content`, concatenated (borrowed when there is only one).
pub(crate) fn text_of(content: &[ContentBlock]) -> Cow<'_, str> {
    concat(content.iter().filter_map(|b| match b {
        ContentBlock::Text { text } => Some(text.as_str()),
        _ => None,
    }))
}

/// The `Reasoning` blocks of `content`, concatenated.
pub(crate) fn reasoning_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// `parts` concatenated, without a copy when there is at most one.
fn concat<'a>(mut parts: impl Iterator<Item = &'a str>) -> Cow<'a, str> {
    let Some(first) = parts.next() else {
        return Cow::Borrowed("");
    };
    match parts.next() {
        None => Cow::Borrowed(first),
        Some(second) => {
            let mut s = String::from(first);
            s.push_str(second);
            s.extend(parts);
            Cow::Owned(s)
        }
    }
}

/// Weft's usage from an upstream's, which must at least count the prompt.
fn usage(u: &read::Usage) -> Option<Usage> {
    let p = u.prompt_tokens?;
    let c = u.completion_tokens.unwrap_or(0);
    Some(Usage {
        total_tokens: u.total_tokens.unwrap_or(p.saturating_add(c)),
        // DeepSeek reports the same count as `prompt_cache_hit_tokens`.
        cache_read_tokens: u
            .prompt_cache_hit_tokens
            .or_else(|| u.prompt_tokens_details.and_then(|d| d.cached_tokens))
            .unwrap_or(0),
        ..Usage::new(p, c)
    })
}

/// Events of a non-streamed completion body; `None` when it is not a completion.
pub(crate) fn completion_events(body: &[u8]) -> Option<Vec<ChatEvent>> {
    parse(&lenient::from_slice(body).ok()??)
}

/// Events of a non-streamed completion, parsed; `None` when the body is not a completion.
#[cfg(test)]
pub(crate) fn parse_completion(v: &Value) -> Option<Vec<ChatEvent>> {
    parse(&lenient::from_value(v)?)
}

fn parse(v: &read::Completion<'_>) -> Option<Vec<ChatEvent>> {
    let choice = v.choices.as_ref()?.first()?.0.as_ref();
    let msg = choice.and_then(|c| c.message.as_ref());
    let mut events = Vec::new();
    if let Some(r) = msg
        .and_then(|m| m.reasoning_content.as_deref())
        .filter(|s| !s.is_empty())
    {
        events.push(ChatEvent::ReasoningDelta(r.to_owned()));
    }
    if let Some(t) = msg
        .and_then(|m| m.content.as_deref())
        .filter(|s| !s.is_empty())
    {
        events.push(ChatEvent::TextDelta(t.to_owned()));
    }
    for (i, call) in msg
        .and_then(|m| m.tool_calls.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let index = u32::try_from(i).ok()?;
        let call = call.0.as_ref();
        let function = call.and_then(|c| c.function.as_ref());
        events.push(ChatEvent::ToolCallStart {
            index,
            id: received_id(call.and_then(|c| c.id.as_deref())),
            name: function?.name.as_deref()?.to_owned(),
        });
        events.push(ChatEvent::ToolCallDelta {
            index,
            arguments: function
                .and_then(|f| f.arguments.as_deref())
                .unwrap_or("{}")
                .to_owned(),
        });
    }
    if let Some(u) = v.usage.as_ref().and_then(usage) {
        events.push(ChatEvent::Usage(u));
    }
    let finish = choice
        .and_then(|c| c.finish_reason.as_deref())
        .map_or(FinishReason::Stop, FinishReason::from_openai);
    events.push(ChatEvent::Finish(finish));
    Some(events)
}

/// A tool-call id as received, made valid for every provider: kept when valid, mapped stably
/// when not, and minted when the server sent none (some OpenAI-compatible servers do not).
fn received_id(id: Option<&str>) -> String {
    match id.filter(|s| !s.is_empty()) {
        Some(id) => super::tool_call_id(id).into_owned(),
        None => {
            // The tail of a UUIDv7 is its random part.
            let u = uuid::Uuid::now_v7().simple().to_string();
            format!("call_{}", &u[12..])
        }
    }
}

/// Folds OpenAI stream chunks into weft events.
#[derive(Default)]
pub(crate) struct StreamState {
    pending: VecDeque<ChatEvent>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    /// Tool-call indexes already started.
    started: Vec<u32>,
    done: bool,
}

impl Fold for StreamState {
    fn on_event(
        &mut self,
        _event: &str,
        data: &str,
        out: &mut VecDeque<ChatEvent>,
    ) -> Result<(), Fault> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        // Parsed once, borrowing from `data`: an error object, or a chunk.
        let Ok(v) = lenient::from_str::<read::Chunk<'_>>(data) else {
            return Err(Fault::Malformed);
        };
        let v = v.unwrap_or_default();
        if let Some(m) = v.error.as_ref().and_then(|e| e.message.as_deref()) {
            return Err(Fault::Upstream(m.to_owned()));
        }
        let ok = self.on_chunk(&v);
        out.extend(self.pending.drain(..));
        if ok { Ok(()) } else { Err(Fault::Malformed) }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn at_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), Fault> {
        // Some servers end without `[DONE]`; a finish reason is enough to call it complete.
        if !self.done && self.finish.is_none() {
            return Err(Fault::EndedEarly);
        }
        self.finish();
        out.extend(self.pending.drain(..));
        Ok(())
    }
}

impl StreamState {
    /// Applies one parsed `data:` payload; `false` when it is not a chunk.
    fn on_chunk(&mut self, v: &read::Chunk<'_>) -> bool {
        if let Some(u) = v.usage.as_ref().and_then(|u| u.0.as_ref()).and_then(usage) {
            self.usage = Some(u);
        }
        let Some(choices) = &v.choices else {
            return v.usage.is_some();
        };
        for choice in choices.iter().map(|c| c.0.as_ref()) {
            let delta = choice.and_then(|c| c.delta.as_ref());
            if let Some(r) = delta
                .and_then(|d| d.reasoning_content.as_deref())
                .filter(|s| !s.is_empty())
            {
                self.pending
                    .push_back(ChatEvent::ReasoningDelta(r.to_owned()));
            }
            if let Some(t) = delta
                .and_then(|d| d.content.as_deref())
                .filter(|s| !s.is_empty())
            {
                self.pending.push_back(ChatEvent::TextDelta(t.to_owned()));
            }
            let calls = delta.and_then(|d| d.tool_calls.as_deref());
            for (pos, call) in calls.unwrap_or_default().iter().enumerate() {
                let call = call.0.as_ref();
                let function = call.and_then(|c| c.function.as_ref());
                let index = call
                    .and_then(|c| c.index)
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or_else(|| u32::try_from(pos).unwrap_or(0));
                if !self.started.contains(&index) {
                    self.started.push(index);
                    self.pending.push_back(ChatEvent::ToolCallStart {
                        index,
                        id: received_id(call.and_then(|c| c.id.as_deref())),
                        name: function
                            .and_then(|f| f.name.as_deref())
                            .unwrap_or_default()
                            .to_owned(),
                    });
                }
                if let Some(a) = function
                    .and_then(|f| f.arguments.as_deref())
                    .filter(|s| !s.is_empty())
                {
                    self.pending.push_back(ChatEvent::ToolCallDelta {
                        index,
                        arguments: a.to_owned(),
                    });
                }
            }
            if let Some(f) = choice.and_then(|c| c.finish_reason.as_deref()) {
                self.finish = Some(FinishReason::from_openai(f));
            }
        }
        true
    }

    /// [`Self::on_chunk`] for a payload as text (`false` when it is not JSON).
    #[cfg(test)]
    fn on_text(&mut self, data: &str) -> bool {
        lenient::from_str::<read::Chunk<'_>>(data)
            .is_ok_and(|v| self.on_chunk(&v.unwrap_or_default()))
    }

    fn finish(&mut self) {
        if let Some(u) = self.usage.take() {
            self.pending.push_back(ChatEvent::Usage(u));
        }
        self.pending
            .push_back(ChatEvent::Finish(self.finish.unwrap_or(FinishReason::Stop)));
        self.done = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Sampling;
    use weft_core::message::ToolSpec;

    #[test]
    fn request_bodies_carry_everything_that_changes_behaviour() {
        let mut extra = Map::new();
        extra.insert("logit_bias".into(), json!({"1": 2}));
        extra.insert("model".into(), json!("overridden"));
        let req = ChatRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: vec![ContentBlock::text("be brief")],
                    name: None,
                },
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "f".into(),
                        input_json: "{}".into(),
                    }],
                    name: None,
                },
                Message {
                    role: Role::Tool,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "c1".into(),
                        content: vec![ContentBlock::text("ok")],
                        is_error: false,
                    }],
                    name: None,
                },
            ],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: "d".into(),
                parameters: json!({"type":"object"}),
            }],
            sampling: Sampling {
                max_tokens: Some(7),
                temperature: Some(0.0),
                stop: vec!["x".into()],
                ..Default::default()
            },
            extra,
            stream: true,
            ..Default::default()
        };
        let b = chat_body("gpt", &req);
        assert_eq!(b["model"], "gpt");
        assert_eq!(b["max_tokens"], 7);
        assert_eq!(b["temperature"], 0.0);
        assert_eq!(b["stop"], json!(["x"]));
        assert_eq!(b["logit_bias"], json!({"1": 2}));
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["messages"][1]["content"], Value::Null);
        assert_eq!(b["messages"][1]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            b["messages"][2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "ok"})
        );
        assert_eq!(b["tools"][0]["function"]["name"], "f");
    }

    #[test]
    fn stream_chunks_fold_into_events() {
        let mut s = StreamState::default();
        assert!(s.on_text(r#"{"choices":[{"delta":{"role":"assistant","content":"he"}}]}"#));
        assert!(s.on_text(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a"}}]}}]}"#));
        assert!(s.on_text(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":1}"}}]},"finish_reason":"tool_calls"}]}"#));
        assert!(s.on_text(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#
        ));
        assert!(!s.on_text("{nope"));
        s.finish();
        let ev: Vec<_> = s.pending.drain(..).collect();
        assert_eq!(ev[0], ChatEvent::TextDelta("he".into()));
        assert_eq!(
            ev[1],
            ChatEvent::ToolCallStart {
                index: 0,
                id: "c".into(),
                name: "f".into()
            }
        );
        assert_eq!(
            ev[2],
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"a".into()
            }
        );
        assert_eq!(
            ev[3],
            ChatEvent::ToolCallDelta {
                index: 0,
                arguments: "\":1}".into()
            }
        );
        assert_eq!(ev[4], ChatEvent::Usage(Usage::new(3, 2)));
        assert_eq!(ev[5], ChatEvent::Finish(FinishReason::ToolCalls));
    }

    /// Counts near u64::MAX overflowed the total (found while writing the `provider_body` fuzz
    /// target; fuzz/seeds/provider_body/usage-overflow-openai).
    #[test]
    fn usage_counts_at_the_edge_of_u64_saturate() {
        let v = json!({"choices": [{"message": {"content": "x"}}],
                       "usage": {"prompt_tokens": u64::MAX, "completion_tokens": 1}});
        let ev = parse_completion(&v).unwrap();
        let Some(ChatEvent::Usage(u)) = ev.iter().find(|e| matches!(e, ChatEvent::Usage(_))) else {
            panic!("no usage in {ev:?}");
        };
        assert_eq!(u.total_tokens, u64::MAX);
    }
}
