//! The `openai` driver: any server that speaks OpenAI's chat-completions wire format, over plain
//! HTTP (reqwest). Non-stream and SSE streaming, tool calls, usage, errors mapped to
//! [`ErrorCode`], and retries with backoff on 429/5xx before the first byte, honouring
//! `Retry-After`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::{Stream, StreamExt as _};
use serde_json::{Map, Value, json};
use weft_config::OpenAiProviderConfig;
use weft_core::message::{ContentBlock, FinishReason, Message, Role, Usage};
use weft_core::{Error, ErrorCode};

use super::{EventStream, ProviderError};
use crate::types::{ChatEvent, ChatRequest, EmbedRequest, EmbedResult};

pub struct OpenAiProvider {
    name: String,
    cfg: OpenAiProviderConfig,
    client: reqwest::Client,
    chat_url: String,
    embed_url: String,
    api_key: Option<String>,
}

impl OpenAiProvider {
    /// Builds the driver and its connection pool. Fails when `api_key_env` names an unset
    /// variable, so a misconfiguration shows at start, not on the first request.
    pub fn new(name: &str, cfg: &OpenAiProviderConfig) -> Result<Self, String> {
        let api_key = match &cfg.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                format!("router.providers.{name}.api_key_env names `{var}`, which is not set in the environment")
            })?),
            None => None,
        };
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build()
            .map_err(|e| {
                format!("router.providers.{name}: building the HTTP client failed: {e}")
            })?;
        let base = cfg.base_url.trim_end_matches('/');
        Ok(Self {
            name: name.to_owned(),
            cfg: cfg.clone(),
            client,
            chat_url: format!("{base}/chat/completions"),
            embed_url: format!("{base}/embeddings"),
            api_key,
        })
    }

    pub async fn chat(&self, model: &str, req: &ChatRequest) -> Result<EventStream, ProviderError> {
        let body = chat_body(model, req);
        let bytes =
            serde_json::to_vec(&body).map_err(|_| ProviderError::fatal(Error::internal()))?;
        let resp = self.send(&self.chat_url, bytes).await?;
        let idle = Duration::from_secs(self.cfg.first_byte_timeout_secs);
        if req.stream {
            Ok(stream_events(self.name.clone(), resp, idle))
        } else {
            let bytes = tokio::time::timeout(idle, resp.bytes())
                .await
                .map_err(|_| ProviderError::retryable(self.timeout_error()))?
                .map_err(|_| ProviderError::retryable(self.broken_error()))?;
            let events = parse_completion(&bytes)
                .ok_or_else(|| ProviderError::retryable(self.malformed_error()))?;
            Ok(Box::pin(futures::stream::iter(events.into_iter().map(Ok))))
        }
    }

    pub async fn embed(
        &self,
        model: &str,
        req: &EmbedRequest,
    ) -> Result<EmbedResult, ProviderError> {
        let mut body = json!({"model": model, "input": req.input, "encoding_format": "float"});
        if let Some(d) = req.dimensions {
            body["dimensions"] = json!(d);
        }
        if let Some(u) = &req.user {
            body["user"] = json!(u);
        }
        let bytes =
            serde_json::to_vec(&body).map_err(|_| ProviderError::fatal(Error::internal()))?;
        let resp = self.send(&self.embed_url, bytes).await?;
        let v: Value = resp
            .json()
            .await
            .map_err(|_| ProviderError::retryable(self.malformed_error()))?;
        let mut data: Vec<(u64, Vec<f32>)> = Vec::new();
        for d in v["data"]
            .as_array()
            .ok_or_else(|| ProviderError::retryable(self.malformed_error()))?
        {
            let vec: Option<Vec<f32>> = d["embedding"].as_array().map(|a| {
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "embeddings are f32 by design"
                )]
                a.iter()
                    .filter_map(Value::as_f64)
                    .map(|x| x as f32)
                    .collect()
            });
            let vec = vec.ok_or_else(|| ProviderError::retryable(self.malformed_error()))?;
            data.push((d["index"].as_u64().unwrap_or(data.len() as u64), vec));
        }
        data.sort_by_key(|(i, _)| *i);
        Ok(EmbedResult {
            provider: self.name.clone(),
            model: model.to_owned(),
            vectors: data.into_iter().map(|(_, v)| v).collect(),
            usage: parse_usage(&v["usage"]).unwrap_or_default(),
        })
    }

    /// POSTs `body`, retrying 429/5xx and connection failures with backoff until a 2xx arrives.
    async fn send(&self, url: &str, body: Vec<u8>) -> Result<reqwest::Response, ProviderError> {
        let first_byte = Duration::from_secs(self.cfg.first_byte_timeout_secs);
        let max_wait = Duration::from_secs(self.cfg.max_retry_after_secs);
        let mut attempt: u32 = 0;
        loop {
            let mut rb = self
                .client
                .post(url)
                .header("content-type", "application/json")
                .body(body.clone());
            if let Some(key) = &self.api_key {
                rb = rb.bearer_auth(key);
            }
            let (err, may_retry_here) = match tokio::time::timeout(first_byte, rb.send()).await {
                Err(_) => (ProviderError::retryable(self.timeout_error()), false),
                Ok(Err(e)) => {
                    tracing::warn!(provider = %self.name, error = %e, "upstream request failed");
                    (
                        ProviderError::retryable(Error::new(
                            ErrorCode::UpstreamError,
                            format!("provider `{}` is unreachable", self.name),
                        )),
                        true,
                    )
                }
                Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
                Ok(Ok(resp)) => {
                    let status = resp.status().as_u16();
                    let e = self.status_error(resp).await;
                    // Bad credentials stay bad: let the next candidate try instead.
                    let retry = e.retryable && status != 401 && status != 403;
                    (e, retry)
                }
            };
            if !may_retry_here || attempt >= self.cfg.max_retries {
                return Err(err);
            }
            let delay = match err.error.retry_after {
                Some(d) if d > max_wait => return Err(err),
                Some(d) => d,
                None => {
                    Duration::from_millis(self.cfg.backoff_ms.saturating_mul(1 << attempt.min(10)))
                }
            };
            metrics::counter!("weft_router_upstream_retries_total", "provider" => self.name.clone())
                .increment(1);
            tracing::info!(provider = %self.name, attempt, delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), code = %err.error.code, "retrying upstream");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn status_error(&self, resp: reqwest::Response) -> ProviderError {
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        // The upstream's own message is meant for API callers; keep it short and never echo
        // anything but its `error.message`.
        let detail = resp
            .bytes()
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| {
                v["error"]["message"]
                    .as_str()
                    .map(|s| s.chars().take(300).collect::<String>())
            });
        let name = &self.name;
        match status {
            429 => ProviderError::rate_limited(name, retry_after),
            500..=599 => {
                let mut e = Error::new(
                    ErrorCode::UpstreamError,
                    format!("provider `{name}` failed with status {status}"),
                );
                e.retry_after = retry_after;
                ProviderError::retryable(e)
            }
            401 | 403 => ProviderError::retryable(Error::new(
                ErrorCode::UpstreamError,
                format!(
                    "provider `{name}` refused weft's credentials (status {status}); check its api_key_env"
                ),
            )),
            404 => ProviderError::fatal(
                Error::new(
                    ErrorCode::ModelNotFound,
                    format!(
                        "provider `{name}` does not know this model{}",
                        detail.map(|d| format!(": {d}")).unwrap_or_default()
                    ),
                )
                .with_param("model"),
            ),
            _ => ProviderError::fatal(Error::invalid(format!(
                "provider `{name}` rejected the request (status {status}){}",
                detail.map(|d| format!(": {d}")).unwrap_or_default()
            ))),
        }
    }

    fn timeout_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamTimeout,
            format!(
                "provider `{}` did not answer within {} s",
                self.name, self.cfg.first_byte_timeout_secs
            ),
        )
    }

    fn malformed_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamError,
            format!("provider `{}` returned a malformed response", self.name),
        )
    }

    fn broken_error(&self) -> Error {
        Error::new(
            ErrorCode::UpstreamError,
            format!("provider `{}` broke the connection mid-response", self.name),
        )
    }
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3); a date in the past is 0.
fn parse_retry_after(v: &str, now: std::time::SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The OpenAI request body for one turn.
pub fn chat_body(model: &str, req: &ChatRequest) -> Value {
    let mut body = Map::new();
    // Unmodelled fields first, so that the fields weft sets win.
    for (k, v) in &req.extra {
        body.insert(k.clone(), v.clone());
    }
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(req.messages.iter().flat_map(to_openai_messages).collect()),
    );
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
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

fn to_openai_messages(m: &Message) -> Vec<Value> {
    let texts = || {
        m.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    };
    let with_name = |mut v: Value| {
        if let Some(n) = &m.name {
            v["name"] = json!(n);
        }
        v
    };
    match m.role {
        Role::System => vec![with_name(json!({"role": "system", "content": texts()}))],
        Role::Developer => vec![with_name(json!({"role": "developer", "content": texts()}))],
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
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": input_json}}),
                    ),
                    _ => None,
                })
                .collect();
            let text = texts();
            let mut v = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) }});
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
                } => {
                    let text: String = content
                        .iter()
                        .filter_map(|c| match c {
                            ContentBlock::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    Some(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}))
                }
                _ => None,
            })
            .collect(),
    }
}

fn parse_usage(v: &Value) -> Option<Usage> {
    let p = v["prompt_tokens"].as_u64()?;
    let c = v["completion_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        prompt_tokens: p,
        completion_tokens: c,
        total_tokens: v["total_tokens"].as_u64().unwrap_or(p + c),
    })
}

/// Events of a non-streamed completion; `None` when the body is not a completion.
fn parse_completion(body: &[u8]) -> Option<Vec<ChatEvent>> {
    let v: Value = serde_json::from_slice(body).ok()?;
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
            id: call["id"].as_str().unwrap_or_default().to_owned(),
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

type SseSource = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

/// Folds OpenAI stream chunks into weft events.
#[derive(Default)]
struct StreamState {
    pending: VecDeque<ChatEvent>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    /// Tool-call indexes already started.
    started: Vec<u32>,
    done: bool,
}

impl StreamState {
    /// Applies one `data:` payload; `false` when it is not a chunk.
    fn on_chunk(&mut self, data: &str) -> bool {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
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
                        id: call["id"].as_str().unwrap_or_default().to_owned(),
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

    fn finish(&mut self) {
        if let Some(u) = self.usage.take() {
            self.pending.push_back(ChatEvent::Usage(u));
        }
        self.pending
            .push_back(ChatEvent::Finish(self.finish.unwrap_or(FinishReason::Stop)));
        self.done = true;
    }
}

fn stream_events(provider: String, resp: reqwest::Response, idle: Duration) -> EventStream {
    let source: SseSource = Box::pin(resp.bytes_stream().eventsource());
    let err = move |provider: &str, what: &str| {
        Error::new(
            ErrorCode::UpstreamError,
            format!("provider `{provider}` {what}"),
        )
    };
    Box::pin(futures::stream::unfold(
        Some((source, StreamState::default(), provider)),
        move |st| async move {
            let (mut src, mut state, provider) = st?;
            loop {
                if let Some(ev) = state.pending.pop_front() {
                    return Some((Ok(ev), Some((src, state, provider))));
                }
                if state.done {
                    return None;
                }
                match tokio::time::timeout(idle, src.next()).await {
                    Err(_) => return Some((Err(err(&provider, "stalled mid-stream")), None)),
                    Ok(None) if state.finish.is_some() => state.finish(),
                    Ok(None) => return Some((Err(err(&provider, "ended the stream early")), None)),
                    Ok(Some(Err(_))) => {
                        return Some((Err(err(&provider, "broke the stream mid-way")), None));
                    }
                    Ok(Some(Ok(ev))) if ev.data.trim() == "[DONE]" => state.finish(),
                    Ok(Some(Ok(ev))) => {
                        if !state.on_chunk(&ev.data) {
                            return Some((
                                Err(err(&provider, "sent a malformed stream chunk")),
                                None,
                            ));
                        }
                    }
                }
            }
        },
    ))
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
    fn retry_after_takes_seconds_or_an_http_date() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn stream_chunks_fold_into_events() {
        let mut s = StreamState::default();
        assert!(s.on_chunk(r#"{"choices":[{"delta":{"role":"assistant","content":"he"}}]}"#));
        assert!(s.on_chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a"}}]}}]}"#));
        assert!(s.on_chunk(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\":1}"}}]},"finish_reason":"tool_calls"}]}"#));
        assert!(s.on_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#
        ));
        assert!(!s.on_chunk("{nope"));
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
        assert_eq!(
            ev[4],
            ChatEvent::Usage(Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                total_tokens: 5
            })
        );
        assert_eq!(ev[5], ChatEvent::Finish(FinishReason::ToolCalls));
    }
}
