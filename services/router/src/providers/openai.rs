//! The `openai` driver: any server that speaks OpenAI's chat-completions wire format, over plain
//! HTTP (reqwest). Non-stream and SSE streaming, tool calls, usage, errors mapped to
//! [`ErrorCode`], and retries with backoff on 429/5xx before the first byte, honouring
//! `Retry-After`. The OpenAI-compatible `deepseek` driver reuses the translation and the stream
//! fold here through a [`Flavor`].

use std::collections::VecDeque;

use serde_json::{Map, Value, json};
use weft_config::OpenAiProviderConfig;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, ToolSpec, Usage};

use super::http::{Fault, Fold, KeyStyle, Upstream};
use super::{EventStream, ProviderError, Unsupported};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

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
        send_chat(&self.up, &self.chat_url, &chat_body(model, req), req.stream).await
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let body = embed_body(model, req);
        let resp = self.up.post(&self.embed_url, &body).await?;
        let v = self.up.json_body(resp).await?;
        let malformed = || ProviderError::retryable(self.up.malformed_error());
        let mut data: Vec<(u64, Vec<f32>)> = Vec::new();
        for d in v["data"].as_array().ok_or_else(malformed)? {
            let vec = super::f32_vector(&d["embedding"]).ok_or_else(malformed)?;
            data.push((d["index"].as_u64().unwrap_or(data.len() as u64), vec));
        }
        data.sort_by_key(|(i, _)| *i);
        Ok(EmbedResult {
            provider: self.up.name.clone(),
            model: model.to_owned(),
            vectors: data.into_iter().map(|(_, v)| v).collect(),
            usage: parse_usage(&v["usage"]).unwrap_or_default(),
        })
    }
}

/// The embeddings request body.
pub(crate) fn embed_body(model: &str, req: &EmbedRequest) -> Value {
    let mut body = json!({"model": model, "input": req.input, "encoding_format": "float"});
    if let Some(d) = req.dimensions {
        body["dimensions"] = json!(d);
    }
    if let Some(u) = &req.user {
        body["user"] = json!(u);
    }
    body
}

/// Posts one chat-completions call; its events come from the SSE stream or the whole completion.
pub(crate) async fn send_chat(
    up: &Upstream,
    url: &reqwest::Url,
    body: &Value,
    stream: bool,
) -> Result<EventStream, ProviderError> {
    let resp = up.post(url, body).await?;
    if stream {
        Ok(up.sse(resp, StreamState::default()))
    } else {
        let v = up.json_body(resp).await?;
        let events =
            parse_completion(&v).ok_or_else(|| ProviderError::retryable(up.malformed_error()))?;
        Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
    }
}

/// How a server's dialect of chat completions departs from OpenAI's own.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Flavor<'a> {
    OpenAi,
    /// DeepSeek: no `developer` role (sent as `system`), `content` always a string on assistant
    /// messages (it rejects null), and the reasoning of the messages whose index is `true` in
    /// `send_reasoning` sent back as `reasoning_content`.
    DeepSeek {
        send_reasoning: &'a [bool],
    },
}

/// The OpenAI request body for one turn.
pub fn chat_body(model: &str, req: &ChatRequest) -> Value {
    chat_body_as(Flavor::OpenAi, model, req)
}

/// The request body for one turn in `flavor`'s dialect.
pub(crate) fn chat_body_as(flavor: Flavor<'_>, model: &str, req: &ChatRequest) -> Value {
    let mut body = Map::new();
    // Unmodelled fields first, so that the fields weft sets win.
    for (k, v) in &req.extra {
        body.insert(k.clone(), v.clone());
    }
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(
            req.messages
                .iter()
                .enumerate()
                .flat_map(|(i, m)| to_openai_messages(m, i, flavor))
                .collect(),
        ),
    );
    if !req.tools.is_empty() {
        body.insert("tools".into(), tools_json(&req.tools));
    }
    if let Some(tc) = &req.tool_choice {
        body.insert("tool_choice".into(), tc.clone());
    }
    let s = &req.sampling;
    let opt = |body: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.into(), v);
        }
    };
    opt(&mut body, "temperature", s.temperature.map(|x| json!(x)));
    opt(&mut body, "top_p", s.top_p.map(|x| json!(x)));
    opt(&mut body, "max_tokens", s.max_tokens.map(|x| json!(x)));
    opt(&mut body, "seed", s.seed.map(|x| json!(x)));
    opt(
        &mut body,
        "presence_penalty",
        s.presence_penalty.map(|x| json!(x)),
    );
    opt(
        &mut body,
        "frequency_penalty",
        s.frequency_penalty.map(|x| json!(x)),
    );
    if !s.stop.is_empty() {
        body.insert("stop".into(), json!(s.stop));
    }
    opt(&mut body, "response_format", req.response_format.clone());
    opt(&mut body, "user", req.user.as_ref().map(|u| json!(u)));
    body.insert("stream".into(), json!(req.stream));
    if req.stream {
        // Always ask for usage: weft accounts every call, whether or not the caller asked.
        body.insert("stream_options".into(), json!({"include_usage": true}));
    } else {
        body.remove("stream_options");
    }
    Value::Object(body)
}

/// `m` (at index `i` of the request) as chat-completions messages. Tool-call ids go out
/// normalised ([`super::tool_call_id`]), so any history's ids are valid here.
fn to_openai_messages(m: &Message, i: usize, flavor: Flavor<'_>) -> Vec<Value> {
    let texts = || text_of(&m.content);
    let with_name = |mut v: Value| {
        if let Some(n) = &m.name {
            v["name"] = json!(n);
        }
        v
    };
    match m.role {
        Role::System => vec![with_name(json!({"role": "system", "content": texts()}))],
        Role::Developer => {
            let role = match flavor {
                Flavor::OpenAi => "developer",
                Flavor::DeepSeek { .. } => "system",
            };
            vec![with_name(json!({"role": role, "content": texts()}))]
        }
        Role::User => {
            let only_text = m
                .content
                .iter()
                .all(|b| matches!(b, ContentBlock::Text { .. }));
            let content = if only_text {
                json!(texts())
            } else {
                Value::Array(
                    m.content
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text { text } => {
                                Some(json!({"type": "text", "text": text}))
                            }
                            ContentBlock::Image { url, detail } => {
                                let mut img = json!({"url": url});
                                if let Some(d) = detail {
                                    img["detail"] = json!(d);
                                }
                                Some(json!({"type": "image_url", "image_url": img}))
                            }
                            _ => None,
                        })
                        .collect(),
                )
            };
            vec![with_name(json!({"role": "user", "content": content}))]
        }
        Role::Assistant => {
            let calls: Vec<Value> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, name, input_json } => Some(
                        json!({"id": super::tool_call_id(id), "type": "function", "function": {"name": name, "arguments": input_json}}),
                    ),
                    _ => None,
                })
                .collect();
            let text = texts();
            let null_content =
                matches!(flavor, Flavor::OpenAi) && text.is_empty() && !calls.is_empty();
            let mut v = json!({"role": "assistant", "content": if null_content { Value::Null } else { json!(text) }});
            if let Flavor::DeepSeek { send_reasoning } = flavor
                && send_reasoning.get(i) == Some(&true)
            {
                let reasoning = reasoning_of(&m.content);
                if !reasoning.is_empty() {
                    v["reasoning_content"] = json!(reasoning);
                }
            }
            if !calls.is_empty() {
                v["tool_calls"] = Value::Array(calls);
            }
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
                } => Some(
                    json!({"role": "tool", "tool_call_id": super::tool_call_id(tool_use_id), "content": text_of(content)}),
                ),
                _ => None,
            })
            .collect(),
    }
}

/// Tool specs as `[{"type": "function", "function": {name, description, parameters}}]`, the
/// shape OpenAI, DeepSeek and Ollama share.
pub(crate) fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect()
}

/// The `Text` blocks of `content`, concatenated.
pub(crate) fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
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

fn parse_usage(v: &Value) -> Option<Usage> {
    let p = v["prompt_tokens"].as_u64()?;
    let c = v["completion_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        total_tokens: v["total_tokens"].as_u64().unwrap_or(p.saturating_add(c)),
        // DeepSeek reports the same count as `prompt_cache_hit_tokens`.
        cache_read_tokens: v["prompt_cache_hit_tokens"]
            .as_u64()
            .or_else(|| v["prompt_tokens_details"]["cached_tokens"].as_u64())
            .unwrap_or(0),
        ..Usage::new(p, c)
    })
}

/// Events of a non-streamed completion; `None` when the body is not a completion.
pub(crate) fn parse_completion(v: &Value) -> Option<Vec<ChatEvent>> {
    let choice = v["choices"].as_array()?.first()?;
    let msg = &choice["message"];
    let mut events = Vec::new();
    if let Some(r) = msg["reasoning_content"].as_str().filter(|s| !s.is_empty()) {
        events.push(ChatEvent::ReasoningDelta(r.to_owned()));
    }
    if let Some(t) = msg["content"].as_str().filter(|s| !s.is_empty()) {
        events.push(ChatEvent::TextDelta(t.to_owned()));
    }
    for (i, call) in msg["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let index = u32::try_from(i).ok()?;
        events.push(ChatEvent::ToolCallStart {
            index,
            id: received_id(call["id"].as_str()),
            name: call["function"]["name"].as_str()?.to_owned(),
        });
        events.push(ChatEvent::ToolCallDelta {
            index,
            arguments: call["function"]["arguments"]
                .as_str()
                .unwrap_or("{}")
                .to_owned(),
        });
    }
    if let Some(u) = parse_usage(&v["usage"]) {
        events.push(ChatEvent::Usage(u));
    }
    let finish = choice["finish_reason"]
        .as_str()
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
        // Parsed once: an error object, or a chunk.
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return Err(Fault::Malformed);
        };
        if let Some(m) = v["error"]["message"].as_str() {
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
    fn on_chunk(&mut self, v: &Value) -> bool {
        if let Some(u) = parse_usage(&v["usage"]) {
            self.usage = Some(u);
        }
        let Some(choices) = v["choices"].as_array() else {
            return v.get("usage").is_some();
        };
        for choice in choices {
            let delta = &choice["delta"];
            if let Some(r) = delta["reasoning_content"]
                .as_str()
                .filter(|s| !s.is_empty())
            {
                self.pending
                    .push_back(ChatEvent::ReasoningDelta(r.to_owned()));
            }
            if let Some(t) = delta["content"].as_str().filter(|s| !s.is_empty()) {
                self.pending.push_back(ChatEvent::TextDelta(t.to_owned()));
            }
            for (pos, call) in delta["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let index = call["index"]
                    .as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or_else(|| u32::try_from(pos).unwrap_or(0));
                if !self.started.contains(&index) {
                    self.started.push(index);
                    self.pending.push_back(ChatEvent::ToolCallStart {
                        index,
                        id: received_id(call["id"].as_str()),
                        name: call["function"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    });
                }
                if let Some(a) = call["function"]["arguments"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                {
                    self.pending.push_back(ChatEvent::ToolCallDelta {
                        index,
                        arguments: a.to_owned(),
                    });
                }
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                self.finish = Some(FinishReason::from_openai(f));
            }
        }
        true
    }

    /// [`Self::on_chunk`] for a payload as text (`false` when it is not JSON).
    #[cfg(test)]
    fn on_text(&mut self, data: &str) -> bool {
        serde_json::from_str::<Value>(data).is_ok_and(|v| self.on_chunk(&v))
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
